#!/usr/bin/python3
"""Sends RoCEv2 RC SEND_ONLY packets, built by scapy, out of a host interface (a lab tap, so they
reach that VM's rxe directly): the lab's control that a bad ICRC is caught by the guest's rxe and
seen by the test's counters.
  inject_roce.py IFACE DST_MAC SRC_IP DST_IP DQPN PSN COUNT good|bad
good: scapy's ICRC; bad: the same ICRC with its bits flipped."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from roce_frames import frames as roce_frames  # noqa: E402
from scapy.all import sendp  # noqa: E402

SEND_ONLY = 0x04


def main(argv):
    if len(argv) != 9 or argv[8] not in ("good", "bad"):
        print(__doc__, file=sys.stderr)
        return 2
    iface, dst_mac, src_ip, dst_ip = argv[1:5]
    dqpn, psn, count, kind = int(argv[5], 0), int(argv[6], 0), int(argv[7]), argv[8]
    sendp(roce_frames(src_ip, dst_ip, dqpn, psn, count, kind, SEND_ONLY, bytes(64), dst_mac=dst_mac), iface=iface,
          verbose=False)
    print(f"sent {count} SEND_ONLY packets with {kind} ICRCs to QPN {dqpn} at {dst_ip} via {iface}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
