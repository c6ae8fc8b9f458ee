#!/usr/bin/env bash
# Jobs that wait for their ranks to be seen (state binding, docs/binding.md) on an appliance looping
# a 2-worker capture (10.0.1.1-2) on two net_pcap ports; nothing ever comes from 10.9.*:
#  1. a failed job's id is free again: job 1 of three ranks (the third's port named, never
#     sending) holds the capture's rank 0 packets until --abort-ms fails it; registered again with the
#     third rank's port left out (it waits for that rank), the answer is ok, the failed job goes
#     and the new one waits, instead of "already exists" with its ranks waiting to their deadline;
#   test_waiting_jobs.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" waiting-jobs
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
start_pcap_appliance --abort-ms 300

state_of() { C list | grep -o "^id=$1 state=[a-z]*" | cut -d= -f3; }

echo "== 1. a failed job registered again while one of its ranks is not seen yet"
# A ring of three: rank 0 as the capture has it (its WRITEs are held), rank 1 writing to rank 2
# (the capture's rank 1 packets no longer fit: dropped as from the wrong source), rank 2 on port 1.
{
  grep -v "^conn" "$tmp/job.job" | sed 's/^workers = 2/workers = 3/'
  grep "^conn = 0," "$tmp/job.job"
  grep "^conn = 1," "$tmp/job.job" | sed 's/10\.0\.1\.1,0x200/10.0.1.3,0x202/'
  echo "conn = 2,10.0.1.3,0x102,10.0.1.1,0x200,0x0,1"
} >"$tmp/three.job"
out=$(C add "$tmp/three.job") || fail "add job 1 of three ranks: $out"
wait_for 20 "job 1 to fail (its third rank never sends; --abort-ms 300)" sh -c "[ \"\$('$ctl' --socket '$tmp/ctl.sock' list | grep -o '^id=1 state=[a-z]*')\" = 'id=1 state=failed' ]" ||
  fail "job 1 did not fail: $(C list)"
grep -v "^conn = 2," "$tmp/three.job" >"$tmp/again.job"
echo "conn = 2,10.0.1.3,0x102,10.0.1.1,0x202,0x0" >>"$tmp/again.job"
out=$(C add "$tmp/again.job") || fail "job 1 registered again over the failed one: $out"
grep -q "ok job 1 added" <<<"$out" || fail "the reply to registering job 1 again: $out"
[ "$(state_of 1)" = binding ] || fail "job 1 registered again does not wait for its third rank: $(C list)"
C list | grep "^id=1 " | grep -q "rank 2's address 10.0.1.3 has not been seen" || fail "what job 1 waits for: $(C list)"
grep -q "job 1: the failed job of this id was removed" "$tmp/log" || fail "the log does not say the failed job went"
C remove 1 >/dev/null || fail "remove job 1"
echo "ok: the failed job 1 was replaced by its new registration, which waits for rank 2"

stop_appliance
