#!/usr/bin/env bash
# Two inagg processes joined by net_memif: A aggregates (workers' rank 0 on its net_pcap port,
# rank 1 behind its memif server port), B is a plain bridge between the memif client port and a
# net_pcap port holding rank 1. Rank 1's packets cross B and the memif link into A; the sums for
# rank 1's successor go back over memif and out of B. The outputs are checked as in the pcap test.
#   test_memif.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
pa="inagg-memif-a-$$" pb="inagg-memif-b-$$"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$tmp" "/var/run/dpdk/$pa" "/var/run/dpdk/$pb"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 15 "$tmp"/a.log "$tmp"/b.log 2>/dev/null; exit 1; }
# shellcheck disable=SC2054  # "-l 0,1" is one argument
eal=(-l 0,1 --no-huge --no-pci -m 512 --log-level=lib.eal:error)
opts=(--socket "" --mtu 1500 --mbufs 4096 --mbuf-budget 1024 --resend-us 100000000)

/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 2 --messages 4 --payload 1024 --message 2048 --background 0 >/dev/null || fail gen-pcap
"$inagg" "${eal[@]}" --file-prefix="$pa" --vdev="net_pcap0,rx_pcap=$tmp/port0.pcap,tx_pcap=$tmp/out0.pcap" \
  --vdev="net_memif0,role=server,socket=$tmp/memif.sock,socket-abstract=no" -- --job "$tmp/job.job" --idle-exit 6 --wait-link 20 "${opts[@]}" >"$tmp/a.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$tmp/memif.sock" ] && break; sleep 0.1; done
[ -S "$tmp/memif.sock" ] || fail "memif server socket never appeared"
timeout 60 "$inagg" "${eal[@]}" --file-prefix="$pb" --vdev="net_memif0,role=client,socket=$tmp/memif.sock,socket-abstract=no" \
  --vdev="net_pcap0,rx_pcap=$tmp/port1.pcap,tx_pcap=$tmp/out1.pcap" -- --idle-exit 4 --wait-link 20 "${opts[@]}" >"$tmp/b.log" 2>&1 || fail "inagg B exited with $?"
wait "$pid"; rc=$?
pid=""
[ $rc -eq 0 ] || fail "inagg A exited with $rc"
grep -Eq "job 1: active .* released_slots 8 " "$tmp/a.log" || fail "A did not release the 8 slots"
/usr/bin/python3 "$src/tests/dataplane/check_output.py" "$tmp" "$tmp/out0.pcap" "$tmp/out1.pcap" || fail "output check"
echo "ok: aggregation across two processes over net_memif"
