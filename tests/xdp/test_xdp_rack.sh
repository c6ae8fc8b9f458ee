#!/usr/bin/env bash
# The XDP tier end to end, on the virtual rack (scripts/rack) with heads of their own, inagg-xdp
# on each head, inagg-worker processes --check'ing every element of every allreduce against the
# tier's reference (the fixed-point sum by a plain wrapping int32 loop):
#   one DTYPE LOSS MODE [unicast]
#                         4 workers under 1 head (XDP in MODE: native or generic), LOSS% lost both
#                         ways on every worker link; a bridge in place of the appliance; results
#                         multicast, or copied to each member by the TC program (unicast)
#   tree DTYPE LOSS       2 groups of 2 workers, each under its head, both heads under a top head;
#                         LOSS% on every link, the heads' too (so partial sums and the top's
#                         results get lost and recovered); the lower heads must have joined the
#                         top's group (what an IGMP-snooping switch needs to forward it to them)
#   auto DTYPE            auto mode with a healthy appliance: everything aggregated by it, the
#                         tier only used once, for the job's closing agreement
#   noappliance DTYPE     auto mode on a rack with no appliance (a plain bridge): the first message
#                         arrives unsummed, every rank falls over at allreduce 0
#   refused DTYPE         auto mode, the appliance refuses the job: every rank learns of the refusal
#                         (rank 0 from its add, the others from list) and runs the job on the tier
#   fallover DTYPE        the appliance aggregates (auto mode) until it is killed mid-run; the rack
#                         fails to wire (scripts/rack bypass --watch) and the job finishes on the
#                         XDP tier, every allreduce exact against the tier that summed it
#   test_xdp_rack.sh INAGG INAGG_CTL INAGG_WORKER INAGG_XDP SRCDIR CASE ARGS...
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 xdp=$4 src=$5 case=$6
shift 6
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"

