#!/usr/bin/env bash
# bench/run ports: the appliance's ports in the virtual rack (--ports), each port type against a
# plain Linux bridge on the same links, interleaved in the same run. For every variant, in every
# one of BENCH_ROUNDS rounds (default 3, the order rotating from round to round):
#   - Gloo: PyTorch Gloo all_reduce of BENCH_SIZE bytes of fp32 (default 64 MiB), 4 workers,
#     every worker's link limited to BENCH_RATE (default 1gbit, tbf), BENCH_ITERS (default 3)
#     timed all_reduces (bench/gloo_allreduce.py checks every element); the round's figure is
#     their median. Through inagg, which only forwards Gloo's TCP, or through the bridge.
#   - forwarding: iperf3 TCP from w0 to w1 and from w2 to w3 at once for BENCH_SECS (default 3)
#     seconds on unlimited links: the total in Gbit/s, the CPU inagg's datapath lcore used
#     meanwhile and the time it spent runnable but waiting for a CPU (both in cores, from
#     /proc/PID/task/TID/schedstat: run time and run-queue wait).
# Variants (BENCH_VARIANTS; by default all but af_packet-nice): bridge (`scripts/rack up --bridge`: no appliance),
# af_packet and af_xdp (`--ports`, with the rack's default threaded NAPI on the hosts' eth0), and
# the rack without threaded NAPI (`--host-napi off`): af_packet-softirq and bridge-softirq;
# af_packet-nice: af_packet with inagg under `nice -n -10` (a bridge forwards in softirq, ahead of
# every process; an appliance is a process among the others); ovs: Open vSwitch with DPDK instead of
# inagg on the same net_af_packet vdevs, EAL options and cores (bench/ovs_dpdk.sh: a netdev bridge,
# `actions=NORMAL`, its PMD thread on inagg's datapath CPU sleeping up to BENCH_IDLE_SLEEP_US when
# idle, `pmd-maxsleep`, as inagg's lab mode; skipped, with a message, without OVS-DPDK). OVS on
# net_af_packet takes MTU 1500 at most (the PMD's largest frame is 1518 bytes, and OVS sizes its
# mbufs from the MTU), so ovs runs on a rack of MTU 1500 (`--mtu 1500`), as does its reference
# af_packet-1500 (inagg); the rack's default is 4200 for the others.
# inagg runs in lab mode, --idle-sleep-us BENCH_IDLE_SLEEP_US (default 100, scripts/rack's advice);
# 0 busy-polls. A Gloo run that does not finish within BENCH_GLOO_TIMEOUT seconds (default 180)
# is reported as nan (and said why), not waited for.
# Ends with `gloo_af_packet_vs_bridge=X ... fwd_bridge_gbps=A ...`: for every variant, the median
# over the rounds of its Gloo time over the bridge's in the same round (the softirq variants over
# bridge-softirq; `_vs_best_bridge`: over the faster of the two bridges in that round), and of its
# forwarding rate; the per-round figures and the ranges above it. With ovs and af_packet both run:
# `gloo_af_packet_1500_vs_ovs` (time through inagg over time through OVS-DPDK: below 1, inagg is
# faster) and `fwd_af_packet_1500_vs_ovs` (rate over rate: above 1, inagg is faster), round by round;
# the two MTU-1500 variants are not set against the bridges (of MTU 4200).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib/wait.sh
. scripts/lib/wait.sh
# shellcheck source=ovs_dpdk.sh
. bench/ovs_dpdk.sh
rate=${BENCH_RATE:-1gbit}
size=${BENCH_SIZE:-67108864}
iters=${BENCH_ITERS:-3}
secs=${BENCH_SECS:-3}
rounds=${BENCH_ROUNDS:-3}
idle_us=${BENCH_IDLE_SLEEP_US:-100}
gloo_timeout=${BENCH_GLOO_TIMEOUT:-180}
read -ra variants <<<"${BENCH_VARIANTS:-bridge af_packet af_xdp af_packet-softirq bridge-softirq af_packet-1500 ovs}"
nice_cmd=()
rack=ibp$$
rack=${rack:0:11}
prefix=inagg-bench-ports-$$
tmp=$(mktemp -d)
pid="" others=()
cleanup() {
  for p in "${others[@]}" $pid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  ovs_down
  scripts/rack down --name "$rack" >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap cleanup EXIT
die() { echo "bench ports: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (the virtual rack)"
command -v iperf3 >/dev/null || die "needs iperf3 (scripts/packages.txt; apt-get install iperf3)"
/usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  die "needs python3-torch with Gloo"
if [[ " ${variants[*]} " == *" ovs "* ]] && ! ovs_find; then
  echo "bench ports: skipping the variant ovs: $ovs_why" >&2
  mapfile -t variants < <(printf '%s\n' "${variants[@]}" | grep -vx ovs)
fi

# up VARIANT [RACK_ARGS...]: the rack for VARIANT, and inagg on its ports unless it is the bridge.
up() {
  local v=$1 args=()
  shift
  case "$v" in
    bridge) args=(--bridge) ;;
    af_packet) args=(--ports af_packet) ;;
    af_packet-nice) args=(--ports af_packet) ;;
    af_packet-1500) args=(--ports af_packet --mtu 1500) ;;
    ovs) args=(--ports af_packet --mtu 1500) ;;
    af_xdp) args=(--ports af_xdp) ;;
    af_packet-softirq) args=(--ports af_packet --host-napi off) ;;
    bridge-softirq) args=(--bridge --host-napi off) ;;
    *) die "unknown variant '$v' (bridge, af_packet, af_xdp, af_packet-softirq, bridge-softirq, af_packet-nice, af_packet-1500, ovs)" ;;
  esac
  scripts/rack up --name "$rack" --workers 4 "${args[@]}" "$@" >"$tmp/rack.log" 2>&1 || die "rack up: $(cat "$tmp/rack.log")"
  [[ "$v" == bridge* ]] && return 0
  if [ "$v" = ovs ]; then
    local devs=() i=0 d
    rm -rf "$tmp/ovs"  # the last round's database and logs
    ovs_up "$tmp/ovs" "$prefix-ovs" 0x2 0x1 --no-huge --no-pci -m 1024 --log-level=lib.eal:error ||
      die "OVS-DPDK did not start: $(ovs_log 3 | tr '\n' ' ')"
    ovs_vsctl --no-wait set Open_vSwitch . "other_config:pmd-maxsleep=$idle_us" || die "OVS-DPDK: pmd-maxsleep"
    for d in $(scripts/rack vdevs --name "$rack"); do devs+=("p$i" "${d#--vdev=}"); i=$((i + 1)); done
    { ovs_add_ports "${devs[@]}" && ovs_flows normal; } || die "OVS-DPDK's ports: $(ovs_log 3 | tr '\n' ' ')"
    return 0
  fi
  rm -f "$tmp/ctl.sock" "$tmp/inagg.log"  # the previous inagg's log says "forwarding on" too
  nice_cmd=()
  [ "$v" = af_packet-nice ] && nice_cmd=(nice -n -10)
  # shellcheck disable=SC2046
  "${nice_cmd[@]}" build/src/apps/inagg -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
    $(scripts/rack vdevs --name "$rack") -- --socket "$tmp/ctl.sock" --mtu 1500 --mbufs 16384 --mbuf-budget 4096 \
    --idle-sleep-us "$idle_us" --resend-us 2000 >"$tmp/inagg.log" 2>&1 &
  pid=$!
  wait_alive "$pid" 60 "inagg to forward" grep -q "^inagg: forwarding on" "$tmp/inagg.log" ||
    die "inagg ($v) did not start: $(grep -v '^lib' "$tmp/inagg.log" | tail -n 3)"
}
down() {
  ovs_down
  if [ -n "$pid" ]; then
    kill "$pid"
    wait "$pid" 2>/dev/null
    pid=""
  fi
  scripts/rack down --name "$rack" >/dev/null
}

