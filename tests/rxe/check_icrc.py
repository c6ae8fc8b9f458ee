#!/usr/bin/python3
"""Checks the ICRC of every RoCEv2 packet in a pcap (inagg --capture: every packet its engines
emitted, the regenerated sums among them) with scapy's own ICRC, an implementation independent of
inagg's CRC code.
  check_icrc.py PCAP
Prints "N packets, M with a bad ICRC" and the first bad ones; exit status 1 when any is bad or
there is no RoCEv2 packet at all."""
import logging
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, Ether, RawPcapReader, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    total = bad = 0
    for raw, _ in RawPcapReader(argv[1]):
        # IPv4 over Ethernet, UDP to 4791: picked from the bytes, so that scapy dissects only
        # RoCEv2 frames and each of them once.
        if len(raw) < 42 or raw[12:14] != b"\x08\x00" or raw[23] != 17:
            continue
        udp = 14 + (raw[14] & 0x0F) * 4
        if raw[udp + 2:udp + 4] != b"\x12\xb7":
            continue
        p = Ether(raw)
        if BTH not in p:
            continue
        total += 1
        p[BTH].icrc = None
        want = bytes(p)[-4:]
        if want != raw[-4:]:
            bad += 1
            if bad <= 5:
                print(f"bad ICRC: {p[IP].src} -> {p[IP].dst} QPN {p[BTH].dqpn:#x} PSN {p[BTH].psn:#x} opcode "
                      f"{p[BTH].opcode:#x}: has {raw[-4:].hex()}, scapy computes {want.hex()}")
    print(f"{total} RoCEv2 packets, {bad} with a bad ICRC")
    return 1 if bad or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
