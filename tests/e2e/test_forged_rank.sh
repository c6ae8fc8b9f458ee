#!/usr/bin/env bash
# A fifth host on the virtual rack (w4) attacking a job of the four others, with frames scapy builds
# (tests/e2e/forge_rank.py: a good ICRC, a tally element of 1.0) (docs/binding.md):
#  1. the job is added before its ranks ever sent anything; w4 then forges rank 1's WRITEs (its
#     address, QPN and start PSN, and w1's MAC as the Ethernet source) every 5 ms, before and while
#     the ranks run: every rank must end exact, the forgeries dropped and counted from the first;
#     rank 0's job text reports its MAC, and the same job reporting another MAC is refused;
#  2. w4 owns a one-rank job of its own and sends a WRITE that fits, then stale ones, with w0's MAC,
#     then 2,000 with random MACs: w0's MAC must not move to w4's port (w1's datagrams to w0 reach
#     w0, none reach w4) and the frames are counted as not from the rank's MAC;
#  3. w4 claims rank 1's address (gratuitous ARPs) while a job of the four runs: the appliance
#     stops the job, and every rank stops with the reason naming the address and port 4 (listed
#     as refused, which each rank reads once its RC budget is spent), none exits 0;
#  4. w4 claims rank 1's address again before the ranks register: the job is refused, and every
#     rank stops with the reason naming the address and both ports, none exits 0.
# Before ranks were bound at registration, (1) gave every rank wrong sums with no error and (2)
# sent w1's traffic for w0 to w4.
#   test_forged_rank.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=5
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
start_rack --
n=4  # the job's ranks: w0..w3; w4 is the attacker
mac() { printf '02:77:00:00:00:%02x' $(($1 + 1)); }
common=(-d float --message 1024 --payload 1024 -b 1K -e 64K -f 4 -n 3 -w 0 -c 1 --ack-timeout-ms 200 --timeout 60
  --mode ina --register "$tmp/ctl.sock")
stat() { awk -v k="$2" '$1 == k {print $2}' <<<"$1"; }

echo "== 1. forged WRITEs of rank 1 from w4, the job added before its ranks sent anything"
ip netns exec "$(ns_w 0)" "$worker" --workers 4 --rank 0 --job-id 1 "${common[@]}" --print-job >"$tmp/job1" ||
  fail "--print-job: $(cat "$tmp/job1")"
grep -q "^conn = 0,10\.77\.0\.1,.*,any,$(mac 0)$" "$tmp/job1" || fail "rank 0 does not report its MAC: $(cat "$tmp/job1")"
out=$("$ctl" --socket "$tmp/ctl.sock" add "$tmp/job1") || fail "add: $out"
list=$("$ctl" --socket "$tmp/ctl.sock" list)
grep -q "id=1 state=binding" <<<"$list" || fail "job 1 is not waiting for its ranks to be seen: $list"
read -r r1_src _ r1_dst r1_dqpn r1_psn < <(awk -F'[ ,]+' '$1 == "conn" && $3 == "1" {print $4, $5, $6, $7, $8}' "$tmp/job1")
[ -n "${r1_psn:-}" ] || fail "no conn line for rank 1 in: $(cat "$tmp/job1")"
ip netns exec "$(ns_w 4)" /usr/bin/python3 "$src/tests/e2e/forge_rank.py" eth0 "$(mac 1)" "$(mac 2)" "$r1_src" \
  "$r1_dst" "$r1_dqpn" "$r1_psn" 1024 every 5 120 >"$tmp/forge1.log" 2>&1 &
forger=$!
others+=("$forger")
wait_alive "$forger" 30 "the forger to start" grep -q ready "$tmp/forge1.log" || fail "forger: $(cat "$tmp/forge1.log")"
run_workers 4 --job-id 1 "${common[@]}"
kill "$forger" 2>/dev/null
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats: $stats"
grep -q "^state active" <<<"$stats" || fail "job 1 not active: $stats"
[ "$(stat "$stats" drop_wrong_port)" -gt 0 ] || fail "w4's forgeries were not dropped as from the wrong port: $stats"
grep -q "rank 1's data connection: not from the port its rank was pinned to" "$tmp/inagg.log" ||
  fail "the journal does not name the forgeries: $(grep -i forg "$tmp/inagg.log" | head -3)"
