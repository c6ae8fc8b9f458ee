#!/usr/bin/env bash
# NCCL's network plugin, libnccl-net-inagg.so, driven as NCCL drives it, through a real appliance in
# the virtual rack: 3 harness processes (tests/ncclnet/collnet_harness.cpp), one per worker
# namespace, each an NCCL rank at its own address (INAGG_ADDRESS), the appliance's control socket
# in INAGG_CONTROL. For every dtype (INAGG_DTYPE fp32, fp16, bf16, int32; the bf16 run through the
# v10 table, the others through v11): the point-to-point network's message to the next rank, then
# CollNet's allreduce (in and out of place, up to 300000 elements), reduce-scatter and all-gather
# over whole and partial windows, every element against a plain loop over every rank's input, and
# bad input (another op or dtype, a buffer outside its registration, a CUDA registration) refused
# with its code and sentence. After each run the communicator's three jobs are gone from the
# appliance. Needs root (namespaces, veths).
#   test_collnet.sh INAGG INAGG_CTL HARNESS PLUGIN SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 harness=$3 plugin=$4 src=$5
n=3
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
start_rack --
# aggregated: the engine's count of data packets added to a slot (summed by the appliance).
aggregated() { "$ctl" --socket "$tmp/ctl.sock" stats | awk '$1 == "aggregated_packets" {print $2}'; }
for run in fp32:11 fp16:11 bf16:10 int32:11; do
  dtype=${run%:*} version=${run#*:}
  before=$(aggregated)
  [ -n "$before" ] || fail "the appliance's stats have no aggregated_packets"
  dir="$tmp/handles.$dtype"
  mkdir -p "$dir"
  hpids=()
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$(ns_w "$r")" env INAGG_CONTROL="$tmp/ctl.sock" INAGG_ADDRESS="10.77.0.$((r + 1))" \
      INAGG_DTYPE="$dtype" INAGG_TIMEOUT_S=60 "$harness" "$plugin" "$dir" "$n" "$r" "$version" \
      >"$tmp/$dtype.r$r.log" 2>&1 &
    hpids+=($!)
    others+=($!)
  done
  wait_pids 240 "the $dtype ranks" "${hpids[@]}" || fail "$dtype: the ranks did not finish"
  for r in $(seq 0 $((n - 1))); do
    wait "${hpids[$r]}" ||
      fail "$dtype (collnet v$version): rank $r failed: $(grep -m 8 -E "FAILED|WARN|ERROR|SUMMARY|^    #[0-9] " "$tmp/$dtype.r$r.log")"
    grep -q "^rank $r: every check passed ($dtype, collnet v$version)" "$tmp/$dtype.r$r.log" ||
      fail "$dtype: rank $r did not say its checks passed"
  done
  grep -q "inagg: rank 0 of $n in jobs" "$tmp/$dtype.r0.log" || fail "$dtype: rank 0 did not join the appliance's jobs"
  after=$(aggregated)
  # The allreduce of 300000 elements alone is more than 40 packets a rank.
  [ $((after - before)) -ge $((n * 40)) ] ||
    fail "$dtype: the appliance summed $((after - before)) packets, not every rank's allreduces"
  left=$("$ctl" --socket "$tmp/ctl.sock" list) || fail "list: $left"
  ! grep -q "^id=" <<<"$left" || fail "$dtype: jobs left on the appliance after closeColl: $left"
  echo "ok: $dtype through collnet v$version, $n ranks, $((after - before)) packets summed by the appliance"
done
echo "PASS"
