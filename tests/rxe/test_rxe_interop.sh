#!/usr/bin/env bash
# Interoperability: one inagg-worker ring in which two ranks are the kernel's Soft-RoCE (rxe VMs,
# --transport verbs) and two are the project's software RoCE endpoint (network namespaces,
# --transport udp --exchange), all four on ports of one inagg (scripts/rxe-lab up --vms 2 --netns 2).
#   rank 0 vm0 10.77.0.101, rank 1 vm1 .102 (rxe0, verbs); rank 2 ns0 .103, rank 3 ns1 .104 (udp).
#   The ring's connections: vm0 -> vm1 (rxe to rxe), vm1 -> ns0 (rxe to software: rxe's WRITEs,
#   whose ICRC covers the kernel's non-zero IP IDs, and the software responder's ACKs), ns0 -> ns1,
#   ns1 -> vm0 (software WRITEs into an rxe MR by its address and rkey, rxe's ACKs).
#   The software ranks join the verbs ranks' TCP exchange (QPNs, PSNs, GIDs, regions) and barriers.
#   1. --mode ring, fp32, no job: inagg only forwards.
#   2. --mode ina, fp32 and int32 (jobs 1, 2), registered by rank 0 (a VM) over inagg's TCP control
#      listener with the exchanged QPNs; the namespaces wait for the job on the control socket.
#   Sizes 1024 (one message, padded) and 40960 bytes (11 messages of 4 packets, window 2), 1 timed
#   and 2 checked (-c 2) allreduces each: each rank compares every element with its scalar reference.
#   3. 2 again (fp32, job 3) with 1% loss on every host's egress (tc netem in the VMs, nftables in
#      the namespaces): the RC recovery between rxe and the software endpoint (NAKs, go-back-N,
#      duplicates re-acknowledged) and the appliance's.
#   4. The control that the check can fail: job 4 as 2, with --corrupt-input 1 on rank 2 (a software
#      rank): every rank must report wrong elements and exit 1.
#   Checks: every rank exits 0 with #wrong 0 (4: 1 and #wrong > 0 everywhere); rxe accepted every RoCE
#   datagram its VM's UDP stack took (UDP InDatagrams = rcvd_pkts: no ICRC or header refused, e.g.
#   the software endpoint's or inagg's regenerated ones) and no QP exceeded its retries; the software
#   ranks counted no bad ICRC; inagg released one slot per packet of each job, held none, forwarded
#   the ring untouched; the ICRC check_icrc.py computes (checked against scapy's) agrees with every RoCEv2 packet inagg emitted.
#   test_rxe_interop.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
here=$(cd "$(dirname "$0")" && pwd)

command -v ethtool >/dev/null || { echo "SKIP: ethtool is missing (scripts/packages.txt)"; exit 77; }

vms=2 nss=2 msg=4096 payload=1024 window=2
n=$((vms + nss))
# shellcheck source=lab.sh
. "$src/tests/rxe/lab.sh" interop 12
lab_require_verbs "$worker"
port=$((20000 + $$ % 20000))

"$lab" up --vms $vms --netns $nss >"$tmp/up.log" 2>&1 || fail "the lab did not come up: $(cat "$tmp/up.log")"
cat "$tmp/up.log"
up_s=$((SECONDS - started))

lab_secret
lab_start_appliance --capture "$tmp/emitted.pcap" --control-tcp "127.0.0.1:$port" --control-secret-file "$tmp/secret"
lab_install_worker "$worker" $vms "$tmp/secret"

common="--workers $n --ip-base 10.77.0.100 --message $msg --payload $payload --window $window -b 1024 -e 40960 -f 40 --iters 1 --warmup 0 -c 2 --in-place 0 --timeout 200"
# The software ranks' RC timers for TCG VMs' round trips (tens of ms, sometimes far more): the
# ceiling a NIC's would be (protocol.md §2), and a floor above a VM's usual round trip.
udp_opts="--transport udp --exchange --exchange-secret-file $tmp/secret --ack-timeout-ms 1000 --rto-min-ms 50"

