# shellcheck shell=bash
# Sourced by the Soft-RoCE lab tests (after they set src, and checked what they need to run):
# skips without root, QEMU or taps; makes $tmp and a DPDK prefix of the run's own ($prefix); takes
# the lab's lock (its taps and VMs have fixed names, so one lab at a time); on exit stops the
# appliance the test started ($ipid, by PID), takes the lab down and removes what the run made.
#   . "$src/tests/rxe/lab.sh" NAME LOG_LINES
#   lab_up VMS              the lab with VMS VMs, its output in $tmp/up.log (and printed)
#   wait_appliance          waits (30 s) for $ipid's control socket $tmp/ctl.sock
#   fail MSG                "FAIL: MSG", the last LOG_LINES of every $tmp/*.log, exit 1
: "${src:?tests/rxe/lab.sh: set src before sourcing}"
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
lab=$src/scripts/rxe-lab
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (taps, QEMU on them)"; exit 77; }
command -v qemu-system-x86_64 >/dev/null ||
  { echo "SKIP: qemu-system-x86_64 is missing: install qemu-system-x86 (scripts/packages.txt, scripts/setup --deps)"; exit 77; }
[ -c /dev/net/tun ] || { echo "SKIP: /dev/net/tun is missing: no taps on this host"; exit 77; }

tmp=$(mktemp -d) || exit 1
prefix="rxe-$1-$$"
lab_log_lines=$2
ipid=""
# shellcheck disable=SC2034  # the sourcing test reports times since it
started=$SECONDS
lab_cleanup() {
  if [ -n "$ipid" ]; then kill "$ipid" 2>/dev/null && wait "$ipid" 2>/dev/null; fi
  "$lab" down >/dev/null 2>&1
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f")"; tail -n "$lab_log_lines" "$f"; }; done
  exit 1
}
exec 9>/run/rxe-lab.lock
flock -w 900 9 || { echo "FAIL: another rxe-lab run held /run/rxe-lab.lock for 15 minutes"; exit 1; }
trap lab_cleanup EXIT

lab_up() {
  "$lab" up --vms "$1" >"$tmp/up.log" 2>&1 || fail "the lab did not come up: $(cat "$tmp/up.log")"
  cat "$tmp/up.log"
}

wait_appliance() {
  wait_alive "$ipid" 30 "inagg's control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" || fail "inagg did not start on the taps"
}
