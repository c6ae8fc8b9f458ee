#!/usr/bin/python3
"""Every short option means one thing across inagg's programs.

  check_short_options.py PROGRAM...

PROGRAM: the built inagg, inagg-ctl, inagg-worker, inagg-xdp, inagg-decode. Each one's --help is
read for its short options ("-j [ --json ]", boost's form) and a letter is reported when it stands
for two long options, in one program or in two, and a long option when it has two letters. The
exceptions are inagg-worker's letters from nccl-tests (all_reduce_perf), which users type from
nccl-tests' own usage and so keep their meaning there even where another program gives the letter
another one; each is listed below with the reason, and an exception that no longer applies is
reported too, so that the list stays true. inagg's EAL options (before `--`) are DPDK's and are not
in its --help. Then a conflict is planted in a copy of the help texts to check that it is found.
Exit 0 when all hold; 1 with one line per problem."""
import os
import re
import subprocess
import sys

# (letter, program, long option): a short option of inagg-worker's that nccl-tests defines, where
# another program gives the letter another meaning.
NCCL_TESTS_EXCEPTIONS = {
    ("c", "inagg-worker", "check"): "all_reduce_perf's -c; inagg's -c is --config (after --)",
    ("i", "inagg-worker", "stepbytes"): "all_reduce_perf's -i; inagg-xdp's -i is --iface",
}
SHORT = re.compile(r"^\s+-([A-Za-z0-9]) \[ --([A-Za-z0-9][A-Za-z0-9_-]*) \]")


def short_options(help_text):
    """{letter: long option} of one program's --help."""
    found = {}
    for line in help_text.splitlines():
        m = SHORT.match(line)
        if m:
            found.setdefault(m.group(1), set()).add(m.group(2))
    return found


def check(helps):
    """helps: {program: --help text}. Returns the problems, one line each."""
    problems = []
    meanings = {}  # letter -> {long option: [programs]}
    letters = {}  # long option -> {letter: [programs]}
    for prog, text in sorted(helps.items()):
        opts = short_options(text)
        if not opts:
            problems.append(f"{prog}: its --help shows no short option at all (is this boost's format still?)")
        for letter, longs in opts.items():
            if len(longs) > 1:
                problems.append(f"{prog}: -{letter} stands for {', '.join('--' + l for l in sorted(longs))}")
            for long in longs:
                meanings.setdefault(letter, {}).setdefault(long, []).append(prog)
                letters.setdefault(long, {}).setdefault(letter, []).append(prog)
    used_exceptions = set()
    for letter, longs in sorted(meanings.items()):
        if len(longs) < 2:
            continue
        # Set the nccl-tests letters aside; what is left must have one meaning.
        rest = {}
        for long, progs in longs.items():
            for prog in progs:
                if (letter, prog, long) in NCCL_TESTS_EXCEPTIONS:
                    used_exceptions.add((letter, prog, long))
                else:
                    rest.setdefault(long, []).append(prog)
        if len(rest) > 1:
            problems.append(f"-{letter} means " + " but ".join(
                f"--{long} in {', '.join(progs)}" for long, progs in sorted(rest.items())) +
                            ": give it one meaning")
    for long, by_letter in sorted(letters.items()):
        if len(by_letter) > 1:
            problems.append(f"--{long} is " + " but ".join(
                f"-{letter} in {', '.join(progs)}" for letter, progs in sorted(by_letter.items())) +
                            ": give it one letter")
    for key, why in sorted(NCCL_TESTS_EXCEPTIONS.items()):
        if key not in used_exceptions:
            letter, prog, long = key
            problems.append(f"the exception for {prog}'s -{letter} (--{long}: {why}) no longer applies: "
                            "remove it from NCCL_TESTS_EXCEPTIONS")
    return problems


def main():
    helps = {}
    problems = []
    for path in sys.argv[1:]:
        prog = os.path.basename(path)
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            problems.append(f"{prog} --help exited {r.returncode}: {r.stderr.strip()[:200]}")
        helps[prog] = r.stdout
    problems += check(helps)
    if not problems:
        # A check that cannot fail proves nothing: plant each kind of mistake.
        plants = {
            "a letter with two meanings": ("inagg-decode", "  -s [ --summary ]   planted\n", "-s means"),
            "a long option with two letters": ("inagg-decode", "  -k [ --socket ] PATH   planted\n",
                                               "--socket is"),
            "an nccl-tests letter that means something else in the worker":
                ("inagg-worker", "  -c [ --colour ]   planted\n", "-c stands for"),
        }
        for what, (prog, line, expect) in plants.items():
            planted = dict(helps)
            planted[prog] = helps[prog] + line
            if not any(expect in p for p in check(planted)):
                problems.append(f"planted {what} ({line.strip()} in {prog}) was not reported as '{expect}...'")
        stale = dict(helps)
        stale["inagg-xdp"] = helps["inagg-xdp"].replace("-i [ --iface ]", "--iface")
        if not any("no longer applies" in p for p in check(stale)):
            problems.append("a stale exception (inagg-xdp without -i) was not reported")
    for p in problems:
        print(p)
    if not problems:
        n = sum(len(short_options(t)) for t in helps.values())
        print(f"ok: {n} short options of {len(helps)} programs, one meaning each "
              f"(nccl-tests' exceptions: {', '.join('-' + k[0] for k in sorted(NCCL_TESTS_EXCEPTIONS))}); "
              "planted mistakes caught")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
