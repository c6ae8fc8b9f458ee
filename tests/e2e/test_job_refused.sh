#!/usr/bin/env bash
# The appliance refuses a job (its held packet buffers do not fit the mbuf budget): rank 0 reads the
# refusal in the reply to its `add`, the other ranks in `list` (state=refused), and every rank
# exits with the same reason within a second or two of rank 0, long before its own --timeout
# (docs/workers.md). Then a job that fits runs on the same appliance: the refusal does not
# stand in its way.
#   test_job_refused.sh INAGG INAGG_CTL INAGG_WORKER SRCDIR
set -uo pipefail
inagg=$1 ctl=$2 worker=$3 src=$4
n=4
# shellcheck source=../lib/rack.sh
. "$src/tests/lib/rack.sh"
C() { "$ctl" --socket "$tmp/ctl.sock" "$@"; }
start_rack --
# 2 x window 64 x 16 packets per message x 4 workers = 8192 held buffers; the budget is 4096.
# Rank 0 starts last, so the others are already waiting when the refusal comes.
wpids=()
for r in 3 2 1 0; do
  ip netns exec "$(ns_w "$r")" "$worker" --workers $n --rank "$r" --message 16384 --payload 1024 --window 64 -b 4 -e 4096 \
    --timeout 60 --register "$tmp/ctl.sock" >"$tmp/refused.w$r.log" 2>&1 &
  wpids[r]=$!
  others+=($!)
done
wait "${wpids[0]}"
rc=$?
t0=$(date +%s.%N)
[ "$rc" = 2 ] || fail "rank 0 exited with $rc, want 2 (refused): $(cat "$tmp/refused.w0.log")"
want=$(grep "^inagg-worker: the appliance refused the job: error: " "$tmp/refused.w0.log") || fail "rank 0: $(cat "$tmp/refused.w0.log")"
grep -q "needs up to 8192 held packet buffers" <<<"$want" || fail "rank 0's reason: $want"
for r in 1 2 3; do
  wait "${wpids[$r]}"
  rc=$?
  [ "$rc" = 2 ] || fail "rank $r exited with $rc, want 2 (refused): $(cat "$tmp/refused.w$r.log")"
done
elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
for r in 1 2 3; do
  [ "$(cat "$tmp/refused.w$r.log")" = "$want" ] || fail "rank $r: '$(cat "$tmp/refused.w$r.log")', rank 0: '$want'"
done
awk -v e="$elapsed" 'BEGIN {exit !(e < 2.5)}' || fail "ranks 1-3 exited ${elapsed} s after rank 0, want within 2 s"
out=$(C list) || fail "list: $out"
grep -q "^id=1 state=refused dtype=fp32 workers=4 .*error=\"job 1: needs up to 8192" <<<"$out" || fail "list: $out"
# A job that fits replaces the refusal.
wpids=()
for r in 0 1 2 3; do
  ip netns exec "$(ns_w "$r")" "$worker" --workers $n --rank "$r" --message 16384 --payload 1024 --window 2 -b 4 -e 65536 -f 16 \
    -n 1 -w 0 -c 1 --timeout 60 --register "$tmp/ctl.sock" >"$tmp/ok.w$r.log" 2>&1 &
  wpids[r]=$!
  others+=($!)
done
for r in 0 1 2 3; do wait "${wpids[$r]}" || fail "rank $r of the job that fits exited with $?: $(tail -n 3 "$tmp/ok.w$r.log")"; done
grep -q "^id=1 state=active" <<<"$(C list)" || fail "after the job that fits: $(C list)"
echo "ok: refused job: all 4 ranks exited with '${want#inagg-worker: }', ranks 1-3 within ${elapsed} s of rank 0; a job that fits then ran"