echo "ok: every rank exact; $(stat "$stats" drop_wrong_port) forged WRITEs dropped (drop_wrong_port)"
"$ctl" --socket "$tmp/ctl.sock" remove 1 >/dev/null || fail "remove job 1"
# A registration whose rank 0 reports another MAC than its frames came with is refused.
sed -e 's/^id = 1$/id = 7/' -e "s/,any,$(mac 0)$/,any,02:77:00:00:00:99/" "$tmp/job1" >"$tmp/job7"
out=$("$ctl" --socket "$tmp/ctl.sock" add "$tmp/job7") && fail "a job whose rank 0 reports another MAC was added: $out"
grep -q "job 7: rank 0's address 10.77.0.1 registered with MAC 02:77:00:00:00:99 but came with $(mac 0) on port 0" <<<"$out" ||
  fail "the refusal of job 7: $out"
echo "ok: rank 0 reported its MAC; a registration reporting another is refused"

echo "== 2. a job owner's frames carrying another host's MAC, and random MACs"
ip netns exec "$(ns_w 4)" /usr/bin/python3 "$src/tests/e2e/station_probe.py" send 10.77.0.1 9 1 >/dev/null  # w4 is seen
cat >"$tmp/job3" <<JOB
id = 3
dtype = fp32
workers = 1
message_bytes = 1024
payload_bytes = 1024
window = 2
conn = 0, 10.77.0.5, 0x500, 10.77.0.5, 0x600, 0
JOB
wait_for 10 "job 3 to be added and bound" sh -c "'$ctl' --socket '$tmp/ctl.sock' add '$tmp/job3' >/dev/null; '$ctl' --socket '$tmp/ctl.sock' list | grep -q 'id=3 state=active'" ||
  fail "job 3 did not become active: $("$ctl" --socket "$tmp/ctl.sock" list)"
forge3() { ip netns exec "$(ns_w 4)" /usr/bin/python3 "$src/tests/e2e/forge_rank.py" eth0 "$@" >>"$tmp/forge3.log" 2>&1 || fail "forging: $(cat "$tmp/forge3.log")"; }
forge3 "$(mac 0)" "$(mac 4)" 10.77.0.5 10.77.0.5 0x600 0 1024 every 100 2  # one that fits, then stale ones
forge3 "$(mac 0)" "$(mac 4)" 10.77.0.5 10.77.0.5 0x600 0 1024 random-macs 2000
ip netns exec "$(ns_w 0)" /usr/bin/python3 "$src/tests/e2e/station_probe.py" recv 7777 6 >"$tmp/recv.log" 2>&1 &
others+=($!)
ip netns exec "$(ns_w 4)" /usr/bin/python3 "$src/tests/e2e/station_probe.py" sniff 10.77.0.1 6 >"$tmp/sniff.log" 2>&1 &
others+=($!)
wait_for 20 "the probes to listen" sh -c "grep -q ready '$tmp/recv.log' && grep -q ready '$tmp/sniff.log'" ||
  fail "probes: $(cat "$tmp/recv.log" "$tmp/sniff.log")"
ip netns exec "$(ns_w 1)" /usr/bin/python3 "$src/tests/e2e/station_probe.py" send 10.77.0.1 7777 20 >/dev/null
wait_for 20 "the probes to finish" sh -c "grep -q received '$tmp/recv.log' && grep -q sniffed '$tmp/sniff.log'" ||
  fail "probes did not finish: $(cat "$tmp/recv.log" "$tmp/sniff.log")"
grep -q "^received 20$" "$tmp/recv.log" || fail "w0 did not get w1's 20 datagrams: $(cat "$tmp/recv.log")"
grep -q "^sniffed 0$" "$tmp/sniff.log" || fail "w1's traffic for w0 reached w4: $(cat "$tmp/sniff.log")"
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 3) || fail "stats 3: $stats"
[ "$(stat "$stats" drop_wrong_mac)" -ge 2000 ] || fail "w4's frames with others' MACs were not dropped as drop_wrong_mac: $stats"
echo "ok: w0's MAC stayed on its port (20 of 20 datagrams to w0, none seen at w4); $(stat "$stats" drop_wrong_mac) frames counted as drop_wrong_mac"
"$ctl" --socket "$tmp/ctl.sock" remove 3 >/dev/null || fail "remove job 3"

