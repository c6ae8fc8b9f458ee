#!/usr/bin/env bash
# nccl-tests compatibility: inagg-worker runs real all_reduce_perf command lines
# (`-b 8 -e 1M -f 2 -g 1`, `-b 1K -e 64K -i 16K -d int32`, `-c`, `-o sum`, `-n`, `-w`, `-a`, `-J`)
# through the appliance on the virtual rack, and an independent parser (tests/lib/nccl_table.py)
# reads the job's output, the ranks' stdout merged as mpirun merges it, as a script made for
# all_reduce_perf would: one table (rank 0's), the sizes of the sweep, count = size / type size,
# type/redop/root, both placements, busbw = algbw * 2(n-1)/n, each row's time aggregated over the
# ranks by -a (every rank's own figures, --rank-figures, are the reference), #wrong summed over
# them, the trailer, and -J's JSON field by field. Then the check must be able to fail: rank 1
# alters 5 elements of its input after the reference was made (--corrupt-input, a test-only flag),
# every rank must count exactly those 5 in every row and placement, rank 0's table their sum, and
# "Out of bounds values" every rank's failed checks (nccl-tests sums them); every rank exits 1.
#   test_nccl_tests.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
table() { /usr/bin/python3 "$src/tests/lib/nccl_table.py" "$@"; }
start_rack --
common=(--workers "$n" --message 16384 --payload 1024 --ack-timeout-ms 50 --timeout 90 --register "$tmp/ctl.sock"
  --rank-figures)

# run TAG JOB_ID [--rank1 EXTRA_ARGS_OF_RANK_1 --] NCCL_ARGS...: every rank with the same
# nccl-tests arguments, rank 1 with the extra ones; the exit codes in $tmp/TAG.rc, the ranks'
# stdout merged in $tmp/TAG.all.
run() {
  local tag=$1 job=$2 extra=() pids=() r
  shift 2
  # A job's QPNs and addresses are the previous run's: remove that job first.
  [ "$job" -gt 1 ] && { "$ctl" --socket "$tmp/ctl.sock" remove $((job - 1)) >/dev/null || fail "remove job $((job - 1))"; }
  if [ "${1:-}" = --rank1 ]; then
    shift
    while [ "$1" != -- ]; do extra+=("$1"); shift; done
    shift
  fi
  for r in $(seq 0 $((n - 1))); do
    local mine=()
    [ "$r" = 1 ] && mine=("${extra[@]}")
    ip netns exec "$(ns_w "$r")" "$worker" --rank "$r" --job-id "$job" "${common[@]}" "${mine[@]}" "$@" \
      >"$tmp/$tag.w$r.log" 2>"$tmp/$tag.w$r.err" &
    pids+=($!)
  done
  : >"$tmp/$tag.rc"
  for r in $(seq 0 $((n - 1))); do
    wait "${pids[$r]}"
    echo "$?" >>"$tmp/$tag.rc"
  done
  cat "$tmp/$tag".w*.log >"$tmp/$tag.all"
}

# 1. nccl-tests' usual sweep: 8 B to 1 MiB by doubling (18 rows), floats, one checked iteration;
# -a as nccl-tests' default (1, the mean); the JSON.
args=(-b 8 -e 1M -f 2 -g 1 -c 1 -n 2 -w 1 -d float -o sum -J "$tmp/sweep.json")
run sweep 1 "${args[@]}"
[ "$(sort -u "$tmp/sweep.rc")" = 0 ] || fail "sweep: exit codes $(tr '\n' ' ' <"$tmp/sweep.rc"): $(cat "$tmp"/sweep.w*.err)"
table --ranks $n --minbytes 8 --maxbytes 1M --stepfactor 2 --type float --average 1 "$tmp/sweep.all" \
  --json "$tmp/sweep.json" --iters 2 --warmup 1 --check 1 --args --rank 0 --job-id 1 "${common[@]}" "${args[@]}" ||
  fail "the job's table: $(cat "$tmp/sweep.all")"

# 2. Fixed steps (1K, 17K, 33K, 49K: 4 rows, 8 checks), int32 under nccl-tests' old name `int`, with
# the corrupted input on rank 1; -a 0: rank 0's times.
run corrupt 2 --rank1 --corrupt-input 5 -- -b 1K -e 64K -i 16K -d int -c 1 -n 1 -w 0 -a 0
[ "$(sort -u "$tmp/corrupt.rc")" = 1 ] || fail "corrupted: exit codes $(tr '\n' ' ' <"$tmp/corrupt.rc"), want 1 everywhere"
table --ranks $n --minbytes 1K --maxbytes 64K --stepbytes 16K --type int32 --average 0 --wrong 5 "$tmp/corrupt.all" ||
  fail "the job's table with a corrupted input: $(cat "$tmp/corrupt.all")"
# The parser itself must fail on that table when told to expect no wrong elements.
table --ranks $n --minbytes 1K --maxbytes 64K --stepbytes 16K --type int32 --average 0 "$tmp/corrupt.all" >/dev/null &&
  fail "the parser accepted the wrong elements as #wrong 0"
grep -q "^# Out of bounds values : $((8 * n)) FAILED" "$tmp/corrupt.w0.log" ||
  fail "trailer: $(grep '^# Out' "$tmp/corrupt.w0.log")"

# 3. -c 0: no check, #wrong N/A; out-of-place only (--in-place 0): the in-place columns blank; -a 3:
# the greatest time.
run nocheck 3 -b 64K -e 256K -f 4 -c 0 -n 1 --in-place 0 -d bfloat16 -a 3
[ "$(sort -u "$tmp/nocheck.rc")" = 0 ] || fail "-c 0: exit codes $(tr '\n' ' ' <"$tmp/nocheck.rc"): $(cat "$tmp"/nocheck.w*.err)"
table --ranks $n --minbytes 64K --maxbytes 256K --stepfactor 4 --type bfloat16 --average 3 --unchecked --no-in-place \
  "$tmp/nocheck.all" || fail "-c 0 table: $(cat "$tmp/nocheck.all")"
echo "ok: all_reduce_perf command lines through the appliance: one table of 18 float rows for $n ranks and its JSON; 5 corrupted elements counted by every rank and summed; -c 0 prints N/A"