# gloo VARIANT: g = the median of BENCH_ITERS Gloo all_reduce times, in seconds. (gloo and forward
# set globals rather than print: in a $(...) subshell, a failure would leave inagg running.)
gloo() {
  local w=() r p ok=true
  up "$1" --rate "$rate"
  for r in 0 1 2 3; do
    ip netns exec "$rack-w$r" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 timeout "$gloo_timeout" \
      /usr/bin/python3 bench/gloo_allreduce.py "$r" 4 10.77.0.1 29500 "$size" "$size" "$iters" >"$tmp/gloo.$r" 2>&1 &
    w+=($!)
  done
  others=("${w[@]}")
  for p in "${w[@]}"; do wait "$p" || ok=false; done
  others=()
  if ! $ok; then
    down
    echo "bench ports: Gloo ($1) failed or took over $gloo_timeout s (rank 0's times, s: $(awk '{printf "%s ", $2 / 1e6}' "$tmp/gloo.0"));" \
      "inagg's port counters: $(grep -h '^port' "$tmp/inagg.log" 2>/dev/null | tr '\n' ';')" >&2
    g=nan gall=-
    return 0
  fi
  down
  awk '$3 != 0 {bad = 1} END {exit bad}' "$tmp/gloo.0" || die "Gloo ($1): wrong elements: $(cat "$tmp/gloo.0")"
  gall=$(awk '{printf "%s%.2f", (NR>1 ? "," : ""), $2 / 1e6}' "$tmp/gloo.0")
  g=$(awk '{print $2 / 1e6}' "$tmp/gloo.0" | sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.3f\n", v[int((NR + 1) / 2)]}')
  [ -n "$g" ] || die "Gloo ($1) printed no times"
}

# lcore_schedstat PID [THREAD_PREFIX]: "RUN_NS WAIT_NS THREADS" summed over the datapath threads
# (inagg's rte-worker-N; OVS's pmd-cNN/...): time run, and time runnable but waiting for a CPU
# (/proc/.../schedstat).
lcore_schedstat() {
  local t r w n=0 sr=0 sw=0
  for t in /proc/"$1"/task/*; do
    [[ "$(cat "$t/comm" 2>/dev/null)" == "${2:-rte-worker}"* ]] || continue
    read -r r w _ <"$t/schedstat" || continue
    sr=$((sr + r)) sw=$((sw + w)) n=$((n + 1))
  done
  [ "$n" -gt 0 ] || echo "bench ports: no ${2:-rte-worker} thread in process $1: $(cat /proc/"$1"/task/*/comm 2>/dev/null | tr '\n' ' ')" >&2
  echo "$sr $sw $n"
}

