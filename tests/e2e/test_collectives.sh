#!/usr/bin/env bash
# End to end: reduce-scatter and all-gather in one pass (docs/protocol.md section 20) on the virtual
# rack: 4 inagg-worker processes run a --check'ed sweep (reduce_scatter_perf's or all_gather_perf's
# sizes: the whole buffer, 4 shards; both placements) through inagg, registered by rank 0 as a job
# of that collective, with random loss on every worker's link. Every element is checked against a
# plain loop over every rank's input; the appliance's counters must show the schedule (contributions
# passed on unchanged, sums or placeholders filled) and nothing left held. Then the same workers
# against an appliance started again, with no job for them: the packets are only switched, and every rank
# must stop on the tally instead of returning what it received.
#   test_collectives.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR COLLECTIVE DTYPE LOSS_PERCENT CHUNK
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 collective=$5 dtype=$6 loss=$7 chunk=${8:-1}
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
lossarg=()
[ "$loss" != 0 ] && lossarg=(--loss "$loss")
start_rack "${lossarg[@]}" --
args=(-d "$dtype" --message 16384 -n 1 -w 0 -c 1 --ack-timeout-ms 200 --collective "$collective" --chunk "$chunk")
run_workers 4 "${args[@]}" -b 64 -e 1000000 -f 5 --timeout 90 --register "$tmp/ctl.sock"
grep -q "^# Collective test starting: ${collective}_perf$" "$tmp/w0.log" &&
  grep -q "^# Collective test concluded: ${collective}_perf$" "$tmp/w0.log" ||
  fail "worker 0's table is not ${collective}_perf's: $(grep '^# Collective test' "$tmp/w0.log")"
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats: $stats"
grep -q "^state active" <<<"$stats" || fail "job not active: $stats"
grep -q "^held_packets 0$" <<<"$stats" || fail "packets left held: $stats"
grep -q "^forwarded_unchanged [1-9]" <<<"$stats" || fail "nothing passed on unchanged: $stats"
if [ "$collective" = reduce_scatter ]; then
  grep -q "^slots_completed [1-9]" <<<"$stats" || fail "no shard summed: $stats"
else
  grep -q "^placeholders_filled [1-9]" <<<"$stats" || fail "no placeholder filled: $stats"
fi
if [ "$loss" != 0 ]; then
  recovered=$(awk '$1 == "naks_sent" || $1 == "retransmits_answered" || $1 == "resends" {s += $2} END {print s + 0}' <<<"$stats")
  [ "$recovered" -gt 0 ] || fail "loss injected but the appliance recovered nothing: $stats"
fi
summary=$(grep -E '^(forwarded_unchanged|slots_completed|placeholders_filled|naks_sent|retransmits_answered|resends) ' <<<"$stats" | tr '\n' ' ')

# No job: a fresh appliance (a removed job's connections stay closed a while) only switches the
# same schedule. Every rank fails on the tally, none prints a result row.
stop_inagg
start_inagg
wpids=()
for r in $(seq 0 $((n - 1))); do
  ip netns exec "$(ns_w "$r")" "$worker" --workers "$n" --rank "$r" "${args[@]}" -b 1M -e 1M --timeout 20 \
    >"$tmp/u$r.log" 2>&1 &
  wpids+=($!)
done
for r in $(seq 0 $((n - 1))); do
  if wait "${wpids[$r]}"; then fail "worker $r returned without the appliance: $(tail -n 3 "$tmp/u$r.log")"; fi
done
grep -l "arrived without the appliance's sum" "$tmp"/u*.log >/dev/null ||
  fail "no rank named the missing sum: $(tail -n 2 "$tmp"/u*.log)"
! grep -q '^ ' "$tmp"/u*.log || fail "a rank printed a result row without the appliance: $(grep -h '^ ' "$tmp"/u*.log)"
echo "ok: $n workers, $collective chunk $chunk, $dtype, loss $loss%: every element exact; appliance: $summary; without the job every rank stopped on the tally"
