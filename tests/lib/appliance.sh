# shellcheck shell=bash
# What a test that runs one appliance needs, sourced after the test has set `src` (the source tree):
#  - tmp: a temporary directory; prefix: a DPDK --file-prefix of this run's own;
#  - pid: the appliance's PID once the test starts it (set pid=$!); on exit, that process is killed,
#    and tmp and the DPDK runtime directory of the prefix are removed, also on failure;
#  - fail MSG: prints "FAIL: MSG" and the tail of $tmp/log (the appliance's output), exits 1;
#  - start_pcap_appliance ARGS...: an appliance looping a 2-worker capture (scripts/gen-pcap) on two
#    net_pcap ports, its control socket at $tmp/ctl.sock, output in $tmp/log, ARGS after inagg's "--";
#    the job of that capture is $tmp/job.job. Waits for the socket (30 s deadline);
#  - stop_appliance: SIGTERM, its exit within 10 s and exit status 0, else fail.
#   . "$src/tests/lib/appliance.sh" NAME
# The sourcing test sets src and inagg (the appliance binary).
: "${src:?tests/lib/appliance.sh: set src before sourcing}" "${inagg:?tests/lib/appliance.sh: set inagg before sourcing}"
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
tmp=$(mktemp -d) || exit 1
prefix="inagg-$1-$$"
pid=""
appliance_cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap appliance_cleanup EXIT
fail() {
  echo "FAIL: $*"
  [ -f "$tmp/log" ] && tail -n 20 "$tmp/log"
  exit 1
}

start_pcap_appliance() {
  /usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 2 --messages 2 --replay --background 10 >/dev/null ||
    fail "gen-pcap could not write the capture"
  "$inagg" -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
    --vdev="net_pcap0,rx_pcap=$tmp/port0.pcap,infinite_rx=1" --vdev="net_pcap1,rx_pcap=$tmp/port1.pcap,infinite_rx=1" \
    -- --socket "$tmp/ctl.sock" --mtu 9000 --mbufs 8192 --mbuf-budget 2048 "$@" >"$tmp/log" 2>&1 &
  pid=$!
  wait_alive "$pid" 30 "the control socket $tmp/ctl.sock" test -S "$tmp/ctl.sock" || fail "inagg did not start"
}

stop_appliance() {
  kill -TERM "$pid"
  wait_for 10 "inagg to exit after SIGTERM" eval '! kill -0 "$pid"' || fail "inagg did not exit after SIGTERM"
  wait "$pid"
  local rc=$?
  pid=""
  [ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
}
