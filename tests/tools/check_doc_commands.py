#!/usr/bin/python3
"""Checks the commands and links in README.md and docs/*.md against the tree, without running
anything that needs root or a network.

  check_doc_commands.py SOURCE_ROOT [PROGRAM...]

PROGRAM: the built inagg, inagg-ctl, inagg-worker, inagg-xdp, inagg-decode (their --help is the
reference for their options). For every ```sh block:
  - every path into the repository a command names (scripts/..., conf/..., tests/..., ...)
    exists; a program under build/src/apps/ is one of the built programs;
  - a script's subcommand ("scripts/rack up") and every option it is given appear in the script's
    usage (its leading comment block, or its docstring);
  - every option given to a built program (after "--" for inagg, whose options before it are
    EAL's) appears in that program's --help, and a subcommand of inagg-ctl or inagg-xdp too.
For every ```python block, each inagg.NAME / inagg.torch.NAME exists in python/inagg.
For every relative Markdown link, the file exists and, with #anchor, the heading does.
Then it plants one mistake of each kind in a copy of the README and checks that each is reported
(a check that cannot fail proves nothing).
Exit 0 when all hold; 1 with one line per problem (file:line: what, and what was expected)."""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

REPO_DIRS = ("scripts/", "bench/", "docker/", "tests/", "conf/", "examples/", "pktgen_profiles/", "python/",
             "debian/", "systemd/", "docs/", "include/", "src/")
APPS = ("inagg", "inagg-ctl", "inagg-worker", "inagg-xdp", "inagg-decode")
# Commands whose first word is a wrapper around the command that follows.
WRAPPERS = {"sudo": 0, "nice": 0, "exec": 0, "env": 0, "timeout": 1, "time": 0}
SHELL_WORDS = {"for", "do", "done", "while", "until", "if", "then", "else", "fi", "in", "!", "[", "[[", "{", "}"}

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def usage_text(path):
    """A script's usage: its leading comment block (shell) or its module docstring (Python)."""
    text = open(path, encoding="utf-8").read()
    if text.startswith("#!/usr/bin/python3") or path.endswith(".py"):
        m = re.search(r'"""(.*?)"""', text, re.S)
        return (m.group(1) if m else "") + "\n" + "\n".join(re.findall(r"add_argument\(([^)]*)\)", text))
    lines = []
    for line in text.splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def has_option(text, opt):
    return re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", text) is not None