# forward VARIANT: f = iperf3's total of two flows (Gbit/s), c = the datapath's CPU meanwhile (inagg's
# lcore, OVS's PMD thread; cores; nan for the bridge).
forward() {
  local v=$1 s=() cl=()
  c=nan
  up "$v"
  for r in 1 3; do
    ip netns exec "$rack-w$r" iperf3 -s -1 -p 5201 >"$tmp/iperf-s$r.log" 2>&1 &
    s+=($!)
  done
  others=("${s[@]}")
  for r in 1 3; do
    wait_alive "${s[$(((r - 1) / 2))]}" 10 "iperf3 server on w$r" \
      sh -c "ip netns exec $rack-w$r ss -Hltn 'sport = :5201' | grep -q LISTEN" || die "iperf3 server on w$r did not start"
  done
  for r in 0 2; do
    ip netns exec "$rack-w$r" iperf3 -c "10.77.0.$((r + 2))" -p 5201 -t "$secs" -J >"$tmp/iperf$r.json" 2>&1 &
    cl+=($!)
  done
  others+=("${cl[@]}")
  wq=nan
  local dp=$pid th=rte-worker
  [ "$v" = ovs ] && dp=$ovs_sw_pid th=pmd-
  if [ -n "$dp" ]; then
    local a b t0 t1
    a=$(lcore_schedstat "$dp" "$th") t0=$(date +%s%N)
    sleep "$secs"  # the measurement interval, not a wait for a state
    b=$(lcore_schedstat "$dp" "$th") t1=$(date +%s%N)
    read -r c wq < <(awk -v a="$a" -v b="$b" -v t="$((t1 - t0))" 'BEGIN {split(a, x, " "); split(b, y, " ");
      if (x[3] + 0 == 0) print "nan nan"; else printf "%.3f %.3f\n", (y[1] - x[1]) / t, (y[2] - x[2]) / t}')
  fi
  local ok=true
  for p in "${cl[@]}" "${s[@]}"; do wait "$p" || ok=false; done
  others=()
  down
  f=$(/usr/bin/python3 - "$tmp/iperf0.json" "$tmp/iperf2.json" <<'PY'
import json, sys
print(f"{sum(json.load(open(f))['end']['sum_received']['bits_per_second'] for f in sys.argv[1:3]) / 1e9:.2f}")
PY
  ) && $ok || {
    echo "bench ports: iperf3 failed ($v): $(tail -n 3 "$tmp"/iperf*.json | tr '\n' ' ')" >&2
    f=nan
  }
}

