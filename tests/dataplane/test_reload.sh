#!/usr/bin/env bash
# A reload (SIGHUP) under a running job: inagg reads its command line and --config file again,
# checks every file they name, and applies all or nothing while the datapath lcores go on.
#  1. A tenant added to the tenants file is accepted on the TCP listener afterwards (refused
#     before); the metrics endpoint moved to another address answers there, and the old one is
#     closed; a log level in the config takes effect; an option only a restart applies is named in
#     a warning, a removed option's old default (job-lcores = 1) only as ignored. The job stays active and keeps aggregating the looping capture. The metrics then
#     move to every address on the port they listen on (the old listener closes first).
#  2. A broken tenants file, a config file with an unknown key, a broken binding table, an unknown
#     log level: "reload refused, nothing changed", naming the file and line; the tenants and log
#     levels before them still hold.
#  3. The log level taken out of the config again: back to what it was at the start.
# Each reload is RELOADING=1 then READY=1 on $NOTIFY_SOCKET (systemd's reload protocol).
#   test_reload.sh INAGG INAGG_CTL SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 src=$3
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" reload
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
B() { "$ctl" --socket "tcp://127.0.0.1:$tcp_port" --control-secret-file "$tmp/bob.cred" "$@"; }
listener=""
trap '[ -n "$listener" ] && kill "$listener" 2>/dev/null; appliance_cleanup' EXIT

alice=$(head -c 24 /dev/urandom | base64) bob=$(head -c 24 /dev/urandom | base64)
echo "alice 100-199 prefixes=10.77.0.1 $alice" >"$tmp/tenants"
echo "bob $bob" >"$tmp/bob.cred"
chmod 600 "$tmp/tenants" "$tmp/bob.cred"
conf() {  # conf [EXTRA LINE...]: the config file
  {
    echo "control-tcp = 127.0.0.1:0"
    echo "control-secret-file = $tmp/tenants"
    echo "metrics = $metrics"
    echo "drain-us = $drain"
    printf '%s\n' "$@"
  } >"$tmp/inagg.conf"
}
metrics=127.0.0.1:0 drain=100
conf

