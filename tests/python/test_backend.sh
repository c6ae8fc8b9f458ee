#!/usr/bin/env bash
# inagg's torch.distributed backend in the virtual rack, as its users run it: one torchrun agent
# per worker namespace (python3 -m inagg.torchrun --nnodes 4 --nproc_per_node 1 --node_rank R,
# the store at rank 0's address), backend="inagg", the appliance's control socket in
# $INAGG_CONTROL, every rank's address from its own interface (needs root: namespaces, veths).
#  1. Collectives (backend_collectives.py check), rank 0 registering the job over the appliance's
#     TCP control listener (--control-tcp, a tenant's credential in INAGG_CONTROL_SECRET_FILE; a
#     veth from worker 0's namespace to this one carries it): every collective against a reference computed
#     from every rank's input, all_reduce of 16 MiB bit for bit through the appliance, the process
#     group's counters exact (which calls went through the appliance, which through Gloo), the
#     appliance's counters for the jobs (the allreduce's, the reduce-scatter's and the
#     all-gather's); after destroy_process_group the jobs are gone.
#  1b. Every other dtype as the job's (INAGG_DTYPE bf16, fp16, int32; a group made again in the
#     same processes): all_reduce through the appliance bit for bit against the scalar reference and
#     against Gloo's all_reduce of the same inputs, the counters saying the appliance summed it;
#     and fp32 with INAGG_CHANNELS=2 (the job striped over 2 connections a rank, 2 engine jobs).
#  2. A rank killed (SIGKILL) in a loop of all_reduce: every other rank raises, and the job is
#     removed from the appliance.
#  2b. The appliance killed and started again with its state directory while 3 ranks pause
#     between steps of reduce_scatter_tensor, all_gather_into_tensor and all_reduce: its three
#     jobs resume, every later call exact and through the restarted appliance's sums and copies.
#  3. Training: examples/train_digits.py under torchrun, with Gloo (DDP), with the backend (DDP
#     with no hook) and sharded through the backend (gradients reduce-scattered, parameters
#     all-gathered); the loss curves agree within LOSS_TOLERANCE, test accuracy reaches 0.9, every
#     gradient bucket DDP made and every step's reduce-scatter was summed by the appliance in one
#     pass (its counters for the job against the sizes), the jobs removed at the end.
#   test_backend.sh INAGG INAGG_CTL SRCDIR PYTHONPATH
# PYTHON_PRELOAD (set by meson in a sanitizer build): the sanitizer runtimes the Python processes
# need to load the instrumented extensions.
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
PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 "$python" -c "import inagg._torch" 2>"$tmp/import.log" ||
  { echo "SKIP: the backend is not built: $(tail -n 1 "$tmp/import.log") (meson builds it with libtorch-dev)"; exit 77; }
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
# job_listed ID: the appliance lists job ID.
job_listed() { C list | grep -q "^id=$1 "; }

rack_cmd up --workers "$n" >"$tmp/rack.log" 2>&1 || fail "rack up: $(cat "$tmp/rack.log")"
# The control network: a veth from here (10.78.S.1) to worker 0's namespace (10.78.S.2), S of
# this run; the rack's teardown (its namespaces) removes it, and so does this script's exit.
subnet="10.78.$(($$ % 250))"
trap 'ip link del "$rack-c" 2>/dev/null; cleanup' EXIT
ip link add "$rack-c" type veth peer name ctl0 netns "$(ns_w 0)" &&
  ip addr add "$subnet.1/30" dev "$rack-c" && ip link set "$rack-c" up &&
  ip netns exec "$(ns_w 0)" ip addr add "$subnet.2/30" dev ctl0 && ip netns exec "$(ns_w 0)" ip link set ctl0 up ||
  fail "the control network's veth"
secret=$(head -c 24 /dev/urandom | base64)
echo "torch * $secret" >"$tmp/tenants"
echo "torch $secret" >"$tmp/credential"
chmod 600 "$tmp/tenants" "$tmp/credential"
inagg_args=(--control-tcp "$subnet.1:18590" --control-secret-file "$tmp/tenants" --state-dir "$tmp/state")
start_inagg "${inagg_args[@]}"

