#!/usr/bin/python3
"""Sends forged ina messages, built by scapy, out of an interface until it is stopped: a host on the
rack posing as a rank's predecessor. Each message is one RDMA WRITE_ONLY_WITH_IMMEDIATE (message
bytes = payload bytes) with a good ICRC, laid out as inagg-worker's fp32 messages are (docs/protocol.md,
"The tally"): the tally TALLY in the first and the last element, 1000.0 in every other. Message i
has PSN PSN + i and lands at VA + (i % 2) x HALF, where an ina rank's allreduce i would put it (the
receive region's two halves in turn).
  forge_message.py IFACE SRC_IP DST_IP DST_MAC DQPN PSN COUNT MESSAGE_BYTES HALF VA RKEY TALLY
The COUNT messages are sent over and over, one every 2 ms, until the process is ended."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from roce_frames import frames as roce_frames  # noqa: E402
from scapy.all import sendp  # noqa: E402

WRITE_ONLY_WITH_IMMEDIATE = 0x0B


def main(argv):
    if len(argv) != 13:
        print(__doc__, file=sys.stderr)
        return 2
    iface, src_ip, dst_ip, dst_mac = argv[1:5]
    dqpn, psn, count, size, half, va, rkey = (int(a, 0) for a in argv[5:12])
    tally = float(argv[12])
    elements = size // 4
    data = struct.pack("<f", tally) + struct.pack("<f", 1000.0) * (elements - 2) + struct.pack("<f", tally)
    pkts = []
    for i in range(count):
        reth = struct.pack(">QII", va + (i % 2) * half, rkey, size)  # virtual address, rkey, DMA length
        imm = struct.pack(">I", i)
        # IP ID 0 with DF, as a software rank sends: its ICRC then verifies at a rank reading a UDP
        # socket, which rebuilds the IP header it cannot see with ID 0 (roce_socket.hpp).
        pkts += roce_frames(src_ip, dst_ip, dqpn, psn + i, 1, "good", WRITE_ONLY_WITH_IMMEDIATE, reth + imm + data,
                            dst_mac=dst_mac, ip_id=0)
    print(f"sending {count} forged messages from {src_ip} to QPN {dqpn:#x} at {dst_ip} (PSN {psn:#x} on, VA {va:#x}, "
          f"rkey {rkey:#x}, tally {tally:g}) via {iface}", flush=True)
    sendp(pkts, iface=iface, loop=1, inter=0.002, verbose=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