# run_ranks NAME JOB WANT ARGS...: every rank with ARGS (job 0: no registration); the ranks'
# outputs in $tmp/NAME-RANK.log. WANT ok: every rank exits 0 with 2 size rows, #wrong 0; WANT wrong:
# every rank exits 1 and reports wrong elements.
run_ranks() {
  local name=$1 job=$2 want=$3 i r rc wrong rows vreg="" nreg=""
  shift 3
  if [ "$job" -gt 0 ]; then
    vreg="--job-id $job --register tcp://10.0.2.2:$port --control-secret-file /lab/inagg/secret"
    nreg="--job-id $job --register $tmp/ctl.sock"
  fi
  local -a ids pids
  for i in $(seq $((vms - 1)) -1 0); do
    ids[i]=$("$lab" run "vm$i" --bg --timeout 240 -- "$run_env /lab/inagg/inagg-worker --rank $i $common --transport verbs --exchange-secret-file /lab/inagg/secret $vreg $*")
  done
  for i in $(seq 0 $((nss - 1))); do
    r=$((vms + i))
    # shellcheck disable=SC2086
    "$lab" run "ns$i" --timeout 240 -- "$worker" --rank $r $common $udp_opts $nreg "$@" >"$tmp/$name-$r.log" 2>&1 &
    pids[i]=$!
    lab_pids+=("${pids[i]}")
  done
  for i in $(seq 0 $((n - 1))); do
    if [ "$i" -lt "$vms" ]; then
      "$lab" wait "vm$i" "${ids[i]}" --timeout 260 >"$tmp/$name-$i.log" 2>&1
      rc=$?
    else
      wait "${pids[i - vms]}"
      rc=$?
    fi
    # Rank 0 prints the job's table (nccl-tests' columns: #wrong, summed over the ranks, is field 9,
    # N/A when nothing was checked); each other rank a closing line with its own sizes and wrong
    # elements ("# rank R: S sizes, C checked placements, W wrong elements").
    if [ "$i" = 0 ]; then
      wrong=$(awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ && $9 != "0" {print $9}' "$tmp/$name-$i.log" | tr '\n' ' ')
      rows=$(awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/' "$tmp/$name-$i.log" | wc -l)
    else
      read -r rows wrong < <(awk '/^# rank [0-9]+: [0-9]+ sizes,/ {print $4, ($9 == "0" ? "" : $9)}' "$tmp/$name-$i.log")
      rows=${rows:-0}
    fi
    if [ "$want" = ok ]; then
      [ "$rc" -eq 0 ] || fail "$name: rank $i exited $rc ($(tail -n 3 "$tmp/$name-$i.log" | tr '\n' ' '))"
      if [ "$rows" -ne 2 ] || [ -n "$wrong" ]; then fail "$name: rank $i printed $rows size rows, #wrong '$wrong'"; fi
    else
      if [ "$rc" -ne 1 ] || [ -z "$wrong" ]; then
        fail "$name: rank $i exited $rc with #wrong '$wrong' although rank 2's input was corrupted ($(tail -n 3 "$tmp/$name-$i.log" | tr '\n' ' '))"
      fi
    fi
  done
  lab_pids=()
}
# job_done NAME JOB: one slot released per packet the job carried, none held; then removed. 3
# allreduces per size (1 timed, 2 checked): 1 message (1024 bytes, padded), then 11 (40960 bytes,
# M less the tally's two elements a message); M/P packets each.
job_done() { lab_job_done "$1" "$2" $(((1 + 11) * 3 * msg / payload)); }
# software_icrc NAME: the software ranks' bad-ICRC counts must be 0 (their footer line), and they
# refused nothing of their NIC peers for its address or rkey.
software_icrc() {
  local r line
  for r in $(seq "$vms" $((n - 1))); do
    line=$(grep "^# rank $r: sent" "$tmp/$1-$r.log") || fail "$1: rank $r printed no transport counters"
    grep -q " 0 bad ICRC;" <<<"$line" || fail "$1: software rank $r refused packets with bad ICRCs: $line"
    grep -q "; refused 0 from another address, 0 with another rkey," <<<"$line" ||
      fail "$1: software rank $r refused its peers' packets: $line"
  done
}

for i in $(seq 0 $((vms - 1))); do counters "vm$i" >"$tmp/c-start-$i"; done

# --- 1. ring, inagg only forwarding ---------------------------------------------------------------
t=$SECONDS
pass0=$("$ctl" --socket "$tmp/ctl.sock" stats | awk '$1 == "passthrough" {print $2}')
run_ranks ring-fp32 0 ok --mode ring --dtype fp32 --seed 11
pass1=$("$ctl" --socket "$tmp/ctl.sock" stats | awk '$1 == "passthrough" {print $2}')
[ $((pass1 - pass0)) -gt 0 ] || fail "ring: inagg's engine counted no passthrough RoCE packets"
software_icrc ring-fp32
echo "ok: ring of 2 rxe VMs and 2 software endpoints, fp32, no job: every element exact on every rank ($((SECONDS - t)) s); inagg forwarded $((pass1 - pass0)) RoCE packets untouched"
grep -h "^# \(verbs\|udp\):" "$tmp"/ring-fp32-*.log
grep -h "^# rank [0-9]*: sent" "$tmp"/ring-fp32-*.log

# --- 2. ina, fp32 and int32 -----------------------------------------------------------------------
job=0
for dtype in fp32 int32; do
  job=$((job + 1))
  t=$SECONDS
  run_ranks "ina-$dtype" $job ok --mode ina --dtype $dtype --seed $((7 + job))
  job_done "ina-$dtype" $job
  software_icrc "ina-$dtype"
  echo "ok: ina over 2 rxe VMs and 2 software endpoints, $dtype, 1024 and 40960 bytes x 3: every element of the 2 checked ones exact on every rank ($((SECONDS - t)) s); job $job: $(grep -E '^(slots_released|held_packets|resends|retransmits_answered) ' "$tmp/ina-$dtype.stats" | tr '\n' ' ')"
done
# --- 3. ina with 1% loss on every host's egress ---------------------------------------------------
t=$SECONDS
for i in $(seq 0 $((vms - 1))); do
  "$lab" run "vm$i" --timeout 60 -- tc qdisc add dev eth0 root netem loss 1% || fail "tc netem in vm$i"
done
for i in $(seq 0 $((nss - 1))); do
  # (The host kernel has no sch_netem.) The output hook: before the appliance, as netem's.
  "$lab" run "ns$i" -- 'nft -f - <<NFT
table inet rxe_loss {
  chain out { type filter hook output priority 0; udp dport 4791 numgen random mod 100 < 1 counter drop; }
}
NFT' || fail "nftables loss in ns$i"
done
run_ranks ina-loss 3 ok --mode ina --dtype fp32 --seed 13
dropped=0
for i in $(seq 0 $((vms - 1))); do
  d=$("$lab" run "vm$i" --timeout 60 -- 'tc -s qdisc show dev eth0; tc qdisc del dev eth0 root' | awk '$1 == "Sent" {for (k = 1; k < NF; k++) if ($k == "(dropped") {sub(",", "", $(k + 1)); print $(k + 1)}}' | head -1)
  dropped=$((dropped + ${d:-0}))
done
for i in $(seq 0 $((nss - 1))); do
  d=$("$lab" run "ns$i" -- 'nft list table inet rxe_loss; nft delete table inet rxe_loss' | awk '$1 == "counter" || / counter packets / {for (k = 1; k < NF; k++) if ($k == "packets") print $(k + 1)}' | head -1)
  dropped=$((dropped + ${d:-0}))
done
[ "$dropped" -gt 0 ] || fail "loss: nothing was dropped"
job_done ina-loss 3
software_icrc ina-loss
echo "ok: ina over 2 rxe VMs and 2 software endpoints, fp32, 1% loss on every host ($dropped packets dropped): every element exact ($((SECONDS - t)) s); job 3: $(grep -E '^(slots_released|naks_sent|resends|retransmits_answered|held_packets) ' "$tmp/ina-loss.stats" | tr '\n' ' ')"
grep -h "^# rank [0-9]*: sent" "$tmp"/ina-loss-*.log

# --- 4. the control: a corrupted input is caught on every rank ------------------------------------
t=$SECONDS
run_ranks ina-corrupt 4 wrong --mode ina --dtype fp32 --seed 21 --corrupt-input 1
"$ctl" --socket "$tmp/ctl.sock" remove 4 >/dev/null || fail "cannot remove job 4"
echo "ok: control: with 1 element of rank 2's input altered after the reference, every rank reported wrong elements and exited 1 ($((SECONDS - t)) s; #wrong per rank: $(for i in $(seq 0 $((n - 1))); do awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ {printf "%s ", $9}' "$tmp/ina-corrupt-$i.log"; printf '| '; done))"
for i in $(seq 0 $((vms - 1))); do counters "vm$i" >"$tmp/c-end-$i"; done

lab_stop_appliance
/usr/bin/python3 "$here/check_icrc.py" "$tmp/emitted.pcap" >"$tmp/icrc.txt" 2>&1 || fail "the ICRC check of what inagg emitted: $(cat "$tmp/icrc.txt")"
echo "ok: the ICRC check (against scapy's) of every RoCEv2 packet inagg's engines emitted: $(tail -n 1 "$tmp/icrc.txt")"
# --- rxe's own counters over the whole run --------------------------------------------------------
for i in $(seq 0 $((vms - 1))); do
  lab_rxe_accepted_all "vm$i" "$tmp/c-start-$i" "$tmp/c-end-$i"
done
echo "ok: lab up in ${up_s} s, whole test $((SECONDS - started)) s"
