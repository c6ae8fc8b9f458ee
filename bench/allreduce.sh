#!/usr/bin/env bash
# bench/run allreduce: 4 workers on the virtual rack with every worker's link limited to the same
# rate by tbf (BENCH_RATE, default 100mbit: a quarter of what the software transport reaches on
# this machine unlimited, so the links are the bottleneck, not the CPUs), an fp32 sweep up to
# 64 MiB through the appliance (ina) and as a ring allreduce in the same run, against the
# line-rate bound size / B, and PyTorch Gloo's all_reduce on the same rack through the same
# appliance (forwarding its TCP) in the same run (bench/gloo_allreduce.py; BENCH_GLOO=0 skips it).
# Also goodput with 1% loss on every link, as a fraction of lossless. Ends with
# `ina_vs_bound=X ring_vs_ina=Y gloo_vs_ina=G loss1_goodput=Z cpu_ina_vs_gloo=C` and writes
# bench/allreduce.png. Before that, CPU seconds per allreduced GB of ina and Gloo (cpu_phase).
# The appliance runs in lab mode (--idle-sleep-us BENCH_IDLE_SLEEP_US, default 1000, as in the
# virtual rack's tests); BENCH_IDLE_SLEEP_US=0 busy-polls. BENCH_WORKER: another inagg-worker
# binary (A/B runs of the transport).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../scripts/lib/exchange_secret.sh
. scripts/lib/exchange_secret.sh
export_exchange_secret  # the job's secret for the ranks' meeting, inherited by every rank started here
rate=${BENCH_RATE:-100mbit}
worker=${BENCH_WORKER:-build/src/apps/inagg-worker}
# BENCH_PAYLOAD: 4096 (default, RoCE MTU 4096 packets, the rack's default MTU 4200: the appliance's
# mbufs then sized for MTU 9000, which holds the 4352-byte frames of its ports: scripts/rack vdevs);
# 1024 or less runs the rack at MTU 1500. BENCH_MAX: the largest size (default 64 MiB).
payload=${BENCH_PAYLOAD:-4096}
rack_mtu=4200 app_mtu=9000
[ "$payload" -gt 1024 ] || rack_mtu=1500 app_mtu=1500
max=${BENCH_MAX:-67108864}
tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  scripts/rack down >/dev/null 2>&1
  rm -rf "$tmp" /var/run/dpdk/inagg-bench-ar-$$
}
trap cleanup EXIT
rate_bps=$(awk -v r="$rate" 'BEGIN {n = r + 0; u = substr(r, length(n "") + 1);
  m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; print n * m}')

start_rack() {  # EXTRA rack args
  scripts/rack up --workers 4 --rate "$rate" --mtu "$rack_mtu" "$@" >/dev/null
  # shellcheck disable=SC2046
  build/src/apps/inagg -l 0,1 --no-huge --no-pci -m 2048 --file-prefix="inagg-bench-ar-$$" --log-level=lib.eal:error $(scripts/rack vdevs) \
    -- --socket "$tmp/ctl.sock" --mtu "$app_mtu" --mbufs 32768 --mbuf-budget 8192 --resend-us 50000 \
    --idle-sleep-us "${BENCH_IDLE_SLEEP_US:-1000}" >"$tmp/inagg.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -S "$tmp/ctl.sock" ] && break; sleep 0.1; done
}
stop_rack() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; scripts/rack down >/dev/null; }
sweep() {  # MODE MIN -> rank 0's table in $tmp/MODE.txt
  local mode=$1 min=$2 w=()
  for r in 0 1 2 3; do
    ip netns exec "inagg-w$r" "$worker" --workers 4 --rank "$r" --mode "$mode" -b "$min" -e "$max" -f 4 -n 1 -w 0 \
      -c 1 --in-place 0 --message 65536 --payload "$payload" --window 2 --ack-timeout-ms 200 --register "$tmp/ctl.sock" --timeout 900 >"$tmp/$mode.$r" 2>&1 &
    w+=($!)
  done
  for p in "${w[@]}"; do wait "$p" || { echo "bench: a $mode worker failed: $(tail -n 2 "$tmp/$mode".*)" >&2; return 1; }; done
  awk '!/^#/ && NF >= 9 {print $1, $6, $9}' "$tmp/$mode.0" >"$tmp/$mode.txt"
}

