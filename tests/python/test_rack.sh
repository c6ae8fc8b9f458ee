#!/usr/bin/env bash
# The Python module in the virtual rack, through the appliance (needs root: namespaces, veths).
#  0. A cold start: the first allreduce_ of a 64 MiB tensor, ranks started a second apart.
#  1. Sums: for each dtype, 4 ranks (test_sums.py) allreduce buffers from one element to several
#     chunks with inagg.Communicator, the job registered by rank 0; every result equals the
#     rank-ordered sum computed with numpy, and the appliance released exactly the slots those
#     buffers make (slots_released; aggregated_packets = 4 x slots). fp32 once more as a job of
#     2 channels (channels=2: the same slots, over both channels' engine jobs).
#  2. Training: examples/train_digits.py, 4 ranks, a small MLP for a few epochs, once with Gloo
#     summing the gradients and once with inagg's DDP hook (job 1); the report checks that the
#     loss curves agree within LOSS_TOLERANCE (relative, per step) and that test accuracy reaches
#     0.9 in both; then every gradient bucket must have been summed by the appliance: its
#     slots_released is the sum over the buckets DDP handed the hook of their packets (each
#     padded to whole messages), aggregated_packets 4 times that, nothing held.
#   test_rack.sh INAGG INAGG_CTL SRCDIR PYTHONPATH
# PYTHON_PRELOAD (set by meson in a sanitizer build): the sanitizer runtimes the Python processes
# need to load the instrumented extension.
set -uo pipefail
inagg=$1 ctl=$2 src=$3 pypath=$4
n=4
python=/usr/bin/python3
LOSS_TOLERANCE=1e-4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
for m in torch sklearn numpy; do
  "$python" -c "import $m" 2>/dev/null || { echo "SKIP: $python has no $m (scripts/setup installs python3-torch, python3-sklearn)"; exit 77; }
done
py() { env PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 \
  OPENBLAS_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 "$python" "$@"; }
stat_of() { "$ctl" --socket "$tmp/ctl.sock" stats "$1" | awk -v k="$2" '$1 == k {print $2}'; }
# check_slots ID SLOTS WHAT: the appliance released exactly SLOTS slots of job ID, each with all 4 ranks.
check_slots() {
  local id=$1 want=$2 what=$3 released aggregated held
  released=$(stat_of "$id" slots_released) aggregated=$(stat_of "$id" aggregated_packets) held=$(stat_of "$id" held_packets)
  [ "$released" = "$want" ] || fail "$what: the appliance released ${released:-?} slots of job $id, the buffers make $want"
  [ "$aggregated" = $((n * want)) ] || fail "$what: aggregated_packets ${aggregated:-?}, want $n x $want"
  [ "$held" = 0 ] || fail "$what: $held packets still held"
}

start_rack --

# 0. A cold start: 4 fresh processes, started 0.33 s apart in reverse rank order, each makes its
#    communicator and at once allreduces a 64 MiB tensor (tests/python/cold_start.py checks it).
pids=()
for r in $(seq 0 $((n - 1))); do
  (
    sleep "0.$(((n - 1 - r) * 33))"
    exec ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
      OMP_NUM_THREADS=1 "$python" "$src/tests/python/cold_start.py" --rank "$r" --world-size $n --control "$tmp/ctl.sock" \
      --job-id 9
  ) >"$tmp/cold.$r.log" 2>&1 &
  pids+=($!)
  others+=($!)
done
for r in $(seq 0 $((n - 1))); do
  wait "${pids[$r]}" || fail "cold start: rank $r exited with $?: $(tail -n 3 "$tmp/cold.$r.log")"
done
"$ctl" --socket "$tmp/ctl.sock" remove 9 >/dev/null || fail "remove job 9"
cat "$tmp"/cold.*.log

