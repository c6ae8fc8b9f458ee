#!/usr/bin/python3
"""Reads an nccl-tests all_reduce_perf results table (as inagg-worker prints it) and checks it
against what the command line asked for, independently of inagg's C++: the sizes of the sweep
(recomputed here from -b/-e/-f/-i with nccl-tests' K/M/G rules), count = size / type size, the
type, redop and root columns, the column alignment under the header's names, algbw = size / time,
busbw = algbw * 2(n-1)/n, #wrong per row, and the trailer (failed checks, the mean bus bandwidth).

  nccl_table.py LOG --ranks N --minbytes 8 --maxbytes 1M [--stepfactor 2 | --stepbytes 16K]
                --type float [--wrong K] [--no-in-place] [--unchecked]

Exits 0 when every check holds, 1 with a message naming the first that does not.
"""
import argparse
import re
import sys

TYPE_SIZES = {"float": 4, "half": 2, "bfloat16": 2, "int32": 4}


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


def check(lines, a):
    header = [l for l in lines if l.startswith("#") and "size" in l and "count" in l and "redop" in l]
    if len(header) != 1:
        raise AssertionError(f"want one column header line, found {len(header)}")
    names = header[0]
    # Every column is right-aligned under its name: the end of each name in the header line.
    ends = [m.end() for m in re.finditer(r"\S+", names)][1:]  # without the leading '#'
    want_names = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong"]
    if names.split()[1:] != want_names:
        raise AssertionError(f"header columns {names.split()[1:]}, want {want_names}")
    if "out-of-place" not in lines[lines.index(names) - 1] or "in-place" not in lines[lines.index(names) - 1]:
        raise AssertionError("no out-of-place / in-place title above the column names")
    rows = [l for l in lines if l.strip() and not l.startswith("#")]
    sizes = sweep(a)
    es = TYPE_SIZES[a.type]
    expected_sizes = [s // es * es for s in sizes if s // es > 0]
    placements = 1 if a.no_in_place else 2
    if len(rows) != len(expected_sizes):
        raise AssertionError(f"{len(rows)} rows, want {len(expected_sizes)} (sizes {expected_sizes})")
    factor = 2 * (a.ranks - 1) / a.ranks
    busbws, failed = [], 0
    for row, want_size in zip(rows, expected_sizes):
        f = row.split()
        if len(f) != 5 + 4 * placements:
            raise AssertionError(f"row has {len(f)} fields, want {5 + 4 * placements}: {row!r}")
        # nccl-tests prints an unchecked #wrong as "    N/A" after the busbw column's two spaces,
        # one character short of the column's end: the same here.
        row_ends = [m.end() + (m.group() == "N/A") for m in re.finditer(r"\S+", row)]
        if row_ends != ends[:len(row_ends)]:
            raise AssertionError(f"row columns end at {row_ends}, the header's at {ends}: {row!r}")
        size, count = int(f[0]), int(f[1])
        if size != want_size or count != size // es or count * es != size:
            raise AssertionError(f"size {size} count {count}, want size {want_size} count {want_size // es}")
        if f[2:5] != [a.type, "sum", "-1"]:
            raise AssertionError(f"type/redop/root {f[2:5]}, want {[a.type, 'sum', '-1']}")
        for p in range(placements):
            time_us, algbw, busbw, wrong = f[5 + 4 * p: 9 + 4 * p]
            time_us, algbw, busbw = float(time_us), float(algbw), float(busbw)
            if time_us <= 0:
                raise AssertionError(f"time {time_us} in {row!r}")
            alg = size / 1e9 / (time_us / 1e6)
            near(algbw, alg, f"algbw of {size} bytes")
            near(busbw, alg * factor, f"busbw of {size} bytes")
            busbws.append(busbw)
            if a.unchecked:
                if wrong != "N/A":
                    raise AssertionError(f"#wrong {wrong} with -c 0, want N/A")
                continue
            want_wrong = min(a.wrong, count)
            if not re.fullmatch(r"[0-9]+", wrong) or int(wrong) != want_wrong:
                raise AssertionError(f"#wrong {wrong} at {size} bytes, want {want_wrong}")
            failed += int(wrong) > 0
    oob = [l for l in lines if l.startswith("# Out of bounds values")]
    want = f"# Out of bounds values : {failed} {'FAILED' if failed else 'OK'}"
    if len(oob) != 1 or oob[0].rstrip() != want:
        raise AssertionError(f"trailer {oob}, want {want!r}")
    avg = [l for l in lines if l.startswith("# Avg bus bandwidth")]
    m = re.fullmatch(r"# Avg bus bandwidth    : (\S+)\s*", avg[0]) if len(avg) == 1 else None
    if not m:
        raise AssertionError(f"no Avg bus bandwidth line: {avg}")
    near(float(m.group(1)), sum(busbws) / len(busbws), "Avg bus bandwidth")
    return len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--minbytes", required=True)
    ap.add_argument("--maxbytes", required=True)
    ap.add_argument("--stepfactor", type=int, default=1)
    ap.add_argument("--stepbytes", default="1M")
    ap.add_argument("--type", required=True, choices=sorted(TYPE_SIZES))
    ap.add_argument("--wrong", type=int, default=0)
    ap.add_argument("--no-in-place", action="store_true")
    ap.add_argument("--unchecked", action="store_true")
    a = ap.parse_args()
    with open(a.log) as f:
        lines = f.read().splitlines()
    try:
        n = check(lines, a)
    except (AssertionError, ValueError, IndexError) as e:
        print(f"{a.log}: {e}")
        return 1
    print(f"{a.log}: {n} rows as all_reduce_perf prints them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
