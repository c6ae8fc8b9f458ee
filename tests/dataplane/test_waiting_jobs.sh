#!/usr/bin/env bash
# Jobs that wait for their ranks to be seen (state binding, docs/binding.md) on an appliance looping
# a 2-worker capture (10.0.1.1-2) on two net_pcap ports; nothing ever comes from 10.9.*:
#  1. a failed job's id is free again: job 1 of three ranks (the third's port named, never
#     sending) holds the capture's rank 0 packets until --abort-ms fails it; registered again with the
#     third rank's port left out (it waits for that rank), the answer is ok, the failed job goes
#     and the new one waits, instead of "already exists" with its ranks waiting to their deadline;
#  2. waiting jobs count against the appliance's budget: with --max-jobs 3, three one-rank jobs
#     wait and a fourth is refused, naming --max-jobs;
#  3. and against a tenant's: a tenant (TCP listener) with max_mbufs=6 and jobs of 4 held buffers
#     each: the first waits, the second is refused by the mbuf budget.
#   test_waiting_jobs.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" waiting-jobs
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
listen="127.0.0.1:$((18900 + $$ % 500))"
secret=$(head -c 24 /dev/urandom | base64)
echo "alice 100-199 prefixes=10.9.1.0/24 max_mbufs=6 $secret" >"$tmp/tenants"
echo "alice $secret" >"$tmp/alice.cred"
chmod 600 "$tmp/tenants" "$tmp/alice.cred"
A() { "$ctl" --socket "tcp://$listen" --control-secret-file "$tmp/alice.cred" "$@"; }
start_pcap_appliance --abort-ms 300 --max-jobs 3 --control-tcp "$listen" --control-secret-file "$tmp/tenants"

one_rank_job() {  # FILE ID ADDRESS: a one-rank job at an address nobody sends from
  printf 'id = %s\ndtype = fp32\nworkers = 1\nmessage_bytes = 1024\npayload_bytes = 1024\nwindow = 2\nconn = 0, %s, 0x500, %s, 0x600, 0\n' \
    "$2" "$3" "$3" >"$1"
}
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

echo "== 2. waiting jobs count against --max-jobs"
for id in 11 12 13; do
  one_rank_job "$tmp/j$id" "$id" "10.9.0.$id"
  out=$(C add "$tmp/j$id") || fail "add waiting job $id: $out"
  [ "$(state_of "$id")" = binding ] || fail "job $id is not waiting: $(C list)"
done
one_rank_job "$tmp/j14" 14 10.9.0.14
out=$(C add "$tmp/j14"); rc=$?
[ $rc -eq 1 ] || fail "a fourth waiting job was added beside three with --max-jobs 3: $rc $out"
grep -q "job 14: the engine already has its maximum of 3 jobs on lcore [0-9]* (counting the jobs waiting there for their ranks); remove a job, or raise --max-jobs" <<<"$out" ||
  fail "the refusal of job 14: $out"
for id in 11 12 13; do C remove "$id" >/dev/null || fail "remove job $id"; done
echo "ok: $(head -n 1 <<<"$out")"

echo "== 3. waiting jobs count against a tenant's budget"
one_rank_job "$tmp/j101" 101 10.9.1.1
out=$(A add "$tmp/j101") || fail "alice's first waiting job: $out"
A list | grep -q "^id=101 state=binding .*mbuf_quota=4 " || fail "job 101's reserved buffers: $(A list)"
one_rank_job "$tmp/j102" 102 10.9.1.2
out=$(A add "$tmp/j102"); rc=$?
[ $rc -eq 1 ] || fail "alice parked a second waiting job past max_mbufs=6: $rc $out"
grep -q "job 102: tenant alice's mbuf budget: it needs up to 4 held packet buffers, 2 of 6 are free" <<<"$out" ||
  fail "the refusal of job 102: $out"
echo "ok: $(head -n 1 <<<"$out")"
stop_appliance