# 1. Sums, every dtype.
id=10
for case in fp32 fp16 bf16 int32 fp32/2; do
  dtype=${case%/*} channels=1
  [ "$case" != "$dtype" ] && channels=${case#*/}
  pids=()
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
      "$python" "$src/tests/python/test_sums.py" --rank "$r" --world-size $n --control "$tmp/ctl.sock" --job-id $id \
      --dtype "$dtype" --channels "$channels" >"$tmp/sums-$dtype.$r.log" 2>&1 &
    pids+=($!)
    others+=($!)
  done
  for r in $(seq 0 $((n - 1))); do
    wait "${pids[$r]}" || fail "sums, $dtype: rank $r exited with $?: $(tail -n 3 "$tmp/sums-$dtype.$r.log")"
  done
  want=$(awk '$1 == "expected_slots" {print $2}' "$tmp/sums-$dtype.0.log")
  [ -n "$want" ] || fail "sums, $dtype: rank 0 printed no expected_slots"
  check_slots $id "$want" "sums, $dtype, $channels channel(s)"
  if [ "$channels" != 1 ]; then
    grep -q "job $id added (4 workers, $channels channels" "$tmp/inagg.log" ||
      fail "sums, $dtype: the appliance did not add job $id with $channels channels"
  fi
  "$ctl" --socket "$tmp/ctl.sock" remove $id >/dev/null || fail "remove job $id"
  echo "ok: sums, $dtype, $channels channel(s): 4 ranks, every element the rank-ordered sum; the appliance released $want slots"
  id=$((id + 1))
done

# 2. Training, Gloo and inagg.
train() {
  local comm=$1 port=$2 r pids=()
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \
      "$python" "$src/examples/train_digits.py" train --rank "$r" --world-size $n --master "10.77.0.1:$port" \
      --comm "$comm" --control "$tmp/ctl.sock" --job-id 1 --hidden 256 --depth 1 --epochs 5 --batch 32 --lr 0.1 \
      --out "$tmp/$comm.json" >"$tmp/train-$comm.$r.log" 2>&1 &
    pids+=($!)
    others+=($!)
  done
  # Every rank must leave (a rank stuck in torch's teardown once kept a run alive for ever).
  if ! wait_pids 150 "the ranks training with $comm" "${pids[@]}" 2>/dev/null; then
    local late=""
    for r in $(seq 0 $((n - 1))); do kill -0 "${pids[$r]}" 2>/dev/null && late+=" $r"; done
    fail "training with $comm: rank(s)$late still running after 150 s: $(tail -n 3 "$tmp/train-$comm.0.log")"
  fi
  for r in $(seq 0 $((n - 1))); do
    wait "${pids[$r]}" || fail "training with $comm: rank $r exited with $?: $(tail -n 5 "$tmp/train-$comm.$r.log")"
  done
  cat "$tmp/train-$comm.0.log"
}
train gloo 29531
train inagg 29532
py "$src/examples/train_digits.py" report "$tmp/gloo.json" "$tmp/inagg.json" --loss-tolerance $LOSS_TOLERANCE \
  --min-accuracy 0.9 >"$tmp/report.log" 2>&1
status=$?
cat "$tmp/report.log"
[ $status = 0 ] || fail "the training runs do not meet the checks (report above)"
# Each hooked step's communication split at the last rank's arrival: both parts there, not negative,
# the part after the last arrival not empty (every bucket was summed after all ranks handed it over).
for comm in gloo inagg; do
  py - "$tmp/$comm.json" <<'EOF' || fail "$comm: the steps' communication breakdown"
import json, sys
run = json.load(open(sys.argv[1]))
steps = run["steps"]
bad = [i for i, st in enumerate(steps) if not (st.get("wait_s", -1) >= 0 and st.get("after_s", 0) > 0)]
if bad or run["mean_after_s"] is None:
    sys.exit(f"{run['comm']}: steps {bad[:5]} lack wait_s/after_s or have them out of range")
EOF
done
# Every bucket through the appliance: its packets, each allreduce padded to whole messages of
# message - 8 bytes of fp32 data (the tally takes the first and the last element), cut in chunks of
# what the communicator's chunk_bytes (8 MiB by default) of messages carry.
want=$(py - "$tmp/inagg.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
m, p, chunk = run["message"], run["payload"], 8 << 20
slots = 0
for step in run["steps"]:
    for numel in step["buckets"]:
        nbytes = numel * 4
        per = m - 8
        for off in range(0, nbytes, chunk // m * per):
            slots += -(-min(chunk // m * per, nbytes - off) // per) * (m // p)
print(slots, sum(len(s["buckets"]) for s in run["steps"]))
EOF
) || fail "counting the buckets of $tmp/inagg.json"
read -r slots buckets <<<"$want"
[ "${buckets:-0}" -gt 0 ] || fail "the inagg run handed the hook no buckets"
check_slots 1 "$slots" "training"
echo "ok: training: loss curves within $LOSS_TOLERANCE, accuracy >= 0.9; all $buckets gradient buckets summed by the appliance ($slots slots)"
