#!/usr/bin/env bash
# Two tenants on the appliance's TCP control listener (--control-tcp), each owning its job ids and
# its hosts' addresses in the tenants file: alice (jobs 100-199, workers 0 and 1: 10.77.0.1-2, at
# most 1 job) and bob (jobs 200-299, workers 2 and 3: 10.77.0.3-4). Alice registers a job with
# exactly the QPs and addresses bob's ranks will use (inagg-worker --print-job): refused, with a
# reason that names nothing of bob, and nothing is registered. A second job of alice's is refused
# by her budget. Bob's ranks then register their job themselves over TCP with bob's credential and
# run checked allreduces beside alice's job on her own ranks: both exact and summed by the appliance.
# Neither tenant may see, query or remove the other's job.
#   test_tenants.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }  # the operator, on the local socket

rack_cmd up --workers "$n" >"$tmp/rack.log" 2>&1 || fail "rack up: $(cat "$tmp/rack.log")"
# The control network: a veth from here to bob's namespaces (workers 2 and 3), addresses of this
# run's own; the listener is on this side of the first one. The rack's teardown removes them.
subnet="10.78.$(($$ % 250))"
trap 'ip link del "$rack-c2" 2>/dev/null; ip link del "$rack-c3" 2>/dev/null; cleanup' EXIT
for w in 2 3; do
  base=$(((w - 2) * 4))
  ip link add "$rack-c$w" type veth peer name ctl0 netns "$(ns_w "$w")" &&
    ip addr add "$subnet.$((base + 1))/30" dev "$rack-c$w" && ip link set "$rack-c$w" up &&
    ip netns exec "$(ns_w "$w")" ip addr add "$subnet.$((base + 2))/30" dev ctl0 &&
    ip netns exec "$(ns_w "$w")" ip link set ctl0 up || fail "the control network's veth to worker $w"
done
ip netns exec "$(ns_w 3)" ip route add "$subnet.1/32" via "$subnet.5" || fail "worker 3's route to the listener"
listen="$subnet.1:$((18600 + $$ % 300))"
alice_secret=$(head -c 24 /dev/urandom | base64) bob_secret=$(head -c 24 /dev/urandom | base64)
cat >"$tmp/tenants" <<EOF
# tenant  jobs     its hosts' addresses, budgets                    secret
alice     100-199  prefixes=10.77.0.1,10.77.0.2 max_jobs=1          $alice_secret
bob       200-299  prefixes=10.77.0.3/32,10.77.0.4/32              $bob_secret
EOF
echo "alice $alice_secret" >"$tmp/alice.cred"
echo "bob $bob_secret" >"$tmp/bob.cred"
chmod 600 "$tmp/tenants" "$tmp/alice.cred" "$tmp/bob.cred"
start_inagg --control-tcp "$listen" --control-secret-file "$tmp/tenants"
A() { "$ctl" --socket "tcp://$listen" --control-secret-file "$tmp/alice.cred" "$@"; }
B() { "$ctl" --socket "tcp://$listen" --control-secret-file "$tmp/bob.cred" "$@"; }

shape=(--workers 2 --message 16384 --payload 1024 --window 2)
# Alice's job 150 on bob's ranks' addresses and QPs, as bob's ranks will use them.
"$worker" "${shape[@]}" --rank 0 --ip-base 10.77.0.2 --job-id 150 --print-job >"$tmp/on-bobs.job" ||
  fail "inagg-worker --print-job: $(cat "$tmp/on-bobs.job")"
grep -q "10.77.0.3" "$tmp/on-bobs.job" || fail "the job on bob's ranks does not name their addresses: $(cat "$tmp/on-bobs.job")"
out=$(A add "$tmp/on-bobs.job" 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "alice's job on bob's addresses: exit $rc, want 1 (refused): $out"
grep -q "job 150: rank 0's source address 10.77.0.3 is not one of tenant alice's (10.77.0.1/32, 10.77.0.2/32)" <<<"$out" ||
  fail "alice's refusal: $out"
grep -q "bob\|10.77.0.4" <<<"$out" && fail "alice's refusal names something of bob's: $out"
C list | grep -q "^id=150 " && fail "the refused job is registered: $(C list)"
# Alice's own job on her own ranks; a second one is over her budget of one job.
"$worker" "${shape[@]}" --rank 0 --ip-base 10.77.0.0 --job-id 150 --print-job >"$tmp/alice.job" || fail "--print-job"
out=$(A add "$tmp/alice.job" 2>&1) || fail "alice's job on her own addresses: $out"
sed 's/^id = 150$/id = 151/' "$tmp/alice.job" >"$tmp/alice2.job"
out=$(A add "$tmp/alice2.job" 2>&1) && fail "alice's second job was added past her budget: $out"
grep -q "job 151: tenant alice's budget of 1 jobs is used up (1 registered)" <<<"$out" || fail "alice's budget: $out"
C list | grep -q "^id=151 state=active" && fail "the job over the budget is registered: $(C list)"
# (listed as refused for a while, so that every rank of it learns why)

# Bob's ranks register their job 250 over TCP; alice's ranks run hers. All at once.
wpids=()
for r in 0 1 2 3; do
  if [ "$r" -lt 2 ]; then
    args=(--rank "$r" --ip-base 10.77.0.0 --job-id 150)
  else
    args=(--rank $((r - 2)) --ip-base 10.77.0.2 --job-id 250 --register "tcp://$listen" --control-secret-file "$tmp/bob.cred")
  fi
  ip netns exec "$(ns_w "$r")" "$worker" "${shape[@]}" "${args[@]}" -b 4 -e 65536 -f 16 -n 1 -w 0 -c 1 --timeout 60 \
    >"$tmp/w$r.log" 2>&1 &
  wpids[r]=$!
  others+=($!)
done
for r in 0 1 2 3; do
  wait "${wpids[$r]}" || fail "worker $r ($([ "$r" -lt 2 ] && echo alice || echo bob)'s) exited with $?: $(tail -n 3 "$tmp/w$r.log")"
  table_exact "$tmp/w$r.log" || fail "worker $r reports wrong elements: $(grep -v '^#' "$tmp/w$r.log" | tail -n 2)"
done
for id in 150 250; do
  agg=$(C stats "$id" | awk '$1 == "aggregated_packets" {print $2}')
  [ "${agg:-0}" -gt 0 ] || fail "job $id was not summed by the appliance: $(C stats "$id" 2>&1 | head -n 5)"
done
# Each tenant sees and touches its own job only.
[ "$(A list | grep -v " state=refused " | cut -d' ' -f1)" = "id=150" ] || fail "alice's list: $(A list)"
[ "$(B list | cut -d' ' -f1)" = "id=250" ] || fail "bob's list: $(B list)"
out=$(A stats 250 2>&1) && fail "alice read bob's job: $out"
out=$(A remove 250 2>&1) && fail "alice removed bob's job: $out"
grep -q "job 250 is not yours" <<<"$out" || fail "alice's removal of bob's job: $out"
C list | grep -q "^id=250 state=active" || fail "bob's job is gone: $(C list)"
echo "ok: alice's job on bob's addresses refused ($(grep -o "rank 0's source.*" <<<"$(A add "$tmp/on-bobs.job" 2>&1)")), her" \
  "second job refused by her budget; bob's ranks registered job 250 over TCP and it ran exact beside alice's job 150," \
  "both summed by the appliance"
