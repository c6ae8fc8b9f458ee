#!/usr/bin/env bash
# bench/run collectives: reduce-scatter and all-gather of 64 MiB of fp32 (BENCH_MAX) over 4 workers
# on the virtual rack, every worker's link limited by tbf to BENCH_RATES (default "100mbit 1gbit"),
# in one run per rate: inagg's one-pass schedules through the appliance (inagg-worker --collective,
# checked against a plain loop), inagg's allreduce (what a reduce-scatter cost before: the whole
# sum), and PyTorch Gloo on the same rack through the same appliance (forwarding its TCP): its
# all_gather, and its all_reduce for the reduce-scatter (Gloo 1.13 has no reduce_scatter: a
# reduce-scatter on Gloo is an all_reduce whose shard each rank keeps). Against the bound that
# transparency leaves (docs/protocol.md section 20): every rank sends and receives (n-1)/n of the
# buffer, (n-1)/n x size / B. A table row per rate, then one line of every rate's ratios:
#   rs_vs_bound_R=.. ag_vs_bound_R=.. gloo_ar_vs_rs_R=.. gloo_ag_vs_ag_R=.. ina_ar_vs_rs_R=.. (R: each rate)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
worker=${BENCH_WORKER:-build/src/apps/inagg-worker}
size=${BENCH_MAX:-67108864}
payload=4096 rack_mtu=4200 app_mtu=9000
tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  scripts/rack down >/dev/null 2>&1
  rm -rf "$tmp" /var/run/dpdk/inagg-bench-co-$$
}
trap cleanup EXIT
# shellcheck source=../scripts/lib/wait.sh
. scripts/lib/wait.sh
# shellcheck source=../scripts/lib/exchange_secret.sh
. scripts/lib/exchange_secret.sh
export_exchange_secret  # the job's secret for the ranks' meeting, inherited by every rank started here

start_rack() {  # RATE
  scripts/rack up --workers 4 --rate "$1" --mtu "$rack_mtu" >/dev/null || { echo "bench: rack up failed" >&2; exit 1; }
  # shellcheck disable=SC2046
  build/src/apps/inagg -l 0,1 --no-huge --no-pci -m 2048 --file-prefix="inagg-bench-co-$$" --log-level=lib.eal:error $(scripts/rack vdevs) \
    -- --socket "$tmp/ctl.sock" --mtu "$app_mtu" --mbufs 32768 --mbuf-budget 8192 --resend-us 50000 \
    --idle-sleep-us "${BENCH_IDLE_SLEEP_US:-1000}" >"$tmp/inagg.log" 2>&1 &
  pid=$!
  wait_alive "$pid" 30 "inagg's control socket" test -S "$tmp/ctl.sock" || { echo "bench: inagg did not start: $(tail -n 3 "$tmp/inagg.log")" >&2; exit 1; }
}
stop_rack() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; scripts/rack down >/dev/null; }

# inagg COLLECTIVE JOB: rank 0's "us wrong" of one checked out-of-place run; the job is removed
# after it (the next one registers the same QPs).
inagg() {
  local w=() r
  for r in 0 1 2 3; do
    ip netns exec "inagg-w$r" "$worker" --workers 4 --rank "$r" --collective "$1" --job-id "$2" -b "$size" -e "$size" \
      -n 1 -w 0 -c 1 --in-place 0 --message 65536 --payload "$payload" --window 2 --ack-timeout-ms 200 \
      --register "$tmp/ctl.sock" --timeout 900 >"$tmp/$1.$r" 2>&1 &
    w+=($!)
  done
  for r in 0 1 2 3; do wait "${w[$r]}" || { echo "bench: $1 rank $r failed: $(tail -n 2 "$tmp/$1.$r")" >&2; return 1; }; done
  build/src/apps/inagg-ctl --socket "$tmp/ctl.sock" remove "$2" >/dev/null || { echo "bench: cannot remove job $2" >&2; return 1; }
  awk '!/^#/ && NF >= 9 {print $6, $9}' "$tmp/$1.0"
}
# gloo OP PORT: rank 0's "us wrong"
gloo() {
  local w=() r
  for r in 0 1 2 3; do
    ip netns exec "inagg-w$r" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 timeout 900 \
      /usr/bin/python3 bench/gloo_allreduce.py "$r" 4 10.77.0.1 "$2" "$size" "$size" 1 "$1" >"$tmp/gloo.$1.$r" 2>&1 &
    w+=($!)
  done
  for r in 0 1 2 3; do wait "${w[$r]}" || { echo "bench: Gloo $1 rank $r failed: $(tail -n 2 "$tmp/gloo.$1.$r")" >&2; return 1; }; done
  awk '{print $2, $3}' "$tmp/gloo.$1.0"
}

/usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  { echo "bench: needs python3-torch with Gloo (scripts/setup --deps)" >&2; exit 1; }
echo "4 workers, $size bytes of fp32, $payload-byte payloads; times in us (rank 0), bound = 3/4 x size / rate"
ratios=""
for rate in ${BENCH_RATES:-100mbit 1gbit}; do
  bps=$(awk -v r="$rate" 'BEGIN {n = r + 0; u = substr(r, length(n "") + 1);
    m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; print n * m}')
  start_rack "$rate"
  rs=$(inagg reduce_scatter 1) && ag=$(inagg all_gather 2) && ar=$(inagg allreduce 3) &&
    grs=$(gloo all_reduce 29510) && gag=$(gloo all_gather 29511) || exit 1
  stop_rack
  wrong=$(printf '%s\n' "$rs" "$ag" "$ar" "$grs" "$gag" | awk '{s += $2} END {print s + 0}')
  [ "$wrong" -eq 0 ] || echo "warning: $wrong elements differed from the reference" >&2
  printf "%-8s inagg reduce_scatter %10.0f  all_gather %10.0f  allreduce %10.0f | Gloo all_reduce %10.0f  all_gather %10.0f | bound %10.0f\n" \
    "$rate" "${rs% *}" "${ag% *}" "${ar% *}" "${grs% *}" "${gag% *}" "$(awk -v s="$size" -v b="$bps" 'BEGIN {print 0.75 * s * 8 / b * 1e6}')"
  ratios+=$(awk -v r="$rate" -v s="$size" -v b="$bps" -v rs="${rs% *}" -v ag="${ag% *}" -v ar="${ar% *}" -v grs="${grs% *}" -v gag="${gag% *}" \
    'BEGIN {bound = 0.75 * s * 8 / b * 1e6
      printf "rs_vs_bound_%s=%.2f ag_vs_bound_%s=%.2f gloo_ar_vs_rs_%s=%.2f gloo_ag_vs_ag_%s=%.2f ina_ar_vs_rs_%s=%.2f ",
        r, rs / bound, r, ag / bound, r, grs / rs, r, gag / ag, r, ar / rs}')
done
echo "$ratios"
