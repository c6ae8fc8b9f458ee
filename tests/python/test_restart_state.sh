#!/usr/bin/env bash
# The appliance keeps the jobs registered at run time in its state directory (--state-dir) and
# registers them again when it restarts. 4 Python ranks (test_restart.py: inagg.Communicator, job 1
# registered once by rank 0) run checked 1 MiB fp32 allreduces, pause with nothing in flight, the
# appliance is killed (-9) and started again with the same state directory, and the ranks go on
# without registering anything: every later allreduce must be the rank-ordered sum (numpy, in rank
# order, bit for bit) and summed by the restarted appliance (its counters, and the tally the ranks
# check). Then a state directory that holds a file inagg did not write exactly (one cut short, one
# of a stranger) must stop the start with the file's name, nothing of it loaded; and of a
# reduce-scatter and an all-gather in the directory, the one whose rounds divide the 2^24 PSNs is
# registered again, the other dropped with the reason (needs root).
#   test_restart_state.sh INAGG INAGG_CTL SRCDIR PYTHONPATH
# PYTHON_PRELOAD (set by meson in a sanitizer build): the sanitizer runtimes the Python processes
# need to load the instrumented extension.
set -uo pipefail
inagg=$1 ctl=$2 src=$3 pypath=$4
n=4 before=3 total=8
python=/usr/bin/python3
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
"$python" -c "import numpy" 2>/dev/null || { echo "SKIP: $python has no numpy (scripts/setup installs python3-numpy)"; exit 77; }
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
stat_of() { C stats 1 | awk -v k="$1" '$1 == k {print $2}'; }
state="$tmp/state"
pause="$tmp/pause"
mkdir -p "$pause"
start_rack -- --state-dir "$state"

pids=()
for r in $(seq 0 $((n - 1))); do
  ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath:$src/tests/python" LD_PRELOAD="${PYTHON_PRELOAD:-}" \
    ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$python" "$src/tests/python/test_restart.py" --rank "$r" --world-size $n --control "$tmp/ctl.sock" --job-id 1 \
    --iterations $total --pause-after $before --pause-dir "$pause" >"$tmp/py$r.log" 2>&1 &
  pids+=($!)
  others+=($!)
done
all_paused() { [ "$(find "$pause" -name 'paused.*' | wc -l)" -eq $n ]; }
wait_for 120 "every rank to pause after $before allreduces" all_paused ||
  fail "the ranks did not all pause: $(ls "$pause"); $(grep -h '^stopped:\|^WRONG' "$tmp"/py*.log)"
[ -f "$state/job-1.state" ] || fail "job 1 registered, but no state file: $(ls -la "$state")"
released_before=$(stat_of slots_released)

# Step 1: killed with nothing in flight, started again with the same state directory.
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
start_inagg --state-dir "$state"
C list | grep -q "^id=1 state=active" || fail "step 1: the restarted appliance does not list job 1 as active: $(C list)"
grep -q "job 1 registered again from $state/job-1.state" "$tmp/inagg.log" ||
  fail "step 1: no line says job 1 was registered again: $(grep -i job "$tmp/inagg.log")"
[ "$(stat_of aggregated_packets)" = 0 ] || fail "step 1: the restarted appliance's job 1 starts with aggregated packets"
touch "$pause/resume"
for r in $(seq 0 $((n - 1))); do
  wait "${pids[$r]}"
  rc=$?
  case $rc in
    0) ;;
    1) fail "step 1: rank $r took a result that is not the sum for one: $(grep -m 1 WRONG "$tmp/py$r.log")" ;;
    *) fail "step 1: rank $r exited with $rc after the restart: $(tail -n 3 "$tmp/py$r.log")" ;;
  esac
  summed=$(grep -c '^summed:' "$tmp/py$r.log")
  [ "$summed" -eq $total ] || fail "step 1: rank $r summed $summed of $total allreduces"
done
# 1 MiB and the tally are 65 messages of 16 packets: every allreduce after the restart through the
# restarted appliance's sums.
want=$(((total - before) * 65 * 16))
released=$(stat_of slots_released)
[ "$released" -ge "$want" ] ||
  fail "step 1: the restarted appliance released $released slots of job 1, the ranks' $((total - before)) allreduces need $want"
[ "$(stat_of aggregated_packets)" -ge $((want * n)) ] || fail "step 1: aggregated_packets $(stat_of aggregated_packets)"
echo "step 1 ok: $before allreduces ($released_before slots), a restart with the state directory, then" \
  "$((total - before)) more summed exactly by the restarted appliance ($released slots, $(stat_of drop_resuming)" \
  "packets dropped while it resumed), no rank registered again"

