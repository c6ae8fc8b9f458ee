#!/usr/bin/python3
"""Reads a job's nccl-tests output (as inagg-worker's ranks print it, their stdout merged as mpirun
merges it) and its -J JSON, and checks them against what the command line asked for, independently
of inagg's C++, from nccl-tests' printed and written format (src/util.cu of nccl-tests 2.19):

- one table for the job: one "Collective test starting/concluded: PROGRAM" pair, one column header,
  one footer, a "#  Rank R Group G Pid P on HOST device D [HEX] INFO" line for every rank;
- the rows: the sizes of the sweep (recomputed here from -b/-e/-f/-i with nccl-tests' K/M/G rules),
  count = size / type size (a reduce-scatter's or all-gather's: one rank's shard), the type, redop
  and root columns, the column alignment under the header's names, algbw = size / time,
  busbw = algbw * 2(n-1)/n (allreduce) or (n-1)/n;
- against every rank's own figures (the "# rank R: ROW" comment lines of --rank-figures): the
  row's time is rank 0's (-a 0), the mean (1), the least (2) or the greatest (3) of theirs, #wrong
  the sum of theirs, and each rank's own #wrong is --wrong;
- the footer: "Out of bounds values" is the number of (rank, placement) whose check found wrong
  elements, as nccl-tests sums each rank's failed checks; "Avg bus bandwidth" the mean busbw;
- with --json FILE: nccl-tests' JSON layout, every field against the table and the command line.

  nccl_table.py LOG... --ranks N --minbytes 8 --maxbytes 1M [--stepfactor 2 | --stepbytes 16K]
                --type float [--wrong K] [--no-in-place] [--unchecked] [--average A]
                [--collective all_reduce] [--json FILE --iters N --warmup N --check N --args ARG...]

Exits 0 when every check holds, 1 with a message naming the first that does not.
"""
import argparse
import json
import re
import sys

TYPE_SIZES = {"float": 4, "half": 2, "bfloat16": 2, "int32": 4}
# nccl-tests' per-rank line (util.cu, writeDeviceReport; parseRankInfo reads it back).
RANK_LINE = re.compile(r"#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[([^]]*)\] (.*)")
TIME_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


def size_of(text):
    m = re.fullmatch(r"([0-9.]+)([kKmMgG]?)", text)
    if not m:
        raise ValueError(f"not a size: {text}")
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * unit)


def sweep(a):
    lo, hi = size_of(a.minbytes), size_of(a.maxbytes)
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s = s * a.stepfactor if a.stepfactor > 1 else s + size_of(a.stepbytes)
    return sizes


def near(got, want, what):
    # Printed with two decimals (fewer when wide): allow the rounding and 1% besides.
    if abs(got - want) > 0.006 + 0.01 * abs(want):
        raise AssertionError(f"{what}: printed {got}, want {want:.4f}")


def one(lines, pattern, what):
    found = [l for l in lines if re.fullmatch(pattern, l)]
    if len(found) != 1:
        raise AssertionError(f"want one {what} line, found {len(found)}: {found[:3]}")
    return re.fullmatch(pattern, found[0])


def placements_of(fields, n):
    """A row's placements: [(time, algbw, busbw, wrong)], wrong None when N/A."""
    out = []
    for p in range(n):
        t, alg, bus, wrong = fields[5 + 4 * p: 9 + 4 * p]
        out.append((float(t), float(alg), float(bus), None if wrong == "N/A" else int(wrong)))
    return out