# launch NAME PORT SCRIPT ARGS...: one torchrun agent per namespace ($nodes of them, default all
# n), rank R's output in $tmp/NAME.R.log; their PIDs in agents[]. The appliance's control socket:
# $control (default the Unix socket), with $credential_file.
agents=()
launch() {
  local name=$1 port=$2 r
  shift 2
  local ranks=${nodes:-$n}
  agents=()
  for r in $(seq 0 $((ranks - 1))); do
    ip netns exec "$(ns_w "$r")" env PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 INAGG_CONTROL="${control:-$tmp/ctl.sock}" \
      INAGG_CONTROL_SECRET_FILE="${credential_file:-}" \
      "$python" -m inagg.torchrun --nnodes "$ranks" --nproc_per_node 1 --node_rank "$r" --master_addr 10.77.0.1 \
      --master_port "$port" --monitor_interval 1 "$@" >"$tmp/$name.$r.log" 2>&1 &
    agents+=($!)
    others+=($!)
  done
}
# finish NAME SECONDS: every agent ends within SECONDS; fails naming the ranks still running.
finish() {
  local name=$1 seconds=$2 r late=""
  if ! wait_pids "$seconds" "the $name agents" "${agents[@]}" 2>/dev/null; then
    for r in "${!agents[@]}"; do kill -0 "${agents[$r]}" 2>/dev/null && late+=" $r"; done
    fail "$name: rank(s)$late still running after $seconds s: $(tail -n 5 "$tmp/$name.0.log")"
  fi
}

# 1. Collectives, the job registered over TCP; then (1b) a group of each other dtype in the same
# processes.
control="tcp://$subnet.1:18590" credential_file="$tmp/credential" \
  launch check 29541 "$src/tests/python/backend_collectives.py" check "$tmp" bf16 fp16 int32 fp32/2
finish check 900
for r in $(seq 0 $((n - 1))); do
  wait "${agents[$r]}" || fail "collectives: rank $r's torchrun exited with $?: $(grep -E 'FAIL|Error|error' "$tmp/check.$r.log" | head -n 5)"
  grep -q "^rank $r: passed" "$tmp/check.$r.log" || fail "collectives: rank $r did not pass: $(grep -E 'FAIL' "$tmp/check.$r.log" | head -n 5; tail -n 5 "$tmp/check.$r.log")"
done
grep -h "^rank" "$tmp"/check.*.log | grep -v -E ": (bf16|fp16|int32|fp32x2)"
job=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' "$tmp/check.0.json") ||
  fail "rank 0 wrote no job id"
job_listed "$job" && fail "collectives: job $job is still on the appliance after destroy_process_group: $(C list)"
# The group's reduce-scatter and all-gather jobs went with it, and so did the dtypes' groups'.
C list | grep -q "^id=" && fail "collectives: jobs left on the appliance after destroy_process_group: $(C list)"
grep -q "^inagg: job $job added" "$tmp/inagg.log" || fail "collectives: the appliance did not log job $job's registration"
echo "ok: collectives: every result as the reference, the counters exact; job $job registered over tcp://$subnet.1:18590, removed at destroy_process_group"
for dtype in bf16 fp16 int32; do
  [ -s "$tmp/dtype-$dtype.0.json" ] || fail "$dtype: rank 0 wrote no result"
  grep -h -e "^rank 0: ok: all_reduce of [0-9]* $dtype" -e "^rank 0: $dtype passed" "$tmp/check.0.log"
done
gloo_cannot=$(grep -o "Gloo cannot sum [a-z0-9]*" "$tmp/check.0.log" | awk '{print $4}' | sort -u | paste -sd' ' -)
echo "ok: bf16, fp16 and int32 jobs: all_reduce through the appliance as the scalar reference, and as Gloo's${gloo_cannot:+ (Gloo cannot sum: $gloo_cannot)}"
# INAGG_CHANNELS=2: the endpoints' channel 0 gives channel 1's QPs; the appliance added the job as
# 2 channels, and both ranks' sums were exact (the rank's check above, fp32x2).
[ -s "$tmp/dtype-fp32x2.0.json" ] || fail "fp32 with 2 channels: rank 0 wrote no result"
grep -q "^rank 0: fp32x2 passed" "$tmp/check.0.log" || fail "fp32 with 2 channels: rank 0 did not pass"
job2=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' "$tmp/dtype-fp32x2.0.json")
grep -q "^inagg: job $job2 added (4 workers, 2 channel" "$tmp/inagg.log" ||
  fail "fp32 with 2 channels: the appliance did not add job $job2 as 2 channels: $(grep "job $job2 added" "$tmp/inagg.log")"
