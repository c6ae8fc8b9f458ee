#!/usr/bin/python3
"""The figures quoted outside bench/README.md come from bench/README.md's table of current figures.

  check_doc_figures.py SOURCE_ROOT

Reads README.md, docs/**/*.md and the string literals of src/** (what the programs print and log)
for figures: a number or a range with a unit of throughput or cost (Gbps, Gbit/s, Mbit/s, Mpps,
G/s, GB/s, ns a packet, ...) or a ratio written as 1.3x. Each one's number (or range, "a-b" and
"a–b" alike) must appear, as a number of its own, in the table under "## Current figures" in
bench/README.md (its figure, compares or measured column, not the target); where it does not, quote the row that is there or drop the figure, and when a
benchmark is run again, change the table and then what quotes it. A range is looked for whole;
"2 x window" (a product) is no figure. Also: a date in those files and in bench/README.md carries
its year (2026-12-05, not 12-05).
Then it plants a figure that is not in the table, a log message with one and a date without a
year in copies, and checks that each is reported (a check that cannot fail proves nothing).
Exit 0 when all hold; 1 with one line per problem (file:line: the figure)."""
import glob
import os
import re
import sys
import tempfile

NUM = r"\d+(?:\.\d+)?"
VALUE = rf"{NUM}(?:\s*[–-]\s*{NUM})?"
UNITS = (r"Gbps|Mbps|Gbit/s|Mbit/s|Gb/s|GB/s|G/s|Mpps|kpps|ns/packet|ns per packet|ns a packet|"
         r"ns each|µs a packet|µs per packet")
FIGURE = re.compile(rf"(?<![\w.%/-])({VALUE})\s?(?:{UNITS})(?![\w/])|(?<![\w.%/-])({VALUE})x(?![\w])")
# MM-DD not after a year; not a range of numbers such as 10-20%.
DATE = re.compile(r"(?<![\d-])(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\d%-])")
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def normal(value):
    return re.sub(r"\s*[–-]\s*", "–", value)


def current_table(root):
    """The first table under '## Current figures' in bench/README.md, without its target column
    (a target is no measurement: "measured 1.3x" must not pass on a target of "≥ 1.3x")."""
    path = os.path.join(root, "bench/README.md")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = lines.index("## Current figures")
    except ValueError:
        return None
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            cells = line.strip().strip("|").split(" | ")
            rows.append(" | ".join(cells[:3]))
            seen = True
        elif seen:
            break
    return normal("\n".join(rows)) if rows else None


def in_table(value, table):
    return re.search(r"(?<![\d.–])" + re.escape(normal(value)) + r"(?![\d]|\.\d|–\d)", table) is not None


def texts(root):
    """(path, line number, text) of what is checked: documents whole, sources' string literals."""
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs/**/*.md"), recursive=True))
    for path in docs:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                yield path, n, line, True
    sources = sorted(p for ext in ("cpp", "hpp", "c", "h")
                     for p in glob.glob(os.path.join(root, f"src/**/*.{ext}"), recursive=True))
    for path in sources:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                code = line.split("//", 1)[0] if '"' not in line.split("//", 1)[0] else line
                for m in STRING.finditer(code):
                    if "%" in m.group(1) and re.search(r"%[-+ #0]*\d*[xX]", m.group(1)):
                        literal = re.sub(r"%[-+ #0]*\d*[xX]", "", m.group(1))
                    else:
                        literal = m.group(1)
                    yield path, n, literal, False


def check(root):
    problems = []
    table = current_table(root)
    if table is None:
        return ["bench/README.md: no table under '## Current figures'"]
    figures = 0
    for path, n, text, is_doc in texts(root):
        where = f"{os.path.relpath(path, root)}:{n}"
        for m in FIGURE.finditer(text):
            value = m.group(1) or m.group(2)
            if not m.group(1) and re.fullmatch(r"0+", value):
                continue  # "0x": hexadecimal, not a ratio
            figures += 1
            if not in_table(value, table):
                problems.append(f"{where}: '{m.group(0)}' is not in bench/README.md's current figures "
                                "(quote the row that is there, or drop it)")
        if is_doc:
            for m in DATE.finditer(text):
                problems.append(f"{where}: the date '{m.group(0)}' has no year (write 2026-{m.group(0)})")
    bench = os.path.join(root, "bench/README.md")
    with open(bench, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in DATE.finditer(line):
                problems.append(f"bench/README.md:{n}: the date '{m.group(0)}' has no year (write 2026-{m.group(0)})")
    return problems, figures


def planted(root):
    """Copies of the checked files with one mistake each; each must be reported."""
    misses = []
    plants = [
        ("README.md", "\nOne lcore aggregates 123.4 Gbps.\n", "'123.4 Gbps'"),
        ("README.md", "\nTwo shards gain 9.87x.\n", "'9.87x'"),
        ("docs/planted.md", "Measured on 11-30.\n", "the date '11-30'"),
        ("src/planted.cpp", 'log("sharded over lcores: from 0.61x to 4.56x one lcore");\n', "'4.56x'"),
    ]
    for rel, text, expect in plants:
        with tempfile.TemporaryDirectory(prefix="inagg-figures.") as tmp:
            for f in ["README.md", "bench/README.md"]:
                os.makedirs(os.path.dirname(os.path.join(tmp, f)) or tmp, exist_ok=True)
                with open(os.path.join(root, f), encoding="utf-8") as src, \
                        open(os.path.join(tmp, f), "w", encoding="utf-8") as dst:
                    dst.write(src.read())
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)) or tmp, exist_ok=True)
            with open(os.path.join(tmp, rel), "a", encoding="utf-8") as f:
                f.write(text)
            found, _ = check(tmp)
            if not any(expect in p for p in found):
                misses.append(f"planted {text.strip()!r} in {rel} was not reported as {expect}")
    return misses


def main():
    root = sys.argv[1]
    problems, figures = check(root)
    if not problems:
        problems = planted(root)
    for p in problems:
        print(p)
    if not problems:
        print(f"ok: {figures} figures in README.md, docs/ and the sources' messages, each in bench/README.md's "
              "current figures; every date has its year; planted mistakes caught")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
