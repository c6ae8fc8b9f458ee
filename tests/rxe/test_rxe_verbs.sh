#!/usr/bin/env bash
# inagg-worker over rdma-core's verbs on the kernel's Soft-RoCE, aggregated by inagg: four rxe VMs
# (scripts/rxe-lab), their taps as inagg's only ports, one lab bring-up for every phase.
#   The workers reach the appliance's control plane over its TCP listener (--control-tcp on the
#   host's 127.0.0.1, the VMs' 10.0.2.2) with a shared secret; rank 0 registers each job with the
#   QPNs its rxe assigned (IPv4-mapped GIDs as addresses), learned in the ranks' TCP exchange.
#   1. control: a request with a wrong credential, from a VM, is refused and counted.
#   2. --mode ina, fp32 then int32 (job 1, job 2): sizes of one packet (one message, padded) and of
#      five windows (10 messages of 4 packets, window 2), 1 timed and 2 checked (-c 2) allreduces
#      each; every element of the checked ones is compared by each rank with its scalar reference
#      (exit status 1 and #wrong otherwise).
#   3. --mode ring (fp32, checked the same way) with no job registered: inagg only forwards.
#   4. 2 again (fp32, job 3) with 1% loss (tc netem in the VMs) on every tap, from the VMs.
#   5. a cold start (job 4): one allreduce of 2 MiB, fp32, then one checked, the ranks started in
#      random order up to ~1 s apart (what nccl-tests users run: a single size, no warm-up). 2 MiB
#      keeps the phase near 30 s: rxe in these TCG VMs moves a 16 MiB allreduce in ~3 minutes.
#   6. reduce-scatter and all-gather in one pass (jobs 5 and 6, --collective): 64 KiB and 1 MiB,
#      fp32, 1 timed and 1 checked each; the held packets released with a sum, and the
#      placeholders filled, exactly as many as the schedule has.
#   7. forged WRITEs (tests/e2e/forge_rank.py: scapy, a good ICRC, float32 1.0 throughout: forged data
#      and a forged tally) on rank 1's connection to rank 2 (its addresses, rank 2's QPN, the job's
#      start PSN, rank 1's MAC), every 5 ms from the moment rank 0 registers the job (read from the
#      appliance's state directory) until the ranks end: (a) from a host that is not a rank, network
#      namespace rxe-ns0 on a port of its own (jobs 7): every rank exact, the forgeries dropped and
#      counted (drop_wrong_port); (b) straight into rank 2's tap from this host, around the appliance,
#      at rank 2's RC responder (job 8): no rank may report a wrong element; either every rank is
#      exact, or the job stops and rank 2's reason names the refused WRITE.
#   Checks: every rank exits 0 with #wrong 0; rxe accepted every RoCE datagram its VM's UDP stack
#   took (UDP InDatagrams grew exactly as much as rcvd_pkts: no packet with a bad ICRC, e.g. a
#   regenerated one that is wrong, was refused; test_rxe_forward.sh shows that this check sees a
#   bad ICRC); no QP exceeded its retries; inagg's stats show each job's slots released, exactly
#   one per packet the job carried, none held; in 3 its engine passed RoCE packets through
#   untouched; in 4 it recovered losses (resends, NAKs, answered retransmissions); and the ICRC
#   check_icrc.py computes (independent of inagg's CRC code, checked against scapy's) agrees with every RoCEv2 packet inagg's engines
#   emitted (--capture). Per phase, each VM's udp_in and rcvd_pkts are printed: a difference there
#   names the phase (a WRITE that reached a receive QP not yet in RTR was one, before the verbs
#   transport's "connected" barrier).
#   test_rxe_verbs.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
here=$(cd "$(dirname "$0")" && pwd)


n=4 msg=4096 payload=1024 window=2
# shellcheck source=lab.sh
. "$src/tests/rxe/lab.sh" verbs 12
lab_require_verbs "$worker"
port=$((20000 + $$ % 20000))

