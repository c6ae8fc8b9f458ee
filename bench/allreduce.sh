#!/usr/bin/env bash
# bench/run allreduce: 4 workers on the virtual rack with every worker's link limited to the same
# rate by tbf (BENCH_RATE, default 100mbit: a quarter of what the software transport reaches on
# this machine unlimited, so the links are the bottleneck, not the CPUs), an fp32 sweep up to
# 64 MiB through the appliance (ina) and as a ring allreduce in the same run, against the
# line-rate bound size / B, and PyTorch Gloo's all_reduce on the same rack through the same
# appliance (forwarding its TCP) in the same run (bench/gloo_allreduce.py; BENCH_GLOO=0 skips it).
# Also goodput with 1% loss on every link, as a fraction of lossless. Ends with
# `ina_vs_bound=X ring_vs_ina=Y gloo_vs_ina=G loss1_goodput=Z` and writes bench/allreduce.png.
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

start_rack
sweep ina 1048576 && sweep ring 1048576 && gloo_sweep 1048576 || exit 1
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
awk -v l="$last" -v lossy="$lossy" 'BEGIN {split(l, f, " ");
  printf "ina_vs_bound=%.2f ring_vs_ina=%.2f gloo_vs_ina=%.2f loss1_goodput=%.2f size=%d\n", f[2] / f[5], f[3] / f[2],
    f[4] / f[2], f[2] / lossy, f[1] }'
