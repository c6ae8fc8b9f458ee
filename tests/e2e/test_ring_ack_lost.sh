#!/usr/bin/env bash
# Ring allreduce, one lost ACK: 4 inagg-worker ranks on loopback in a network namespace of this
# test's own (unshare, no fixed names, so no shared lock), run a --check'ed bf16 ring over two rows
# whose steps need different numbers of messages (9604 bytes: 1 message per step, 67228: 2). An
# nftables rule drops exactly one packet: the ACK of rank 2's last packet of the first row. Rank 2
# then waits for its ACK timeout while its predecessor, which no longer waits for it, runs n-1
# steps ahead into the second row and writes into rank 2's receive region. Each step's staging area
# must not move with the row's size, or that write lands on the step rank 2 has not read yet (the
# e2e_rack_ring_bf16_loss1 failure: 1200 wrong elements in the 9604-byte row).
#   test_ring_ack_lost.sh INAGG_WORKER
set -uo pipefail
worker=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a network namespace and nftables)"; exit 77; }
for c in unshare nft ip; do command -v "$c" >/dev/null || { echo "SKIP: no $c"; exit 77; }; done
if [ -z "${INAGG_RING_NETNS:-}" ]; then
  INAGG_RING_NETNS=1 exec unshare --net "$0" "$@"
fi
# shellcheck source=../../scripts/lib/exchange_secret.sh
. "$(dirname "$0")/../../scripts/lib/exchange_secret.sh"
export_exchange_secret  # the job's secret for the ranks' meeting, as a launcher hands it over
tmp=$(mktemp -d)
wpids=()
cleanup() {
  for p in "${wpids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 8 "$tmp"/*.log; exit 1; }

n=4 victim=2 message=16384 payload=1024 first=9604 last=67228 es=2
ip link set lo up || fail "lo up"
# The ACK to drop: rank 2's PSN after the first row, as inagg-worker numbers them: its start PSN
# (0xfff000 + 101 r), then two allreduces (the timed one and the checked one, out of place only),
# each 2(n-1) steps of one chunk (ceil(elements / n) elements) padded to whole messages of
# message/payload packets each.
chunk=$(((first / es + n - 1) / n * es))
msgs=$(((chunk + message - 1) / message))
packets=$((2 * 2 * (n - 1) * msgs * message / payload))
psn=$(printf '0x%06x' $(((0xfff000 + 101 * victim + packets - 1) & 0xffffff)))
victim_ip=127.0.1.$((victim + 1)) succ_ip=127.0.1.$(((victim + 1) % n + 1))
nft -f - <<EOF || fail "nftables rule"
table inet ring_ack_lost {
  set dropped { type ipv4_addr; flags dynamic; }
  chain out {
    type filter hook output priority 0;
    ip saddr @dropped accept
    ip saddr $succ_ip ip daddr $victim_ip udp dport 4791 @th,64,8 0x11 @th,136,24 $psn add @dropped { ip saddr } counter drop
  }
}
EOF
for r in $(seq 0 $((n - 1))); do
  "$worker" --workers $n --rank "$r" --ip-base 127.0.1.0 --mode ring -d bfloat16 --message $message --payload $payload \
    -b $first -e $last -f 7 -n 1 -w 0 -c 1 --in-place 0 --ack-timeout-ms 300 --timeout 30 >"$tmp/w$r.log" 2>&1 &
  wpids+=($!)
done
for r in $(seq 0 $((n - 1))); do
  wait "${wpids[$r]}" || fail "rank $r exited with $? ($(grep -m1 -E 'differs|inagg-worker:' "$tmp/w$r.log"))"
done
wpids=()
for r in $(seq 0 $((n - 1))); do
  # Rank 0 prints the job's table (#wrong, field 9, summed over the ranks); each other rank a
  # closing line with its own count of sizes and wrong elements.
  if [ "$r" = 0 ]; then
    awk '!/^#/ && NF >= 9 && $9 != "0" {bad = 1} END {exit bad}' "$tmp/w$r.log" || fail "the job's table reports wrong elements"
    [ "$(grep -c '^ ' "$tmp/w$r.log")" = 2 ] || fail "rank 0 did not print both rows"
  else
    grep -q "^# rank $r: 2 sizes, 2 checked placements, 0 wrong elements" "$tmp/w$r.log" ||
      fail "rank $r: $(grep "^# rank $r: [0-9]* sizes" "$tmp/w$r.log")"
  fi
done
# The scenario happened: exactly that ACK was dropped, and rank 2 recovered it by its timer.
dropped=$(nft list chain inet ring_ack_lost out | sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
[ "$dropped" = 1 ] || fail "the rule dropped ${dropped:-no} packets, not the one ACK with PSN $psn (did inagg-worker's PSN or chunk layout change?)"
grep -Eq "rank $victim: sent .* [1-9][0-9]* timeouts" "$tmp/w$victim.log" || fail "rank $victim saw no ACK timeout: $(grep "rank $victim: sent" "$tmp/w$victim.log")"
echo "ok: ring, $n ranks, bf16, rows $first and $last, the ACK of rank $victim's PSN $psn lost: every element exact"