echo "4 workers; Gloo all_reduce of $size bytes fp32 at $rate per link, median of $iters;" \
  "forwarding: iperf3 w0->w1 + w2->w3, ${secs} s, unlimited links; inagg --idle-sleep-us $idle_us"
printf "%-6s %-18s %10s %10s %12s %11s  %s\n" round variant gloo_s fwd_gbps inagg_cores inagg_wait gloo_each_s
: >"$tmp/results"
for i in $(seq "$rounds"); do
  n=${#variants[@]}
  for j in $(seq 0 $((n - 1))); do
    v=${variants[$(((i - 1 + j) % n))]}
    gloo "$v"
    forward "$v"
    printf "%-6s %-18s %10s %10s %12s %11s  %s\n" "$i" "$v" "$g" "$f" "$c" "$wq" "$gall"
    echo "$i $v $g $f $c" >>"$tmp/results"
  done
done
/usr/bin/python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for r, v, g, f, c in rows:
    by.setdefault(v, {})[r] = (float(g), float(f))
out = []
MTU1500 = ("ovs", "af_packet-1500")
def rng(xs):
    return f"median {statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"
for v in by:
    ref = "bridge-softirq" if v.endswith("-softirq") else "bridge"
    if v.startswith("bridge") or ref not in by or v in MTU1500:
        continue
    ratios = [by[v][r][0] / by[ref][r][0] for r in by[v] if r in by[ref]]
    ok = [x for x in ratios if x == x]  # nan: a Gloo run that did not finish
    failed = len(ratios) - len(ok)
    note = f", {failed} of {len(ratios)} rounds did not finish" if failed else ""
    print(f"gloo {v} / {ref}: {rng(ok) if ok else 'none finished'} over {len(ok)} rounds{note}")
    out.append(f"gloo_{v.replace('-', '_')}_vs_{ref.replace('-', '_')}={statistics.median(ok) if ok else float('nan'):.2f}")
if "bridge" in by and "bridge-softirq" in by:
    # The rack's default (threaded NAPI) against whichever bridge was faster in the same round.
    for v in (x for x in by if not x.startswith("bridge") and x not in MTU1500):
        ratios = [by[v][r][0] / min(by["bridge"][r][0], by["bridge-softirq"][r][0])
                  for r in by[v] if r in by["bridge"] and r in by["bridge-softirq"]]
        ok = [x for x in ratios if x == x]
        if ok:
            print(f"gloo {v} / the round's faster bridge: {rng(ok)} over {len(ok)} rounds")
            out.append(f"gloo_{v.replace('-', '_')}_vs_best_bridge={statistics.median(ok):.2f}")
for v in by:
    g = [x[0] for x in by[v].values() if x[0] == x[0]]
    f = [x[1] for x in by[v].values() if x[1] == x[1]]
    print(f"gloo {v}: {rng(g) if g else 'none finished'} s; forwarding {v}: {rng(f) if f else 'none'} Gbit/s")
    out.append(f"fwd_{v.replace('-', '_')}_gbps={statistics.median(f) if f else float('nan'):.2f}")
if "ovs" in by and "af_packet-1500" in by:
    # inagg against OVS-DPDK on the same ports, round by round (Gloo: time, lower is better).
    for i, what in ((0, "gloo"), (1, "fwd")):
        ratios = [by["af_packet-1500"][r][i] / by["ovs"][r][i] for r in by["ovs"] if r in by["af_packet-1500"]]
        ok = [x for x in ratios if x == x]
        print(f"{what} af_packet-1500 / ovs: {rng(ok) if ok else 'none'} over {len(ok)} rounds")
        out.append(f"{what}_af_packet_1500_vs_ovs={statistics.median(ok) if ok else float('nan'):.2f}")
print(" ".join(out))
PY