# The service manager's end of $NOTIFY_SOCKET: each datagram on a line of its own.
/usr/bin/python3 "$src/tests/lib/notify_listener.py" "$tmp/notify.sock" "$tmp/notify.txt" &
listener=$!
wait_for 5 "the notify listener" test -e "$tmp/notify.sock.ready" || fail "the notify listener did not start"
readies() { grep -c "^READY=1" "$tmp/notify.txt" 2>/dev/null; }
# readies_above N: more than N READY=1 lines so far (a function, so each look counts them again).
readies_above() { [ "$(readies)" -gt "$1" ]; }
# reload WHAT: SIGHUP, then the next READY=1 (a reload answered, applied or not).
reload() {
  local before
  before=$(readies)
  kill -HUP "$pid"
  wait_alive "$pid" 10 "READY=1 after the reload ($1)" readies_above "$before" ||
    fail "no READY=1 after the reload ($1): $(cat "$tmp/notify.txt")"
  tail -n 1 "$tmp/notify.txt" | grep -q "^READY=1|STATUS=forwarding on 2 ports$" || fail "READY=1's line: $(tail -n 2 "$tmp/notify.txt")"
  tail -n 2 "$tmp/notify.txt" | head -n 1 | grep -q "^RELOADING=1|STATUS=reloading|MONOTONIC_USEC=[0-9]*$" ||
    fail "no RELOADING=1 before READY=1: $(tail -n 3 "$tmp/notify.txt")"
}
log_lines() { grep -c "$1" "$tmp/log"; }
scrape() { /usr/bin/python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://$1/metrics"; }

NOTIFY_SOCKET=$tmp/notify.sock
export NOTIFY_SOCKET
start_pcap_appliance --config "$tmp/inagg.conf"
unset NOTIFY_SOCKET
wait_alive "$pid" 10 "READY=1" readies_above 0 || fail "no READY=1 at the start: $(cat "$tmp/notify.txt")"
tcp_port=$(sed -n 's/.*control requests over TCP on 127.0.0.1:0 (port \([0-9]*\)).*/\1/p' "$tmp/log")
metrics_at=$(sed -n 's|.*metrics at http://\(127.0.0.1:[0-9]*\)/metrics.*|\1|p' "$tmp/log")
[ -n "$tcp_port" ] && [ -n "$metrics_at" ] || fail "the log names no TCP or metrics port"
C add "$tmp/job.job" >/dev/null || fail "add the job"
aggregated() { C stats 1 | awk '$1 == "aggregated_packets" {print $2}'; }
advancing() { [ "$(aggregated)" -gt "$1" ]; }
wait_for 10 "job 1 to aggregate" advancing 0 || fail "job 1: $(C stats 1 2>&1 | head -n 5)"
out=$(B list 2>&1) && fail "bob was accepted before he is a tenant: $out"
grep -q "wrong credential" <<<"$out" || fail "bob's refusal before the reload: $out"
scrape "$metrics_at" | grep -q "^inagg_build_info" || fail "no metrics at $metrics_at"

# 1. Bob added, the metrics elsewhere, control's log at warnings, a restart-only option changed,
# a removed option's old default set.
echo "bob 200-299 prefixes=10.77.0.3 $bob" >>"$tmp/tenants"
metrics=127.0.0.2:0 drain=50
conf "log-level = inagg.control:warning" "job-lcores = 1"
before=$(aggregated)
reload "bob added"
grep -q "inagg: reloaded $tmp/inagg.conf: listeners, tenants" "$tmp/log" || fail "no 'reloaded' line"
grep -q "inagg: the metrics endpoint moved from 127.0.0.1:0 to 127.0.0.2:0 (reload)" "$tmp/log" || fail "the metrics did not move"
grep -q "inagg: reload: --drain-us changed, which only a restart applies" "$tmp/log" || fail "no warning for --drain-us"
grep -q "job-lcores 1 is ignored: the option was removed" "$tmp/log" || fail "no warning that job-lcores = 1 is ignored"
grep -q "job-lcores changed" "$tmp/log" && fail "job-lcores = 1, which changes nothing, was taken for a change only a restart applies"
out=$(B list 2>&1) || fail "bob is refused after the reload: $out"
grep -q "no jobs" <<<"$out" || fail "bob sees another tenant's job: $out"
new_metrics=$(sed -n 's|.*metrics at http://\(127.0.0.2:[0-9]*\)/metrics.*|\1|p' "$tmp/log")
scrape "$new_metrics" | grep -q "^inagg_build_info" || fail "no metrics at the new address $new_metrics"
scrape "$metrics_at" >/dev/null 2>&1 && fail "the old metrics endpoint $metrics_at still answers"
C list | grep -q "^id=1 state=active" || fail "job 1 is not active after the reload: $(C list)"
wait_for 10 "job 1 to aggregate after the reload" advancing "$before" || fail "job 1 stopped aggregating: $(C stats 1 | head -n 5)"

# The metrics on a port of their own, then on every address at that port: the new address takes
# the old one's port, so the old listener closes first.
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics=127.0.0.2:$port
conf  # inagg.control at info again once this reload is through: the next one's lines are logged
reload "metrics on port $port"
scrape "127.0.0.2:$port" | grep -q "^inagg_build_info" || fail "no metrics at 127.0.0.2:$port"
metrics=0.0.0.0:$port
conf "log-level = inagg.control:warning"
reload "metrics on every address"
grep -q "reload refused" "$tmp/log" && fail "moving the metrics to every address on their port: $(grep 'reload refused' "$tmp/log")"
grep -q "inagg: the metrics endpoint: 0.0.0.0:$port takes the port of 127.0.0.2:$port, which closes first (reload)" "$tmp/log" ||
  fail "the old metrics listener did not close first: $(grep 'metrics' "$tmp/log" | tail -n 3)"
scrape "127.0.0.1:$port" | grep -q "^inagg_build_info" || fail "no metrics at 127.0.0.1:$port after the move to 0.0.0.0:$port"

# 2. A broken tenants file: refused, nothing changed. (inagg.control at warning: the "reloading"
# info line is not logged.)
infos=$(log_lines "inagg: reloading ")
cp "$tmp/tenants" "$tmp/tenants.good"
echo "carol 300-399 prefixes=10.77.0.5 short" >>"$tmp/tenants"
reload "broken tenants file"
grep -q "inagg: reload refused, nothing changed: control over TCP: $tmp/tenants: line 3: " "$tmp/log" ||
  fail "the refusal does not name the tenants file and line: $(grep 'reload refused' "$tmp/log")"
[ "$(log_lines "inagg: reloading ")" = "$infos" ] || fail "an info line of inagg.control was logged at level warning"
B list >/dev/null 2>&1 || fail "bob lost his access to a refused reload"
cp "$tmp/tenants.good" "$tmp/tenants"
conf "log-level = inagg.control:warning" "no-such-option = 1"
reload "unknown key in the config"
grep -q "inagg: reload refused, nothing changed: $tmp/inagg.conf:6: " "$tmp/log" ||
  fail "the refusal does not name the config file and line: $(grep 'reload refused' "$tmp/log" | tail -n 1)"
echo "10.77.0.1 99 not-a-mac" >"$tmp/bindings"
conf "log-level = inagg.control:warning" "bindings = $tmp/bindings"
reload "broken binding table"
grep -q "inagg: reload refused, nothing changed: --bindings: $tmp/bindings: line 1: " "$tmp/log" ||
  fail "the refusal does not name the binding table and line: $(grep 'reload refused' "$tmp/log" | tail -n 1)"
conf "log-level = inagg.control:loud"
reload "unknown log level"
grep -q "inagg: reload refused, nothing changed: --log-level: 'inagg.control:loud': the level must be" "$tmp/log" ||
  fail "the refusal does not name the log level: $(grep 'reload refused' "$tmp/log" | tail -n 1)"
B list >/dev/null 2>&1 || fail "bob lost his access to the refused reloads"

# 3. The log level out of the config: inagg.control logs its info lines again (from the next
# reload's on: a reload's own lines are logged at the levels it was asked under).
conf
reload "log level reset"
reload "at the start's log levels"
[ "$(log_lines "inagg: reloading ")" -gt "$infos" ] || fail "inagg.control's level did not go back to info"
before=$(aggregated)
wait_for 10 "job 1 to aggregate after the reloads" advancing "$before" || fail "job 1 stopped aggregating"
C list | grep -q "^id=1 state=active" || fail "job 1 is not active after the reloads: $(C list)"

stop_appliance
grep -qi "sanitizer" "$tmp/log" && fail "sanitizer report"
echo "ok: reloads applied tenants, listeners, log levels all or nothing while job 1 kept aggregating"
