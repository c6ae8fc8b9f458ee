#!/usr/bin/env bash
# bench/run appliance: the whole appliance on virtual devices, each figure against a reference
# measured in the same run on the same device type and core.
#   fwd_vs_testpmd   64-byte non-RoCE frames, 2 net_pcap ports looping a capture (infinite_rx),
#                    one datapath lcore: inagg's bridge vs dpdk-testpmd --forward-mode=mac
#   agg_vs_memcpy    fp32, n = 4, 4 KiB payloads, replay job, same ports: aggregated input bytes
#                    per second vs single-core memcpy of the same bytes (bench_engine's reference)
#   agg_gbps_per_lcore, and forwarding with 1 and 2 datapath lcores (2 lcores share this 2-core
#   machine with the control thread: indicative only)
#   job_2channels_vs_1 the aggregation job as 2 channels on 2 datapath lcores vs 1 channel on 1, and the
#                    packets handed between lcores meanwhile (bench/job_lcores.py)
#   fwd_vs_ovs       the same 64-byte forwarding, inagg vs Open vSwitch with DPDK (Debian's
#                    openvswitch-switch-dpdk, DPDK 22.11) on the same vdevs, EAL options and cores:
#                    its PMD thread on inagg's datapath CPU, its other lcore on the control thread's,
#                    a netdev bridge, the rule `actions=NORMAL` (MAC learning, as inagg bridges);
#                    fwd_vs_ovs_p2p against port-to-port rules (in_port=1,output:2 and back)
#   fwd1500_vs_ovs   the same with 1514-byte frames (a full 1500-byte MTU)
#   fwdroce_vs_ovs   the same with RoCEv2 frames of no registered job (scripts/gen-pcap, 4 ranks,
#                    1 KiB payloads): with nothing registered inagg bridges them unparsed
#   Without OVS-DPDK these print nan and say why. Its ovsdb-server and ovs-vswitchd run from a
#   directory of this run (bench/ovs_dpdk.sh), never as the system's service; OVS's rate is the tx
#   packets of both ports over BENCH_OVS_SECS (default 2) seconds once both forward.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib/wait.sh
. scripts/lib/wait.sh
# shellcheck source=ovs_dpdk.sh
. bench/ovs_dpdk.sh
secs=${BENCH_SECS:-10}  # EAL start-up with --no-huge -m 2048 takes a few of these
tmp=$(mktemp -d)
pids=()
keep=${BENCH_KEEP:-}  # set to keep the logs
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  ovs_down
  rm -rf /var/run/dpdk/inagg-bench-*-$$
  if [ -n "$keep" ]; then echo "logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
eal=(--no-huge -m 2048 --no-pci --log-level=lib.eal:error)

# 64-byte frames (1514-byte ones in fwd1500_*) between two stations, one per port direction.
/usr/bin/python3 - "$tmp" <<'PY'
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Raw, wrpcap
def frames(src, dst, size):
    out = []
    for i in range(256):
        p = Ether(src=src, dst=dst) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1000 + i, dport=9)
        p = p / Raw(bytes(size - len(p)))
        p.time = 1700000000 + i / 1e6
        out.append(p)
    return out
for name, size in (("fwd", 60), ("fwd1500_", 1514)):
    wrpcap(f"{sys.argv[1]}/{name}0.pcap", frames("02:00:00:00:00:0a", "02:00:00:00:00:0b", size))
    wrpcap(f"{sys.argv[1]}/{name}1.pcap", frames("02:00:00:00:00:0b", "02:00:00:00:00:0a", size))
PY
# RoCEv2 of 4 ranks (rank r behind port r mod 2), no job registered: plain traffic to a switch.
/usr/bin/python3 scripts/gen-pcap --out "$tmp/roce" --workers 4 --payload 1024 --message 4096 --messages 8 --background 0 >/dev/null
# vdevs PREFIX0.pcap PREFIX1.pcap [FIRST_PORT_NUMBER]: the two looping ports' devargs (no --vdev=).
vdevs() { echo "net_pcap${3:-0},rx_pcap=${1}0.pcap,infinite_rx=1 net_pcap$((${3:-0} + 1)),rx_pcap=${1}1.pcap,infinite_rx=1"; }
declare -A pcaps=([fwd]="$tmp/fwd" [fwd1500]="$tmp/fwd1500_" [fwdroce]="$tmp/roce/port")
read -ra fwd_vdevs <<<"$(vdevs "${pcaps[fwd]}")"
fwd_vdevs=("${fwd_vdevs[@]/#/--vdev=}")

