#!/usr/bin/env bash
# Single large allreduces from a cold start, as a user runs nccl-tests: for each round and size,
# 4 fresh inagg-worker processes (ina, fp32, one size, one timed and one checked allreduce in each
# placement, the default RC timeouts) started one after another with up to SKEW_MS between the
# first and the last, in a different order each round, on the virtual rack at RoCE MTU 4096,
# optionally rate-limited. Every rank must exit 0 with every element exact. The ranks meet at
# rank 0 before they send (UdpRcTransport::meet) and after every fill: without that, the first
# rank's packets wait at the appliance for the last rank's, unacknowledged, and its RC requester
# gives up ("retry count exceeded").
#   test_cold_start.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR RATE|none ROUNDS SKEW_MS SIZE...
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 rate=$5 rounds=$6 skew_ms=$7
shift 7
sizes=("$@")
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
ratearg=()
[ "$rate" != none ] && ratearg=(--rate "$rate")
inagg_mtu=9000
start_rack --mtu 4200 "${ratearg[@]}" --
job=0
for round in $(seq 1 "$rounds"); do
  for size in "${sizes[@]}"; do
    job=$((job + 1))
    wpids=()
    # Rank r starts at a delay that rotates with the round: rank 0 first in one round, last in another.
    for r in $(seq 0 $((n - 1))); do
      delay_ms=$(( ((r + round) % n) * skew_ms / (n - 1) ))
      (
        sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        exec ip netns exec "$(ns_w "$r")" "$worker" --workers "$n" --rank "$r" --mode ina -d float -b "$size" -e "$size" \
          -n 1 -w 0 -c 1 --job-id "$job" --timeout 240 --register "$tmp/ctl.sock"
      ) >"$tmp/w$r.log" 2>&1 &
      wpids+=($!)
      others+=($!)
    done
    for r in $(seq 0 $((n - 1))); do
      wait "${wpids[$r]}" || fail "round $round, $size bytes (job $job): rank $r exited with $?: $(grep -v '^#' "$tmp/w$r.log" | tail -n 3)"
    done
    for r in $(seq 0 $((n - 1))); do
      table_exact "$tmp/w$r.log" || fail "round $round, $size bytes: rank $r reports wrong elements: $(grep -v '^#' "$tmp/w$r.log" | tail -n 3)"
    done
    row=$(grep '^ ' "$tmp/w0.log" | head -n 1 | awk '{print $6 " us"}')
    echo "ok: round $round, $size bytes, ranks started over ${skew_ms} ms: exact on every rank (rank 0 out of place: $row; $(grep -o '[0-9]* timeouts' "$tmp/w0.log"))"
    out=$("$ctl" --socket "$tmp/ctl.sock" remove "$job" 2>&1) || fail "remove job $job: $out"
  done
done
echo "ok: $rounds rounds of ${sizes[*]} bytes from a cold start, rate ${rate}"
