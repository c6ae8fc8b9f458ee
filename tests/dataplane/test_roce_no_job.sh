#!/usr/bin/env bash
# RoCEv2 with no job registered: inagg is then a plain switch for it too. On two net_pcap ports,
# scapy's RoCEv2 WRITEs of 4 ranks (and background frames) with no --job: every frame leaves by
# the other port byte for byte, in order (scapy reads both sides), the engine counts every RoCEv2
# frame as passed through, and a frame cut inside its BTH, which the engine drops as malformed
# when something is registered, is bridged like the rest.
#   test_roce_no_job.sh INAGG SRCDIR
set -uo pipefail
inagg=$1 src=$2
tmp=$(mktemp -d)
prefix="inagg-test-nojob-$$"
cleanup() { rm -rf "$tmp" "/var/run/dpdk/$prefix"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -n 20 "$tmp/log"; exit 1; }

/usr/bin/python3 "$src/scripts/gen-pcap" --out "$tmp" --workers 4 --payload 1024 --message 4096 --messages 4 \
  --background 20 >/dev/null || fail "gen-pcap"
# One more frame on port 0: a RoCEv2 WRITE cut inside its BTH (UDP to 4791, 6 bytes of BTH).
/usr/bin/python3 - "$tmp/port0.pcap" <<'PY' || fail "appending the cut frame"
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Raw, rdpcap, wrpcap
frames = list(rdpcap(sys.argv[1]))
cut = Ether(src="02:00:00:00:00:31", dst="02:00:00:00:00:32") / IP(src="10.9.0.1", dst="10.9.0.2") / \
    UDP(sport=49152, dport=4791) / Raw(bytes([0x0a, 0x40, 0xff, 0xff, 0, 0]))
cut.time = frames[-1].time + 1e-6
wrpcap(sys.argv[1], frames + [cut])
PY
timeout 120 "$inagg" -l 0,1 --no-huge --no-pci -m 1024 --file-prefix="$prefix" --log-level=lib.eal:error \
  --vdev="net_pcap0,rx_pcap=$tmp/port0.pcap,tx_pcap=$tmp/out0.pcap" \
  --vdev="net_pcap1,rx_pcap=$tmp/port1.pcap,tx_pcap=$tmp/out1.pcap" \
  -- --socket "" --idle-exit 1 --mtu 4200 --mbufs 8192 --mbuf-budget 2048 >"$tmp/log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "inagg exited with $rc"
roce=$(/usr/bin/python3 - "$tmp" <<'PY'
import logging, sys
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import UDP, rdpcap
d = sys.argv[1]
roce = 0
for a, b in ((0, 1), (1, 0)):
    sent = [bytes(p) for p in rdpcap(f"{d}/port{a}.pcap")]
    got = [bytes(p) for p in rdpcap(f"{d}/out{b}.pcap")]
    if got != sent:
        sys.exit(f"port {a} -> {b}: {len(sent)} frames in, {len(got)} out; first difference at "
                 f"{next((i for i, (x, y) in enumerate(zip(sent, got)) if x != y), min(len(sent), len(got)))}")
    roce += sum(1 for p in rdpcap(f"{d}/port{a}.pcap") if UDP in p and p[UDP].dport == 4791)
print(roce)
PY
) || fail "the frames were not bridged byte for byte: $roce"
passthrough=$(awk '/^engine:/ {for (i = 1; i <= NF; i++) if ($i == "passthrough") print $(i + 1)}' "$tmp/log")
malformed=$(awk '/^engine:/ {for (i = 1; i <= NF; i++) if ($i == "malformed") print $(i + 1)}' "$tmp/log")
[ "$passthrough" = "$roce" ] || fail "the engine counted ${passthrough:-no} passthrough frames, scapy sees $roce RoCEv2 frames"
[ "${malformed:-0}" = 0 ] || fail "with no job the engine dropped $malformed frames as malformed"
echo "ok: no job: $roce RoCEv2 frames (one cut inside its BTH) and the background bridged byte for byte, $passthrough counted passed through"
