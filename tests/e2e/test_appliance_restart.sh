#!/usr/bin/env bash
# The appliance killed and restarted at once while 4 ranks run checked 1 MiB ina allreduces: the
# restarted appliance does not know the job and forwards its packets unsummed, so every later
# message arrives at each rank holding its predecessor's data. Every rank must stop with an error
# (the tally's, "arrived without the appliance's sum", on at least one), and none may print a
# checked row with wrong elements, or finish as if its sums were right.
# With `state`, the appliance keeps its jobs in a state directory and restarts with it: it knows job
# 1 again at once (nobody registers it again) and resumes it at the first message a rank begins.
# The allreduce caught by the restart may fail (its in-flight messages' sums are gone) or go on;
# either way no rank may print a wrong row or take a wrong sum, and a rank that fails says why.
#   test_appliance_restart.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR [state]
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 mode=${5:-}
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
state_args=()
[ "$mode" = state ] && state_args=(--state-dir "$tmp/state")
start_rack -- "${state_args[@]}"
# Every allreduce checked (-n 0 timed, -c 400 checked; the first wrong one ends a row's checks).
# The retry budget, 40 x 250 ms, outlasts the restart: the ranks go on through it, as they would
# through a restart by systemd (Restart=on-failure), instead of failing on silence.
wpids=()
for r in $(seq 0 $((n - 1))); do
  ip netns exec "$(ns_w "$r")" "$worker" --workers $n --rank "$r" --job-id 1 --message 16384 --payload 1024 \
    -b 1048576 -e 1048576 -n 1 -w 0 -c 400 --in-place 0 --ack-timeout-ms 250 --retry 40 --timeout 120 \
    --register "$tmp/ctl.sock" >"$tmp/w$r.log" 2>&1 &
  wpids+=($!)
  others+=($!)
done
# 1 MiB is 65 messages of 16 pieces: some 20 allreduces in, kill the appliance and restart it.
wait_for 60 "job 1 to release 20000 slots" released_over 1 20000 || fail "job 1 never got going: $(C stats 1 2>&1 | head -n 5)"
released=$(C stats 1 | awk '$1 == "slots_released" {print $2}')
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
for r in $(seq 0 $((n - 1))); do
  kill -0 "${wpids[$r]}" 2>/dev/null || fail "rank $r ended before the appliance was killed (the run is too short)"
done
start_inagg "${state_args[@]}"
if [ "$mode" = state ]; then
  C list | grep -q "^id=1 state=active" || fail "the appliance restarted with its state directory does not list job 1: $(C list)"
else
  C list | grep -q "id=1 " && fail "the restarted appliance lists job 1: $(C list)"
fi
finished=0
for r in $(seq 0 $((n - 1))); do
  wait "${wpids[$r]}"
  rc=$?
  log="$tmp/w$r.log"
  # A table row (it starts with a space): #wrong is field 9 (out of place).
  awk '/^ / && NF >= 9 && $9 != "0" {bad = 1} END {exit !bad}' "$log" &&
    fail "rank $r printed a checked row with wrong elements: $(grep -v '^#' "$log" | tail -n 2)"
  grep -q "differs from the reference sum" "$log" && fail "rank $r received a wrong sum: $(grep -m 1 differs "$log")"
  if [ "$rc" = 0 ] && [ "$mode" = state ]; then
    table_exact "$log" || fail "rank $r finished without an exact table: $(grep -v '^#' "$log" | tail -n 2)"
    finished=$((finished + 1))
    continue
  fi
  [ "$rc" != 0 ] || fail "rank $r finished (exit 0) although the appliance forgot its job mid-run"
  grep -q "^inagg-worker: rank $r: " "$log" || fail "rank $r (exit $rc) gave no reason: $(tail -n 2 "$log")"
done
reasons=$(grep -h '^inagg-worker:' "$tmp"/w*.log | cut -c1-100 | paste -sd';' -)
if [ "$mode" = state ]; then
  echo "ok: appliance restarted with its state directory after $released slots of job 1: job 1 known again" \
    "without a registration ($(C stats 1 | awk '$1 == "drop_resuming" {print $2}') packets dropped until it resumed," \
    "$(C stats 1 | awk '$1 == "slots_released" {print $2}') slots released since); $finished of $n ranks finished" \
    "every checked allreduce exact${reasons:+, the others stopped: $reasons}; no rank took a wrong sum"
  exit 0
fi
# Each rank stops on the tally, unless its predecessor stopped on it first and sends nothing more
# (then its RC requester or the deadline ends it, as after any rank's failure).
tallied=$(grep -l "arrived without the appliance's sum (\(first\|last\) tally 1, want 4)" "$tmp"/w*.log | wc -l)
[ "$tallied" -ge 1 ] || fail "no rank stopped on the tally: $(grep -h '^inagg-worker:' "$tmp"/w*.log)"
rest=$(grep -h '^inagg-worker:' "$tmp"/w*.log | grep -v "without the appliance's sum" | cut -c1-80 | paste -sd';' -)
echo "ok: appliance restarted after $released slots of job 1: $tallied of $n ranks stopped on the tally" \
  "${rest:+(the others: $rest) }and no rank returned a wrong sum"
