#!/usr/bin/env bash
# bench/run racks: 4 workers in 2 racks (scripts/racks; BENCH_PER_RACK=4: 8 workers), a leaf
# appliance per rack and a spine, the inter-rack links limited to BENCH_RATE each way (default
# 200mbit; the workers' own links are not), so that the inter-rack links are the bottleneck. In
# one run, on the same racks and the same three appliances (lab mode, BENCH_IDLE_SLEEP_US): a ring
# allreduce (the appliances only switch it) and the hierarchical ina allreduce (the leaves' and the
# spine's parts of the job added, inagg-ctl split), one size (BENCH_SIZE, default 64 MiB, fp32),
# -n BENCH_ITERS. Per allreduce: the time (rank 0's, nccl-tests' out-of-place column) against the
# inter-rack bound (the bytes one direction of a rack's link must carry / B: S for the hierarchy,
# 2(n-1)/n S for the ring), and the RoCEv2 bytes on the busiest direction of an inter-rack link
# (scripts/racks bytes, the other direction's ACKs included) per byte of S. Ends with
# `racks_vs_bound=X ring_vs_racks=Y inter_bytes_racks=A inter_bytes_ring=B`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rate=${BENCH_RATE:-200mbit}
size=${BENCH_SIZE:-67108864}
iters=${BENCH_ITERS:-3}
per_rack=${BENCH_PER_RACK:-2}
n=$((2 * per_rack))
name=ibr
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  scripts/racks down --name "$name" >/dev/null 2>&1
  rm -rf "$tmp" /var/run/dpdk/inagg-bench-racks-$$-*
}
trap cleanup EXIT
fail() { echo "bench racks: $*" >&2; exit 1; }
rate_bps=$(awk -v r="$rate" 'BEGIN {n = r + 0; u = substr(r, length(n "") + 1);
  m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; print n * m}')

scripts/racks up --name "$name" --racks 2 --per-rack "$per_rack" --inter-rate "$rate" --mtu 4200 >"$tmp/racks.log" 2>&1 ||
  fail "racks up: $(cat "$tmp/racks.log")"
# shellcheck source=../scripts/lib/wait.sh
. scripts/lib/wait.sh
# shellcheck source=../scripts/lib/exchange_secret.sh
. scripts/lib/exchange_secret.sh
export_exchange_secret  # the job's secret for the ranks' meeting, inherited by every rank started here
# shellcheck source=../scripts/lib/af_packet.sh
. scripts/lib/af_packet.sh
for part in "leaf 0" "leaf 1" spine; do
  p=${part// /}
  for attempt in 1 2 3; do  # again on a PACKET_FANOUT clash with another appliance (scripts/lib/af_packet.sh)
    # shellcheck disable=SC2046,SC2086  # the vdev arguments are words; $part is two
    build/src/apps/inagg -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="inagg-bench-racks-$$-$p" --log-level=lib.eal:error \
      $(scripts/racks vdevs $part --name "$name") -- --socket "$tmp/$p.sock" --mtu 9000 --mbufs 16384 --mbuf-budget 8192 \
      --resend-us 50000 --idle-sleep-us "${BENCH_IDLE_SLEEP_US:-1000}" >"$tmp/$p.log" 2>&1 &
    pids+=($!)
    wait_alive "${pids[-1]}" 10 "the $p appliance's control socket" test -S "$tmp/$p.sock" && break
    fanout_clash "$tmp/$p.log" && [ "$attempt" -lt 3 ] || fail "the $p appliance did not start: $(tail -n 3 "$tmp/$p.log")"
  done
done
racks=$(scripts/racks rack-of --name "$name")
common=(--workers "$n" -d float --message 65536 --payload 4096 --window 2 -b "$size" -e "$size" -n "$iters" -w 1 -c 1
  --in-place 0 --ack-timeout-ms 200 --timeout 900)

# inter_bytes: the largest of the four link directions' RoCEv2 byte counters.
inter_bytes() { scripts/racks bytes --name "$name" | awk '{if ($5 > m) m = $5} END {print m + 0}'; }
run() {  # MODE EXTRA... -> "us bytes_per_allreduce" (rank 0's time; the busiest link direction's bytes)
  local mode=$1 before after w=()
  shift
  before=$(inter_bytes)
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$name-w$r" build/src/apps/inagg-worker "${common[@]}" --rank "$r" --mode "$mode" "$@" >"$tmp/$mode.$r" 2>&1 &
    w+=($!)
  done
  for p in "${w[@]}"; do wait "$p" || fail "a $mode worker failed: $(tail -n 3 "$tmp/$mode".*)"; done
  after=$(inter_bytes)
  awk '!/^#/ && NF >= 9 {if ($9 != "0") bad = 1; t = $6} END {if (bad || t == "") exit 1; print t}' "$tmp/$mode.0" ||
    fail "$mode: wrong elements or no result row: $(grep -v '^#' "$tmp/$mode.0")"
  echo $(((after - before) / (iters + 2)))  # a warm-up, the timed ones, the checked one
  grep -h "^# rank $((per_rack - 1)): sent" "$tmp/$mode.$((per_rack - 1))" | sed "s/^# /$mode: /" >&2  # rack 0's uplink
}
ring=$(run ring | paste -sd' ') || exit 1
build/src/apps/inagg-worker "${common[@]}" --rank 0 --print-job >"$tmp/job.job"
build/src/apps/inagg-ctl split "$tmp/job.job" --racks "$racks" --out-dir "$tmp" >/dev/null || fail "split"
for p in leaf0 leaf1 spine; do
  f=$tmp/${p/leaf/leaf-}.job
  build/src/apps/inagg-ctl --socket "$tmp/$p.sock" add "$f" >/dev/null || fail "adding $f to the $p appliance"
done
hier=$(run ina --racks "$racks" | paste -sd' ') || exit 1
read -r ring_us ring_bytes <<<"$ring"
read -r hier_us hier_bytes <<<"$hier"
spine=$(build/src/apps/inagg-ctl --socket "$tmp/spine.sock" stats 1)
echo "spine: $(grep -E '^(slots_released|aggregated_packets|retransmits_answered|resends) ' <<<"$spine" | tr '\n' ' ')"
awk -v s="$size" -v n="$n" -v B="$rate_bps" -v ru="$ring_us" -v rb="$ring_bytes" -v hu="$hier_us" -v hb="$hier_bytes" 'BEGIN {
  hbound = s * 8 / B * 1e6; rbound = 2 * (n - 1) / n * hbound
  printf "size %d B, %d ranks in 2 racks, inter-rack links %.0f Mbit/s each way\n", s, n, B / 1e6
  printf "ring:         %9.0f us (bound %.0f us, %.2fx), busiest inter-rack direction %.0f bytes an allreduce (%.2f S)\n", ru, rbound, ru / rbound, rb, rb / s
  printf "leaves+spine: %9.0f us (bound %.0f us, %.2fx), busiest inter-rack direction %.0f bytes an allreduce (%.2f S)\n", hu, hbound, hu / hbound, hb, hb / s
  printf "racks_vs_bound=%.2f ring_vs_racks=%.2f inter_bytes_racks=%.2f inter_bytes_ring=%.2f\n", hbound / hu, ru / hu, hb / s, rb / s
}'
