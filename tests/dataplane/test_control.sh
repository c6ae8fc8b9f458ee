#!/usr/bin/env bash
# inagg's control plane at run time: jobs added, listed, queried and removed with inagg-ctl over
# the control socket while traffic flows (net_pcap looping its capture), clear errors for bad
# requests, and a clean exit on SIGTERM in the middle of traffic (final stats, status 0, no
# sanitizer report in an ASan build).
#   test_control.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" ctl-test
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }

start_pcap_appliance
[ "$(stat -c %a "$tmp/ctl.sock")" = 600 ] || fail "control socket is not 0600"

out=$(C list) || fail "list: $out"
grep -q "no jobs" <<<"$out" || fail "list before add: $out"
out=$(C add "$tmp/job.job") || fail "add: $out"
grep -q "ok job 1 added" <<<"$out" || fail "add reply: $out"
aggregating() { local v; v=$(C stats 1 | awk '$1 == "aggregated_packets" {print $2}'); [ "${v:-0}" -gt 0 ]; }
wait_for 10 "job 1 to aggregate the replayed traffic" aggregating || fail "job 1: $(C stats 1 2>&1 | head -n 5)"
out=$(C list) || fail "list: $out"
grep -q "id=1 state=active dtype=fp32 workers=2" <<<"$out" || fail "list after add: $out"
agg=$(C stats 1 | awk '$1 == "aggregated_packets" {print $2}')
[ "${agg:-0}" -gt 0 ] || fail "the job aggregated nothing while traffic flowed"
out=$(C stats) || fail "stats: $out"
grep -q "^rx_packets [1-9]" <<<"$out" || fail "engine stats: $out"
# Bad requests: a clear error and exit status 1 (refused) or 2 (could not even be sent).
out=$(C add "$tmp/job.job"); rc=$?
[ $rc -eq 1 ] && grep -q "already exists" <<<"$out" || fail "duplicate add: $rc $out"
out=$(C remove 99); rc=$?
[ $rc -eq 1 ] && grep -q "no job 99" <<<"$out" || fail "remove unknown: $rc $out"
out=$(C stats 99); rc=$?
[ $rc -eq 1 ] && grep -q "no job 99" <<<"$out" || fail "stats unknown: $rc $out"
out=$(C bogus 2>&1); rc=$?
[ $rc -eq 2 ] || fail "unknown command: $rc $out"
# DPDK telemetry: the appliance's commands answer through dpdk-telemetry.py.
tel=$(printf '/inagg/jobs\n/inagg/job,1\n' | dpdk-telemetry.py -f "$prefix" 2>&1)
grep -q '"/inagg/jobs": \[1\]' <<<"$tel" || fail "telemetry /inagg/jobs: $tel"
grep -q '"aggregated_packets": [1-9]' <<<"$tel" || fail "telemetry /inagg/job,1: $tel"
out=$(C remove 1) || fail "remove: $out"
grep -q "ok job 1 removed" <<<"$out" || fail "remove reply: $out"
grep -q "no jobs" <<<"$(C list)" || fail "list after remove"
# Re-add, then SIGTERM while the job holds packets and traffic flows.
C add "$tmp/job.job" >/dev/null || fail "re-add"
wait_for 10 "the re-added job 1 to aggregate" aggregating || fail "re-added job 1: $(C stats 1 2>&1 | head -n 5)"
kill -TERM "$pid"
ended() { ! kill -0 "$pid" 2>/dev/null; }
wait_for 10 "inagg to exit after SIGTERM" ended || fail "inagg did not exit within 10 s of SIGTERM"
wait "$pid"; rc=$?
pid=""
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM"
grep -q "inagg: final stats" "$tmp/log" || fail "no final stats"
grep -qi "sanitizer" "$tmp/log" && fail "sanitizer report"
[ -e "$tmp/ctl.sock" ] && fail "control socket left behind"
echo "control plane behaves"