def help_of(programs, name):
    exe = programs.get(name)
    if not exe:
        return None
    args = [exe, "--", "--help"] if name == "inagg" else [exe, "--help"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    if "sage" not in text:
        problem(name, f"'{' '.join(args)}' printed no usage (exit {out.returncode}): {text[:200]!r}")
    return text


def logical_lines(block):
    """Joins backslash continuations and drops comments; yields (offset, text)."""
    buf, start = "", None
    for i, line in enumerate(block):
        if start is None:
            start = i
        stripped = re.sub(r"(^|\s)#.*$", "", line) if not line.lstrip().startswith("#!") else ""
        if stripped.rstrip().endswith("\\"):
            buf += stripped.rstrip()[:-1] + " "
            continue
        buf += stripped
        if buf.strip():
            yield start, buf
        buf, start = "", None


def split_top_level(line):
    """The line cut at every ; & | ( ) outside quotes: (text, the separator after it). A command
    substitution $( ... ) stays in its command as the word SUBST; its own commands come first."""
    parts, cur, quote, i = [], "", None, 0
    while i < len(line):
        c = line[i]
        if quote:
            cur += c
            if c == quote:
                quote = None
        elif c in "'\"":
            quote, cur = c, cur + c
        elif c == "$" and line[i + 1:i + 2] == "(":
            depth, j, q = 1, i + 2, None
            while j < len(line) and depth:
                if q:
                    q = None if line[j] == q else q
                elif line[j] in "'\"":
                    q = line[j]
                elif line[j] == "(":
                    depth += 1
                elif line[j] == ")":
                    depth -= 1
                j += 1
            parts.extend(split_top_level(line[i + 2:j - 1]))
            cur, i = cur + "SUBST", j
            continue
        elif c in ";&|()":
            if c in "&|" and line[i + 1:i + 2] == c:
                c, i = c + c, i + 1
            parts.append((cur, c))
            cur = ""
        else:
            cur += c
        i += 1
    parts.append((cur, ""))
    return parts


def simple_commands(line):
    """Splits a shell line into simple commands (by ; && || | & and $( ... ))."""
    for part, sep in split_top_level(line):
        try:
            words = shlex.split(part)
        except ValueError as e:
            yield None, str(e), sep
            continue
        while words and (words[0] in SHELL_WORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
            if words[0] in ("for", "while", "until"):
                words = []
                break
            words = words[1:]
        if words[:3] == ["ip", "netns", "exec"]:
            words = words[4:]
        while words and words[0] in WRAPPERS:
            words = words[1 + WRAPPERS[words[0]]:]
        if words:
            yield words, None, sep


def check_repo_path(root, where, word):
    if any(c in word for c in "$<>") or "NAME" in word or "PATH" in word:
        return
    path = word.split("=", 1)[-1].rstrip(".,:;")
    if not path.startswith(REPO_DIRS):
        return
    if "*" in path:
        if not glob.glob(os.path.join(root, path)):
            problem(where, f"'{path}' matches no file in the repository")
    elif not os.path.exists(os.path.join(root, path)):
        problem(where, f"'{path}' does not exist in the repository")


def check_options(where, prog, words, reference, what):
    for w in words:
        if w == "--":
            break
        if re.match(r"^--?[A-Za-z]", w):
            opt = w.split("=", 1)[0]
            if not has_option(reference, opt):
                problem(where, f"{prog}: option {opt} is not in {what}")


def check_command(root, programs, helps, where, words):
    prog, args = words[0], words[1:]
    for w in words:
        check_repo_path(root, where, w)
    app = None
    if prog.startswith("build/src/apps/") or prog.startswith("build-asan/src/apps/"):
        app = os.path.basename(prog)
        if app not in APPS:
            problem(where, f"'{prog}' is not a program the build makes ({', '.join(APPS)})")
            return
    elif prog in APPS:
        app = prog
    if app:
        if app not in helps:
            helps[app] = help_of(programs, app)
        ref = helps[app]
        if ref is None:
            return
        if app == "inagg":
            if "--" not in args:
                return
            args = args[args.index("--") + 1:]
        check_options(where, app, args, ref, f"'{app} --help'")
        positional = [a for a in args if not a.startswith("-")]
        if app in ("inagg-ctl", "inagg-xdp") and positional:
            # The subcommand is the first word that is not an option's value.
            sub = next((a for i, a in enumerate(args) if not a.startswith("-") and
                        (i == 0 or not args[i - 1].startswith("--") or "=" in args[i - 1])), None)
            if sub and re.match(r"^[a-z][a-z-]*$", sub) and not has_option(ref, sub):
                problem(where, f"{app}: subcommand '{sub}' is not in '{app} --help'")
        return
    if prog.startswith(REPO_DIRS):
        path = os.path.join(root, prog)
        if not os.path.isfile(path):
            return  # already reported by check_repo_path
        if not os.access(path, os.X_OK):
            problem(where, f"'{prog}' is not executable")
            return
        usage = usage_text(path)
        if not usage.strip():
            problem(where, f"'{prog}' has no usage text (a leading comment block or a docstring)")
            return
        check_options(where, prog, args, usage, f"its usage (the comment at the top of {prog})")
        if args and re.match(r"^[a-z][a-z-]*$", args[0]) and not has_option(usage, args[0]):
            problem(where, f"{prog}: subcommand '{args[0]}' is not in its usage")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, inblock = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            inblock = not inblock
        elif not inblock and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def check_links(root, md, lines):
    inblock = False
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            inblock = not inblock
            continue
        if inblock:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), file)) if file else md
            where = f"{os.path.relpath(md, root)}:{n}"
            if not os.path.exists(dest):
                problem(where, f"link to '{target}': no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problem(where, f"link to '{target}': no heading with that anchor in {os.path.relpath(dest, root)}")


def check_python(root, where, code):
    sources = ""
    for f in glob.glob(os.path.join(root, "python", "inagg", "*")):
        if f.endswith((".py", ".cpp")):
            sources += open(f, encoding="utf-8").read()
    for mod, name in re.findall(r"(?<![\w/.-])inagg\.(torch\.)?([A-Za-z_]\w*)", code):
        if name == "torch" and not mod:
            continue
        if not re.search(r"(def |class |\")" + re.escape(name) + r"\b", sources) and \
                not re.search(r"\b" + re.escape(name) + r"\s*=", sources):
            problem(where, f"inagg.{mod}{name} is not defined in python/inagg")


def check_tree(root, programs, helps):
    """Checks README.md and docs/*.md under root; returns the number of commands read."""
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    commands = 0
    for md in files:
        lines = open(md, encoding="utf-8").read().split("\n")
        check_links(root, md, lines)
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)", lines[i])
            if not m:
                i += 1
                continue
            lang, j = m.group(1), i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            block = lines[i + 1:j]
            if lang == "sh":
                commands += check_block(root, programs, helps, f"{os.path.relpath(md, root)}", i + 2, block)
            elif lang == "python":
                check_python(root, f"{os.path.relpath(md, root)}:{i + 2}", "\n".join(block))
            i = j + 1
    return len(files), commands