lab_up $n --netns 1  # rxe-ns0: the forging host of phase 7
up_s=$((SECONDS - started))

lab_secret
lab_start_appliance --capture "$tmp/emitted.pcap" --state-dir "$tmp/state" --control-tcp "127.0.0.1:$port" --control-secret-file "$tmp/secret"
grep -q "control requests over TCP on 127.0.0.1:$port" "$tmp/inagg.log" || fail "inagg does not say it listens on TCP port $port"

lab_install_worker "$worker" $n "$tmp/secret"


# --- 1. control over TCP from a VM: a wrong credential is refused ------------------------------
# bash's /dev/tcp (the VM runs jobs with sh): a framed `list` (socket.hpp) whose MAC is not the
# tenant's; the server refuses it and closes.
cat >/run/rxe-lab/vm0/share/inagg/bad-secret.sh <<EOF
exec 3<>/dev/tcp/10.0.2.2/$port || exit 1
printf 'request 5 admin %064d\\nlist\\n' 0 >&3
timeout 20 cat <&3
EOF
bad=$("$lab" run vm0 --timeout 60 -- bash /lab/inagg/bad-secret.sh 2>&1)
grep -q "^error: wrong credential" <<<"$bad" || fail "a request from vm0 with a wrong MAC was not refused with 'wrong credential': $bad"
echo "ok: control over TCP from vm0 (10.0.2.2:$port) with a wrong secret: $bad"

