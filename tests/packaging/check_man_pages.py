#!/usr/bin/python3
"""Every program's manual page (built by help2man from its --help) shows every option of that
--help, and the JSON forms are described there: inagg-ctl's --json with top's object, inagg-xdp's
--json with status's.

  check_man_pages.py PROGRAM PAGE [PROGRAM PAGE]...

The page's roff is read as text (font changes dropped, \\- as -). Exit 0 when all hold; 1 with one
line per problem."""
import os
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*|-[A-Za-z0-9])(?=[\s,\]=])")
# What the JSON forms' descriptions must carry into the page, beside the option itself.
JSON_FORMS = {
    "inagg-ctl": ["--once", "each frame is one JSON object", '"engine"', '"jobs"'],
    "inagg-xdp": ["status --iface IF [--json]", '"programs"', '"run_count"'],
}


def roff_text(roff):
    """The words of a roff page: font changes dropped, escapes as the characters they stand for,
    each request line (".TP", ".B text") by its text alone."""
    text = re.sub(r"\\f[BIRP]", "", roff)
    text = text.replace("\\-", "-").replace("\\(dq", '"').replace("\\(aq", "'").replace("\\e", "\\")
    lines = []
    for line in text.splitlines():
        if line.startswith(("'\\\"", '.\\"')):
            continue  # a comment
        lines.append(line.split(" ", 1)[1] if line.startswith(".") and " " in line else
                     "" if line.startswith(".") else line)
    return " ".join(lines)


def main():
    args = sys.argv[1:]
    problems = []
    for prog_path, page_path in zip(args[::2], args[1::2]):
        prog = os.path.basename(prog_path)
        help_text = subprocess.run([prog_path, "--help"], capture_output=True, text=True, timeout=30).stdout
        with open(page_path, encoding="utf-8") as f:
            page = " ".join(roff_text(f.read()).split())
        options = set()
        for line in help_text.splitlines():
            if re.match(r"^\s+-", line):  # an option's own line: "  -j [ --json ]  ..."
                options.update(OPTION.findall(line.split("  ", 2)[1] if line.startswith("  ") else line))
        for opt in sorted(options):
            if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", page):
                problems.append(f"{page_path}: {prog}'s option {opt} is not in its manual page (rebuild it)")
        for phrase in JSON_FORMS.get(prog, []):
            if phrase not in page:
                problems.append(f"{page_path}: does not say '{phrase}' (its --help's JSON form)")
        if not options:
            problems.append(f"{prog}: no options found in its --help")
        print(f"{prog}: {len(options)} options in its page")
    for p in problems:
        print(p)
    if not problems:
        print(f"ok: {len(args) // 2} manual pages show every option of their --help and the JSON forms")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
