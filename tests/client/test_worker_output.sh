#!/usr/bin/env bash
# inagg-worker --output-file: the results for programs, checked against the table the same run
# printed. Two ranks run a checked ring allreduce on loopback in a network namespace of this
# test's own (unshare); rank 0 writes JSON, rank 1 CSV. Python's json and csv modules read them,
# and every size's time, algbw, busbw and #wrong must be the table's (to its printed precision).
# A name that is neither .json nor .csv, and a path that cannot be written, are refused at once.
#   test_worker_output.sh INAGG_WORKER
set -uo pipefail
worker=$1
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
. "$(dirname "$0")/../../scripts/lib/exchange_secret.sh"
export_exchange_secret

out=$("$worker" --workers 2 --rank 0 --output-file "$tmp/r.txt" 2>&1 >/dev/null)
[ $? = 2 ] && grep -qF "the name must end in .json or .csv" <<<"$out" || fail "--output-file r.txt: $out"
out=$("$worker" --workers 2 --rank 0 --output-file /nonexistent/dir/r.json 2>&1 >/dev/null)
[ $? = 2 ] && grep -qF "cannot open it for writing" <<<"$out" || fail "--output-file in a missing directory: $out"

[ "$(id -u)" = 0 ] || { echo "SKIP: the run part needs root (a network namespace)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
if [ -z "${INAGG_OUTPUT_NETNS:-}" ]; then
  trap - EXIT
  rm -rf "$tmp"
  INAGG_OUTPUT_NETNS=1 exec unshare --net "$0" "$@"
fi
ip link set lo up || fail "lo up"
for r in 0 1; do
  file=$tmp/r$r.json
  [ "$r" = 1 ] && file=$tmp/r$r.csv
  "$worker" --workers 2 --rank "$r" --ip-base 127.0.1.0 --mode ring -b 8K -e 512K -f 8 -n 2 -w 1 -c 1 \
    --timeout 30 --output-file "$file" >"$tmp/w$r.log" 2>&1 &
  wpids+=($!)
done
for r in 0 1; do
  wait "${wpids[$r]}" || fail "rank $r exited with $?"
done
wpids=()
/usr/bin/python3 - "$tmp" <<'PY' || fail "the files do not match the tables"
import csv, json, sys
tmp = sys.argv[1]

def table(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if line.startswith("#") or len(f) != 13:
            continue
        rows[int(f[0])] = {"count": int(f[1]), "type": f[2], "redop": f[3],
                           "out_of_place": [float(f[5]), float(f[6]), float(f[7]), f[8]],
                           "in_place": [float(f[9]), float(f[10]), float(f[11]), f[12]]}
    return rows

def close(printed, exact):  # the table prints %.2f (or fewer digits when wide)
    return abs(printed - exact) <= max(0.006, abs(exact) * 0.006)

def same(t, placement, time_us, algbw, busbw, wrong, where):
    p = t[placement]
    for name, printed, exact in (("time", p[0], time_us), ("algbw", p[1], algbw), ("busbw", p[2], busbw)):
        if not close(printed, exact):
            sys.exit(f"{where} {placement} {name}: table {printed}, file {exact}")
    if str(wrong) != p[3]:
        sys.exit(f"{where} {placement} #wrong: table {p[3]}, file {wrong}")

t0 = table(f"{tmp}/w0.log")
doc = json.load(open(f"{tmp}/r0.json"))
assert doc["program"] == "inagg-worker" and doc["mode"] == "ring" and doc["rank"] == 0 and doc["ranks"] == 2, doc
assert doc["failed_checks"] == 0, doc
sizes = [r["size_bytes"] for r in doc["results"]]
if sizes != sorted(t0) or len(sizes) != 3:
    sys.exit(f"JSON sizes {sizes}, table sizes {sorted(t0)}")
for r in doc["results"]:
    t = t0[r["size_bytes"]]
    assert r["count"] == t["count"] and r["type"] == t["type"] == "float" and r["redop"] == t["redop"] == "sum", r
    for placement in ("out_of_place", "in_place"):
        m = r[placement]
        same(t, placement, m["time_us"], m["algbw_gbps"], m["busbw_gbps"], m["wrong"], f"rank 0 size {r['size_bytes']}")

t1 = table(f"{tmp}/w1.log")
lines = list(csv.DictReader(open(f"{tmp}/r1.csv")))
if len(lines) != 2 * len(t1) or len(t1) != 3:
    sys.exit(f"CSV has {len(lines)} lines for {len(t1)} sizes")
for l in lines:
    t = t1[int(l["size_bytes"])]
    assert int(l["count"]) == t["count"] and l["type"] == "float" and l["redop"] == "sum", l
    same(t, l["placement"], float(l["time_us"]), float(l["algbw_gbps"]), float(l["busbw_gbps"]), int(l["wrong"]),
         f"rank 1 size {l['size_bytes']}")
print("files match the tables")
PY
echo "ok: --output-file writes JSON and CSV that match the table; bad names and paths refused"
