#!/usr/bin/env bash
# The state directory keeps the lcore each job was on, and a restart puts it there again. With two
# datapath lcores, an mbuf budget of 1000 per lcore and jobs of 700 (big) and 400 (small) held
# buffers, the adds big 1, big 2, the removal of 1, small 3, small 4 leave lcore A with 3 and 4
# (800) and lcore B with 2 (700). Placed again least-loaded in id order, 2 would go to A, 3 to B
# and 4 to A beside 2 (1100): the start failed. Then:
#  1. restart: every job back on its own lcore (the log says which), nothing refused;
#  2. restart with a budget of 750: job 4 no longer fits beside 3 and is refused alone (its file
#     kept as job-4.state.refused, the reason in the log); 2 and 3 start;
#  3. restart with lcore B gone (EAL's lcores: A only) and job 3's file as an older inagg wrote it
#     (no lcore): 2 is refused alone, its lcore named; 3 goes where there is room.
#   test_state_placement.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" state-placement
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
state=$tmp/state

# start LCORES BUDGET: inagg with EAL's --lcores LCORES (main lcore 0 first) on one net_null port.
start() {
  rm -f "$tmp/ctl.sock"
  "$inagg" --lcores="$1" --no-huge --no-pci -m 512 --file-prefix="$prefix" --log-level=lib.eal:error --vdev=net_null0 \
    -- --socket "$tmp/ctl.sock" --mtu 1500 --mbufs 4096 --mbuf-budget "$2" --idle-sleep-us 1000 --resend-us 2000 \
    --state-dir "$state" >"$tmp/log" 2>&1 &
  pid=$!
  wait_alive "$pid" 30 "the control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" || fail "inagg did not start"
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || fail "inagg exited with $? after SIGTERM"
  pid=""
}
# job ID WINDOW: a 2-rank ring of one packet a message: 2 x window x 2 ranks held buffers.
job() {
  local q=$(($1 * 16))
  printf 'id = %s\ndtype = fp32\nworkers = 2\nmessage_bytes = 1024\npayload_bytes = 1024\nwindow = %s\n' "$1" "$2"
  # Each rank bound to the one port (net_null sends nothing to see the ranks by).
  printf 'conn = 0, 10.0.0.1, 0x%x, 10.0.0.2, 0x%x, 0, 0\nconn = 1, 10.0.0.2, 0x%x, 10.0.0.1, 0x%x, 0, 0\n' \
    $((q + 1)) $((q + 2)) $((q + 3)) $((q + 4))
}
add() { job "$1" "$2" >"$tmp/j$1.job" && C add "$tmp/j$1.job" >/dev/null || fail "add job $1: $(C add "$tmp/j$1.job" 2>&1)"; }
# listed IDS...: exactly these jobs are listed, active.
listed() {
  local want got
  want=$(printf '%s\n' "$@")
  got=$(C list | awk '{print $1 " " $2}' | sed -n 's/^id=\([0-9]*\) state=active$/\1/p')
  [ "$got" = "$want" ] || fail "listed '$(tr '\n' ' ' <<<"$got")', want '$*': $(C list)"
}
# on ID LCORE: the log says job ID was registered again on LCORE.
on() { grep -q "job $1 registered again from $state/job-$1.state on lcore $2 " "$tmp/log" || fail "job $1 not on lcore $2: $(grep "job $1 " "$tmp/log")"; }

# Lcores 1 and 2 run the datapath (both on CPU 1; 0 and 1 are the two CPUs every machine has).
two='0@0,(1,2)@1' one='0@0,1@1'
start "$two" 1000
add 1 175
add 2 175
C remove 1 >/dev/null || fail "remove job 1"
add 3 100
add 4 100
listed 2 3 4
grep -q "^inagg-state 2 job 4 spec [0-9a-f]* lcore 1$" "$state/job-4.state" || fail "job 4's state file: $(head -n 1 "$state/job-4.state")"
grep -q " lcore 2$" "$state/job-2.state" || fail "job 2's state file: $(head -n 1 "$state/job-2.state")"
stop

# 1. Every job on its own lcore again.
start "$two" 1000
listed 2 3 4
on 2 2 && on 3 1 && on 4 1
grep -q "cannot be registered again" "$tmp/log" && fail "a job was refused: $(grep "cannot be registered" "$tmp/log")"
stop

# 2. Job 4 no longer fits beside 3: refused alone, its file kept aside.
start "$two" 750
listed 2 3
grep -q "state file $state/job-4.state: job 4 cannot be registered again: job 4: needs up to 400 held packet buffers .*; its file is kept as $state/job-4.state.refused" "$tmp/log" ||
  fail "job 4's refusal: $(grep "job 4" "$tmp/log")"
[ -f "$state/job-4.state.refused" ] && [ ! -e "$state/job-4.state" ] || fail "job 4's file was not set aside: $(ls "$state")"
grep -q "2 of 3 job(s) registered again" "$tmp/log" || fail "no summary of the refusal: $(grep "state directory" "$tmp/log")"
stop

# 3. Lcore 2 gone, job 3's file of format 1 (no lcore).
# Format 1's digest: 32-bit FNV-1a of the body, by the textbook loop.
/usr/bin/python3 - "$state/job-3.state" <<'PY' || fail "rewriting job 3's file as format 1"
import sys
path = sys.argv[1]
text = open(path).read()
body = text[text.index("\n") + 1:]
h = 2166136261
for b in body.encode():
    h = ((h ^ b) * 16777619) & 0xFFFFFFFF
open(path, "w").write(f"inagg-state 1 job 3 spec {h:08x}\n" + body)
PY
grep -q "^inagg-state 1 job 3 spec [0-9a-f]\{8\}$" "$state/job-3.state" || fail "job 3's file as format 1: $(head -n 1 "$state/job-3.state")"
start "$one" 1000
listed 3
grep -q "job 2 cannot be registered again: job 2 was on lcore 2, which is not a datapath lcore of this appliance (1; EAL's -l)" "$tmp/log" ||
  fail "job 2's refusal: $(grep "job 2" "$tmp/log")"
on 3 1
[ -f "$state/job-2.state.refused" ] && [ -f "$state/job-4.state.refused" ] || fail "set-aside files: $(ls "$state")"
stop
grep -qi "sanitizer" "$tmp/log" && fail "sanitizer report"
echo "ok: the state directory puts each job back on its lcore (jobs 2, 3, 4 where least-loaded placement no longer" \
  "fits); a job that no longer fits, or whose lcore is gone, is refused alone and set aside; a file without an lcore is placed"
