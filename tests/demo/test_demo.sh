#!/usr/bin/env bash
# The README's main command, short (DEMO_MAX small, the fall-over step included), three times in a
# row on this build's programs: every run must pass, and a failing run must name its step.
#   test_demo.sh SRCDIR BUILDDIR
set -uo pipefail
src=$1 build=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: the demo needs root (network namespaces, veths)"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for run in 1 2 3; do
  t0=$SECONDS
  if ! DEMO_MAX=262144 DEMO_BUILD="$build" "$src/scripts/demo" >"$log" 2>&1; then
    echo "FAIL: demo run $run of 3:"
    tail -n 40 "$log"
    exit 1
  fi
  grep -q "^demo: every step passed$" "$log" || { echo "FAIL: demo run $run exited 0 without its closing line:"; tail -n 20 "$log"; exit 1; }
  grep -q "rank 0: falling over to the XDP tier" "$log" || { echo "FAIL: demo run $run: no fall-over shown:"; tail -n 20 "$log"; exit 1; }
  echo "demo run $run of 3 passed in $((SECONDS - t0)) s"
done
echo "ok: the short demo passed 3 times in a row"