gloo_sweep() {  # MIN -> rank 0's "size us wrong" in $tmp/gloo.txt
  local min=$1 w=()
  if [ "${BENCH_GLOO:-1}" = 0 ] || ! /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
    echo "bench: Gloo skipped (BENCH_GLOO=0, or no python3-torch with Gloo)" >&2
    awk '{print $1, "nan", 0}' "$tmp/ina.txt" >"$tmp/gloo.txt"
    return 0
  fi
  for r in 0 1 2 3; do
    ip netns exec "inagg-w$r" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 timeout 900 \
      /usr/bin/python3 bench/gloo_allreduce.py "$r" 4 10.77.0.1 29500 "$min" "$max" >"$tmp/gloo.$r" 2>&1 &
    w+=($!)
  done
  for p in "${w[@]}"; do wait "$p" || { echo "bench: a Gloo rank failed: $(tail -n 2 "$tmp"/gloo.*)" >&2; return 1; }; done
  cp "$tmp/gloo.0" "$tmp/gloo.txt"
}

# CPU cost per allreduced byte, ina against Gloo on the same rack and links (BENCH_CPU=0 skips
# it): each runs the largest size N = 1 and N = 1 + BENCH_CPU_ITERS times (-c 0, no warm-up), and
# the difference is what those allreduces cost, the start-up (Python's import of torch, the ranks'
# meeting, the registration) cancelled. Per process: the 4 ranks' user and system seconds (bash's
# `times` of each rank), the appliance's (/proc/PID/stat); and the whole machine's busy seconds
# (/proc/stat: user, nice, system, irq, softirq), which also holds the kernel's softirq work on
# the veths that no process is charged for, and anything else running.
cpu_secs() { awk '{split($0, t, /[ms]/); print t[1] * 60 + t[2]}' <<<"$1"; }
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# shellcheck disable=SC2016  # expanded by the bash that runs the rank
timed='"${@:2}"; rc=$?; times >"$1"; exit $rc'  # ARGS: TIMES_FILE COMMAND...: the command, then its CPU times
cpu_run() {  # MODE N -> "ranks_user ranks_sys appliance machine" (seconds) appended to $tmp/cpu.MODE.N
  local mode=$1 n=$2 w=() r a0 m0 a1 m1 hz
  hz=$(getconf CLK_TCK)
  # The sweep's (or the last run's) job 1 is still registered and has summed: a launch does not join it.
  [ "$mode" = ina ] && build/src/apps/inagg-ctl --socket "$tmp/ctl.sock" remove 1 >/dev/null 2>&1
  a0=$(awk '{print $14 + $15}' "/proc/$pid/stat") m0=$(machine_ticks)
  for r in 0 1 2 3; do
    if [ "$mode" = gloo ]; then
      ip netns exec "inagg-w$r" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 timeout 900 bash -c "$timed" \
        _ "$tmp/times.$r" /usr/bin/python3 bench/gloo_allreduce.py "$r" 4 10.77.0.1 $((29510 + n)) "$max" "$max" "$n" >"$tmp/cpu.$mode.$n.$r" 2>&1 &
    else
      ip netns exec "inagg-w$r" bash -c "$timed" _ "$tmp/times.$r" "$worker" --workers 4 \
        --rank "$r" --mode ina -b "$max" -e "$max" -n "$n" -w 0 -c 0 --in-place 0 --message 65536 --payload "$payload" \
        --window 2 --ack-timeout-ms 200 --register "$tmp/ctl.sock" --timeout 900 >"$tmp/cpu.$mode.$n.$r" 2>&1 &
    fi
    w+=($!)
  done
  for p in "${w[@]}"; do
    wait "$p" || { echo "bench: a $mode rank failed: $(tail -n 2 "$tmp/cpu.$mode.$n".*; tail -n 20 "$tmp/inagg.log")" >&2; return 1; }
  done
  a1=$(awk '{print $14 + $15}' "/proc/$pid/stat") m1=$(machine_ticks)
  local us=0 sy=0 line
  for r in 0 1 2 3; do
    line=$(sed -n 2p "$tmp/times.$r")  # the children's user and system time
    us=$(awk -v a="$us" -v b="$(cpu_secs "${line%% *}")" 'BEGIN {print a + b}')
    sy=$(awk -v a="$sy" -v b="$(cpu_secs "${line##* }")" 'BEGIN {print a + b}')
  done
  echo "$us $sy $((a1 - a0)) $((m1 - m0))" | awk -v hz="$hz" '{print $1, $2, $3 / hz, $4 / hz}' >"$tmp/cpu.$mode.$n"
}
cpu_phase() {
  local extra=${BENCH_CPU_ITERS:-3} mode gb
  [ "${BENCH_CPU:-1}" = 0 ] && return 0
  gb=$(awk -v b="$max" -v n="$extra" 'BEGIN {print b * n / 1e9}')
  echo "CPU seconds per allreduced GB ($extra allreduces of $max bytes: N = $((extra + 1)) minus N = 1): 4 ranks (user, system), the appliance, the whole machine"
  for mode in ina gloo; do
    if [ "$mode" = gloo ] && ! /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
      echo "bench: Gloo's CPU skipped (no python3-torch with Gloo)" >&2
      continue
    fi
    cpu_run "$mode" 1 && cpu_run "$mode" $((extra + 1)) || return 1
    paste -d' ' "$tmp/cpu.$mode.$((extra + 1))" "$tmp/cpu.$mode.1" | awk -v m="$mode" -v gb="$gb" \
      '{u = ($1 - $5) / gb; s = ($2 - $6) / gb; a = ($3 - $7) / gb; t = ($4 - $8) / gb
        printf "%-5s ranks %6.2f (user %6.2f, system %6.2f)  appliance %6.2f  machine %6.2f\n", m, u + s, u, s, a, t
        print u + s, a, t > "'"$tmp"'/cpu.per_gb." m}'
  done | tee "$tmp/cpu.table"
}

start_rack
sweep ina 1048576 && sweep ring 1048576 && gloo_sweep 1048576 || exit 1
cpu_phase || exit 1
stop_rack
start_rack --loss 1
mv "$tmp/ina.txt" "$tmp/ina.lossless"
sweep ina "$max" || exit 1
stop_rack
mv "$tmp/ina.txt" "$tmp/ina.loss1"; mv "$tmp/ina.lossless" "$tmp/ina.txt"

echo "rate $rate per worker link, $payload-byte payloads; rows: size, ina us, ring us, gloo us, bound us (size / rate)"
join <(sort -n "$tmp/ina.txt") <(sort -n "$tmp/ring.txt") | join - <(sort -n "$tmp/gloo.txt") | sort -n |
  awk -v b="$rate_bps" '{g = ($6 == "nan") ? sprintf("%12s", "nan") : sprintf("%12.0f", $6)
    printf "%10d %12.0f %12.0f %s %12.0f\n", $1, $2, $4, g, $1 * 8 / b * 1e6}' | tee "$tmp/table"
