#!/usr/bin/env bash
# The appliance killed and restarted at once under 4 Python ranks (test_restart.py: checked 1 MiB
# fp32 allreduces with inagg.Communicator): the restarted appliance does not know the job and
# forwards its packets unsummed. Every rank must raise InaggError (at least one naming the tally,
# "arrived without the appliance's sum"); none may take a result that is not the sum for one,
# nor finish (needs root: namespaces, veths).
#   test_restart.sh INAGG INAGG_CTL SRCDIR PYTHONPATH
# PYTHON_PRELOAD (set by meson in a sanitizer build): the sanitizer runtimes the Python processes
# need to load the instrumented extension.
set -uo pipefail
inagg=$1 ctl=$2 src=$3 pypath=$4
n=4
python=/usr/bin/python3
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
"$python" -c "import numpy" 2>/dev/null || { echo "SKIP: $python has no numpy (scripts/setup installs python3-numpy)"; exit 77; }
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
start_rack --
pids=()
for r in $(seq 0 $((n - 1))); do
  ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath:$src/tests/python" LD_PRELOAD="${PYTHON_PRELOAD:-}" \
    ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$python" "$src/tests/python/test_restart.py" --rank "$r" --world-size $n --control "$tmp/ctl.sock" --job-id 1 \
    --iterations 400 >"$tmp/py$r.log" 2>&1 &
  pids+=($!)
  others+=($!)
done
# 1 MiB is 65 messages of 16 pieces: some 20 allreduces in, kill the appliance and restart it.
wait_for 90 "job 1 to release 20000 slots" released_over 1 20000 || fail "job 1 never got going: $(C stats 1 2>&1 | head -n 5)"
released=$(C stats 1 | awk '$1 == "slots_released" {print $2}')
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
for r in $(seq 0 $((n - 1))); do
  kill -0 "${pids[$r]}" 2>/dev/null || fail "rank $r ended before the appliance was killed (the run is too short)"
done
start_inagg
for r in $(seq 0 $((n - 1))); do
  wait "${pids[$r]}"
  rc=$?
  case $rc in
    3) ;;
    1) fail "rank $r took a result that is not the sum for one: $(grep -m 1 WRONG "$tmp/py$r.log")" ;;
    0) fail "rank $r finished although the appliance forgot its job mid-run" ;;
    *) fail "rank $r exited with $rc: $(tail -n 3 "$tmp/py$r.log")" ;;
  esac
done
tallied=$(grep -l "arrived without the appliance's sum (\(first\|last\) tally 1, want 4)" "$tmp"/py*.log | wc -l)
[ "$tallied" -ge 1 ] || fail "no rank stopped on the tally: $(grep -h '^stopped:' "$tmp"/py*.log)"
echo "ok: appliance restarted after $released slots of job 1: every rank raised InaggError, $tallied of $n on" \
  "the tally; summed allreduces before: $(for r in $(seq 0 $((n - 1))); do grep -c '^summed:' "$tmp/py$r.log"; done | paste -sd/ -)"
