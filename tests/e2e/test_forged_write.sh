#!/usr/bin/env bash
# A fifth host on the virtual rack (worker namespace 4, no rank) forges the messages rank 1 expects
# from rank 0: RDMA WRITEs to rank 1's receive QP, one message each at the PSNs rank 0 would use,
# good ICRCs, the tally the appliance's sum would carry (4), at the fixed VA and rkey every rank
# once used, sent over and over.
#  1. Before the job registers, from an address no rank has: ranks 3, 2 and 1 start first and wait
#     for rank 0; once rank 1 has taken forged datagrams on its UDP port, the forger stops and rank
#     0 starts and registers the job. The appliance switched the forged WRITEs to rank 1 (it knew
#     no job of theirs): rank 1 must have taken none, and every rank ends exact.
#  2. While the job registers, from rank 0's own address: the forger runs from before the ranks
#     start until the job is active or refused. The appliance may refuse the job (rank 0's
#     address seen on two ports: docs/binding.md); then every rank stops with a reason. No rank
#     may exit 0 with a wrong sum.
#  3. A ring, from rank 0's address: no job on the appliance at all, the forged WRITEs reach rank 1
#     throughout its run; every rank ends exact.
# Rank 1 says what it refused: before its receive side opened (1), for their rkey (3).
#   test_forged_write.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=5      # the rack's hosts: ranks 0-3 and the forger
ranks=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
start_rack --
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
# Rank 0 is 10.77.0.1, rank 1 10.77.0.2 with MAC 02:77:00:00:00:02 (scripts/rack); the rack plan's
# QPs (RackPlan): rank 1's receive QP 0x201 (ring: 0x401), rank 0's first PSN 0xfff000. One
# 1024-byte message per allreduce, the receive region's halves 1024 bytes apart.
fpid=""
start_forger() {  # SRC_IP QPN LOGTAG
  ip netns exec "$(ns_w 4)" /usr/bin/python3 "$src/tests/e2e/forge_message.py" eth0 "$1" 10.77.0.2 \
    02:77:00:00:00:02 "$2" 0xfff000 16 1024 1024 0x7f0000000000 0x1234 4 >"$tmp/forger.$3.log" 2>&1 &
  fpid=$!
  others+=("$fpid")
  wait_alive "$fpid" 30 "the forger to start" grep -q "^sending" "$tmp/forger.$3.log" ||
    fail "the forger did not start: $(cat "$tmp/forger.$3.log")"
}
stop_forger() {
  kill "$fpid" 2>/dev/null
  wait "$fpid" 2>/dev/null
}
wpids=()
start_rank() {  # RANK LOGTAG WORKER_ARGS...
  local r=$1 tag=$2
  shift 2
  ip netns exec "$(ns_w "$r")" "$worker" --workers "$ranks" --rank "$r" --message 1024 --payload 1024 -b 1016 -e 1016 \
    -w 1 --ack-timeout-ms 200 "$@" >"$tmp/$tag.w$r.log" 2>&1 &
  wpids[r]=$!
  others+=($!)
}
# every rank exited 0 with every row exact; the failure names the rank and its last lines
ranks_exact() {  # LOGTAG
  local r
  for r in $(seq 0 $((ranks - 1))); do
    wait "${wpids[$r]}" || fail "$1: rank $r exited with $? under forged WRITEs: $(tail -n 3 "$tmp/$1.w$r.log")"
    table_exact "$tmp/$1.w$r.log" || fail "$1: rank $r took forged data for the sum: $(grep -v '^#' "$tmp/$1.w$r.log" | tail -n 3)"
  done
}
# refused COUNT of rank 1's transport line ("refused A from another address, B with another rkey, ...")
refused() {  # LOGTAG WHAT
  sed -n "s/^# rank 1: .* refused \([0-9]*\) from another address, \([0-9]*\) with another rkey, \([0-9]*\) to another QP, \([0-9]*\) before its receive side opened$/\1 \2 \3 \4/p" \
    "$tmp/$1.w1.log" | awk -v w="$2" '{print w == "source" ? $1 : w == "rkey" ? $2 : w == "qpn" ? $3 : $4}'
}
# rank 1's namespace has delivered at least N UDP datagrams to a socket (Udp InDatagrams)
# shellcheck disable=SC2016  # awk's own fields
udp_taken() { [ "$(ip netns exec "$(ns_w 1)" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ {print $2}' /proc/net/snmp)" -ge "$1" ]; }

# --- 1. ina: forged WRITEs before the job registers -----------------------------------------------
start_forger 10.77.0.9 0x201 before
for r in 3 2 1; do start_rank "$r" before -n 3 -c 3 --timeout 60 --register "$tmp/ctl.sock"; done
# Rank 1 has bound UDP 4791 and forged datagrams reach it, while rank 0 has not even started.
wait_alive "${wpids[1]}" 30 "rank 1 to take 20 forged datagrams on its UDP port" udp_taken 20 ||
  fail "rank 1 took no forged datagrams: $(cat "$tmp/before.w1.log" "$tmp/forger.before.log")"
stop_forger
start_rank 0 before -n 3 -c 3 --timeout 60 --register "$tmp/ctl.sock"
ranks_exact before
early=$(refused before early)
[ "${early:-0}" -gt 0 ] ||
  fail "before: rank 1 counted no WRITE refused before its receive side opened: $(grep '^# rank 1:' "$tmp/before.w1.log")"
out=$(C list) || fail "list: $out"
grep -q "^id=1 state=active" <<<"$out" || fail "before: job 1 not active: $out"
C remove 1 >/dev/null || fail "remove job 1"

# --- 2. ina: forged WRITEs while the job registers ------------------------------------------------
start_forger 10.77.0.1 0x201 while
# (A rank whose predecessor's packets the appliance drops waits for them until its --timeout.)
for r in 3 2 1 0; do start_rank "$r" while -n 3 -c 3 --timeout 20 --register "$tmp/ctl.sock" --job-id 2; done
settled() { C list | grep -Eq "^id=2 state=(active|refused)"; }
wait_for 60 "job 2 to become active (or be refused)" settled || fail "while: job 2 never became active: $(C list)"
stop_forger
stopped=0
for r in $(seq 0 $((ranks - 1))); do
  if wait "${wpids[$r]}"; then
    table_exact "$tmp/while.w$r.log" || fail "while: rank $r exited 0 with a wrong sum: $(grep -v '^#' "$tmp/while.w$r.log" | tail -n 3)"
  else
    grep -q "^inagg-worker: ." "$tmp/while.w$r.log" || fail "while: rank $r stopped without a reason: $(tail -n 3 "$tmp/while.w$r.log")"
    stopped=$((stopped + 1))
  fi
done
C remove 2 >/dev/null 2>&1  # (a refused job is gone by itself)

# --- 3. ring: forged WRITEs throughout, no job on the appliance ------------------------------------
start_forger 10.77.0.1 0x401 ring
for r in 0 1 2 3; do start_rank "$r" ring -n 1 -c 1 --timeout 60 --mode ring; done
ranks_exact ring
stop_forger
rkey=$(refused ring rkey)
[ "${rkey:-0}" -gt 0 ] || fail "ring: rank 1 counted no WRITE refused for its rkey: $(grep '^# rank 1:' "$tmp/ring.w1.log")"
echo "ok: forged messages with tally $ranks from a fifth host: before the job registered every rank exact, rank 1 refused $early; while it registered $stopped of $ranks ranks stopped with a reason, the others exact; ring exact, rank 1 refused $rkey for their rkey"
