#!/usr/bin/env bash
# bench/run appliance: the whole appliance on virtual devices, each figure against a reference
# measured in the same run on the same device type and core.
#   fwd_vs_testpmd   64-byte non-RoCE frames, 2 net_pcap ports looping a capture (infinite_rx),
#                    one datapath lcore: inagg's bridge vs dpdk-testpmd --forward-mode=mac
#   agg_vs_memcpy    fp32, n = 4, 4 KiB payloads, replay job, same ports: aggregated input bytes
#                    per second vs single-core memcpy of the same bytes (bench_engine's reference)
#   agg_gbps_per_lcore, and forwarding with 1 and 2 datapath lcores (2 lcores share this 2-core
#   machine with the control thread: indicative only)
#   job_2lcores_vs_1 the aggregation job on 2 datapath lcores (--job-lcores 2) vs 1 (bench/job_lcores.py)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
secs=${BENCH_SECS:-10}  # EAL start-up with --no-huge -m 2048 takes a few of these
tmp=$(mktemp -d)
pids=()
keep=${BENCH_KEEP:-}  # set to keep the logs
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf /var/run/dpdk/inagg-bench-*-$$
  if [ -n "$keep" ]; then echo "logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
eal=(--no-huge -m 2048 --no-pci --log-level=lib.eal:error)

# 64-byte frames between two stations, one per port direction.
/usr/bin/python3 - "$tmp" <<'PY'
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Raw, wrpcap
def frames(src, dst):
    out = []
    for i in range(256):
        p = Ether(src=src, dst=dst) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1000 + i, dport=9)
        p = p / Raw(bytes(60 - len(p)))
        p.time = 1700000000 + i / 1e6
        out.append(p)
    return out
wrpcap(sys.argv[1] + "/fwd0.pcap", frames("02:00:00:00:00:0a", "02:00:00:00:00:0b"))
wrpcap(sys.argv[1] + "/fwd1.pcap", frames("02:00:00:00:00:0b", "02:00:00:00:00:0a"))
PY
fwd_vdevs=(--vdev="net_pcap0,rx_pcap=$tmp/fwd0.pcap,infinite_rx=1" --vdev="net_pcap1,rx_pcap=$tmp/fwd1.pcap,infinite_rx=1")

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
/usr/bin/python3 scripts/gen-pcap --out "$tmp/ho" --workers 4 --payload 4096 --message 65536 --messages 8 --replay --background 0 --ports 4 >/dev/null
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
echo "job ownership: the non-owner lcore spends ${ho_cyc:-?} cycles per 4 KiB packet it receives and hands over (net_pcap RX copy included; the owner, at ${own_cyc:-?} cycles per packet, cannot keep up, so most handovers find its ring full and are dropped and counted)"
echo "aggregation, fp32 n=4 4 KiB: $(awk -v x="$agg_bps" 'BEGIN {printf "%.1f", x * 8 / 1e9}') Gbps of input per lcore," \
     "memcpy $(awk -v x="$memcpy_bps" 'BEGIN {printf "%.1f", x * 8 / 1e9}') Gbps"
# One job on two datapath lcores against one (bench/job_lcores.py, one round; `bench/run job-lcores`
# runs more).
job=$(/usr/bin/python3 bench/job_lcores.py 1 "$secs" | tee -a /dev/stderr | grep -o 'job_2lcores_vs_1=[0-9.]*')
awk -v f="$inagg_pps" -v t="$testpmd_pps" -v a="$agg_bps" -v m="$memcpy_bps" -v f2="$inagg_pps2" -v f1="$inagg_pps_s1" -v j="${job:-job_2lcores_vs_1=?}" 'BEGIN {
  printf "fwd_vs_testpmd=%.2f agg_vs_memcpy=%.2f agg_gbps_per_lcore=%.1f fwd_2lcores_vs_1=%.2f %s\n",
    (t > 0 ? f / t : 0), (m > 0 ? a / m : 0), a * 8 / 1e9, (f1 > 0 ? f2 / f1 : 0), j }'