# testpmd: the last full stats period's Tx-pps, both ports.
timeout -s INT "$secs" dpdk-testpmd -l 0,1 "${eal[@]}" --file-prefix="inagg-bench-tp-$$" "${fwd_vdevs[@]}" -- \
  --total-num-mbufs=32768 --forward-mode=mac -a --stats-period=1 >"$tmp/testpmd.log" 2>&1
testpmd_pps=$(grep -o "Tx-pps: *[0-9]*" "$tmp/testpmd.log" | awk '{print $2}' | tail -n 2 | awk '{s += $1} END {print s + 0}')

# inagg: tx of both ports between the last two periodic stats, over their time stamps.
inagg_rate() {  # LOG -> packets per second
  awk '/^stats t=/ {t = substr($2, 3); n++; T[n] = t; S[n] = s; s = 0}
       /^port [0-9]+ / {for (i = 1; i <= NF; i++) if ($i == "tx") s += $(i + 1)}
       END {if (n < 3) {print 0; exit} print (S[n] - S[n-1]) / (T[n] - T[n-1])}' "$1"
}
# (S[k] holds the port totals printed after stats line k-1; differences of consecutive k are rates.)
run_inagg() {  # NAME LCORES EXTRA... -> log in $tmp/NAME.log
  local name=$1 lcores=$2
  shift 2
  timeout -s INT "$secs" build/src/apps/inagg --lcores="$lcores" "${eal[@]}" --file-prefix="inagg-bench-$name-$$" "$@" >"$tmp/$name.log" 2>&1
}
run_inagg fwd1 0,1 "${fwd_vdevs[@]}" -- --socket "" --mtu 1500 --mbufs 32768 --mbuf-budget 1024 --stats-interval 1
inagg_pps=$(inagg_rate "$tmp/fwd1.log")
for k in fwd1500 fwdroce; do
  read -ra devs <<<"$(vdevs "${pcaps[$k]}")"
  run_inagg "$k" 0,1 "${devs[@]/#/--vdev=}" -- --socket "" --mtu 1500 --mbufs 32768 --mbuf-budget 1024 --stats-interval 1
done
inagg_pps1500=$(inagg_rate "$tmp/fwd1500.log")
inagg_ppsroce=$(inagg_rate "$tmp/fwdroce.log")

# OVS-DPDK on the same vdevs (numbered apart: a removed port's vdev may stay attached), EAL
# options and CPUs: PMD on CPU 1 (inagg's datapath lcore 1), its other lcore on CPU 0.
ovs_secs=${BENCH_OVS_SECS:-2}
declare -A ovs_pps=()
ovs_measure() {
  local k m i=0 a b devs
  ovs_up "$tmp/ovs" "inagg-bench-ovs-$$" 0x2 0x1 "${eal[@]}" || return 1
  for k in fwd fwd1500 fwdroce; do
    read -ra devs <<<"$(vdevs "${pcaps[$k]}" "$i")"
    i=$((i + 2))
    ovs_add_ports "$k-0" "${devs[0]}" "$k-1" "${devs[1]}" || return 1
    for m in normal p2p; do
      ovs_flows "$m" && ovs_wait_forwarding || return 1
      a=$(ovs_tx)
      sleep "$ovs_secs"  # the measurement interval, not a wait for a state
      b=$(ovs_tx)
      ovs_pps[$k-$m]=$(awk -v a="$a" -v b="$b" 'BEGIN {split(a, x, " "); split(b, y, " "); print (y[2] - x[2]) / ((y[1] - x[1]) / 1e9)}')
    done
    ovs_del_ports || return 1
  done
}
if ovs_find; then
  ovs_measure || echo "bench appliance: OVS-DPDK did not run; its log: $(ovs_log 5 | tr '\n' ' ')" >&2
  ovs_down
else
  echo "bench appliance: skipping OVS-DPDK: $ovs_why" >&2
