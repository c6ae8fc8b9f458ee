#!/usr/bin/env bash
# A job of channels on two datapath lcores: every rank has C connections to its successor and
# message m goes on channel m mod C (scripts/gen-pcap --channels). Each channel is an engine job of
# its own on the lcore channel_lcore() gives it; the sums must be exact and each connection's PSNs
# in order (check_output.py against gen-pcap's sums, scapy).
#   test_channels.sh INAGG SRCDIR C aligned|crossed
# Each port's capture is in two RX queues, channel c's frames on one. aligned: channel c on queue
# c mod 2, the queue of its channel's lcore, as RSS by UDP source port spreads a job's connections
# when the channels are placed by it: none is handed between lcores. crossed: the queues swapped,
# every packet arrives at the other lcore, which hands it over (the software dispatch by QPN, where
# RSS puts a channel elsewhere). Both lcores' engines aggregate their channels.
set -uo pipefail
inagg=$1 src=$2 channels=$3 placement=$4
tmp=$(mktemp -d)
prefix="inagg-channels-$$"
cleanup() { rm -rf "$tmp" "/var/run/dpdk/$prefix"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 25 "$tmp/log"; exit 1; }

/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 4 --ports 2 --messages 8 --message 4096 --payload 1024 \
  --channels "$channels" --queues 2 --background 0 >/dev/null || fail gen-pcap
grep -q "^channels = $channels" "$tmp/job.job" || fail "gen-pcap wrote no channels line"
vdevs=()
for p in 0 1; do
  if [ "$placement" = aligned ]; then rx="rx_pcap=$tmp/port${p}q0.pcap,rx_pcap=$tmp/port${p}q1.pcap"; else rx="rx_pcap=$tmp/port${p}q1.pcap,rx_pcap=$tmp/port${p}q0.pcap"; fi
  vdevs+=("--vdev=net_pcap$p,$rx,tx_pcap=$tmp/out${p}q0.pcap,tx_pcap=$tmp/out${p}q1.pcap")
done
# Main lcore 0 for control, lcores 1 and 2 for the datapath (2 and 0 share CPU 0).
timeout 120 "$inagg" --lcores='(0,2)@0,1@1' --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
  "${vdevs[@]}" -- --job "$tmp/job.job" --socket "" --idle-exit 3 --mtu 4200 --mbufs 16384 --mbuf-budget 4096 \
  --resend-us 100000000 >"$tmp/log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "inagg exited with $rc"
grep -q "datapath on the worker lcores" "$tmp/log" || fail "not two datapath lcores"
grep -q "job 1: active" "$tmp/log" || fail "job not active at exit"
grep -Eq "^job 1: .*slots_released 32( |$)" "$tmp/log" ||
  fail "the job's line does not show its 32 slots released: $(grep '^job 1:' "$tmp/log" | tail -n 1)"
# shellcheck source=../lib/lcore_stats.sh
. "$src/tests/lib/lcore_stats.sh"
handed=$(lcore_sum handover_out "$tmp/log")
for lc in $(awk '/^lcore [0-9]+:/ {print $2}' "$tmp/log" | sort -u); do
  roce=$(awk -v l="$lc" '$1 == "lcore" && $2 == l {for (i = 1; i <= NF; i++) if ($i == "roce") v = $(i + 1)} END {print v + 0}' "$tmp/log")
  # 4 ranks x 32 packets, half of the channels on each lcore.
  [ "$roce" -eq 64 ] || fail "lcore ${lc%:}'s engine took $roce of the job's 128 data packets, expected 64 (its channels')"
done
if [ "$placement" = aligned ]; then
  [ "$handed" -eq 0 ] || fail "$handed packets were handed between lcores; each channel's queue is its lcore's"
else
  [ "$handed" -eq 128 ] || fail "$handed packets handed over, expected all 128 (every channel's queue is the other lcore's)"
fi
/usr/bin/python3 - "$tmp" <<'PY' || fail "merging the per-queue output"
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import rdpcap, wrpcap
d = sys.argv[1]
for p in range(2):
    wrpcap(f"{d}/out{p}.pcap", list(rdpcap(f"{d}/out{p}q0.pcap")) + list(rdpcap(f"{d}/out{p}q1.pcap")))
PY
/usr/bin/python3 "$src/tests/dataplane/check_output.py" "$tmp" "$tmp/out0.pcap" "$tmp/out1.pcap" || fail "output check"
echo "$channels channels, queues $placement: every sum exact and in PSN order; $handed packets handed over"
