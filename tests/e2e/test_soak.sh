#!/usr/bin/env bash
# The soak: ROUNDS jobs one after another in the virtual rack, every link
# impaired both ways (scripts/rack --impair: loss, duplicates and reordering, what tc netem would
# do; this kernel has no netem), each job ITERS + 1 checked ina allreduces of SIZE bytes by 4
# workers (-c ITERS+1, out of place, after one timed allreduce). After each job: every element exact (the workers' --check), no stuck slot (held 0), the
# job removed, and the appliance's packet buffers in use back to the level after the first job: nothing leaks from job to job.
#   test_soak.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR ROUNDS SIZE ITERS [IMPAIR]
# CI runs a short version; docs/reliability.md records a long one (make it with larger ROUNDS/SIZE/ITERS).
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4 rounds=$5 size=$6 iters=$7 impair=${8:-loss=1,dup=1,reorder=25}
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
worker_failure_hint() { echo "the appliance's job: $(C stats 1 2>&1 | tr '\n' ' ')"; }

start_rack --impair "$impair" -- --metrics 127.0.0.1:0
url=$(sed -n 's|^inagg: metrics at \(http://[^ ]*\)$|\1|p' "$tmp/inagg.log")
[ -n "$url" ] || fail "inagg did not say where its metrics are"
metric() { /usr/bin/python3 -c "import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().splitlines():
    if l.split(' ')[0] == sys.argv[2]: print(int(float(l.split(' ')[1])))" "$url" "$1"; }
no_jobs() { C list | grep -q "no jobs"; }
slack=64  # buffers in flight when the gauge is read (the lcores keep forwarding ARP and the like); caches count as free
baseline="" total_naks=0 total_resends=0 total_dups=0 t0=$SECONDS
for round in $(seq 1 "$rounds"); do
  ts=$SECONDS
  worker_context="round $round: "
  run_workers 1 -d float --minbytes "$size" --maxbytes "$size" -n 1 -w 0 -c $((iters + 1)) --in-place 0 --seed "$round" \
    --ack-timeout-ms 200 --timeout 300 --register "$tmp/ctl.sock"
  stats=$(C stats 1) || fail "round $round: stats: $stats"
  grep -q "^state active" <<<"$stats" || fail "round $round: job not active: $stats"
  grep -q "^held_packets 0$" <<<"$stats" || fail "round $round: stuck slots: $(grep -E '^(held|retained)' <<<"$stats")"
  field() { awk -v k="$1" '$1 == k {print $2}' <<<"$stats"; }
  naks=$(field naks_sent) resends=$(field resends) dups=$(($(field duplicates_collecting) + $(field duplicates_dropped) + $(field retransmits_answered)))
  total_naks=$((total_naks + naks)) total_resends=$((total_resends + resends)) total_dups=$((total_dups + dups))
  out=$(C remove 1) || fail "round $round: remove: $out"
  wait_for 10 "job 1 to be gone" no_jobs || fail "round $round: job 1 still listed: $(C list)"
  in_use=$(metric inagg_mbufs_in_use) || fail "round $round: no inagg_mbufs_in_use from $url"
  [ -z "$baseline" ] && baseline=$in_use
  echo "round $round: $((iters + 1)) x $size B exact in $((SECONDS - ts)) s; naks_sent $naks resends $resends duplicates $dups; mbufs in use $in_use (after round 1: $baseline)"
  [ "$in_use" -le $((baseline + slack)) ] || fail "round $round: $in_use mbufs in use, $baseline after round 1: a leak"
done
[ $((total_naks + total_resends + total_dups)) -gt 0 ] || fail "the links were impaired but the appliance recovered nothing"
echo "ok: $rounds jobs x $((iters + 1)) allreduces of $size B, 4 workers, every link impaired ($impair): every element exact, no stuck slot, no leak; $((SECONDS - t0)) s; naks_sent $total_naks resends $total_resends duplicates $total_dups"