fi
ovs() { echo "${ovs_pps[$1]:-nan}"; }
# Scaling: net_pcap has one queue per capture file, so each port gets the file twice for two
# queues; TX goes to /dev/null pcaps in both runs so they pay the same PMD cost.
q1=(--vdev="net_pcap0,rx_pcap=$tmp/fwd0.pcap,tx_pcap=/dev/null,infinite_rx=1" --vdev="net_pcap1,rx_pcap=$tmp/fwd1.pcap,tx_pcap=/dev/null,infinite_rx=1")
q2=(--vdev="net_pcap0,rx_pcap=$tmp/fwd0.pcap,rx_pcap=$tmp/fwd0.pcap,tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1"
    --vdev="net_pcap1,rx_pcap=$tmp/fwd1.pcap,rx_pcap=$tmp/fwd1.pcap,tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1")
run_inagg scale1 0,1 "${q1[@]}" -- --socket "" --mtu 1500 --mbufs 32768 --mbuf-budget 1024 --stats-interval 1
inagg_pps_s1=$(inagg_rate "$tmp/scale1.log")
run_inagg scale2 "(0,2)@0,1@1" "${q2[@]}" -- --socket "" --mtu 1500 --mbufs 32768 --mbuf-budget 1024 --stats-interval 1
inagg_pps2=$(inagg_rate "$tmp/scale2.log")

# Aggregation: a replay job looping through the appliance.
/usr/bin/python3 scripts/gen-pcap --out "$tmp/agg" --workers 4 --payload 4096 --message 65536 --messages 8 --replay --background 0 >/dev/null
run_inagg agg 0,1 --vdev="net_pcap0,rx_pcap=$tmp/agg/port0.pcap,infinite_rx=1" --vdev="net_pcap1,rx_pcap=$tmp/agg/port1.pcap,infinite_rx=1" \
  -- --socket "" --job "$tmp/agg/job.job" --mtu 4200 --mbufs 16384 --mbuf-budget 4096 --stats-interval 1
agg_bps=$(awk '/^stats t=/ {t = substr($2, 3); n++; T[n] = t}
               /^job 1:/ {for (i = 1; i <= NF; i++) if ($i == "aggregated_bytes") B[n] = $(i + 1)}
               END {if (n < 3) {print 0; exit} print (B[n] - B[n-1]) / (T[n] - T[n-1])}' "$tmp/agg.log")
grep -q "job 1: active" "$tmp/agg.log" || echo "warning: the aggregation job did not stay active" >&2
# Job ownership across lcores: rank r's stream on queue (r / 2) of port (r mod 2), so the lcore
# that does not own the job receives half its packets and hands them over through its ring.
/usr/bin/python3 scripts/gen-pcap --out "$tmp/ho" --workers 4 --payload 4096 --message 65536 --messages 8 --replay --background 0 --ports 4 --appliance-ports 2 >/dev/null
run_inagg handover "(0,2)@0,1@1" \
  --vdev="net_pcap0,rx_pcap=$tmp/ho/port0.pcap,rx_pcap=$tmp/ho/port2.pcap,tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1" \
  --vdev="net_pcap1,rx_pcap=$tmp/ho/port1.pcap,rx_pcap=$tmp/ho/port3.pcap,tx_pcap=/dev/null,tx_pcap=/dev/null,infinite_rx=1" \
  -- --socket "" --job "$tmp/ho/job.job" --mtu 4200 --mbufs 16384 --mbuf-budget 4096 --stats-interval 1
# Cycles per packet on the lcore that only hands over, against the owner's per aggregated packet.
read -r ho_cyc own_cyc < <(awk '/^lcore/ {for (i = 1; i <= NF; i++) {if ($i == "rx") rx = $(i+1); if ($i == "handover_out") ho = $(i+1);
                                 if ($i == "handover_in") hi = $(i+1); if ($i == "busy_cycles") bc = $(i+1)}
                                 if (ho > 0) h = bc / rx; else if (hi > 0) o = bc / (rx + hi)}
                           END {printf "%.0f %.0f\n", h, o}' <(grep "^lcore" "$tmp/handover.log" | tail -n 2))
