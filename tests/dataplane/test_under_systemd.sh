#!/usr/bin/env bash
# inagg as systemd runs it. Readiness: with $NOTIFY_SOCKET set (Type=notify), inagg sends READY=1
# once its ports are up and the loops forward, and STOPPING=1 when it stops. The log: with stdout
# the journal's stream (JOURNAL_STREAM names its device and inode, as systemd sets it), every log
# line starts with its syslog priority, which journald reads as the entry's level: a warning
# "<4>", an info line "<6>"; each line is written once. Without JOURNAL_STREAM (a terminal, a
# file) the lines carry no prefix.
#   test_under_systemd.sh INAGG
set -uo pipefail
inagg=$1
tmp=$(mktemp -d)
prefix="under-systemd-$$"
listener=""
cleanup() {
  [ -n "$listener" ] && kill "$listener" 2>/dev/null && wait "$listener" 2>/dev/null
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# An empty capture: no packets; --run-for ends the run.
printf '\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\x01\x00\x00\x00' >"$tmp/empty.pcap"
run() {  # run OUTFILE: inagg with a warning to say (metrics on every address) and its info lines
  timeout 60 "$inagg" -l 0 --no-huge --no-pci -m 512 --file-prefix="$prefix" \
    --vdev="net_pcap0,rx_pcap=$tmp/empty.pcap,tx_pcap=/dev/null" -- --socket "" --mtu 1500 --mbufs 2048 \
    --mbuf-budget 512 --run-for 0.5 --metrics 0.0.0.0:0 >"$1" 2>"$1.err"
}
warning="inagg: metrics listen on every address"
# The service manager's end of $NOTIFY_SOCKET: each datagram on a line of its own.
/usr/bin/python3 "$(dirname "$0")/../lib/notify_listener.py" "$tmp/notify.sock" "$tmp/notify.txt" &
listener=$!
for _ in $(seq 100); do [ -e "$tmp/notify.sock.ready" ] && break; sleep 0.05; done
[ -e "$tmp/notify.sock.ready" ] || fail "the notify listener did not start within 5 s"
: >"$tmp/journal"
NOTIFY_SOCKET=$tmp/notify.sock JOURNAL_STREAM=$(stat -c '%d:%i' "$tmp/journal") run "$tmp/journal" ||
  fail "inagg exited with $?: $(tail -n 5 "$tmp/journal" "$tmp/journal.err")"
# The listener writes each datagram as it comes: wait (up to 5 s) for the last one.
for _ in $(seq 100); do grep -q "^STOPPING=1" "$tmp/notify.txt" 2>/dev/null && break; sleep 0.05; done
[ "$(cut -d'|' -f1 "$tmp/notify.txt" | tr '\n' ' ')" = "READY=1 STOPPING=1 " ] ||
  fail "the service manager heard '$(cat "$tmp/notify.txt")', want READY=1 then STOPPING=1"
grep -q "^READY=1|STATUS=forwarding on 1 ports$" "$tmp/notify.txt" || fail "READY=1 without its status: $(cat "$tmp/notify.txt")"
[ "$(grep -c "^<4>$warning" "$tmp/journal")" = 1 ] || fail "the warning is not once with priority <4>: $(grep -F "$warning" "$tmp/journal")"
grep -q "^<6>inagg: forwarding on 1 ports" "$tmp/journal" || fail "no info line with priority <6>: $(head -n 20 "$tmp/journal")"
# (The stats block, "inagg: final stats" and its lines, is printed, not logged: journald files it
# at its default level, info.)
bare=$(grep "^inagg: \|^EAL: " "$tmp/journal" | grep -v "^inagg: final stats$")
[ -z "$bare" ] || fail "log lines without their priority: $bare"
run "$tmp/plain" || fail "inagg exited with $? without JOURNAL_STREAM: $(tail -n 5 "$tmp/plain" "$tmp/plain.err")"
[ "$(grep -c "^$warning" "$tmp/plain")" = 1 ] || fail "without the journal the warning is not once and bare: $(grep -F "$warning" "$tmp/plain")"
grep -q "^<[0-7]>" "$tmp/plain" && fail "a priority prefix outside the journal: $(grep -m3 "^<" "$tmp/plain")"
echo "ok: READY=1 and STOPPING=1 reach \$NOTIFY_SOCKET"
echo "ok: log lines carry their syslog priority on the journal's stream ($(grep -c '^<' "$tmp/journal") lines), none elsewhere"
