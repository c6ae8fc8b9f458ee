#!/usr/bin/env bash
# A job across racks whose spine dies mid-job: 4 workers in 2 racks (tests/lib/racks.sh), a head of
# the XDP tier on rack 0's leaf standing by, the workers in auto mode running 300 checked
# allreduces. Once the spine summed a good part of them it is killed (kill -9) and its ports are
# joined by a bridge (scripts/racks bypass spine), as a bypass NIC would: each leaf then gets the
# other rack's partial on its downlink, not the total, and writes it into its held packets. The
# tally (2, not 4) must stop every rank from taking that for a sum: each falls over to the XDP tier
# and every allreduce, before and after, is exact against the reference of the tier that summed it.
#   test_racks_spine_killed.sh INAGG INAGG_CTL INAGG_WORKER INAGG_XDP SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 xdp=$4 src=$5
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
# shellcheck source=../lib/racks.sh
. "$src/tests/lib/racks.sh"

size=(--message 16384 --payload 1024 -d float)
start_racks "${size[@]}" -- --heads 1
"$xdp" key "$tmp/job1.key" || fail "inagg-xdp key"
cat >"$tmp/head.job" <<JOB
id = 1
members = 4
values = 256
window = 8
total_weight = 4
group = 239.77.0.1
member = 0, 10.77.0.1
member = 1, 10.77.0.2
member = 2, 10.77.0.3
member = 3, 10.77.0.4
key_file = $tmp/job1.key
JOB
start_agent 0 generic "$tmp/head.job"
racks_cmd bypass spine --watch "${part_pid[spine]}" >"$tmp/bypass.log" 2>&1 &
others+=($!)

wpids=()
for r in 0 1 2 3; do
  ip netns exec "$(ns_w "$r")" "$worker" --workers 4 --rank "$r" "${size[@]}" --racks "$(racks_cmd rack-of)" --mode auto \
    --xdp-heads 10.77.0.201 --xdp-key-file "$tmp/job1.key" -b 65536 -e 65536 -n 1 -w 0 -c 300 --in-place 0 --ack-timeout-ms 50 --timeout 300 \
    >"$tmp/w$r.log" 2>&1 &
  wpids+=($!)
done
spine_released_over() { [ "$(stat "$(part_stats spine 2>/dev/null)" slots_released)" -gt "$1" ] 2>/dev/null; }
wait_for 120 "the spine to release 2000 slots" spine_released_over 2000 ||
  fail "the job never got going across the racks: $(worker_failure_hint | tr '\n' ' ')"
released=$(stat "$(part_stats spine)" slots_released)
kill -9 "${part_pid[spine]}"
wait "${part_pid[spine]}" 2>/dev/null
for r in 0 1 2 3; do
  wait "${wpids[$r]}" || fail "worker $r exited with status $? after the spine was killed (at $released slots)"
done
grep -q "bridged" "$tmp/bypass.log" || fail "the spine's ports were not bridged: $(cat "$tmp/bypass.log")"
for r in 0 1 2 3; do
  grep -q "falling over" "$tmp/w$r.log" || fail "rank $r finished without falling over to the XDP tier"
  table_exact "$tmp/w$r.log" || fail "rank $r reports wrong elements"
done
# What the leaves saw after the spine died: partials coming down where totals should.
why=$(grep -h "falling over" "$tmp/w0.log" | head -n 1)
echo "ok: spine killed after $released slots; every rank fell over to the XDP tier and every allreduce is exact; rank 0: ${why#\# }"
