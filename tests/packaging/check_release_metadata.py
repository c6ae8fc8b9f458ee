#!/usr/bin/python3
"""Checks what a release carries besides code, against the tree's other statements of it.

  check_release_metadata.py SOURCE_ROOT

  - LICENSE is the BSD-3-Clause text that debian/copyright quotes (the same clauses, word for word
    after folding whitespace), with a copyright line for the inagg authors and a year; meson.build
    says BSD-3-Clause too;
  - the maintainer is one name and address everywhere (debian/control's Maintainer, every
    debian/changelog trailer), and that address is no placeholder: no reserved example or test
    domain (RFC 2606, RFC 6761), no noreply address;
  - debian/changelog is a history: each entry's version above the next one's (dpkg's order) and
    its date no earlier, the newest at meson's project version; CHANGELOG.md has the same
    versions, newest first, each under "## X.Y.Z — YYYY-MM-DD" with its entry's date, under an
    optional "## Unreleased" at the top.
Then it plants a mistake of each kind in copies and checks each is reported
(a check that cannot fail proves nothing). Exit 0 when all hold; 1 with one line per problem."""
import datetime
import email.utils
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Domains that cannot be anyone's mail (RFC 2606 and RFC 6761), and addresses that take no mail.
PLACEHOLDER_DOMAIN = re.compile(r"(^|\.)(example|invalid|test|localhost|local)$|(^|\.)example\.(com|net|org)$")
NOREPLY = re.compile(r"no-?reply", re.IGNORECASE)


def words(text):
    return " ".join(text.split())


def license_clauses_of_copyright(text):
    """The body of debian/copyright's stand-alone 'License: BSD-3-Clause' paragraph, unfolded."""
    m = re.search(r"^License: BSD-3-Clause\n((?: .*\n?)+)", text, re.MULTILINE)
    if not m:
        return None
    lines = [line[1:] for line in m.group(1).splitlines()]
    return words("\n".join("" if line == "." else line for line in lines))


def license_clauses_of_license(text):
    """LICENSE from its first clause ('Redistribution and use ...') to the end, unfolded."""
    start = text.find("Redistribution and use")
    return words(text[start:]) if start >= 0 else None


