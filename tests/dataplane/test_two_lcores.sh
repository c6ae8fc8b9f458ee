#!/usr/bin/env bash
# MAC learning with two datapath lcores: a 6-worker job on 3 net_pcap ports of
# 2 queues each; ranks 0-2 arrive on queue 0 (the lcore that owns the job), ranks 3-5 on queue 1
# (the other lcore, which hands them over). Every released sum must leave only on the port of the
# station it is addressed to - the owner learns where ranks 3-5 are from the packets handed to it -
# and carry the exact sum (check_output.py, scapy). Before, the owner never learned them and
# flooded their sums to every other port.
#   test_two_lcores.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
prefix="inagg-2lc-$$"
cleanup() { [ -n "${KEEP:-}" ] && grep -E "^(lcore|job 1|engine)" "$tmp/log"; rm -rf "$tmp" "/var/run/dpdk/$prefix"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 25 "$tmp/log"; exit 1; }

# gen-pcap's "port" g holds rank g; appliance port g mod 3, queue g / 3 replays it.
/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 6 --ports 6 --appliance-ports 3 --messages 3 --background 0 >/dev/null || fail gen-pcap
vdevs=()
for p in 0 1 2; do
  vdevs+=("--vdev=net_pcap$p,rx_pcap=$tmp/port$p.pcap,rx_pcap=$tmp/port$((p + 3)).pcap,tx_pcap=$tmp/out${p}q0.pcap,tx_pcap=$tmp/out${p}q1.pcap")
done
# Main lcore 0 for control, lcores 1 and 2 for the datapath (2 and 0 share CPU 0: the control
# thread mostly sleeps).
# --idle-exit 3: a datapath lcore shares its CPU with another here (EAL's --lcores), and under a
# loaded CI machine a second without a packet read is not yet the end of the capture.
timeout 120 "$inagg" --lcores='(0,2)@0,1@1' --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
  "${vdevs[@]}" -- --job "$tmp/job.job" --socket "" --idle-exit 3 --mtu 4200 --mbufs 8192 --mbuf-budget 2048 \
  --resend-us 100000000 >"$tmp/log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "inagg exited with $rc"
grep -q "datapath on the worker lcores" "$tmp/log" || fail "not two datapath lcores"
grep -Eq "^lcore [0-9]+: .* handover_out [1-9]" "$tmp/log" || fail "no packet was handed over: the test does not test ownership"
grep -Eq "^lcore [0-9]+: .* handover_full [1-9]" "$tmp/log" && fail "handovers dropped (owner's ring full)"
grep -q "job 1: active" "$tmp/log" || fail "job not active at exit"
# net_pcap takes no rte_flow rule: the RSS rule, then the queue rule, are tried and refused, and
# the port says it classifies in software (flow.hpp's fallback), in the log and in the stats.
grep -Eq "port 0 .*rte_flow steering of UDP 4791 unavailable \(rss at priority 1: .*; queue at priority 0: .*\); classifying in software" "$tmp/log" ||
  fail "the rte_flow fallback (rss, then queue, then software) was not reported"
grep -Eq "^port 0 .*steering software\)" "$tmp/log" || fail "stats do not show steering software"
/usr/bin/python3 - "$tmp" <<'PY' || fail "merging the per-queue output"
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import rdpcap, wrpcap
d = sys.argv[1]
for p in range(3):
    wrpcap(f"{d}/out{p}.pcap", list(rdpcap(f"{d}/out{p}q0.pcap")) + list(rdpcap(f"{d}/out{p}q1.pcap")))
PY
/usr/bin/python3 "$src/tests/dataplane/check_output.py" --station-ports 0,1,2,0,1,2 "$tmp" "$tmp/out0.pcap" "$tmp/out1.pcap" "$tmp/out2.pcap" ||
  fail "output check"
echo "two datapath lcores: every sum exact, in PSN order, and only on its destination's port"
