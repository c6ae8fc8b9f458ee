#!/usr/bin/env bash
# systemd's watchdog: with $WATCHDOG_USEC (1 s here) and $WATCHDOG_PID set as systemd sets them,
# inagg sends WATCHDOG=1 on $NOTIFY_SOCKET every half interval while every datapath lcore runs its
# loop, idle in lab mode too (no traffic, --idle-sleep-us). The test seam $INAGG_TEST_STALL_LCORE
# then stops one lcore's loop: the log names that lcore and the pings stop (for three times their
# period, all the test waits for), until SIGTERM ends the run cleanly.
#   test_watchdog.sh INAGG LCORES STALLED_LCORE    e.g. 0,1 1 (a worker lcore), 0 0 (the main one)
set -uo pipefail
inagg=$1 lcores=$2 stalled=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" watchdog
listener=""
trap '[ -n "$listener" ] && kill "$listener" 2>/dev/null; appliance_cleanup' EXIT

# The service manager's end of $NOTIFY_SOCKET: each datagram on a line of its own.
/usr/bin/python3 "$src/tests/lib/notify_listener.py" "$tmp/notify.sock" "$tmp/notify.txt" &
listener=$!
wait_for 5 "the notify listener" test -e "$tmp/notify.sock.ready" || fail "the notify listener did not start"
pings() { grep -c "^WATCHDOG=1$" "$tmp/notify.txt"; }
# An empty capture: the lcores stay idle.
printf '\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\x01\x00\x00\x00' >"$tmp/empty.pcap"
# The subshell's PID is inagg's after exec: $WATCHDOG_PID names it, as systemd's does.
(
  export NOTIFY_SOCKET=$tmp/notify.sock WATCHDOG_USEC=1000000 WATCHDOG_PID=$BASHPID INAGG_TEST_STALL_LCORE="$stalled@3"
  exec "$inagg" -l "$lcores" --no-huge --no-pci -m 512 --file-prefix="$prefix" --log-level=lib.eal:error \
    --vdev="net_pcap0,rx_pcap=$tmp/empty.pcap,tx_pcap=/dev/null" -- --socket "" --mtu 1500 --mbufs 2048 \
    --mbuf-budget 512 --idle-sleep-us 100
) >"$tmp/log" 2>&1 &
pid=$!
stall_line="inagg: lcore $stalled has begun no loop iteration for "
wait_alive "$pid" 20 "the log to name the stalled lcore $stalled" grep -q "$stall_line" "$tmp/log" ||
  fail "no line about the stalled lcore $stalled; pings: $(pings)"
grep -q "systemd's watchdog: pinged every 0.5 s while every datapath lcore runs its loop" "$tmp/log" ||
  fail "inagg did not take \$WATCHDOG_USEC"
healthy=$(pings)
# 3 s healthy, a ping every 0.5 s: about 7; at least 4 leaves room for a slow start.
[ "$healthy" -ge 4 ] || fail "only $healthy WATCHDOG=1 while every lcore ran: $(cat "$tmp/notify.txt")"
more_pings() { [ "$(pings)" -gt "$healthy" ]; }
wait_for 2 "no ping after the stall" more_pings 2>/dev/null &&
  fail "WATCHDOG=1 went on after lcore $stalled stalled: $(tail -n 3 "$tmp/notify.txt")"
stop_appliance
grep -q "^STOPPING=1" "$tmp/notify.txt" || fail "no STOPPING=1: $(tail -n 3 "$tmp/notify.txt")"
grep -qi "sanitizer" "$tmp/log" && fail "sanitizer report"
echo "ok: $healthy WATCHDOG=1 while lcores $lcores ran, none once lcore $stalled stalled: $(grep -o "lcore $stalled has begun.*" "$tmp/log")"
