#!/usr/bin/python3
"""Adds frames that claim the job's ranks' MAC addresses from a foreign port to gen-pcap's pcaps, for
test_mac_claims.sh. Rank r's station (gen-pcap's mac(r)) is behind port r mod PORTS; each claim comes
in on port (r + 1) mod PORTS:

  - before the job's traffic on that port: a burst of BURST frames from other source addresses
    (enough to fill the bridge's table), then a gratuitous ARP (broadcast) and a plain unicast
    frame with each rank's MAC as source;
  - then one claim of each kind again after every EVERY honest frames, to the end.

  gen_mac_claims.py GEN_DIR --ports PORTS --workers N [--burst 8192] [--every 4]
Writes claims.txt: "<port> <count>" lines, the frames added per port.
"""
import argparse
import logging
import os

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ARP, Ether, IP, UDP, Raw, rdpcap, wrpcap  # noqa: E402


def mac(rank: int) -> str:  # as gen-pcap
    return "02:00:00:00:%02x:%02x" % (rank >> 8, rank & 0xFF)


def claims(rank: int):
    m = mac(rank)
    ip = "10.0.0.%d" % (rank + 1)
    garp = Ether(src=m, dst="ff:ff:ff:ff:ff:ff") / ARP(op=2, hwsrc=m, psrc=ip, hwdst="ff:ff:ff:ff:ff:ff", pdst=ip)
    plain = Ether(src=m, dst="02:00:00:99:00:01") / IP(src=ip, dst="10.9.9.9") / UDP(sport=9, dport=9) / Raw(b"claim")
    return [garp, plain]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gen")
    ap.add_argument("--ports", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--burst", type=int, default=8192)
    ap.add_argument("--every", type=int, default=4)
    a = ap.parse_args()
    added = {}
    for p in range(a.ports):
        path = os.path.join(a.gen, f"port{p}.pcap")
        honest = list(rdpcap(path))
        ranks = [r for r in range(a.workers) if (r + 1) % a.ports == p]
        out = []
        for i in range(a.burst):
            src = "06:%02x:%02x:%02x:%02x:%02x" % (p, (i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF, 0x5A)
            out.append(Ether(src=src, dst="02:00:00:99:00:02") / IP(src="10.9.0.1", dst="10.9.9.8") / UDP(sport=7, dport=7))
        for r in ranks:
            out += claims(r)
        for i, f in enumerate(honest):
            out.append(f)
            if i % a.every == a.every - 1:
                for r in ranks:
                    out += claims(r)
        wrpcap(path, out)
        added[p] = len(out) - len(honest)
    with open(os.path.join(a.gen, "claims.txt"), "w") as f:
        for p, n in added.items():
            f.write(f"{p} {n}\n")


if __name__ == "__main__":
    main()
