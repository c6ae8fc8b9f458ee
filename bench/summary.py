#!/usr/bin/env python3
"""Reads the closing key=value lines of several runs of one benchmark (one line per run, in the
order they ran) and prints one line: each numeric key as its median with the range over the runs,
`key=MEDIAN [MIN-MAX]`, non-numeric keys as the value most runs gave. A key missing from a run is
counted as missing (`n=` says how many runs had it), never as zero."""
import statistics
import sys


def main():
    runs = [line.split() for line in sys.stdin if "=" in line]
    if not runs:
        print("summary: no key=value line came from the runs", file=sys.stderr)
        return 1
    keys, values = [], {}
    for fields in runs:
        for f in fields:
            if "=" not in f:
                continue
            k, v = f.split("=", 1)
            if k not in values:
                keys.append(k)
                values[k] = []
            values[k].append(v)
    out = []
    for k in keys:
        vs = values[k]
        try:
            nums = [float(v) for v in vs]
        except ValueError:
            out.append(f"{k}={max(set(vs), key=vs.count)}")
            continue
        nums = [x for x in nums if x == x]  # NaN: a run that measured nothing
        if not nums:
            out.append(f"{k}=nan")
            continue
        med = statistics.median(nums)
        missing = "" if len(nums) == len(runs) else f" n={len(nums)}"
        out.append(f"{k}={med:.3g} [{min(nums):.3g}-{max(nums):.3g}]{missing}")
    print(f"runs={len(runs)} " + " ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
