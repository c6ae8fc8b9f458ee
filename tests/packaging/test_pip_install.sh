#!/usr/bin/env bash
# `pip install .` as pyproject.toml says to run it: a copy of the tree installed into a fresh venv
# of Debian's python3 that sees the system's packages (torch, meson-python), without build
# isolation or dependencies; then, from outside the tree, the venv's python imports inagg and its
# torch backend from the venv (backend "inagg" registered with torch.distributed), and pip reports
# meson's project version. A compile of the client library and both extensions in a release build
# of their own: about 8 CPU-minutes the first time, under a minute from ccache.
#   test_pip_install.sh SRCDIR VERSION
set -uo pipefail
src=$(cd "$1" && pwd) || exit 1
version=$2
fail() { echo "FAIL: $*"; exit 1; }
/usr/bin/python3 -c "import mesonpy" 2>/dev/null ||
  { echo "SKIP: meson-python is not installed (apt-get install python3-mesonpy; scripts/setup installs it)"; exit 77; }
/usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null ||
  { echo "SKIP: python3-venv is not installed (scripts/setup installs it)"; exit 77; }
tmp=$(mktemp -d /tmp/inagg-pip.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# A copy of the tree's files (tracked and new, not ignored: no build directories), so that the
# build's working directory (meson-python makes it inside the source) never lands in the tree.
mkdir -p "$tmp/inagg"
(cd "$src" && git ls-files -co --exclude-standard -z) | (cd "$src" && xargs -0 cp --parents -t "$tmp/inagg" 2>/dev/null)
[ -f "$tmp/inagg/pyproject.toml" ] || fail "copying the tree failed (is $src a git checkout with pyproject.toml?)"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv --system-site-packages"
start=$SECONDS
# Compiler cache hits across runs: paths relative to the copy, whatever its temporary name.
export CCACHE_BASEDIR="$tmp/inagg" CCACHE_NOHASHDIR=1
# INAGG_BUILD_JOBS: ninja's jobs (default: every CPU), for a machine shared with other builds.
if ! (cd "$tmp" && "$tmp/venv/bin/pip" install --no-build-isolation --no-deps \
  --config-settings=compile-args=-j"${INAGG_BUILD_JOBS:-$(nproc)}" "$tmp/inagg" >"$tmp/pip.log" 2>&1); then
  tail -n 40 "$tmp/pip.log"
  fail "pip install --no-build-isolation --no-deps . failed (the log's end is above)"
fi
echo "ok: pip install . in $((SECONDS - start)) s"

out=$(cd "$tmp" && "$tmp/venv/bin/python" -c '
import sys
import inagg, inagg.torch
import torch.distributed as dist
assert inagg.__file__.startswith(sys.prefix), (inagg.__file__, sys.prefix)
assert inagg.dtype_size("bf16") == 2 and "fp32" in inagg.DTYPES, inagg.DTYPES
assert "INAGG" in dist.Backend._plugins and dist.Backend("inagg") == "inagg", "no backend inagg in torch.distributed"
print(inagg.__file__)' 2>&1) || fail "the installed module does not import: $out"
echo "ok: imported $out; backend \"inagg\" registered"
shown=$("$tmp/venv/bin/pip" show inagg 2>/dev/null | sed -n 's/^Version: //p')
[ "$shown" = "$version" ] || fail "pip shows inagg $shown, want meson's project version $version"
files=$("$tmp/venv/bin/pip" show -f inagg | sed -n '/^Files:/,$ s/^  //p')
for f in inagg/__init__.py inagg/torch.py inagg/torchrun.py; do
  grep -qx "$f" <<<"$files" || fail "the installed package lacks $f: $files"
done
for e in _inagg _torch; do
  grep -q "^inagg/$e\.cpython-.*\.so$" <<<"$files" || fail "the installed package lacks the extension $e: $files"
done
stray=$(grep -v -e '^inagg/' -e '^inagg-.*\.dist-info/' -e '^\.\./' <<<"$files" || true)
[ -z "$stray" ] || fail "the wheel installs more than the module: $stray"
echo "ok: pip shows inagg $shown with the module and its two extensions, nothing else"
