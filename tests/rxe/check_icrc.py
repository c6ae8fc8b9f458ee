#!/usr/bin/python3
"""Checks the ICRC of every RoCEv2 packet in a pcap (inagg --capture: every packet its engines
emitted, the regenerated sums among them), independently of inagg's CRC code.
  check_icrc.py PCAP [SAMPLE]
Every packet: zlib's CRC-32 over the RoCEv2 pseudo-header as the IBTA annex masks it (8 bytes of
ones for the LRH; IP TOS, TTL and checksum, UDP checksum and the BTH's FECN/BECN/reserved byte all
ones), written here. That computation is itself checked against scapy's (scapy.contrib.roce, BTH
rebuilt with icrc=None) on the first SAMPLE packets (default 2000), on every 50th after them and on
every packet it calls bad: a packet where the two disagree fails the run, so the fast check cannot
drift from scapy's. Prints "N RoCEv2 packets, M with a bad ICRC (...)" and the first bad ones;
exit status 1 when any is bad, the two disagree, or there is no RoCEv2 packet at all."""
import logging
import struct
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, Ether, RawPcapReader, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def icrc_of(raw, ip):
    """The ICRC of an Ethernet frame RAW whose IPv4 header starts at IP (the last 4 bytes its ICRC)."""
    m = bytearray(raw[ip:-4])
    m[1] = 0xFF  # TOS
    m[8] = 0xFF  # TTL
    m[10:12] = b"\xff\xff"  # IP checksum
    udp = (m[0] & 0x0F) * 4
    m[udp + 6:udp + 8] = b"\xff\xff"  # UDP checksum
    m[udp + 8 + 4] = 0xFF  # BTH: FECN, BECN, reserved
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(m)) & 0xFFFFFFFF)


def scapy_icrc(raw):
    p = Ether(raw)
    if BTH not in p:
        return None, p
    p[BTH].icrc = None
    return bytes(p)[-4:], p


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    sample = int(argv[2]) if len(argv) == 3 else 2000
    total = bad = compared = disagreed = 0
    for raw, _ in RawPcapReader(argv[1]):
        # IPv4 over Ethernet, UDP to 4791, at least a BTH and an ICRC.
        if len(raw) < 42 or raw[12:14] != b"\x08\x00" or raw[23] != 17:
            continue
        udp = 14 + (raw[14] & 0x0F) * 4
        if raw[udp + 2:udp + 4] != b"\x12\xb7" or len(raw) < udp + 8 + 12 + 4:
            continue
        total += 1
        mine = icrc_of(raw, 14)
        wrong = mine != raw[-4:]
        if wrong or total <= sample or total % 50 == 0:
            theirs, p = scapy_icrc(raw)
            compared += 1
            if theirs != mine:
                disagreed += 1
                if disagreed <= 5:
                    print(f"packet {total}: this check computes {mine.hex()}, scapy {theirs.hex() if theirs else 'no BTH'}")
                continue
        if wrong:
            bad += 1
            if bad <= 5:
                print(f"bad ICRC: {p[IP].src} -> {p[IP].dst} QPN {p[BTH].dqpn:#x} PSN {p[BTH].psn:#x} opcode "
                      f"{p[BTH].opcode:#x}: has {raw[-4:].hex()}, scapy computes {mine.hex()}")
    print(f"{total} RoCEv2 packets, {bad} with a bad ICRC ({compared} of them also by scapy's BTH, "
          f"{disagreed} where the two disagree)")
    return 1 if bad or disagreed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
