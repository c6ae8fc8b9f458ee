#!/usr/bin/python3
"""Independent check of the ICRCs in a pcap the engine test wrote: every RoCEv2 packet's ICRC is
recomputed here, by scapy for IPv4 (scapy.contrib.roce) and with zlib over the masked IPv6
pseudo-header (scapy has no IPv6 ICRC). Prints "checked N packets" and exits 1 on any mismatch."""
import logging
import struct
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, IPv6, UDP, Ether, rdpcap, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def ipv6_icrc(ip_bytes: bytes) -> int:
    b = bytearray(ip_bytes)
    b[0] |= 0x0F
    b[1:4] = b"\xff\xff\xff"
    b[7] = 0xFF
    b[46:48] = b"\xff\xff"   # UDP checksum (IPv6 header is 40 bytes)
    b[48 + 4] = 0xFF         # BTH FECN/BECN/resv
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF


def main(path: str, expect_min: int) -> int:
    bad = checked = 0
    for i, pkt in enumerate(rdpcap(path)):
        if UDP not in pkt or pkt[UDP].dport != 4791:
            continue
        raw = bytes(pkt)
        stored = struct.unpack("<I", raw[-4:])[0]
        if IP in pkt:
            p2 = Ether(raw)
            del p2[BTH].icrc
            want = struct.unpack("<I", bytes(Ether(bytes(p2)))[-4:])[0]
        else:
            l3 = len(raw) - len(bytes(pkt[IPv6]))
            want = ipv6_icrc(raw[l3:-4])
        checked += 1
        if stored != want:
            bad += 1
            print(f"packet {i}: ICRC 0x{stored:08x}, scapy computes 0x{want:08x}")
    print(f"checked {checked} packets, {bad} bad ICRCs")
    return 1 if bad or checked < expect_min else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