echo "ok: INAGG_CHANNELS=2: job $job2 added as 2 channels, all_reduce of fp32 exact as the rank-ordered sum"

# 2. A rank killed in a loop of all_reduce.
rm -f "$tmp"/pid.*
launch loop 29542 "$src/tests/python/backend_collectives.py" loop "$tmp"
for r in $(seq 0 $((n - 1))); do
  wait_for 400 "rank $r to start its sums" test -s "$tmp/pid.$r" ||
    fail "loop: rank $r never started: $(tail -n 5 "$tmp/loop.$r.log")"
done
read -r victim job <"$tmp/pid.3"
wait_for 60 "job $job to release 2000 slots" released_over "$job" 2000 || fail "loop: job $job never got going: $(C stats "$job" 2>&1 | head -n 5)"
kill -9 "$victim"
finish loop 300
for r in 0 1 2; do
  grep -q '"error": "' "$tmp/loop.$r.json" 2>/dev/null ||
    fail "loop: rank $r did not raise after rank 3 was killed: $(tail -n 5 "$tmp/loop.$r.log")"
  grep -h "^rank $r: after" "$tmp/loop.$r.log"
done
job_listed "$job" && fail "loop: job $job is still on the appliance after rank 3 was killed: $(C list)"
echo "ok: rank 3 killed: ranks 0-2 raised, job $job removed"

# 2b. The appliance restarted between two steps of reduce-scatter, all-gather and all-reduce: 3
# ranks (a reduce-scatter's or all-gather's rounds, 2 x chunk x 16 packets, divide the 2^24 PSNs,
# which a resume needs; 4 ranks' rounds of 3 chunks do not) pause with nothing in flight, the
# appliance is killed (-9) and started again with its state directory, and the ranks go on: the
# restarted appliance resumes the group's three jobs where the ranks went back, every later call
# through its sums and copies, each checked.
pause="$tmp/pause"
mkdir -p "$pause"
nodes=3 launch restart 29548 "$src/tests/python/backend_collectives.py" restart "$tmp" "$pause"
all_paused() { [ "$(find "$pause" -name 'paused.*' | wc -l)" -eq 3 ]; }
wait_for 300 "every rank to pause after its first steps" all_paused ||
  fail "restart: the ranks did not all pause: $(ls "$pause"); $(grep -h -E 'FAIL|Error' "$tmp"/restart.*.log | head -n 5)"
[ "$(find "$tmp/state" -name 'job-*.state' | wc -l)" = 3 ] || fail "restart: the group's 3 jobs are not in the state directory: $(ls "$tmp/state")"
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
start_inagg "${inagg_args[@]}"
[ "$(grep -c "registered again from $tmp/state/" "$tmp/inagg.log")" = 3 ] ||
  fail "restart: the restarted appliance did not register the group's 3 jobs again: $(grep -i job "$tmp/inagg.log")"
touch "$pause/resume"
finish restart 300
for r in 0 1 2; do
  wait "${agents[$r]}" || fail "restart: rank $r's torchrun exited with $?: $(grep -E 'FAIL|Error|error' "$tmp/restart.$r.log" | head -n 5)"
  grep -q "^rank $r: passed" "$tmp/restart.$r.log" || fail "restart: rank $r did not pass: $(tail -n 5 "$tmp/restart.$r.log")"
done
grep -h "^rank 0: ok: the restarted" "$tmp/restart.0.log"
C list | grep -q "^id=" && fail "restart: jobs left on the appliance after destroy_process_group: $(C list)"
echo "ok: appliance restarted with its state directory between steps of 3 ranks: the group's reduce-scatter, all-gather and allreduce jobs resumed, every later call exact through the restarted appliance"

