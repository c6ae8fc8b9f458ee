#!/usr/bin/python3
"""Sends RoCEv2 RC SEND_ONLY packets, built by scapy, out of a host interface (a lab tap, so they
reach that VM's rxe directly): the lab's control that a bad ICRC is caught by the guest's rxe and
seen by the test's counters.
  inject_roce.py IFACE DST_MAC SRC_IP DST_IP DQPN PSN COUNT good|bad
good: scapy's ICRC; bad: the same ICRC with its bits flipped."""
import logging
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, load_contrib, sendp  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def main(argv):
    if len(argv) != 9 or argv[8] not in ("good", "bad"):
        print(__doc__, file=sys.stderr)
        return 2
    iface, dst_mac, src_ip, dst_ip = argv[1:5]
    dqpn, psn, count, kind = int(argv[5], 0), int(argv[6], 0), int(argv[7]), argv[8]
    frames = []
    for i in range(count):
        # A source MAC no VM has: a switch that learns it learns nothing that matters.
        pkt = (Ether(src="02:77:00:00:09:09", dst=dst_mac) / IP(src=src_ip, dst=dst_ip, flags="DF", id=0x4000 + i) /
               UDP(sport=49152, dport=4791, chksum=0) /
               BTH(opcode=0x04, pkey=0xFFFF, dqpn=dqpn, psn=(psn + i) & 0xFFFFFF) / Raw(bytes(64)))
        raw = bytearray(bytes(pkt))
        if kind == "bad":
            for k in range(1, 5):
                raw[-k] ^= 0xFF
        frames.append(Ether(bytes(raw)))
    sendp(frames, iface=iface, verbose=False)
    print(f"sent {count} SEND_ONLY packets with {kind} ICRCs to QPN {dqpn} at {dst_ip} via {iface}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
