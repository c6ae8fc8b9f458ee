#!/usr/bin/env bash
# End to end across racks: 4 workers in 2 racks (scripts/racks: ranks 0-1 and 2-3), a leaf
# appliance per rack and a spine appliance between them, three inagg processes in lab mode. The job
# of the 4 ranks (inagg-worker --print-job) is split by inagg-ctl split into the leaves' and the
# spine's parts, each appliance started with its part (--job); the workers run a --check'ed ina
# allreduce sweep, every element against their own reference. Then from the appliances' counters:
# the spine summed every slot from one partial per rack, never a rank's own packet; the leaves
# released everything, nothing stuck; and from the inter-rack links' counters: each link carried
# one stream of the job's payload each way, not one per rank; forged WRITEs on an inter-rack
# link are dropped by the leaf and counted.
#   test_racks.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR DTYPE LOSS_PERCENT
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 dtype=$5 loss=$6
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
# shellcheck source=../lib/racks.sh
. "$src/tests/lib/racks.sh"

lossargs=()
[ "$loss" != 0 ] && lossargs=(--loss "$loss" --inter-loss "$loss")
size=(--message 16384 --payload 1024 -d "$dtype")
start_racks "${size[@]}" -- "${lossargs[@]}"
run_workers 4 "${size[@]}" --racks "$(racks_cmd rack-of)" -b 4 -e 200000 -f 7 -n 1 -w 0 -c 1 --ack-timeout-ms 200 --timeout 120 --mode ina

spine=$("$ctl" --socket "$tmp/spine.sock" stats 1) || fail "spine stats: $spine"
slots=$(stat "$spine" slots_released)
[ "${slots:-0}" -gt 0 ] || fail "the spine released nothing: $spine"
# The spine's job has 2 "ranks", the racks' uplinks: every slot it summed had 2 partials.
[ "$(stat "$spine" aggregated_packets)" = $((2 * slots)) ] ||
  fail "the spine summed $(stat "$spine" aggregated_packets) packets for $slots slots, not one partial per rack: $spine"
for part in leaf0 leaf1 spine; do
  s=$("$ctl" --socket "$tmp/$part.sock" stats 1) || fail "$part stats: $s"
  grep -q "^state active" <<<"$s" || fail "$part: job not active: $s"
  grep -q "^held_packets 0$" <<<"$s" || fail "$part: stuck slots: $s"
  [ "$(stat "$s" slots_released)" = "$slots" ] || fail "$part released $(stat "$s" slots_released) slots, the spine $slots"
done
if [ "$loss" != 0 ]; then
  recovered=0
  for part in leaf0 leaf1 spine; do
    s=$("$ctl" --socket "$tmp/$part.sock" stats 1)
    recovered=$((recovered + $(awk '$1 == "naks_sent" || $1 == "retransmits_answered" || $1 == "resends" {s += $2} END {print s + 0}' <<<"$s")))
  done
  [ "$recovered" -gt 0 ] || fail "loss injected but no appliance recovered anything"
fi
# Inter-rack bytes: each rack's link carries the uplink connection's packets up and the downlink's
# down (plus go-back-N retransmissions under loss), so about the job's payload bytes each way; one
# appliance for all ranks would carry every connection of the rack, twice that here.
bytes=$(racks_cmd bytes)
aggregated=$(stat "$spine" aggregated_bytes)
per_link=$((aggregated / 2))
while read -r _ k dir _ b _ p; do
  [ "$b" -ge "$per_link" ] || fail "rack $k $dir carried $b bytes, less than one partial per slot ($per_link): $bytes"
  [ "$b" -lt $((per_link * 2)) ] || fail "rack $k $dir carried $b bytes, as much as every connection of the rack ($((per_link * 2))): $bytes"
done <<<"$bytes"
# A hostile host on the inter-rack link into rack 0 (the link's bridge, in the namespace NAME-x)
# forges WRITEs on rack 0's downlink connection: from a source that is not the rank's, from the
# rank's source with another MAC, from it with a bad ICRC, and from it with a good ICRC far ahead of
# the window. Leaf 0 drops
# every one and counts it by kind; none reaches rank 0 (its receive counters do not move).
read -r _ _ down_src _ down_dst down_qpn down_psn < <(awk -F'[ ,]+' '$1 == "conn" && $3 == "0" {print $1, $3, $4, $5, $6, $7, $8}' "$tmp/leaf-0.job")
[ -n "${down_qpn:-}" ] || fail "no downlink connection (rank 0) in leaf-0.job: $(cat "$tmp/leaf-0.job")"
before=$("$ctl" --socket "$tmp/leaf0.sock" stats 1)
forge() { ip netns exec "$rack-x" /usr/bin/python3 "$src/tests/e2e/forge_write.py" l0 "$@" >>"$tmp/forge.log" 2>&1 || fail "forging: $(cat "$tmp/forge.log")"; }
# The rank's own MAC (scripts/rack gives rank r 02:77:00:00:00:(r+1)): the leaf bound it, so a frame
# without it is dropped before anything else is looked at.
down_mac=$(printf '02:77:00:00:00:%02x' "${down_src##*.}")
forge 10.77.0.9 "$down_dst" "$down_qpn" "$down_psn" 1024 5 good "$down_mac"
forge "$down_src" "$down_dst" "$down_qpn" "$down_psn" 1024 5 good
forge "$down_src" "$down_dst" "$down_qpn" "$down_psn" 1024 5 bad "$down_mac"
forge "$down_src" "$down_dst" "$down_qpn" $((down_psn + 100000)) 1024 5 good "$down_mac"
grew() {  # COUNTER N: leaf 0's job counter grew by at least N since `before`
  local now
  now=$("$ctl" --socket "$tmp/leaf0.sock" stats 1)
  [ $(($(stat "$now" "$1") - $(stat "$before" "$1"))) -ge "$2" ]
}
for c in drop_wrong_source drop_wrong_mac bad_icrc err_ahead_of_window; do
  wait_for 10 "leaf 0 to count 5 forged packets as $c" grew "$c" 5 || fail "leaf 0 did not count the forged packets as $c: $("$ctl" --socket "$tmp/leaf0.sock" stats 1)"
done
after=$("$ctl" --socket "$tmp/leaf0.sock" stats 1)
[ "$(stat "$after" released_packets)" = "$(stat "$before" released_packets)" ] || fail "leaf 0 released packets after the run, while only forged ones came"

forged=""
for c in drop_wrong_source drop_wrong_mac bad_icrc err_ahead_of_window; do forged+=" $c +$(($(stat "$after" "$c") - $(stat "$before" "$c")))"; done
echo "ok: $n workers in 2 racks, leaves and a spine, $dtype, loss $loss%: every element exact; spine: $slots slots of 2 partials; inter-rack: $(tr '\n' ';' <<<"$bytes") (payload $per_link bytes a link); forged on the link, leaf 0:$forged"