# 3. Training, Gloo and the backend.
train() {
  local comm=$1 port=$2 r
  launch "train-$comm" "$port" "$src/examples/train_digits.py" train --comm "$comm" --job-id 0 --hidden 256 --depth 1 \
    --epochs 5 --batch 32 --lr 0.1 --out "$tmp/$comm.json"
  finish "train-$comm" 900
  for r in $(seq 0 $((n - 1))); do
    wait "${agents[$r]}" || fail "training with $comm: rank $r exited with $?: $(tail -n 5 "$tmp/train-$comm.$r.log")"
  done
  grep -v -e '^\*' -e 'OMP_NUM_THREADS' -e '^WARNING' "$tmp/train-$comm.0.log"
}
train gloo 29543
train backend 29544
train backend-sharded 29547
PYTHONPATH="$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 "$python" "$src/examples/train_digits.py" report "$tmp/gloo.json" "$tmp/backend.json" \
  "$tmp/backend-sharded.json" --loss-tolerance $LOSS_TOLERANCE --min-accuracy 0.9 >"$tmp/report.log" 2>&1
status=$?
cat "$tmp/report.log"
[ $status = 0 ] || fail "the training runs do not meet the checks (report above)"
# Every bucket of every step through the appliance: DDP's bucket sizes (bytes; the sharded run: its
# flat gradient buffer, one reduce-scatter a step) in slots, as backend_collectives.py's slots_of
# counts them, against the appliance's counters for the job and the process group's.
# sums_checked RUN.json: "ok JOB SLOTS SUMS", or what differs.
sums_checked() {
  PYTHONPATH="$src/tests/python:$pypath" LD_PRELOAD="${PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
    "$python" - "$1" <<'EOF'
import json, sys
from backend_collectives import slots_of, rotated_packets
run = json.load(open(sys.argv[1]))
steps, buckets, payload = len(run["steps"]), run["backend"]["bucket_bytes"], run["payload"]
world = run["world_size"]
js, pg = run["job_stats"], run["transport"][0]
problems = []
if not buckets:
    problems.append("DDP reported no bucket sizes")
if run["comm"] == "backend-sharded":
    # One reduce-scatter and one all-gather of the flat buffer a step, each in one pass through
    # the appliance (the job's stats: the reduce-scatter's, every held packet summed from the
    # other ranks' contributions).
    kind, bytes_per_step = "reduce_scatter_appliance", 2 * sum(buckets)
    want = steps * world * rotated_packets(buckets[0] // world, payload, world)
    if js["slots_released"] != want or js["aggregated_packets"] != (world - 1) * want or js["held_packets"] != 0:
        problems.append(f"the reduce-scatter job released {js['slots_released']} sums ({js['aggregated_packets']} "
                        f"contributions, {js['held_packets']} held); {steps} steps of {buckets} make {want}")
    if pg["allgather_appliance"] != steps:
        problems.append(f"rank 0's counters: {pg['allgather_appliance']} allgather_appliance, want {steps}")
else:
    kind, bytes_per_step = "allreduce_appliance", sum(buckets)
    want = steps * sum(slots_of(b, payload) for b in buckets)
    if js["slots_released"] != want or js["aggregated_packets"] != world * want or js["held_packets"] != 0:
        problems.append(f"the appliance released {js['slots_released']} slots ({js['aggregated_packets']} packets, "
                        f"{js['held_packets']} held); {steps} steps of buckets {buckets} make {want}")
if pg[kind] != steps * len(buckets) or pg["appliance_bytes"] != steps * bytes_per_step:
    problems.append(f"rank 0's counters: {pg[kind]} {kind}, {pg['appliance_bytes']} bytes through the "
                    f"appliance; {steps} steps of buckets {buckets} make {steps * len(buckets)}, {steps * bytes_per_step} bytes")
print("; ".join(problems) if problems else f"ok {run['job_id']} {want} {steps * len(buckets)}")
EOF
}
for comm in backend backend-sharded; do
  check=$(sums_checked "$tmp/$comm.json") || fail "reading $tmp/$comm.json"
  read -r verdict job slots sums <<<"$check"
  [ "$verdict" = ok ] || fail "training with $comm: $check"
  job_listed "$job" && fail "training with $comm: job $job is still on the appliance after the run: $(C list)"
  echo "ok: training with $comm: loss curve within $LOSS_TOLERANCE of Gloo's, accuracy >= 0.9; all $sums gradient sums through the appliance ($slots slots), job $job removed"
done
