#!/usr/bin/env bash
# A station on one port claiming a job rank's MAC address (tests/dataplane/gen_mac_claims.py): a
# burst of other source addresses before the job's traffic, then gratuitous ARPs and plain unicast
# frames with each rank's MAC from a foreign port, before the rank is first seen and between its
# packets. A 3-worker job on three net_pcap ports (rank r behind port r), its ranks bound from the
# start (the job file names their ports and MACs), so every claim comes while the job runs and
# stops it (docs/binding.md, "While the job runs"), whatever flood came before. Checks: the job
# stopped, the reason naming a rank's MAC or address and the claiming port; every sum that left
# before exact, in PSN order, and out of the port of the station it is addressed to only (never
# the claimer's, never flooded: check_output.py --station-ports --partial).
#   test_mac_claims.sh INAGG SRCDIR REFUSED [gen_mac_claims.py options: --burst N --every K]
#                      [-- inagg options]
#     REFUSED: "refused" when claims come after a rank was seen (mac_moves_refused must count them,
#     and the journal name them at most once a second), "limited" when inagg runs with a per-port
#     limit below the burst (mac_limit_refused must count the addresses past it), else "any"
# On the bridge before sticky ranks and a keyed hash, each variant sent sums out of the wrong port:
# claims only before the job's traffic (--burst 0 --every 100000), the burst alone (--every 100000),
# claims between the job's packets (--burst 0 --every 4).
set -uo pipefail
inagg=$1 src=$2 refused=$3
shift 3
gen_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do gen_args+=("$1"); shift; done
[ $# -gt 0 ] && shift
# shellcheck source=../lib/appliance.sh
. "$src/tests/lib/appliance.sh" macclaims

step() { echo "== $*"; }
step "generate: 3 workers on 3 ports, and the claims"
/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 3 --ports 3 --payload 256 --message 1024 --messages 32 \
  --background 10 --max-frame 4000 >/dev/null || fail "gen-pcap"
/usr/bin/python3 "$src/tests/dataplane/gen_mac_claims.py" "$tmp" --ports 3 --workers 3 "${gen_args[@]}" || fail "gen_mac_claims.py"

step "replay through inagg"
vdevs=()
for p in 0 1 2; do vdevs+=(--vdev="net_pcap$p,rx_pcap=$tmp/port$p.pcap,tx_pcap=$tmp/out$p.pcap"); done
started=$SECONDS
timeout 300 "$inagg" -l 0 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
  "${vdevs[@]}" -- --job "$tmp/job.job" --socket "" --idle-exit 1 --mtu 4200 --mbufs 16384 --mbuf-budget 2048 \
  --resend-us 100000000 "$@" >"$tmp/log" 2>&1
rc=$?
took=$((SECONDS - started))
[ $rc -eq 0 ] || fail "inagg exited with status $rc"
grep -qi "sanitizer\|runtime error" "$tmp/log" && fail "sanitizer report in inagg's output"
grep -Eq "job 1 stopped: job 1: rank [0-2]'s (MAC 02:00:00:00:00:0[0-2]|address [0-9.]+) was seen (on|with MAC [0-9a-f:]+ on) port [0-2]( \(MAC [0-9a-f:]+\))? while the job ran" "$tmp/log" ||
  fail "job 1 was not stopped by the claims: $(grep -E '^job 1|job 1 stopped' "$tmp/log")"
echo "$(grep -o "job 1 stopped: .* while the job ran" "$tmp/log" | head -n 1)"

if [ "$refused" = refused ]; then
  grep -Eq "^lcore 0: .* mac_moves_refused [1-9]" "$tmp/log" || fail "no claim was refused and counted (mac_moves_refused)"
  count=$(grep -o "mac_moves_refused [0-9]*" "$tmp/log" | tail -n 1 | cut -d' ' -f2)
  lines=$(grep -c "a job rank's address on port" "$tmp/log")
  [ "$lines" -le $((took + 2)) ] || fail "$lines journal lines for $count refused claims in $took s (at most one a second)"
  echo "refused claims: $count counted, $lines logged in $took s"
fi
if [ "$refused" = limited ]; then
  grep -Eq "^lcore 0: .* mac_limit_refused [1-9]" "$tmp/log" || fail "no address past the port limit was counted"
  grep -q "holds its limit of" "$tmp/log" || fail "the port limit was never logged"
  echo "past the port limit: $(grep -o "mac_limit_refused [0-9]*" "$tmp/log" | tail -n 1)"
fi

step "check: the sums that left before the stop exact, in order, each out of its station's port only"
/usr/bin/python3 "$src/tests/dataplane/check_output.py" --station-ports 0,1,2 --partial "$tmp" "$tmp/out0.pcap" "$tmp/out1.pcap" \
  "$tmp/out2.pcap" || fail "output check"
echo "ok: mac claims"
