#!/usr/bin/env bash
# inagg-worker's output as nccl-tests users' tools read it: one table per job (rank 0's), every
# rank's figures aggregated by -a 0/1/2/3 and #wrong summed over the ranks, and -J's JSON in
# nccl-tests' layout, read by an independent parser (tests/lib/nccl_table.py) from the ranks'
# merged stdout, as mpirun merges it. Three ranks run a checked ring allreduce on loopback in a
# network namespace of this test's own (unshare); every rank also prints its own figures
# (--rank-figures), the parser's reference for the aggregation. Then the check must be able to
# fail: rank 1 alters 3 elements of its input after the reference was made (--corrupt-input), and
# every row must count them on every rank, summed. -J never overwrites (FILE.0 next to FILE), .csv
# writes the rows as CSV, and a name that is neither, a path that cannot be written and an -a out
# of range are refused at once.
#   test_worker_output.sh INAGG_WORKER SRCDIR
set -uo pipefail
worker=$1 src=$2
n=3
fail() { echo "FAIL: $*"; tail -n 8 "$tmp"/*.log 2>/dev/null; exit 1; }
tmp=$(mktemp -d)
wpids=()
cleanup() {
  for p in "${wpids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# The job's secret for the ranks' meeting, as a launcher hands it to every rank.
# shellcheck source=../../scripts/lib/exchange_secret.sh
. "$src/scripts/lib/exchange_secret.sh"
export_exchange_secret

out=$("$worker" --workers 2 --rank 0 -J "$tmp/r.txt" 2>&1 >/dev/null)
[ $? = 2 ] && grep -qF "the name must end in .json (nccl-tests' JSON) or .csv" <<<"$out" || fail "-J r.txt: $out"
out=$("$worker" --workers 2 --rank 0 --output-file /nonexistent/dir/r.json 2>&1 >/dev/null)
[ $? = 2 ] && grep -qF "/nonexistent/dir/r.json: cannot create it" <<<"$out" || fail "-J in a missing directory: $out"
out=$("$worker" --workers 2 --rank 0 -a 4 2>&1 >/dev/null)
[ $? = 2 ] && grep -qF -- "-a/--average must be 0" <<<"$out" || fail "-a 4: $out"

[ "$(id -u)" = 0 ] || { echo "SKIP: the run part needs root (a network namespace)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
if [ -z "${INAGG_OUTPUT_NETNS:-}" ]; then
  trap - EXIT
  rm -rf "$tmp"
  INAGG_OUTPUT_NETNS=1 exec unshare --net "$0" "$@"
fi
ip link set lo up || fail "lo up"

# run TAG [--rank1 ARGS... --] NCCL_ARGS...: every rank with the same arguments (rank 1 with the
# extra ones), its stdout in $tmp/TAG.wR.log; the exit codes in $tmp/TAG.rc; the merged stdout in
# $tmp/TAG.all.
run() {
  local tag=$1 extra=() r
  shift
  if [ "${1:-}" = --rank1 ]; then
    shift
    while [ "$1" != -- ]; do extra+=("$1"); shift; done
    shift
  fi
  wpids=()
  for r in $(seq 0 $((n - 1))); do
    local mine=()
    [ "$r" = 1 ] && mine=("${extra[@]}")
    "$worker" --workers $n --rank "$r" --ip-base 127.0.1.0 --mode ring --timeout 60 --rank-figures "${mine[@]}" "$@" \
      >"$tmp/$tag.w$r.log" 2>"$tmp/$tag.w$r.err" &
    wpids+=($!)
  done
  : >"$tmp/$tag.rc"
  for r in $(seq 0 $((n - 1))); do
    wait "${wpids[$r]}"
    echo "$?" >>"$tmp/$tag.rc"
  done
  wpids=()
  cat "$tmp/$tag".w*.log >"$tmp/$tag.all"
}
sweep=(-b 8K -e 128K -f 4 -n 2 -w 1)
table() { /usr/bin/python3 "$src/tests/lib/nccl_table.py" --ranks $n --minbytes 8K --maxbytes 128K --stepfactor 4 --type float "$@"; }
rows() { grep -c '^ ' "$1"; }

# -a 0, -J: rank 0's times; the JSON's every field against the table and the command line.
args=(-a 0 -J "$tmp/r.json" "${sweep[@]}" -c 1)
run a0 "${args[@]}"
[ "$(sort -u "$tmp/a0.rc")" = 0 ] || fail "-a 0: exit codes $(tr '\n' ' ' <"$tmp/a0.rc"): $(cat "$tmp"/a0.w*.err)"
table "$tmp/a0.all" --average 0 --json "$tmp/r.json" --iters 2 --warmup 1 --check 1 \
  --args --workers $n --rank 0 --ip-base 127.0.1.0 --mode ring --timeout 60 --rank-figures "${args[@]}" ||
  fail "-a 0: $(cat "$tmp/a0.all")"
for r in 1 2; do
  [ "$(rows "$tmp/a0.w$r.log")" = 0 ] || fail "rank $r printed table rows: $(cat "$tmp/a0.w$r.log")"
  grep -q "^# rank $r: 3 sizes, 6 checked placements, 0 wrong elements" "$tmp/a0.w$r.log" ||
    fail "rank $r's closing line: $(grep "^# rank $r: [0-9]* sizes" "$tmp/a0.w$r.log")"
done
grep -q "^# Writing JSON output to $tmp/r.json$" "$tmp/a0.w0.log" || fail "rank 0 did not announce the JSON"

# -a 1 with rank 1's input corrupted: every rank counts the 3 elements in every row, the table sums
# them, Out of bounds counts each rank's failed checks (3 ranks x 6), every rank exits 1. -J to a
# name that exists: FILE.0, the first file untouched.
before=$(md5sum <"$tmp/r.json")
args=(-a 1 -J "$tmp/r.json" "${sweep[@]}" -c 1)
run a1 --rank1 --corrupt-input 3 -- "${args[@]}"
[ "$(sort -u "$tmp/a1.rc")" = 1 ] || fail "corrupted: exit codes $(tr '\n' ' ' <"$tmp/a1.rc"), want 1 everywhere"
[ "$(md5sum <"$tmp/r.json")" = "$before" ] || fail "-J overwrote an existing file"
table "$tmp/a1.all" --average 1 --wrong 3 --json "$tmp/r.json.0" --iters 2 --warmup 1 --check 1 \
  --args --workers $n --rank 0 --ip-base 127.0.1.0 --mode ring --timeout 60 --rank-figures "${args[@]}" ||
  fail "-a 1, corrupted: $(cat "$tmp/a1.all")"
grep -q "^# Out of bounds values : 18 FAILED" "$tmp/a1.w0.log" || fail "trailer: $(grep '^# Out' "$tmp/a1.w0.log")"
# The parser itself must fail on that table when told to expect no wrong elements.
table "$tmp/a1.all" --average 1 >/dev/null && fail "the parser accepted the wrong elements as #wrong 0"

# -a 2, CSV: the least time; the CSV's lines are the table's.
run a2 -a 2 -J "$tmp/r.csv" "${sweep[@]}" -c 1
[ "$(sort -u "$tmp/a2.rc")" = 0 ] || fail "-a 2: exit codes $(tr '\n' ' ' <"$tmp/a2.rc"): $(cat "$tmp"/a2.w*.err)"
table "$tmp/a2.all" --average 2 || fail "-a 2: $(cat "$tmp/a2.all")"
/usr/bin/python3 - "$tmp/a2.w0.log" "$tmp/r.csv" <<'PY' || fail "the CSV does not match the table"
import csv, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if not line.startswith("#") and len(f) == 13:
        rows[(f[0], "out_of_place")] = f[1:5] + f[5:9]
        rows[(f[0], "in_place")] = f[1:5] + f[9:13]
lines = list(csv.DictReader(open(sys.argv[2])))
if len(lines) != len(rows) or len(rows) != 6:
    sys.exit(f"{len(lines)} CSV lines for {len(rows)} placements")
for l in lines:
    t = rows[(l["size_bytes"], l["placement"])]
    if [l["count"], l["type"], l["redop"]] != t[:3] or l["wrong"] != t[7]:
        sys.exit(f"CSV {l}, table {t}")
    for name, printed in (("time_us", t[4]), ("algbw_gbps", t[5]), ("busbw_gbps", t[6])):
        if abs(float(printed) - float(l[name])) > max(0.006, 0.006 * float(l[name])):
            sys.exit(f"CSV {name} {l[name]}, table {printed}")
PY

# -a 3, -c 0, out of place only: the greatest time, #wrong N/A, the in-place columns blank.
run a3 -a 3 "${sweep[@]}" -c 0 --in-place 0
[ "$(sort -u "$tmp/a3.rc")" = 0 ] || fail "-a 3: exit codes $(tr '\n' ' ' <"$tmp/a3.rc"): $(cat "$tmp"/a3.w*.err)"
table "$tmp/a3.all" --average 3 --unchecked --no-in-place || fail "-a 3: $(cat "$tmp/a3.all")"
echo "ok: one table per job of $n ranks, -a 0/1/2/3 against every rank's figures, 3 corrupted elements summed over the ranks, -J's JSON and CSV"