# The job's MAC key, made as an operator would: every head's job file names it, every worker reads it.
"$xdp" key "$tmp/job1.key" || fail "inagg-xdp key"
# head_job FILE ID MEMBERS TOTAL GROUP [PARENT PARENT_GROUP PARENT_RANK]
head_job() {
  {
    echo "id = $2"; echo "members = $3"; echo "values = 256"; echo "window = 8"; echo "total_weight = $4"; echo "group = $5"
    echo "key_file = $tmp/job1.key"
    [ $# -gt 5 ] && { echo "parent = $6"; echo "parent_group = $7"; echo "parent_rank = $8"; }
  } >"$1"
}
# bindings FILE: the operator's binding table of the rack's ranks (worker r at 10.77.0.r+1 on port
# r with its MAC), for the appliance beside a head (docs/binding.md). In one CI run of the auto case
# the appliance saw rank 2's MAC on the head's port as well and refused the job as claimed by
# another host; the cause is not found yet, and a table decides the ranks' ports whatever else
# claims them, as an operator with heads on the rack's ports would give it.
bindings() {
  local r
  for r in $(seq 0 $((n - 1))); do printf '10.77.0.%d %d 02:77:00:00:00:%02x\n' $((r + 1)) "$r" $((r + 1)); done >"$1"
}
# members FILE IP...: a member line per rank, in order (the head takes a rank's DATA only from it)
members() {
  local f=$1 r=0 ip
  shift
  for ip in "$@"; do echo "member = $r, $ip" >>"$f"; r=$((r + 1)); done
}
unicast_members() {  # FILE: fan out by TC to the 4 workers instead of multicast
  echo "fanout = unicast" >>"$1"
}
# run_workers MODE TAG ARGS...: the 4 ranks in their namespaces; pids in wpids.
run_workers() {
  local mode=$1 tag=$2
  shift 2
  wpids=()
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$(ns_w "$r")" "$worker" --workers $n --rank "$r" --mode "$mode" --job-id 1 --timeout 120 \
      --xdp-key-file "$tmp/job1.key" "$@" >"$tmp/$tag.w$r.log" 2>&1 &
    wpids+=($!)
    others+=($!)
  done
}
wait_workers() {  # TAG [MIN_ROWS]: every rank exits 0, every row exact
  for r in $(seq 0 $((n - 1))); do wait "${wpids[$r]}" || fail "$1: rank $r exited with $?: $(tail -n 3 "$tmp/$1.w$r.log")"; done
  for r in $(seq 0 $((n - 1))); do
    table_exact "$tmp/$1.w$r.log" || fail "$1: rank $r reports wrong elements"
    [ "$(rows_of "$tmp/$1.w$r.log")" -ge "${2:-3}" ] || fail "$1: rank $r reported too few sizes: $(cat "$tmp/$1.w$r.log")"
  done
}
stat_of() { awk -v k="$2" '$1 == k {print $2}' <<<"$1"; }
sizes=(-b 4 -e 300000 -f 9 -n 1 -w 0 -c 1)

case "$case" in
  one)
    dtype=$1 loss=$2 mode=$3 fanout=${4:-multicast}
    lossarg=()
    [ "$loss" != 0 ] && lossarg=(--loss "$loss")
    rack_cmd up --workers $n --heads 1 --bridge "${lossarg[@]}" >/dev/null || fail "rack up"
    head_job "$tmp/h0.job" 1 4 4 239.77.0.1
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2 10.77.0.3 10.77.0.4
    [ "$fanout" = unicast ] && unicast_members "$tmp/h0.job"
    start_agent 0 "$mode" "$tmp/h0.job"
    run_workers xdp run --dtype "$dtype" --xdp-heads 10.77.0.201 "${sizes[@]}"
    wait_workers run
    st=$("$xdp" --socket "$tmp/xdp0.sock" stats 1) || fail "stats: $st"
    [ "$(stat_of "$st" completed)" -gt 0 ] || fail "the head completed nothing: $st"
    [ "$(stat_of "$st" completed)" = "$(stat_of "$st" results_sent)" ] || fail "completed != results_sent: $st"
    for k in bad_rank bad_count ahead weight_mismatch fanout_errors bad_mac; do [ "$(stat_of "$st" $k)" = 0 ] || fail "$k: $st"; done
    if [ "$fanout" = unicast ]; then
      [ "$(stat_of "$st" fanout_copies)" = $(( 4 * $(stat_of "$st" results_sent) )) ] || fail "unicast: not 4 copies per result: $st"
    else
      [ "$(stat_of "$st" fanout_copies)" = 0 ] || fail "multicast fan-out made copies: $st"
    fi
    repeats=$(cat "$tmp"/run.w*.log | awk '/XDP tier:.*repeats/ {gsub(/[(]/, ""); for (i = 1; i <= NF; i++) if ($i == "repeats),") s += $(i-1)} END {print s + 0}')
    if [ "$loss" != 0 ]; then
      [ "$repeats" -gt 0 ] || fail "loss injected but no worker repeated a chunk"
      [ "$(stat_of "$st" retained_answers)" -gt 0 ] || [ "$(stat_of "$st" duplicates)" -gt 0 ] || fail "loss injected but the head answered no repeat: $st"
    fi
    echo "ok: 4 workers, 1 head ($mode, $fanout), $dtype, loss $loss%: every element exact; head: completed $(stat_of "$st" completed)," \
         "retained answers $(stat_of "$st" retained_answers), duplicates $(stat_of "$st" duplicates); worker repeats $repeats"
    ;;
  tree)
    dtype=$1 loss=$2
    lossarg=()
    [ "$loss" != 0 ] && lossarg=(--loss "$loss" --head-loss "$loss")
    rack_cmd up --workers $n --heads 3 --bridge "${lossarg[@]}" >/dev/null || fail "rack up"
    # Heads 0 and 1 (10.77.0.201, .202) take ranks 0-1 and 2-3 and send their sums up to head 2
    # (10.77.0.203), which multicasts the total to them on 239.77.0.100; they pass it down.
    head_job "$tmp/h0.job" 1 2 4 239.77.0.1 10.77.0.203 239.77.0.100 0
    head_job "$tmp/h1.job" 1 2 4 239.77.0.2 10.77.0.203 239.77.0.100 1
    head_job "$tmp/h2.job" 1 2 4 239.77.0.100
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2
    members "$tmp/h1.job" 10.77.0.3 10.77.0.4
    members "$tmp/h2.job" 10.77.0.201 10.77.0.202
    start_agent 2 generic "$tmp/h2.job"
    start_agent 0 generic "$tmp/h0.job"
    start_agent 1 native "$tmp/h1.job"
    for h in 0 1; do
      ip netns exec "$(ns_h "$h")" ip maddr show dev eth0 | grep -qE "inet +239\.77\.0\.100$" || fail "head $h did not join the top head's group"
    done
    # Lossless, nothing may be asked for again: with a 1 s timeout (not the default 20 ms, which a
    # worker starved of CPU on a loaded 2-core machine can overrun) a repeat means a lost result.
    timeout_arg=()
    [ "$loss" = 0 ] && timeout_arg=(--xdp-timeout-ms 1000)
    run_workers xdp run --dtype "$dtype" --xdp-heads 10.77.0.201,10.77.0.202 --xdp-group-size 2 --xdp-mcast 239.77.0.1 \
      "${timeout_arg[@]}" "${sizes[@]}"
    wait_workers run
    s0=$("$xdp" --socket "$tmp/xdp0.sock" stats 1) s1=$("$xdp" --socket "$tmp/xdp1.sock" stats 1) s2=$("$xdp" --socket "$tmp/xdp2.sock" stats 1)
    for s in "$s0" "$s1"; do
      [ "$(stat_of "$s" up_sent)" -gt 0 ] || fail "a lower head sent nothing up: $s"
      [ "$(stat_of "$s" parent_results)" -gt 0 ] || fail "a lower head passed no result down: $s"
      [ "$(stat_of "$s" weight_mismatch)" = 0 ] && [ "$(stat_of "$s" bad_mac)" = 0 ] || fail "weights or MACs: $s"
    done
    [ "$(stat_of "$s2" completed)" -gt 0 ] && [ "$(stat_of "$s2" weight_mismatch)" = 0 ] && [ "$(stat_of "$s2" bad_mac)" = 0 ] ||
      fail "top head: $s2"
    if [ "$loss" != 0 ]; then
      [ $(( $(stat_of "$s0" up_resent) + $(stat_of "$s1" up_resent) )) -gt 0 ] || fail "loss on the heads' links but no partial sum was sent up again"
      [ "$(stat_of "$s2" retained_answers)" -gt 0 ] || [ "$(stat_of "$s2" duplicates)" -gt 0 ] || fail "the top head answered no repeat: $s2"
    else
      # Lossless: every chunk's result reaches the lower heads by multicast, none by asking again.
      [ "$(stat_of "$s0" up_resent)" = 0 ] && [ "$(stat_of "$s1" up_resent)" = 0 ] || fail "partial sums sent again without loss: $s0 $s1"
    fi
    echo "ok: 2 groups of 2 under a top head, $dtype, loss $loss%: every element exact; top head completed" \
         "$(stat_of "$s2" completed), lower heads sent up $(stat_of "$s0" up_sent)+$(stat_of "$s1" up_sent)" \
         "(again: $(stat_of "$s0" up_resent)+$(stat_of "$s1" up_resent)), top head answered $(stat_of "$s2" retained_answers) repeats"
    ;;
  auto)
    dtype=$1
    bindings "$tmp/bindings"
    start_rack --heads 1 -- --bindings "$tmp/bindings"
    head_job "$tmp/h0.job" 1 4 4 239.77.0.1
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2 10.77.0.3 10.77.0.4
    start_agent 0 generic "$tmp/h0.job"
    run_workers auto run --dtype "$dtype" --register "$tmp/ctl.sock" --xdp-heads 10.77.0.201 --message 16384 --ack-timeout-ms 50 "${sizes[@]}"
    wait_workers run
    ! grep -h "falling over" "$tmp"/run.w*.log || fail "a rank fell over with the appliance up"
    for r in $(seq 0 $((n - 1))); do
      grep -q "XDP tier: .* (not used: the appliance aggregated throughout)" "$tmp/run.w$r.log" || fail "rank $r: $(grep -h 'XDP tier:' "$tmp/run.w$r.log")"
    done
    s=$("$ctl" --socket "$tmp/ctl.sock" stats 1)
    [ "$(stat_of "$s" slots_released)" -gt 0 ] && [ "$(stat_of "$s" held_packets)" = 0 ] || fail "appliance: $s"
    st=$("$xdp" --socket "$tmp/xdp0.sock" stats 1)
    [ "$(stat_of "$st" completed)" = 1 ] || fail "the tier should have finished exactly the closing agreement: $st"
    echo "ok: auto with the appliance up: every allreduce summed by it ($(stat_of "$s" slots_released) slots), $dtype exact;" \
         "the tier finished the closing agreement only"
    ;;
  noappliance)
    dtype=$1
    rack_cmd up --workers $n --heads 1 --bridge >/dev/null || fail "rack up"
    head_job "$tmp/h0.job" 1 4 4 239.77.0.1
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2 10.77.0.3 10.77.0.4
    start_agent 0 native "$tmp/h0.job"
    run_workers auto run --dtype "$dtype" --xdp-heads 10.77.0.201 --message 16384 "${sizes[@]}"
    wait_workers run
    for r in $(seq 0 $((n - 1))); do
      grep -q "falling over to the XDP tier at allreduce 0 (message 0 arrived without the appliance's sum (last tally 1, want 4).*takes over from allreduce 0" \
        "$tmp/run.w$r.log" || fail "rank $r: $(grep -h falling "$tmp/run.w$r.log")"
    done
    echo "ok: no appliance on the path: every rank saw message 0 unsummed and ran the job on the XDP tier, $dtype exact"
    ;;
  refused)
    dtype=$1
    start_rack --heads 1 --
    head_job "$tmp/h0.job" 1 4 4 239.77.0.1
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2 10.77.0.3 10.77.0.4
    start_agent 0 generic "$tmp/h0.job"
    # Window 64 of 16 KiB messages in 1 KiB payloads: 2 x 64 x 16 packets x 4 workers = 8192 held
    # buffers, the budget is 4096 (--payload auto would take 4096 on the rack's MTU 4200 links: 4
    # packets a message, 2048 buffers, no refusal). Without the refusal in `list`, ranks 1-3 would
    # fall over after 5 s as "job 1 is not active".
    run_workers auto run --dtype "$dtype" --register "$tmp/ctl.sock" --xdp-heads 10.77.0.201 --message 16384 --payload 1024 \
      --window 64 "${sizes[@]}"
    wait_workers run
    for r in $(seq 0 $((n - 1))); do
      grep -q "falling over to the XDP tier at allreduce 0 (the appliance refused the job: error: job 1: needs up to 8192 held packet buffers.*takes over from allreduce 0" \
        "$tmp/run.w$r.log" || fail "rank $r: $(grep -h falling "$tmp/run.w$r.log")"
    done
    echo "ok: the appliance refused the job; every rank learnt why at once and ran it on the XDP tier, $dtype exact"
    ;;
  fallover)
    dtype=$1
    bindings "$tmp/bindings"
    start_rack --heads 1 -- --abort-ms 3000 --bindings "$tmp/bindings"
    head_job "$tmp/h0.job" 1 4 4 239.77.0.1
    members "$tmp/h0.job" 10.77.0.1 10.77.0.2 10.77.0.3 10.77.0.4
    start_agent 0 generic "$tmp/h0.job"
    # The bypass NIC: once the appliance is gone, its ports are joined into a plain bridge.
    rack_cmd bypass --watch "$pid" >"$tmp/bypass.log" 2>&1 &
    others+=($!)
    # 400 checked allreduces of 64 KiB (-c 400, out of place; one timed before them); the appliance
    # dies while they run.
    run_workers auto run --dtype "$dtype" --register "$tmp/ctl.sock" --xdp-heads 10.77.0.201 --message 16384 --payload 1024 \
      --ack-timeout-ms 50 --retry 7 -b 65536 -e 65536 -n 1 -w 0 -c 400 --in-place 0
    wait_for 60 "the appliance to release 2000 slots of job 1" released_over 1 2000 ||
      fail "the appliance did not aggregate: $("$ctl" --socket "$tmp/ctl.sock" stats 1 2>&1 | head -n 8)"
    s=$("$ctl" --socket "$tmp/ctl.sock" stats 1)
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    pid=""
    wait_workers run 1
    grep -q "ports bridged" "$tmp/bypass.log" || fail "the rack did not fail to wire: $(cat "$tmp/bypass.log")"
    for r in $(seq 0 $((n - 1))); do
      grep -q "falling over to the XDP tier at allreduce" "$tmp/run.w$r.log" || fail "rank $r did not fall over: $(tail -n 3 "$tmp/run.w$r.log")"
    done
    # Every rank resumed at the same allreduce, and the ranks agree on how many the tier did.
    [ "$(grep -ho 'takes over from allreduce [0-9]*' "$tmp"/run.w*.log | sort -u | wc -l)" = 1 ] || fail "ranks resumed at different allreduces"
    [ "$(grep -ho 'XDP tier: [0-9]* chunks' "$tmp"/run.w*.log | sort -u | wc -l)" = 1 ] || fail "ranks did different work on the tier"
    st=$("$xdp" --socket "$tmp/xdp0.sock" stats 1)
    [ "$(stat_of "$st" completed)" -gt 0 ] || fail "the head completed nothing: $st"
    echo "rank 0: $(grep -ho "falling over.*" "$tmp/run.w0.log")"
    echo "ok: appliance killed after $(stat_of "$s" slots_released)+ slots, rack bridged, all 4 ranks $(grep -ho 'takes over from allreduce [0-9]*' "$tmp/run.w0.log")," \
         "400 checked allreduces of $dtype exact; head completed $(stat_of "$st" completed) chunks"
    ;;
  *)
    fail "unknown case '$case'"
    ;;
esac
