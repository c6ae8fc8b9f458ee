#!/usr/bin/env bash
# End to end: the virtual rack (scripts/rack: 4 worker namespaces on veths), inagg switching
# between them on its ports (net_af_packet, the rack's default, or PORTS: scripts/rack --ports), and
# 4 inagg-worker processes running a --check'ed
# allreduce sweep (nccl-tests' options, both placements) in ina mode through it, with the sizes from one packet to several windows and a
# non-multiple tail, for the given dtype, optionally with random loss on every worker's link.
# Mode ina registers the job through the control socket from rank 0 (--register); mode ring runs
# the classic ring allreduce over the same transport, which the appliance only switches.
# PAYLOAD 4096 (RoCE MTU 4096) runs the rack at --mtu 4200 and inagg at --mtu 9000 (its mbufs then
# hold net_af_packet's 4352-byte frame slots), as bench/run allreduce does with BENCH_PAYLOAD=4096.
# CHANNELS (environment): the job's channels (--channels, docs/protocol.md section 22): every rank
# stripes its messages over that many RC connections, each a job of its own on the appliance.
#   test_rack.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR DTYPE LOSS_PERCENT MODE [PORTS [PAYLOAD]]
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 dtype=$5 loss=$6 mode=${7:-ina} ports=${8:-af_packet} payload=${9:-1024}
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
lossarg=()
[ "$loss" != 0 ] && lossarg=(--loss "$loss")
mtuarg=()
if [ "$payload" -gt 1024 ]; then
  mtuarg=(--mtu 4200)
  inagg_mtu=9000
fi
start_rack "${lossarg[@]}" "${mtuarg[@]}" --ports "$ports" --
grep -q "^inagg: port 0 (net_$ports)" "$tmp/inagg.log" || fail "inagg's ports are not net_$ports: $(grep '^inagg: port 0' "$tmp/inagg.log")"
# The rack's hosts receive in a NAPI kernel thread of their own (scripts/rack --host-napi threaded).
[ "$(ip netns exec "$(ns_w 0)" cat /sys/class/net/eth0/threaded)" = 1 ] || fail "worker 0's eth0 has no threaded NAPI"
# ACK timeout 200 ms: the RC retry budget (7 x 200 ms) must outlast a rank that is stalled computing
# its --check reference on a loaded machine (7 x 50 ms once did not); losses are recovered by the
# appliance's NAKs and an RTO that follows the round trip, not by this timeout.
channels=${CHANNELS:-1}
run_workers 4 -d "$dtype" --message 16384 --payload "$payload" -b 4 -e 200000 -f 7 -n 1 -w 0 -c 1 --ack-timeout-ms 200 \
  --timeout 90 --mode "$mode" --register "$tmp/ctl.sock" --channels "$channels"
if [ "$mode" = ring ]; then
  out=$("$ctl" --socket "$tmp/ctl.sock" list)
  grep -q "no jobs" <<<"$out" || fail "ring mode registered a job: $out"
  echo "ok: $n workers, ring, $dtype, loss $loss%, $ports ports, $payload-byte payloads: every element exact"
  exit 0
fi
stats=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats: $stats"
grep -q "^state active" <<<"$stats" || fail "job not active: $stats"
grep -q "^slots_released [1-9]" <<<"$stats" || fail "nothing released: $stats"
grep -q "^held_packets 0$" <<<"$stats" || fail "stuck slots: $stats"
# Every rank checked every element and every message's tally (the appliance summed it): with
# channels, each channel's messages were summed by that channel's engine job.
grep -q "job 1 added (4 workers, $channels channel" "$tmp/inagg.log" ||
  fail "the appliance did not add the job with $channels channel(s): $(grep 'job 1 added' "$tmp/inagg.log")"
if [ "$payload" -gt 2048 ]; then
  # Payloads above 2 KiB on average: packets no MTU-1500 path could carry went through.
  awk '$1 == "aggregated_packets" {p = $2} $1 == "aggregated_bytes" {b = $2} END {exit !(p > 0 && b / p > 2048)}' <<<"$stats" ||
    fail "the appliance aggregated no packets of more than 2 KiB on average with --payload $payload: $stats"
fi
if [ "$loss" != 0 ]; then
  recovered=$(awk '$1 == "naks_sent" || $1 == "retransmits_answered" || $1 == "resends" {s += $2} END {print s + 0}' <<<"$stats")
  [ "$recovered" -gt 0 ] || fail "loss injected but the appliance recovered nothing: $stats"
fi
echo "ok: $n workers, ina, $dtype, $channels channel(s), loss $loss%, $ports ports, $payload-byte payloads: every element exact; appliance: $(grep -E '^(slots_released|naks_sent|resends|retransmits_answered|held_packets) ' <<<"$stats" | tr '\n' ' ')"
# The same launch again while the first's job is still registered (it summed already): every rank
# refuses to join it mid-stream, naming the job and how to remove it, instead of failing later on
# its RC retries with every packet taken for an old one.
rerun=()
for r in $(seq 0 $((n - 1))); do
  ip netns exec "$(ns_w "$r")" "$worker" --workers "$n" --rank "$r" -d "$dtype" --message 16384 --payload "$payload" \
    -b 4 -e 200000 -f 7 -n 1 -w 0 -c 1 --ack-timeout-ms 200 --timeout 30 --mode ina --register "$tmp/ctl.sock" \
    --channels "$channels" >"$tmp/again$r.log" 2>&1 &
  rerun+=($!)
done
for r in $(seq 0 $((n - 1))); do
  wait "${rerun[$r]}" && fail "a second launch of job 1 ran while the first's was still registered: rank $r exited 0"
  grep -q "job 1 is already active on the appliance with this spec and has summed [1-9][0-9]* slots.*inagg-ctl remove 1" \
    "$tmp/again$r.log" || fail "second launch: rank $r did not say why: $(tail -n 3 "$tmp/again$r.log")"
done
# The second launch's add of the same job (rank 0's) left the first's as it was.
again=$("$ctl" --socket "$tmp/ctl.sock" stats 1) || fail "stats after the second launch: $again"
grep -q "^state active" <<<"$again" || fail "the second launch's add changed the first's job: $again"
echo "ok: a second launch of the same job, the first's still registered: every rank refused with the reason, the job kept"