memcpy_gbps=$(build/bench/bench_engine --benchmark_filter='BM_.*/4/4096' --benchmark_min_time=0.5 --benchmark_color=false 2>/dev/null |
  sed 's/\x1b\[[0-9;]*m//g' | sed -n 's|^n/P=4/4096: .*memcpy \([0-9.]*\) Gbps.*|\1|p')
memcpy_bps=$(awk -v g="${memcpy_gbps:-0}" 'BEGIN {print g * 1e9 / 8}')
echo "forwarding, 64 B, 2 ports: testpmd $(awk -v x="$testpmd_pps" 'BEGIN {printf "%.2f", x / 1e6}') Mpps," \
     "inagg $(awk -v x="$inagg_pps" 'BEGIN {printf "%.2f", x / 1e6}') Mpps (1 lcore)," \
     "scaling with tx to /dev/null pcaps: $(awk -v x="$inagg_pps_s1" 'BEGIN {printf "%.2f", x / 1e6}') Mpps (1 lcore) ->" \
     "$(awk -v x="$inagg_pps2" 'BEGIN {printf "%.2f", x / 1e6}') Mpps (2 lcores, one sharing a core with the control thread)"
mpps() { awk -v x="$1" 'BEGIN {if (x == "nan" || x == "") print "nan"; else printf "%.2f", x / 1e6}'; }
echo "forwarding vs OVS-DPDK, Mpps, inagg / OVS NORMAL / OVS port-to-port: 64 B $(mpps "$inagg_pps") / $(mpps "$(ovs fwd-normal)") / $(mpps "$(ovs fwd-p2p)")," \
     "1514 B $(mpps "$inagg_pps1500") / $(mpps "$(ovs fwd1500-normal)") / $(mpps "$(ovs fwd1500-p2p)")," \
     "RoCEv2 1 KiB $(mpps "$inagg_ppsroce") / $(mpps "$(ovs fwdroce-normal)") / $(mpps "$(ovs fwdroce-p2p)")"
echo "job ownership: the non-owner lcore spends ${ho_cyc:-?} cycles per 4 KiB packet it receives and hands over (net_pcap RX copy included; the owner, at ${own_cyc:-?} cycles per packet, cannot keep up, so most handovers find its ring full and are dropped and counted)"
echo "aggregation, fp32 n=4 4 KiB: $(awk -v x="$agg_bps" 'BEGIN {printf "%.1f", x * 8 / 1e9}') Gbps of input per lcore," \
     "memcpy $(awk -v x="$memcpy_bps" 'BEGIN {printf "%.1f", x * 8 / 1e9}') Gbps"
# One job as two channels on two datapath lcores against one (bench/job_lcores.py, one round;
# `bench/run job-lcores` runs more).
job=$(/usr/bin/python3 bench/job_lcores.py 1 "$secs" | tee -a /dev/stderr |
  grep -Eo '(job_2channels_vs_1|channels2_handed_over)=[0-9.]*' | tr '\n' ' ')
# vs X Y: X / Y, nan when Y is nan or 0.
vs() { awk -v x="$1" -v y="$2" 'BEGIN {if (y == "nan" || y == "" || y + 0 <= 0) print "nan"; else printf "%.2f", x / y}'; }
ovs_keys="fwd_vs_ovs=$(vs "$inagg_pps" "$(ovs fwd-normal)") fwd_vs_ovs_p2p=$(vs "$inagg_pps" "$(ovs fwd-p2p)")"
ovs_keys+=" fwd1500_vs_ovs=$(vs "$inagg_pps1500" "$(ovs fwd1500-normal)") fwdroce_vs_ovs=$(vs "$inagg_ppsroce" "$(ovs fwdroce-normal)")"
awk -v f="$inagg_pps" -v t="$testpmd_pps" -v a="$agg_bps" -v m="$memcpy_bps" -v f2="$inagg_pps2" -v f1="$inagg_pps_s1" -v j="${job:-job_2channels_vs_1=?}" -v o="$ovs_keys" 'BEGIN {
  printf "fwd_vs_testpmd=%.2f agg_vs_memcpy=%.2f agg_gbps_per_lcore=%.1f fwd_2lcores_vs_1=%.2f %s %s\n",
    (t > 0 ? f / t : 0), (m > 0 ? a / m : 0), a * 8 / 1e9, (f1 > 0 ? f2 / f1 : 0), j, o }'