echo "== 3. w4 claims rank 1's address while the job runs"
cat >"$tmp/garp.py" <<'PY'
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, Ether, sendp
sendp(Ether(src="02:77:00:00:00:05", dst="ff:ff:ff:ff:ff:ff") /
      ARP(op=2, hwsrc="02:77:00:00:00:05", psrc="10.77.0.2", hwdst="ff:ff:ff:ff:ff:ff", pdst="10.77.0.2"),
      iface="eth0", count=3, verbose=False)
PY
pids=()
running=(-d float --message 1024 --payload 1024 -b 64K -e 64K -n 100000 -w 0 -c 1 --ack-timeout-ms 200 --timeout 60
  --mode ina --register "$tmp/ctl.sock")
for r in 0 1 2 3; do
  ip netns exec "$(ns_w "$r")" "$worker" --workers 4 --rank "$r" --job-id 6 "${running[@]}" >"$tmp/d$r.log" 2>&1 &
  pids+=($!)
done
released() { "$ctl" --socket "$tmp/ctl.sock" stats 6 2>/dev/null | awk '$1 == "released_slots" {exit !($2 > 100)}'; }
wait_for 60 "job 6 to be active and release 100 slots" released || fail "job 6 never got going: $("$ctl" --socket "$tmp/ctl.sock" list)"
ip netns exec "$(ns_w 4)" /usr/bin/python3 "$tmp/garp.py" || fail "gratuitous ARP"
for r in 0 1 2 3; do
  wait "${pids[$r]}" && fail "rank $r exited 0 though another host claimed a rank's address: $(tail -3 "$tmp/d$r.log")"
  # Rank 1's address, claimed from port 4; or rank 0's, whose frames to rank 1 the claim sent to w4,
  # which forwarded them (as in 4).
  grep -Eq "job 6 refused: job 6: rank [01]'s address 10\.77\.0\.[12] was seen on port 4 \(MAC [0-9a-f:]+\) while the job ran, but the rank is bound to port [01]" "$tmp/d$r.log" ||
    fail "rank $r did not stop with the reason: $(tail -3 "$tmp/d$r.log")"
done
grep -q "job 6 stopped: job 6: rank [01]'s address" "$tmp/inagg.log" || fail "the journal does not say why job 6 stopped"
echo "ok: every rank stopped with: $(grep -Eo "rank [01]'s address 10\.77\.0\.[12] was seen on port 4 .* while the job ran" "$tmp/d0.log" | head -1)"

echo "== 4. w4 claims rank 1's address before the ranks register"
ip netns exec "$(ns_w 4)" /usr/bin/python3 "$tmp/garp.py" || fail "gratuitous ARP"
pids=()
for r in 0 1 2 3; do
  ip netns exec "$(ns_w "$r")" "$worker" --workers 4 --rank "$r" --job-id 4 "${common[@]}" >"$tmp/c$r.log" 2>&1 &
  pids+=($!)
done
for r in 0 1 2 3; do
  wait "${pids[$r]}" && fail "rank $r exited 0 though its job's binding was ambiguous: $(tail -3 "$tmp/c$r.log")"
  # Rank 1's address, claimed from port 4; or rank 0's, whose frames to rank 1 the claim sent to
  # w4, which forwarded them (w4 in the middle: then rank 0's address comes in on port 4 too).
  grep -Eq "10\.77\.0\.(2 was seen on ports 1 and 4|1 was seen on ports 0 and 4)" "$tmp/c$r.log" ||
    fail "rank $r did not stop with the reason: $(tail -3 "$tmp/c$r.log")"
done
echo "ok: every rank stopped with: $(grep -Eo "rank [01]'s address 10\.77\.0\.[12] was seen on ports [01] and 4[^:]*" "$tmp/c0.log" | head -1)"