def check_table(lines, a):
    program = f"{a.collective}_perf"
    one(lines, rf"# Collective test starting: {program}", "preamble")
    one(lines, rf"# Collective test concluded: {program}", "closing")
    header = [l for l in lines if l.startswith("#") and "size" in l and "count" in l and "redop" in l]
    if len(header) != 1:
        raise AssertionError(f"want one column header line (one table for the job), found {len(header)}")
    names = header[0]
    ends = [m.end() for m in re.finditer(r"\S+", names)][1:]  # without the leading '#'
    want_names = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong"]
    if names.split()[1:] != want_names:
        raise AssertionError(f"header columns {names.split()[1:]}, want {want_names}")
    above = lines[lines.index(names) - 1]
    if "out-of-place" not in above or "in-place" not in above:
        raise AssertionError("no out-of-place / in-place title above the column names")

    # Every rank's line, once, in rank order.
    ranks = [RANK_LINE.fullmatch(l) for l in lines if l.startswith("#  Rank")]
    if any(m is None for m in ranks) or [int(m.group(1)) for m in ranks] != list(range(a.ranks)):
        raise AssertionError(f"the ranks' lines name ranks {[m and m.group(1) for m in ranks]}, want 0..{a.ranks - 1}")

    rows = [l for l in lines if l.strip() and not l.startswith("#")]
    es = TYPE_SIZES[a.type]
    if a.collective == "all_reduce":
        expected = [(s // es * es, s // es) for s in sweep(a) if s // es > 0]
        factor = 2 * (a.ranks - 1) / a.ranks
    else:  # a size is the whole buffer, n shards of whole elements; the count one shard's
        expected = [(s, s // es // a.ranks) for s in sweep(a) if s % (es * a.ranks) == 0 and s >= es * a.ranks]
        factor = (a.ranks - 1) / a.ranks
    placements = 1 if a.no_in_place else 2
    if len(rows) != len(expected):
        raise AssertionError(f"{len(rows)} rows, want {len(expected)} (sizes {[s for s, _ in expected]})")

    # Every rank's own figures: "# rank R: " and a row.
    own = {}
    for l in lines:
        m = re.fullmatch(r"# rank (\d+): ( *\d+ +\d+ +(float|half|bfloat16|int32) .*)", l)
        if m:
            f = m.group(2).split()
            own.setdefault(int(f[0]), {})[int(m.group(1))] = placements_of(f, placements)

    busbws, failed, table = [], 0, []
    for row, (want_size, want_count) in zip(rows, expected):
        f = row.split()
        if len(f) != 5 + 4 * placements:
            raise AssertionError(f"row has {len(f)} fields, want {5 + 4 * placements}: {row!r}")
        # nccl-tests prints an unchecked #wrong as "    N/A" after the busbw column's two spaces,
        # one character short of the column's end: the same here.
        row_ends = [m.end() + (m.group() == "N/A") for m in re.finditer(r"\S+", row)]
        if row_ends != ends[:len(row_ends)]:
            raise AssertionError(f"row columns end at {row_ends}, the header's at {ends}: {row!r}")
        size, count = int(f[0]), int(f[1])
        if (size, count) != (want_size, want_count):
            raise AssertionError(f"size {size} count {count}, want size {want_size} count {want_count}")
        if f[2:5] != [a.type, "sum", "-1"]:
            raise AssertionError(f"type/redop/root {f[2:5]}, want {[a.type, 'sum', '-1']}")
        mine = own.get(size, {})
        if a.average is not None and sorted(mine) != list(range(a.ranks)):
            raise AssertionError(f"{size} bytes: every rank's own figures (--rank-figures) wanted, got ranks {sorted(mine)}")
        got = placements_of(f, placements)
        for p, (time_us, algbw, busbw, wrong) in enumerate(got):
            if time_us <= 0:
                raise AssertionError(f"time {time_us} in {row!r}")
            alg = size / 1e9 / (time_us / 1e6)
            near(algbw, alg, f"algbw of {size} bytes")
            near(busbw, alg * factor, f"busbw of {size} bytes")
            busbws.append(busbw)
            if a.average is not None:
                theirs = [mine[r][p][0] for r in range(a.ranks)]
                want = [theirs[0], sum(theirs) / len(theirs), min(theirs), max(theirs)][a.average]
                if a.average == 1:
                    near(time_us, want, f"{size} bytes: the mean time of {theirs}")
                elif time_us != want:  # the same value, printed the same way
                    raise AssertionError(f"{size} bytes: time {time_us}, want {want} of the ranks' {theirs} (-a {a.average})")
            if a.unchecked:
                if wrong is not None:
                    raise AssertionError(f"#wrong {wrong} with -c 0, want N/A")
                continue
            if wrong is None:
                raise AssertionError(f"#wrong N/A at {size} bytes with a check")
            if a.average is not None:
                theirs = [mine[r][p][3] for r in range(a.ranks)]
                if theirs != [min(a.wrong, count if a.collective == "all_reduce" else count * a.ranks)] * a.ranks:
                    raise AssertionError(f"{size} bytes: the ranks' own #wrong {theirs}, want {a.wrong} each")
                if wrong != sum(theirs):
                    raise AssertionError(f"{size} bytes: #wrong {wrong}, want the sum of the ranks' {theirs}")
                failed += sum(w > 0 for w in theirs)
            elif a.wrong == 0 and wrong != 0:
                raise AssertionError(f"#wrong {wrong} at {size} bytes, want 0")
        table.append((size, count, got))
    if a.average is None and a.wrong:
        raise AssertionError("--wrong needs every rank's own figures (--average and --rank-figures)")
    oob = one(lines, r"# Out of bounds values : (\d+) (OK|FAILED)\s*", "Out of bounds values")
    if int(oob.group(1)) != failed or oob.group(2) != ("FAILED" if failed else "OK"):
        raise AssertionError(f"Out of bounds values {oob.group(1)} {oob.group(2)}, want {failed}")
    avg = one(lines, r"# Avg bus bandwidth    : (\S+)\s*", "Avg bus bandwidth")
    near(float(avg.group(1)), sum(busbws) / len(busbws), "Avg bus bandwidth")
    return table, failed, float(avg.group(1)), ranks


def check_json(path, a, table, failed, avg, ranks):
    with open(path) as f:
        doc = json.load(f)
    want_keys = ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
                 "average_bus_bandwidth", "errors", "end_time"]
    if list(doc) != want_keys:
        raise AssertionError(f"JSON keys {list(doc)}, want {want_keys}")
    if doc["version"] != 3 or not isinstance(doc["nccl_version"], int):
        raise AssertionError(f"version {doc['version']} nccl_version {doc['nccl_version']}")
    for k in ("start_time", "end_time"):
        if not TIME_FORMAT.fullmatch(doc[k]):
            raise AssertionError(f"{k} {doc[k]!r} is not YYYY-MM-DD HH:MM:SS")
    if doc["start_time"] > doc["end_time"]:
        raise AssertionError("start_time after end_time")
    if doc["args"][1:] != a.args:
        raise AssertionError(f"args {doc['args'][1:]}, want {a.args}")
    if not all(isinstance(e, str) and "=" in e for e in doc["env"]):
        raise AssertionError("env holds something other than NAME=value")
    secret = [e for e in doc["env"] if e.startswith("INAGG_EXCHANGE_SECRET=")]
    if secret and secret != ["INAGG_EXCHANGE_SECRET=(not written)"]:
        raise AssertionError("the job's secret was written to the JSON")
    c = doc["config"]
    step = {"step_factor": a.stepfactor} if a.stepfactor > 1 else {"step_bytes": size_of(a.stepbytes)}
    want = {"nthreads": 1, "ngpus": 1, "minimum_bytes": size_of(a.minbytes), "maximum_bytes": size_of(a.maxbytes),
            **step, "warmup_iters": a.warmup, "iterations": a.iters, "aggregated_iterations": 1,
            "validation": a.check, "graph": 0, "blocking_collectives": "false", "per_iter_timing": "false",
            "per_iter_skip": 0, "parallel_init": "false"}
    for k, v in want.items():
        if c.get(k) != v:
            raise AssertionError(f"config {k} = {c.get(k)!r}, want {v!r}")
    if list(c) != list(want) + ["devices"]:
        raise AssertionError(f"config keys {list(c)}")
    devices = c["devices"]
    if len(devices) != len(ranks):
        raise AssertionError(f"{len(devices)} devices, {len(ranks)} rank lines")
    for d, m in zip(devices, ranks):
        want = {"rank": int(m.group(1)), "group": int(m.group(2)), "pid": int(m.group(3)), "hostname": m.group(4),
                "device": int(m.group(5)), "device_hex": m.group(6), "device_info": m.group(7)}
        if d != want:
            raise AssertionError(f"device {d}, the rank line says {want}")
    results = doc["results"]
    if len(results) != len(table):
        raise AssertionError(f"{len(results)} JSON results, {len(table)} rows")
    for r, (size, count, got) in zip(results, table):
        keys = ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "actual_iterations",
                "experiment_name"]
        if list(r) != keys:
            raise AssertionError(f"result keys {list(r)}, want {keys}")
        if (r["size"], r["count"], r["type"], r["redop"], r["root"]) != (size, count, a.type, "sum", "    -1"):
            raise AssertionError(f"result {r} for the row of {size} bytes")
        if r["actual_iterations"] != a.iters or r["experiment_name"] != f"{a.collective}_perf":
            raise AssertionError(f"actual_iterations/experiment_name {r['actual_iterations']} {r['experiment_name']!r}")
        for p, name in enumerate(["out_of_place", "in_place"]):
            if p >= len(got):
                if r[name] is not None:
                    raise AssertionError(f"{name} {r[name]} for a placement not run")
                continue
            v = r[name]
            if list(v) != ["time", "alg_bw", "bus_bw", "nwrong"]:
                raise AssertionError(f"{name} keys {list(v)}")
            time_us, algbw, busbw, wrong = got[p]
            near(time_us, v["time"], f"{size} bytes {name} time")
            near(algbw, v["alg_bw"], f"{size} bytes {name} alg_bw")
            near(busbw, v["bus_bw"], f"{size} bytes {name} bus_bw")
            if (v["nwrong"] is None) != (wrong is None) or (wrong is not None and v["nwrong"] != wrong):
                raise AssertionError(f"{size} bytes {name} nwrong {v['nwrong']}, the table's {wrong}")
    if doc["out_of_bounds"] != {"count": failed, "okay": "false" if failed else "true"}:
        raise AssertionError(f"out_of_bounds {doc['out_of_bounds']}, want count {failed}")
    b = doc["average_bus_bandwidth"]
    near(avg, b["bandwidth"], "average_bus_bandwidth")
    if b["okay"] != "unchecked" or list(b) != ["bandwidth", "okay"]:
        raise AssertionError(f"average_bus_bandwidth {b}")
    if doc["errors"] != []:
        raise AssertionError(f"errors {doc['errors']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--minbytes", required=True)
    ap.add_argument("--maxbytes", required=True)
    ap.add_argument("--stepfactor", type=int, default=1)
    ap.add_argument("--stepbytes", default="1M")
    ap.add_argument("--type", required=True, choices=sorted(TYPE_SIZES))
    ap.add_argument("--collective", default="all_reduce", choices=["all_reduce", "reduce_scatter", "all_gather"])
    ap.add_argument("--wrong", type=int, default=0)
    ap.add_argument("--average", type=int, choices=[0, 1, 2, 3])
    ap.add_argument("--no-in-place", action="store_true")
    ap.add_argument("--unchecked", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--check", type=int, default=1)
    ap.add_argument("--args", nargs=argparse.REMAINDER, default=[])
    a = ap.parse_args()
    lines = []
    for log in a.logs:
        with open(log) as f:
            lines += f.read().splitlines()
    try:
        table, failed, avg, ranks = check_table(lines, a)
        if a.json:
            check_json(a.json, a, table, failed, avg, ranks)
    except (AssertionError, ValueError, IndexError, KeyError, TypeError) as e:
        print(f"{' '.join(a.logs)}: {e}")
        return 1
    print(f"{' '.join(a.logs)}: one table of {len(table)} rows as {a.collective}_perf prints it"
          f"{', and its JSON' if a.json else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