# Step 2: removing the job removes its file.
C remove 1 >/dev/null || fail "step 2: remove 1: $(C remove 1 2>&1)"
[ ! -e "$state/job-1.state" ] || fail "step 2: job 1 removed, its state file is still there"
# A job to keep, beside which a bad file must refuse the whole directory.
cat >"$tmp/job2.job" <<'EOF'
id = 2
dtype = fp32
workers = 2
message_bytes = 4096
payload_bytes = 1024
window = 2
conn = 0, 10.77.0.1, 0x100, 10.77.0.2, 0x201, 0
conn = 1, 10.77.0.2, 0x101, 10.77.0.1, 0x200, 0
EOF
C add "$tmp/job2.job" >/dev/null || fail "step 2: add job 2: $(C add "$tmp/job2.job" 2>&1)"
[ -f "$state/job-2.state" ] || fail "step 2: job 2 added, no state file"
stop_inagg

# Step 3: a state file cut short, or a stranger's file: the start stops naming it, nothing loaded.
refused_start() {  # WHAT EXPECTED_TEXT: inagg must exit 2 with EXPECTED_TEXT, having opened no socket
  local what=$1 text=$2 ipid rc
  rm -f "$tmp/ctl.sock"
  inagg_argv --state-dir "$state"
  "$inagg" "${argv[@]}" >"$tmp/refused.log" 2>&1 &
  ipid=$!
  others+=("$ipid")
  wait_pids 60 "inagg to refuse the state directory ($what)" "$ipid" || fail "step 3 ($what): inagg did not stop"
  wait "$ipid"
  rc=$?
  [ "$rc" = 2 ] || fail "step 3 ($what): inagg exited with $rc, not 2: $(tail -n 3 "$tmp/refused.log")"
  grep -q -- "$text" "$tmp/refused.log" || fail "step 3 ($what): no '$text' in: $(tail -n 3 "$tmp/refused.log")"
  grep -q "registered again from" "$tmp/refused.log" && fail "step 3 ($what): a job was registered from a refused directory"
  grep -q "forwarding on" "$tmp/refused.log" && fail "step 3 ($what): it forwarded"
  # --check-config says the same without EAL.
  "$inagg" -- --state-dir "$state" --check-config >"$tmp/check.log" 2>&1 && fail "step 3 ($what): --check-config passed"
  grep -q -- "$text" "$tmp/check.log" || fail "step 3 ($what): --check-config said: $(cat "$tmp/check.log")"
}
cp "$state/job-2.state" "$tmp/job-2.good"
head -c -30 "$tmp/job-2.good" >"$state/job-2.state"
refused_start "a file cut short" "state file '$state/job-2.state' is refused"
cp "$tmp/job-2.good" "$state/job-2.state"
echo "hello" >"$state/notes.txt"
refused_start "a stranger's file" "holds 'notes.txt', which is not an inagg state file"
rm "$state/notes.txt"
# As written, the directory loads again.
start_inagg --state-dir "$state"
C list | grep -q "^id=2 state=active" || fail "step 3: the good state file was not loaded: $(C list)"
echo "step 3 ok: a state file cut short and a stranger's file each stopped the start (exit 2, named), the" \
  "good directory loads"

# Step 4: a reduce-scatter and an all-gather in the state directory. One whose rounds divide the
# 2^24 PSNs (3 ranks: 2 x 4 packets) is registered again; one whose rounds do not (4 ranks: 3 x 4)
# is dropped at the start with the reason, its file removed.
rotated_job() {  # ID COLLECTIVE WORKERS: a ring of WORKERS ranks on the rack's addresses
  local r
  printf 'id = %s\ndtype = fp32\nworkers = %s\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 2\ncollective = %s\n' \
    "$1" "$3" "$2"
  for r in $(seq 0 $(($3 - 1))); do
    printf 'conn = %s, 10.77.0.%s, 0x%x, 10.77.0.%s, 0x%x, 0\n' "$r" $((r + 1)) $((0x300 + 16 * $1 + r)) \
      $(((r + 1) % $3 + 1)) $((0x400 + 16 * $1 + (r + 1) % $3))
  done
}
rotated_job 3 reduce_scatter 3 >"$tmp/job3.job"
rotated_job 4 all_gather 4 >"$tmp/job4.job"
for j in 3 4; do C add "$tmp/job$j.job" >/dev/null || fail "step 4: add job $j: $(C add "$tmp/job$j.job" 2>&1)"; done
stop_inagg
start_inagg --state-dir "$state"
# Registered again: active, or binding until its ranks are seen (docs/binding.md: rank 2 has sent
# nothing since the restart).
C list | grep -Eq "^id=3 state=(active|binding)" || fail "step 4: the 3-rank reduce-scatter was not registered again: $(C list)"
C list | grep -q "^id=4 " && fail "step 4: the 4-rank all-gather was registered again: $(C list)"
grep -q "job 4: an all_gather resumes after a restart only when its rounds divide the 2^24 PSNs, and its are 12 packets" \
  "$tmp/inagg.log" || fail "step 4: no line says why job 4 was dropped: $(grep -i 'job 4' "$tmp/inagg.log")"
[ ! -e "$state/job-4.state" ] || fail "step 4: job 4 dropped, its state file is still there"
echo "step 4 ok: a 3-rank reduce-scatter registered again from the state directory; a 4-rank all-gather" \
  "dropped with the reason (its rounds of 12 packets do not divide the 2^24 PSNs)"