# outcome LOG RANK: $rows (sizes the rank reports) and $wrong (its wrong-element counts other than 0
# or N/A, space-separated). Rank 0 prints the job's table (nccl-tests' columns: #wrong, summed over
# the ranks, is field 9, N/A when nothing was checked); each other rank a closing line with its own
# sizes and wrong elements ("# rank R: S sizes, C checked placements, W wrong elements").
outcome() {
  if [ "$2" = 0 ]; then
    wrong=$(awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ && $9 != "0" && $9 != "N/A" {print $9}' "$1" | tr '\n' ' ')
    rows=$(awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/' "$1" | wc -l)
  else
    read -r rows wrong < <(awk '/^# rank [0-9]+: [0-9]+ sizes,/ {print $4, ($9 == "0" ? "" : $9)}' "$1")
    rows=${rows:-0}
  fi
}

# run_ranks NAME JOB ARGS...: every rank with ARGS (a job id 0: no registration), each checking
# every element; the ranks' outputs in $tmp/NAME-RANK.log. $sizes: the sizes and iterations
# ($want_rows size rows); $skew_ms: each rank starts up to that long after the one before it.
sizes="-b 1024 -e 40960 -f 40 --iters 1 --warmup 0 -c 2" want_rows=2 skew_ms=0
run_ranks() {
  local name=$1 job=$2 i wrong rows reg=""
  shift 2
  [ "$job" -gt 0 ] && reg="--job-id $job --register tcp://10.0.2.2:$port --control-secret-file /lab/inagg/secret"
  local -a ids
  for i in $(shuf -i 0-$((n - 1))); do
    [ "$skew_ms" -gt 0 ] && sleep "$(printf '0.%03d' $((RANDOM % skew_ms)))"
    ids[i]=$("$lab" run "vm$i" --bg --timeout 240 -- "$run_env /lab/inagg/inagg-worker --rank $i --workers $n --ip-base 10.77.0.100 --transport verbs --exchange-secret-file /lab/inagg/secret --message $msg --payload $payload --window $window $sizes --in-place 0 --timeout ${rank_timeout:-200} $reg $*")
  done
  for i in $(seq 0 $((n - 1))); do
    "$lab" wait "vm$i" "${ids[i]}" --timeout 260 >"$tmp/$name-$i.log" 2>&1 ||
      fail "$name: rank $i failed ($(tail -n 3 "$tmp/$name-$i.log" | tr '\n' ' '))"
    outcome "$tmp/$name-$i.log" "$i"
    if [ "$rows" -ne "$want_rows" ] || [ -n "$wrong" ]; then fail "$name: rank $i printed $rows size rows, #wrong '$wrong'"; fi
  done
}
# job_done NAME JOB: the job's slots: one released per packet it carried, none held; then removed.
# Per size 3 allreduces (1 timed, 2 checked): 1 message (1024 bytes, padded), then 11 (40960
# bytes, M less the tally's two elements a message); M/P packets each.
job_done() { lab_job_done "$1" "$2" $(((1 + 11) * 3 * msg / payload)); }
stat_of() { awk -v k="$2" '$1 == k {print $2}' "$tmp/$1.stats"; }

phases=()
# snapshot PHASE: every VM's counters after PHASE.
snapshot() {
  local i
  for i in $(seq 0 $((n - 1))); do counters "vm$i" >"$tmp/c-$1-$i"; done
  phases+=("$1")
}
snapshot start
# --- 2. ina over verbs, fp32 and int32 -----------------------------------------------------------
job=0
for dtype in fp32 int32; do
  job=$((job + 1))
  t=$SECONDS
  run_ranks "ina-$dtype" $job --mode ina --dtype $dtype --seed $((7 + job))
  job_done "ina-$dtype" $job
  snapshot "ina-$dtype"
  echo "ok: ina over verbs, $dtype, $n rxe VMs, 1024 and 40960 bytes x 3: every element of the 2 checked ones exact on every rank ($((SECONDS - t)) s); job $job: slots_released $(stat_of "ina-$dtype" slots_released), held_packets 0, resends $(stat_of "ina-$dtype" resends), retransmits_answered $(stat_of "ina-$dtype" retransmits_answered)"
  grep -h "^# rank .*verbs" "$tmp"/ina-$dtype-*.log
done

# --- 3. ring over verbs, inagg only forwarding -------------------------------------------------
t=$SECONDS
"$ctl" --socket "$tmp/ctl.sock" list | grep -q "^id=" && fail "a job is still registered before the ring run"
pass0=$("$ctl" --socket "$tmp/ctl.sock" stats | awk '$1 == "passthrough" {print $2}')
run_ranks ring-fp32 0 --mode ring --dtype fp32 --seed 11
snapshot ring-fp32
pass1=$("$ctl" --socket "$tmp/ctl.sock" stats | awk '$1 == "passthrough" {print $2}')
[ $((pass1 - pass0)) -gt 0 ] || fail "ring: inagg's engine counted no passthrough RoCE packets"
echo "ok: ring over verbs, fp32, no job registered: every element exact on every rank ($((SECONDS - t)) s); inagg forwarded $((pass1 - pass0)) RoCE packets untouched"

# --- 4. ina with 1% loss on every tap -------------------------------------------------------------
# netem in each VM, on its data NIC's egress: every packet a VM sends into its tap (the senders'
# data, the receivers' ACKs) may be lost. (The host kernel here has no sch_netem; the VMs' has.)
t=$SECONDS
for i in $(seq 0 $((n - 1))); do
  "$lab" run "vm$i" --timeout 60 -- tc qdisc add dev eth0 root netem loss 1% || fail "tc netem in vm$i"
done
run_ranks ina-loss 3 --mode ina --dtype fp32 --seed 13
dropped=0
for i in $(seq 0 $((n - 1))); do
  d=$("$lab" run "vm$i" --timeout 60 -- 'tc -s qdisc show dev eth0; tc qdisc del dev eth0 root' | awk '$1 == "Sent" {for (k = 1; k < NF; k++) if ($k == "(dropped") {sub(",", "", $(k + 1)); print $(k + 1)}}' | head -1)
  dropped=$((dropped + ${d:-0}))
done
[ "$dropped" -gt 0 ] || fail "loss: netem dropped nothing in the VMs"
job_done ina-loss 3
recovered=$(awk '$1 == "naks_sent" || $1 == "retransmits_answered" || $1 == "resends" {s += $2} END {print s + 0}' "$tmp/ina-loss.stats")
[ "$recovered" -gt 0 ] || fail "loss: the appliance recovered nothing: $(tr '\n' ' ' <"$tmp/ina-loss.stats")"
echo "ok: ina over verbs, fp32, 1% loss on every tap ($dropped packets dropped): every element exact ($((SECONDS - t)) s); job 3: $(grep -E '^(slots_released|naks_sent|resends|retransmits_answered|held_packets) ' "$tmp/ina-loss.stats" | tr '\n' ' ')"
snapshot ina-loss

# --- 5. a cold start: one 2 MiB allreduce, ranks started apart -----------------------------------
# 2 allreduces of 2 MiB: ceil(512 Ki elements / (M/4 less the tally's 2)) messages of M/P packets.
t=$SECONDS
sizes="-b 2M -e 2M --iters 1 --warmup 0 -c 1" want_rows=1 skew_ms=333
run_ranks cold-start 4 --mode ina --dtype fp32 --seed 17
lab_job_done cold-start 4 $((2 * ((524288 + msg / 4 - 3) / (msg / 4 - 2)) * (msg / payload)))
grep -h "^# rank .*verbs" "$tmp"/cold-start-*.log
echo "ok: ina over verbs, a single 2 MiB fp32 allreduce from a cold start (ranks started in random order, up to 0.33 s apart each), then a checked one: every element exact on every rank ($((SECONDS - t)) s); job 4: $(grep -E '^(slots_released|resends|retransmits_answered) ' "$tmp/cold-start.stats" | tr '\n' ' ')"
awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {print "  rank time_us " $6 ", algbw " $7 " GB/s"}' "$tmp"/cold-start-*.log
snapshot cold-start

# --- 6. reduce-scatter and all-gather in one pass ---------------------------------------------
# Per size (the whole buffer: 4 shards) and collective, 2 runs (1 timed, 1 checked); a shard is
# ceil(size / 4 / (M/4 less the tally's 2) / 4) messages of M/P packets, each rank's connection
# carrying every shard but its own: a reduce-scatter holds one chunk a round (the one into the
# owner), an all-gather fills n - 2 a round.
sizes="-b 64K -e 1M -f 16 --iters 1 --warmup 0 -c 1" want_rows=2 skew_ms=0
shard_packets=0
for size in 65536 1048576; do
  shard_packets=$((shard_packets + (size / 4 / 4 + msg / 4 - 3) / (msg / 4 - 2) * (msg / payload)))
done
for c in reduce_scatter all_gather; do
  t=$SECONDS
  [ "$c" = all_gather ] && job=6 || job=5
  run_ranks "$c" $job --mode ina --dtype fp32 --seed 19 --collective $c
  stats=$("$ctl" --socket "$tmp/ctl.sock" stats $job) || fail "stats $job: $stats"
  grep -q "^held_packets 0$" <<<"$stats" || fail "$c: job $job: packets held after the run: $(tr '\n' ' ' <<<"$stats")"
  if [ $c = reduce_scatter ]; then
    want="slots_released $((2 * n * shard_packets))"
  else
    want="placeholders_filled $((2 * n * (n - 2) * shard_packets))"
  fi
  grep -q "^$want$" <<<"$stats" || fail "$c: job $job: want $want: $(tr '\n' ' ' <<<"$stats")"
  "$ctl" --socket "$tmp/ctl.sock" remove $job >/dev/null || fail "cannot remove job $job"
  snapshot "$c"
  echo "ok: $c over verbs in one pass, fp32, 64 KiB and 1 MiB: every element exact on every rank ($((SECONDS - t)) s); job $job: $want, $(grep -E '^(forwarded_unchanged|retransmits_answered|resends) ' <<<"$stats" | tr '\n' ' ')"
done

# --- 7. forged WRITEs on rank 1's connection, through the appliance and around it ---------------
# forge_at JOB NAME CMD...: once rank 0 has registered JOB (its state file), CMD with rank 1's
# connection (its address, rank 2's address and QPN, the start PSN) appended, in the background
# ($forger); $tmp/NAME.log says when it was ready and how many the appliance had summed then.
forge_at() {
  local job=$1 name=$2
  shift 2
  (
    wait_for 240 "job $job's registration" test -f "$tmp/state/job-$job.state" || exit 1
    read -r r1_src r1_dst r1_dqpn r1_psn < <(awk -F'[ ,]+' '$1 == "conn" && $3 == "1" {print $4, $6, $7, $8}' "$tmp/state/job-$job.state")
    echo "conn of rank 1: $r1_src -> $r1_dst QPN $r1_dqpn PSN $r1_psn"
    exec "$@" "$r1_src" "$r1_dst" "$r1_dqpn" "$r1_psn" 1024 every 5 300
  ) >"$tmp/$name.log" 2>&1 &
  forger=$!
  lab_pids+=("$forger")
}
# forged_ranks NAME JOB: every rank's outcome; fails when one reports a wrong element. $failed: the
# ranks that exited non-zero.
forged_ranks() {
  local name=$1 job=$2 i wrong rows
  local -a ids
  failed=""
  for i in $(seq 0 $((n - 1))); do
    ids[i]=$("$lab" run "vm$i" --bg --timeout 240 -- "$run_env /lab/inagg/inagg-worker --rank $i --workers $n --ip-base 10.77.0.100 --transport verbs --exchange-secret-file /lab/inagg/secret --message $msg --payload $payload --window $window $sizes --in-place 0 --timeout 90 --job-id $job --register tcp://10.0.2.2:$port --control-secret-file /lab/inagg/secret --mode ina --dtype fp32 --seed $((23 + job))")
  done
  for i in $(seq 0 $((n - 1))); do
    "$lab" wait "vm$i" "${ids[i]}" --timeout 260 >"$tmp/$name-$i.log" 2>&1 || failed+=" $i"
    outcome "$tmp/$name-$i.log" "$i"
    [ -z "$wrong" ] || fail "$name: rank $i summed wrong elements (#wrong '$wrong') under forged WRITEs"
    [[ " $failed " == *" $i "* ]] || [ "$rows" -eq "$want_rows" ] || fail "$name: rank $i exited 0 with $rows size rows"
  done
}
# stop_forger NAME: ends $forger, which must have been ready and have sent.
stop_forger() {
  kill "$forger" 2>/dev/null
  wait_pids 20 "the forger to stop" "$forger" || fail "$1: the forger did not stop"
  grep -q "^sent [1-9]" "$tmp/$1.log" || fail "$1: the forger sent nothing: $(cat "$tmp/$1.log")"
}
sizes="-b 1024 -e 40960 -f 40 --iters 1 --warmup 0 -c 2" want_rows=2

t=$SECONDS
forge_at 7 forge-appliance ip netns exec rxe-ns0 /usr/bin/python3 "$src/tests/e2e/forge_rank.py" eth0 02:77:00:00:02:02 02:77:00:00:02:03
forged_ranks forged-appliance 7
stop_forger forge-appliance
[ -z "$failed" ] || fail "forged-appliance: rank(s)$failed failed: $(for i in $failed; do tail -n 2 "$tmp/forged-appliance-$i.log"; done | tr '\n' ' ')"
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 7) || fail "stats 7: $stats"
dropped=$(awk '$1 == "drop_wrong_port" {print $2}' <<<"$stats")
[ "${dropped:-0}" -gt 0 ] || fail "forged-appliance: the appliance dropped none of rxe-ns0's forgeries as from the wrong port: $(tr '\n' ' ' <<<"$stats")"
job_done forged-appliance 7
echo "ok: forged WRITEs of rank 1 from rxe-ns0 (a host that is no rank, on its own port) during job 7: every element exact on every rank ($((SECONDS - t)) s); $(tail -n 1 "$tmp/forge-appliance.log"); job 7: drop_wrong_port $dropped, slots_released $(stat_of forged-appliance slots_released)"

t=$SECONDS
forge_at 8 forge-responder /usr/bin/python3 "$src/tests/e2e/forge_rank.py" rxe-t2 02:77:00:00:02:02 02:77:00:00:02:03
counters vm2 >"$tmp/c-forge-before"
forged_ranks forged-responder 8
stop_forger forge-responder
counters vm2 >"$tmp/c-forge-after"
refused=$(($(delta "$tmp/c-forge-before" "$tmp/c-forge-after" udp_in) - $(delta "$tmp/c-forge-before" "$tmp/c-forge-after" rcvd_pkts)))
if [ -z "$failed" ]; then
  job_done forged-responder 8
  echo "ok: forged WRITEs of rank 1 straight at rank 2's responder (around the appliance) during job 8: every element exact on every rank ($((SECONDS - t)) s); $(tail -n 1 "$tmp/forge-responder.log"); vm2's rxe refused $refused datagrams"
else
  grep -q "forged WRITE" "$tmp/forged-responder-2.log" ||
    fail "forged-responder: rank(s)$failed failed, and rank 2's reason does not name the refused WRITE: $(tail -n 2 "$tmp/forged-responder-2.log" | tr '\n' ' ')"
  "$ctl" --socket "$tmp/ctl.sock" remove 8 >/dev/null
  echo "ok: forged WRITEs of rank 1 straight at rank 2's responder (around the appliance) during job 8: no rank summed a wrong element; the job stopped ($((SECONDS - t)) s; rank(s)$failed failed), rank 2 with: $(grep -h "forged WRITE" "$tmp/forged-responder-2.log" | tail -n 1); $(tail -n 1 "$tmp/forge-responder.log")"
fi

lab_stop_appliance
/usr/bin/python3 "$here/check_icrc.py" "$tmp/emitted.pcap" >"$tmp/icrc.txt" 2>&1 || fail "the ICRC check of what inagg emitted: $(cat "$tmp/icrc.txt")"
echo "ok: the ICRC check (against scapy's) of every RoCEv2 packet inagg's engines emitted: $(tail -n 1 "$tmp/icrc.txt")"
# --- checks: rxe's own counters, per phase -------------------------------------------------------
for i in $(seq 0 $((n - 1))); do
  line=""
  for k in $(seq 1 $((${#phases[@]} - 1))); do
    a=$tmp/c-${phases[k - 1]}-$i b=$tmp/c-${phases[k]}-$i
    line+=" ${phases[k]}: udp_in +$(delta "$a" "$b" udp_in) rcvd_pkts +$(delta "$a" "$b" rcvd_pkts) dup +$(delta "$a" "$b" duplicate_request) retry +$(delta "$a" "$b" completer_retry_err);"
  done
  echo "vm$i:$line"
done
for i in $(seq 0 $((n - 1))); do
  lab_rxe_accepted_all "vm$i" "$tmp/c-start-$i" "$tmp/c-ina-loss-$i"
done
refused=$(awk '$1 == "control" && $2 == "tcp" {for (k = 1; k < NF; k++) if ($k == "refused") print $(k + 1)}' "$tmp/inagg.log")
[ "$refused" = 1 ] || fail "inagg counted '$refused' refused TCP control requests, want 1: $(grep '^control tcp' "$tmp/inagg.log")"
echo "ok: inagg: $(grep '^control tcp' "$tmp/inagg.log"); lab up in ${up_s} s, whole test $((SECONDS - started)) s"
