#!/usr/bin/env bash
# Lab mode (inagg --idle-sleep-us): on the virtual rack, with 1% loss on every worker's link,
#  1. the idle appliance's datapath lcore uses well under the CPU of a busy-polling one: both
#     measured in this run from the thread's run time (scripts/lib/cpu.sh), and the bound is loose
#     (lab < half of busy) so that a loaded machine cannot make it flake; the figures themselves
#     are bench/run idle's;
#  2. in lab mode it still forwards (UDP round trips between two workers) and a --check'ed allreduce through
#     it completes exactly, its loss recovered by the appliance's timers (resends, NAKs sent again)
#     and the workers' ACK timeouts while its lcore keeps falling asleep between bursts.
#   test_lab_mode.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
# shellcheck source=../../scripts/lib/cpu.sh
. "$src/scripts/lib/cpu.sh"

forwarding() { wait_alive "$pid" 30 "inagg to forward" grep -q "^inagg: forwarding on" "$tmp/inagg.log"; }

idle_sleep_us=0 start_rack --loss 1 --
forwarding || fail "inagg (busy-polling) did not start forwarding"
busy=$(cpu_cores "$pid" 2 rte-worker) || fail "cannot measure CPU use"
stop_inagg
idle_sleep_us=1000 start_inagg
forwarding || fail "inagg (lab mode) did not start forwarding"
grep -q "lab mode (idle sleeps up to 1000 us)" "$tmp/inagg.log" || fail "inagg does not say it runs in lab mode"
lab=$(cpu_cores "$pid" 2 rte-worker) || fail "cannot measure CPU use"
echo "idle appliance, its datapath lcore: busy-polling $busy cores, lab mode $lab cores"
# Under half of busy-polling; or, on a machine so loaded that the busy-polling lcore itself got
# little CPU, under a tenth of a core (that it slept at all is checked below from its counter).
awk -v b="$busy" -v l="$lab" 'BEGIN {exit !(l < 0.5 * b || l < 0.1)}' ||
  fail "lab mode's lcore used $lab cores idle, not under half of busy-polling's $busy"

# Bridging: UDP round trips between two workers (other UDP ports are not in the loss rules).
ip netns exec "$(ns_w 1)" /usr/bin/python3 "$src/scripts/lib/udp_rtt.py" echo 10.77.0.2 7777 30 &
others+=($!)
rtt=$(ip netns exec "$(ns_w 0)" /usr/bin/python3 "$src/scripts/lib/udp_rtt.py" ping 10.77.0.2 7777 5 2>&1) ||
  fail "no UDP round trip through the appliance in lab mode: $rtt"

run_workers 3 --message 16384 --payload 1024 -b 4 -e 300000 -f 9 -n 2 -w 0 -c 1 --ack-timeout-ms 50 --timeout 90 \
  --mode ina --register "$tmp/ctl.sock"
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats: $stats"
grep -q "^held_packets 0$" <<<"$stats" || fail "stuck slots: $stats"
recovered=$(awk '$1 == "naks_sent" || $1 == "retransmits_answered" || $1 == "resends" {s += $2} END {print s + 0}' <<<"$stats")
[ "$recovered" -gt 0 ] || fail "1% loss injected but the appliance recovered nothing: $stats"
stop_inagg
sleeps=$(grep -o "idle_sleeps [0-9]*" "$tmp/inagg.log" | awk '{s += $2} END {print s + 0}')
[ "$sleeps" -gt 0 ] || fail "inagg's lcore never slept in lab mode: $(grep '^lcore' "$tmp/inagg.log")"
echo "ok: lab mode $lab vs busy $busy cores idle; forwarding (UDP round trip $rtt ms), and a 4-worker allreduce with 1% loss exact" \
  "(appliance recovered $recovered times); the lcore slept $sleeps times"