def maintainers(root):
    """(where, 'Name <address>') for debian/control's Maintainer and every changelog trailer."""
    found = []
    with open(os.path.join(root, "debian/control"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("Maintainer:"):
                found.append((f"debian/control:{n}", line.split(":", 1)[1].strip()))
    with open(os.path.join(root, "debian/changelog"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^ -- (.+?>)  ", line)
            if m:
                found.append((f"debian/changelog:{n}", m.group(1)))
    return found


def debian_entries(root):
    """[(version, date, line)] of debian/changelog, in the file's order."""
    entries, version, at = [], None, 0
    with open(os.path.join(root, "debian/changelog"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^inagg \(([^)]+)\) ", line)
            if m:
                version, at = m.group(1), n
            m = re.match(r"^ -- .+?>  (.+)$", line)
            if m and version:
                entries.append((version, email.utils.parsedate_to_datetime(m.group(1)), at))
                version = None
    return entries


def version_greater(a, b):
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b]).returncode == 0


def check_history(root):
    problems = []
    entries = debian_entries(root)
    if not entries:
        return ["debian/changelog: no entries"]
    for (v1, d1, n1), (v2, d2, n2) in zip(entries, entries[1:]):
        if not version_greater(v1, v2):
            problems.append(f"debian/changelog:{n1}: {v1} is not above the next entry's {v2} (line {n2})")
        if d1 < d2:
            problems.append(f"debian/changelog:{n1}: {v1}'s date {d1:%Y-%m-%d} is before {v2}'s {d2:%Y-%m-%d}")
    with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
        m = re.search(r"version\s*:\s*'([^']+)'", f.read())
    if not m or m.group(1) != entries[0][0]:
        problems.append(f"debian/changelog's newest entry is {entries[0][0]} but meson.build's project version is "
                        f"{m.group(1) if m else '?'} (add an entry, or bump the version)")
    path = os.path.join(root, "CHANGELOG.md")
    if not os.path.isfile(path):
        return problems + ["CHANGELOG.md: missing (the user-facing history, newest first)"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    heads = re.findall(r"^## (\S+) — (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    # "## Unreleased" may open the history (what changed since the last version), nowhere else.
    all_heads = re.findall(r"^## .*$", text, re.MULTILINE)
    odd = [h for i, h in enumerate(all_heads)
           if not re.fullmatch(r"## \S+ — \d{4}-\d{2}-\d{2}", h) and not (i == 0 and h == "## Unreleased")]
    problems += [f"CHANGELOG.md: '{h}' is not '## X.Y.Z — YYYY-MM-DD'" +
                 (" ('## Unreleased' only as the first heading)" if h == "## Unreleased" else "") for h in odd]
    want = [(v, f"{d:%Y-%m-%d}") for v, d, _ in entries]
    if heads != want:
        problems.append("CHANGELOG.md's versions and dates " + ", ".join(f"{v} {d}" for v, d in heads) +
                        " differ from debian/changelog's " + ", ".join(f"{v} {d}" for v, d in want))
    return problems


def check(root):
    problems = check_history(root)
    lic_path = os.path.join(root, "LICENSE")
    if not os.path.isfile(lic_path):
        return ["LICENSE: missing at the top of the tree (debian/copyright says BSD-3-Clause: add its text)"]
    with open(lic_path, encoding="utf-8") as f:
        lic = f.read()
    with open(os.path.join(root, "debian/copyright"), encoding="utf-8") as f:
        copyright_text = f.read()
    want = license_clauses_of_copyright(copyright_text)
    have = license_clauses_of_license(lic)
    if want is None:
        problems.append("debian/copyright: no stand-alone 'License: BSD-3-Clause' paragraph")
    elif have != want:
        at = next((i for i, (a, b) in enumerate(zip(have or "", want)) if a != b), min(len(have or ""), len(want)))
        problems.append(f"LICENSE: its clauses differ from debian/copyright's BSD-3-Clause text near "
                        f"'{(have or '')[max(0, at - 30):at + 30]}' (want '{want[max(0, at - 30):at + 30]}')")
    if not re.search(r"^Copyright \(c\) 20\d\d(-20\d\d)?, the inagg authors$", lic, re.MULTILINE):
        problems.append("LICENSE: no line 'Copyright (c) YEAR, the inagg authors'")
    if not re.search(r"^Copyright: 20\d\d(-20\d\d)? the inagg authors$", copyright_text, re.MULTILINE):
        problems.append("debian/copyright: no 'Copyright: YEAR the inagg authors' line")
    with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
        if not re.search(r"license\s*:\s*'BSD-3-Clause'", f.read()):
            problems.append("meson.build: project() does not say license : 'BSD-3-Clause'")

    found = maintainers(root)
    if not found:
        problems.append("debian/control: no Maintainer field")
    names = sorted({who for _, who in found})
    if len(names) > 1:
        problems.append("the maintainer differs between " +
                        "; ".join(f"{where} '{who}'" for where, who in found if who != found[0][1]) +
                        f" and {found[0][0]} '{found[0][1]}' (use one name and address)")
    for where, who in found:
        m = re.fullmatch(r"(.+) <([^@<>\s]+)@([^@<>\s]+)>", who)
        if not m:
            problems.append(f"{where}: '{who}' is not 'Name <user@domain>'")
            continue
        domain = m.group(3).lower()
        if PLACEHOLDER_DOMAIN.search(domain) or NOREPLY.search(m.group(2) + "@" + domain):
            problems.append(f"{where}: '{who}' is a placeholder address (a reserved or noreply domain): "
                            "use the project's address")
    return problems


def planted(root):
    """Mistakes planted in a copy, each of which check() must report."""
    misses = []
    with tempfile.TemporaryDirectory(prefix="inagg-release-meta.") as tmp:
        copy = os.path.join(tmp, "tree")
        os.makedirs(os.path.join(copy, "debian"))
        for f in ("LICENSE", "meson.build", "debian/control", "debian/changelog", "debian/copyright", "CHANGELOG.md"):
            shutil.copy(os.path.join(root, f), os.path.join(copy, f))
        plants = [
            ("LICENSE", "Neither the name", "The name", "LICENSE: its clauses differ"),
            ("debian/control", "Maintainer: ", "Maintainer: someone <a@b.example>\nX-Was: ",
             "placeholder address"),
            ("debian/changelog", "\n -- ", "\n -- Someone Else <se@inagg.dev>  \n\n -- ", "the maintainer differs"),
            ("meson.build", "version : '", "version : '9", "meson.build's project version"),
            ("CHANGELOG.md", " — 2026-12-02\n", " — 2026-12-01\n", "CHANGELOG.md's versions and dates"),
            ("CHANGELOG.md", "## 0.5.0 — ", "## Unreleased\n\n## 0.5.0 — ", "only as the first heading"),
            ("debian/changelog", "inagg (0.2.0)", "inagg (0.0.9)", "is not above the next entry's"),
        ]
        for path, old, new, expect in plants:
            full = os.path.join(copy, path)
            with open(full, encoding="utf-8") as f:
                orig = f.read()
            with open(full, "w", encoding="utf-8") as f:
                f.write(orig.replace(old, new, 1))
            if not any(expect in p for p in check(copy)):
                misses.append(f"planted mistake in {path} ('{old.strip()}' -> '{new.strip()}') was not reported "
                              f"as '{expect}'")
            with open(full, "w", encoding="utf-8") as f:
                f.write(orig)
    return misses


def main():
    root = sys.argv[1]
    problems = check(root)
    if not problems:
        problems = planted(root)
    for p in problems:
        print(p)
    if not problems:
        who = maintainers(root)[0][1]
        print(f"ok: LICENSE is debian/copyright's BSD-3-Clause; maintainer '{who}' everywhere; "
              f"{len(debian_entries(root))} versions in debian/changelog and CHANGELOG.md; planted mistakes caught")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
