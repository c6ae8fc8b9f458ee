#!/usr/bin/env bash
# dpdk-dumpcap captures live from an inagg port. inagg starts rte_pdump in the
# primary; dumpcap is a secondary process, so the primary's memory must be in hugepages: the test
# mounts a hugetlbfs of its own (in a private mount namespace) and, when fewer than 160 2 MiB pages
# are free, reserves the missing ones and gives them back at the end. inagg bridges two net_pcap
# ports looping background frames (no job); every frame dumpcap writes from port 0 (its RX and its
# TX) must be one of those frames, byte for byte (scapy). Root only (exit 77 otherwise).
#   test_dumpcap.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (hugepages, hugetlbfs)"; exit 77; }
command -v dpdk-dumpcap >/dev/null || { echo "SKIP: no dpdk-dumpcap (Debian package dpdk)"; exit 77; }
if [ -z "${INAGG_IN_OWN_MNTNS:-}" ]; then
  exec unshare -m --propagation private env INAGG_IN_OWN_MNTNS=1 "$0" "$@"
fi
# shellcheck source=../../scripts/lib/wait.sh
. "$src/scripts/lib/wait.sh"
pages=/sys/kernel/mm/hugepages/hugepages-2048kB
need=160  # inagg's -m 256 and the capture ring and pool dumpcap makes in its memory
tmp=$(mktemp -d)
prefix="inagg-dumpcap-$$"
pid="" added=0
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  mountpoint -q "$tmp/huge" && umount "$tmp/huge"
  [ "$added" -gt 0 ] && echo $(($(cat "$pages/nr_hugepages") - added)) >"$pages/nr_hugepages"
  rm -rf "$tmp" "/var/run/dpdk/$prefix"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 20 "$tmp/log"; exit 1; }

[ -d "$pages" ] || { echo "SKIP: no 2 MiB hugepages on this kernel"; exit 77; }
free=$(cat "$pages/free_hugepages")
if [ "$free" -lt "$need" ]; then
  added=$((need - free))
  echo $(($(cat "$pages/nr_hugepages") + added)) >"$pages/nr_hugepages" 2>/dev/null
  [ "$(cat "$pages/free_hugepages")" -ge "$need" ] || { echo "SKIP: cannot reserve $need free 2 MiB hugepages"; exit 77; }
fi
mkdir "$tmp/huge" && mount -t hugetlbfs -o pagesize=2M nodev "$tmp/huge" || fail "mount a hugetlbfs"

/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 0 --background 40 --max-frame 1514 >/dev/null || fail gen-pcap
# --base-virtaddr: dumpcap must map inagg's memory at the same addresses; left to the kernel they
# land among the shared libraries, where dumpcap's own (randomised) libraries sometimes sit
# ("EAL: Cannot init memory"). 0x300000000000 is above ASan's shadow and below its allocator.
"$inagg" -l 0 --base-virtaddr=0x300000000000 --huge-dir "$tmp/huge" -m 256 --no-pci --file-prefix="$prefix" --log-level=lib.eal:error \
  --vdev="net_pcap0,rx_pcap=$tmp/port0.pcap,infinite_rx=1" --vdev="net_pcap1,rx_pcap=$tmp/port1.pcap,infinite_rx=1" \
  -- --socket "" --mtu 1500 --mbufs 4096 --mbuf-budget 1024 >"$tmp/log" 2>&1 &
pid=$!
wait_alive "$pid" 60 "inagg to forward" grep -q "^inagg: forwarding on" "$tmp/log" || fail "inagg did not start"
grep -q "rte_pdump) unavailable" "$tmp/log" && fail "inagg could not start rte_pdump"
timeout 60 dpdk-dumpcap --file-prefix="$prefix" -i 0 -c 200 -s 2048 -q -w "$tmp/cap.pcapng" >"$tmp/dumpcap.log" 2>&1 ||
  fail "dpdk-dumpcap: $(tail -n 5 "$tmp/dumpcap.log")"
/usr/bin/python3 - "$tmp" <<'PY' || fail "the capture does not hold port 0's frames"
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import rdpcap
d = sys.argv[1]
known = {bytes(p) for f in ("port0.pcap", "port1.pcap") for p in rdpcap(f"{d}/{f}")}
port0 = {bytes(p) for p in rdpcap(f"{d}/port0.pcap")}
cap = [bytes(p) for p in rdpcap(f"{d}/cap.pcapng")]
strange = [c for c in cap if c not in known]
print(f"dumpcap wrote {len(cap)} frames from port 0: {sum(c in port0 for c in cap)} of its own input, "
      f"{sum(c in known and c not in port0 for c in cap)} forwarded to it from port 1, {len(strange)} unknown")
raise SystemExit(1 if len(cap) < 200 or strange or not any(c in port0 for c in cap) else 0)
PY
kill -INT "$pid"
wait_for 10 "inagg to exit" bash -c "! kill -0 $pid" || fail "inagg did not exit after SIGINT"
wait "$pid"; rc=$?
pid=""
[ $rc -eq 0 ] || fail "inagg exited with $rc"
echo "dpdk-dumpcap captured from inagg's port 0"
