#!/usr/bin/env bash
# inagg --selftest (how to check that the appliance sees RoCE, docs/deploy.md section 6), on virtual
# ports, without hugepages:
# 1. two net_ring ports (each loops its TX back to its RX): each sees its own probe, byte for byte,
#    ICRC valid: PASS, exit 0;
# 2. a net_ring and a net_null port (TX dropped, RX garbage): the net_null port fails with the
#    hint, the net_ring one passes, exit 1;
# 3. a net_pcap port fed by scapy (3 RoCEv2 packets with a valid ICRC, 2 with a corrupted one,
#    1 cut inside its BTH, 4 frames that are not RoCE): the report's counts must be scapy's; the
#    probe it wrote to the TX pcap must be a RoCEv2 RC SEND_ONLY whose ICRC scapy recomputes.
#   test_selftest.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
prefix="inagg-selftest-$$"
trap 'rm -rf "$tmp" "/var/run/dpdk/$prefix"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() {  # VDEV... -> $out, $rc
  local vdevs=()
  for v in "$@"; do vdevs+=("--vdev=$v"); done
  out=$("$inagg" --no-huge --no-pci -m 256 --file-prefix="$prefix" --log-level=lib.eal:error --log-level='inagg.*:warning' \
    "${vdevs[@]}" -- --mtu 1500 --mbufs 4096 --mbuf-budget 1024 --selftest --selftest-time 1 2>&1)
  rc=$?
}

run net_ring0 net_ring1
[ "$rc" = 0 ] || fail "two net_ring ports: exit $rc, want 0: $out"
for p in 0 1; do
  grep -q "^port $p (net_ring): link up.*probe sent; received 1 frames, 1 RoCEv2 with a valid ICRC (0 bad ICRC, 0 malformed); probes back from port $p: PASS$" <<<"$out" ||
    fail "net_ring port $p: $out"
done
grep -q "^selftest: PASS (2 of 2 ports see RoCEv2)$" <<<"$out" || fail "verdict: $out"

run net_ring0 net_null0
[ "$rc" = 1 ] || fail "net_ring + net_null: exit $rc, want 1: $out"
grep -q "^port 0 (net_ring): .*probes back from port 0: PASS$" <<<"$out" || fail "net_ring port next to net_null: $out"
grep -q "^port 1 (net_null): .* 0 RoCEv2 with a valid ICRC .*probes back from none: FAIL$" <<<"$out" || fail "net_null port: $out"
grep -q "^  port 1: no RoCEv2 packet with a valid ICRC arrived in 1000 ms" <<<"$out" || fail "no hint for the net_null port: $out"
grep -q "^selftest: FAIL (1 of 2 ports see RoCEv2)$" <<<"$out" || fail "verdict: $out"

/usr/bin/python3 - "$tmp/in.pcap" <<'PY' || fail "scapy could not write the input pcap"
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, DNS, Ether, IP, UDP, Raw, wrpcap, load_contrib
load_contrib("roce")
from scapy.contrib.roce import BTH
def roce(psn):
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") / \
        UDP(sport=50000, dport=4791, chksum=0) / BTH(opcode=0x04, dqpn=0x123, psn=psn) / Raw(b"\x11" * 64)
good = [Ether(bytes(roce(p))) for p in range(3)]
bad = []
for p in (3, 4):
    b = bytearray(bytes(roce(p)))
    b[-1] ^= 0xFF  # the ICRC's last byte
    bad.append(Ether(bytes(b)))
cut = Ether(bytes(roce(5))[:14 + 20 + 8 + 6])  # 6 bytes of a BTH, IP and UDP lengths fixed below
cut[IP].len = None; cut[IP].chksum = None; cut[UDP].len = None
cut = Ether(bytes(cut))
plain = [Ether() / ARP(), Ether() / IP() / UDP(dport=53) / DNS(), Ether(type=0x88cc) / Raw(b"\x00" * 50),
         Ether() / IP() / UDP(dport=4792) / Raw(b"\x00" * 40)]
wrpcap(sys.argv[1], good + bad + [cut] + plain)
PY
run "net_pcap0,rx_pcap=$tmp/in.pcap,tx_pcap=$tmp/out.pcap"
[ "$rc" = 0 ] || fail "net_pcap port fed RoCEv2: exit $rc, want 0: $out"
grep -q "^port 0 (net_pcap): .*probe sent; received 10 frames, 3 RoCEv2 with a valid ICRC (2 bad ICRC, 1 malformed); probes back from none: PASS$" <<<"$out" ||
  fail "counts differ from scapy's frames (10 frames: 3 good, 2 bad ICRC, 1 malformed): $out"
/usr/bin/python3 - "$tmp/out.pcap" "$src/tests/dataplane" <<'PY' || fail "the probe on the wire is not what the selftest says"
import sys
sys.path.insert(0, sys.argv[2])
from check_output import icrc_ok  # scapy's ICRC, recomputed
from scapy.all import IP, UDP, rdpcap
from scapy.contrib.roce import BTH
frames = rdpcap(sys.argv[1])
assert len(frames) == 1, f"{len(frames)} frames on the TX pcap, want the probe alone"
p = frames[0]
assert p[UDP].dport == 4791 and p[IP].dst == "192.0.2.2", p.summary()
assert p[BTH].opcode == 0x04 and p[BTH].dqpn == 0xFFFFFE, p[BTH].show(dump=True)
assert icrc_ok(bytes(p)), "the probe's ICRC does not verify"
assert bytes(p[BTH].payload).startswith(b"inagg-selftest"), bytes(p[BTH].payload)
PY
echo "ok: selftest passes on looped ports, fails with a hint on net_null, counts scapy's frames exactly, probe verified by scapy"