def check_block(root, programs, helps, name, first, block):
    commands = 0
    foreground = None  # where an appliance was started in the foreground
    server = None  # where a server (the appliance, a head's agent) was started in the background
    for off, text in logical_lines(block):
        where = f"{name}:{first + off}"
        for words, err, sep in simple_commands(text):
            if err:
                problem(where, f"cannot read the command ({err}): {text.strip()}")
                continue
            commands += 1
            check_command(root, programs, helps, where, words)
            placeholders = [w for w in words if re.match(r"^\[.+", w) and w not in ("[", "[[")]
            if placeholders:
                problem(where, f"'{placeholders[0]}': an optional part in brackets inside a command "
                        "(write the option, or describe it in a comment)")
            prog = os.path.basename(words[0])
            if sep == "&" and (prog == "inagg" or (prog == "inagg-xdp" and "run" in words)):
                server = where
            elif words == ["wait"] and server:
                problem(where, f"a bare 'wait' also waits for the server started at {server}, which never "
                        "exits: wait for the workers' PIDs")
            if prog == "inagg" and "--" in words and sep != "&" and \
                    not set(words) & {"--help", "--check-config", "--selftest", "--version", "--run-for"}:
                foreground = where
            elif prog == "inagg-worker" and foreground:
                problem(where, f"the workers start only after the appliance started at {foreground} "
                        "exits: start it in the background (&) and wait for its control socket")
                foreground = None
    return commands


# One mistake per line, each of which must be reported on its own line of the planted README.
PLANTED = [
    "scripts/rack up --workers 4 --no-such-rack-option 1",
    "scripts/rack no-such-subcommand",
    "scripts/no-such-script --help",
    "build/src/apps/inagg-no-such-program --help",
    "build/src/apps/inagg-worker --workers 4 --no-such-worker-option",
    "build/src/apps/inagg -l 0 --no-huge -- --no-such-inagg-option 1 &",
    "build/src/apps/inagg-ctl no-such-request",
    "build/src/apps/inagg -- --config conf/no-such.conf --check-config",
    "scripts/rack up --workers 4 [--rate 1gbit]",
    "build/src/apps/inagg-xdp run --iface eth0 --socket /tmp/x & wait",
]


def self_test(root, programs, helps):
    """Plants PLANTED (and a foreground appliance, a dead link, a missing Python name) in a copy."""
    global problems
    with tempfile.TemporaryDirectory(prefix="check_doc_commands.") as tmp:
        for entry in os.listdir(root):
            if entry not in ("README.md", "docs"):
                os.symlink(os.path.join(root, entry), os.path.join(tmp, entry))
        os.mkdir(os.path.join(tmp, "docs"))
        body = ["# planted", "", "```sh"] + PLANTED + [
            "build/src/apps/inagg -l 0 --no-huge -- --socket /tmp/s",
            "build/src/apps/inagg-worker --workers 4 --rank 0", "```", "",
            "[a dead link](docs/no-such-file.md) [a dead anchor](README.md#no-such-heading)", "",
            "```python", "import inagg", "inagg.NoSuchCommunicator()", "```", ""]
        open(os.path.join(tmp, "README.md"), "w", encoding="utf-8").write("\n".join(body))
        saved, problems = problems, []
        check_tree(tmp, programs, helps)
        found, problems = problems, saved
    missing = []
    for n, text in enumerate(PLANTED):
        if not any(p.startswith(f"README.md:{4 + n}:") for p in found):
            missing.append(f"line {4 + n}: {text}")
    worker, links = 4 + len(PLANTED) + 1, 4 + len(PLANTED) + 4
    if not any(p.startswith(f"README.md:{worker}:") and "background" in p for p in found):
        missing.append("a worker started after an appliance in the foreground")
    if not any(p.startswith(f"README.md:{links}:") and "no such file" in p for p in found):
        missing.append("the dead link")
    if not any(p.startswith(f"README.md:{links}:") and "anchor" in p for p in found):
        missing.append("the dead anchor")
    if not any("NoSuchCommunicator" in p for p in found):
        missing.append("the missing Python name")
    for m in missing:
        problem("self-test", f"a planted mistake went unreported: {m}")
    return len(found)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    programs = {os.path.basename(p): p for p in sys.argv[2:]}
    helps = {}
    files, commands = check_tree(root, programs, helps)
    planted = self_test(root, programs, helps)
    for p in problems:
        print(p)
    print(f"check_doc_commands: {files} files, {commands} commands, {len(problems)} problems "
          f"(self-test: {planted} reports on planted mistakes)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
