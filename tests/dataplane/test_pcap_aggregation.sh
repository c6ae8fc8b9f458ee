#!/usr/bin/env bash
# Integration: inagg on two net_pcap ports. scapy builds n workers' RoCEv2 WRITEs (rank r behind
# port r mod 2) plus background traffic; inagg aggregates and bridges; check_output.py verifies
# the output pcaps (sums exact, ICRCs valid by scapy, PSN order, background byte-identical).
#   test_pcap_aggregation.sh INAGG SRCDIR NAME [gen-pcap args...]
# Environment: INAGG_ARGS, more inagg options; EXPECT_LOG, an extended regex inagg's log must match.
set -uo pipefail
inagg=$1 src=$2 name=$3
shift 3
tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$tmp" "/var/run/dpdk/inagg-test-$name-$$"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 30 "$tmp/log"; exit 1; }

/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" "$@" >/dev/null || fail "gen-pcap $*"
vdevs=() outs=()
for f in "$tmp"/port*.pcap; do
  p=$(basename "$f" .pcap); p=${p#port}
  vdevs+=("--vdev=net_pcap$p,rx_pcap=$f,tx_pcap=$tmp/out$p.pcap")
  outs+=("$tmp/out$p.pcap")
done
timeout 120 "$inagg" -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="inagg-test-$name-$$" --log-level=lib.eal:error \
  "${vdevs[@]}" -- --job "$tmp/job.job" --socket "" --idle-exit 1 --mtu 4200 --mbufs 8192 --mbuf-budget 2048 \
  --resend-us 100000000 --capture "$tmp/capture.pcap" ${INAGG_ARGS:-} >"$tmp/log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "inagg exited with $rc"
grep -q "classifying in software" "$tmp/log" || fail "the rte_flow fallback was not reported"
grep -q "job 1: active" "$tmp/log" || fail "job not active at exit"
grep -Eq "job 1: .*bad_icrc|job_errors|stale" "$tmp/log" && fail "unexpected engine errors"
[ -z "${EXPECT_LOG:-}" ] || grep -Eq "$EXPECT_LOG" "$tmp/log" || fail "the log does not match $EXPECT_LOG"
/usr/bin/python3 "$src/tests/dataplane/check_output.py" "$tmp" "${outs[@]}" || fail "output check"
/usr/bin/python3 "$src/tests/agg/check_icrc_scapy.py" "$tmp/capture.pcap" 1 >/dev/null || fail "--capture pcap has bad ICRCs"
echo "ok: $name"