wrong=$(awk '{s += $3} END {print s + 0}' "$tmp/ina.txt" "$tmp/ring.txt" "$tmp/gloo.txt" "$tmp/ina.loss1")
[ "$wrong" -eq 0 ] || echo "warning: $wrong elements differed from the reference" >&2
/usr/bin/python3 - "$tmp/table" bench/allreduce.png "$rate" <<'PY'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
size = [r[0] / 2**20 for r in rows]
plt.figure(figsize=(6, 4))
for i, label in ((1, "ina (through inagg)"), (2, "ring"), (3, "Gloo all_reduce (forwarded by inagg)"),
                 (4, "bound: size / link rate")):
    pts = [(x, r[i] / 1e6) for x, r in zip(size, rows) if r[i] == r[i]]  # Gloo: nan when skipped
    if pts:
        plt.plot(*zip(*pts), marker="o", label=label, linestyle="--" if i == 4 else "-")
plt.xscale("log", base=2); plt.yscale("log")
plt.xlabel("allreduce size (MiB), 4 workers, fp32"); plt.ylabel("time (s)")
plt.title(f"allreduce on the virtual rack, {sys.argv[3]} per link")
plt.grid(True, which="both", alpha=0.3); plt.legend(); plt.tight_layout()
plt.savefig(sys.argv[2], dpi=100)
PY
last=$(tail -n 1 "$tmp/table")
lossy=$(awk '{print $2}' "$tmp/ina.loss1" | tail -n 1)
# cpu_ina_vs_gloo: the whole machine's busy seconds per allreduced byte, ina's over Gloo's (below
# 1: ina costs less CPU); nan without the CPU phase.
cpu_ratio=nan
if [ -s "$tmp/cpu.per_gb.ina" ] && [ -s "$tmp/cpu.per_gb.gloo" ]; then
  cpu_ratio=$(paste -d' ' "$tmp/cpu.per_gb.ina" "$tmp/cpu.per_gb.gloo" | awk '{if ($6 > 0) printf "%.2f", $3 / $6; else printf "nan"}')
fi
awk -v l="$last" -v lossy="$lossy" -v cpu="$cpu_ratio" 'BEGIN {split(l, f, " ");
  printf "ina_vs_bound=%.2f ring_vs_ina=%.2f gloo_vs_ina=%.2f loss1_goodput=%.2f cpu_ina_vs_gloo=%s size=%d\n",
    f[2] / f[5], f[3] / f[2], f[4] / f[2], f[2] / lossy, cpu, f[1] }'
