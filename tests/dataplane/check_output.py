#!/usr/bin/python3
"""Checks what inagg wrote to its output pcaps against what scripts/gen-pcap expected:
- every RoCEv2 data packet to a registered receiver carries exactly the expected rank-ordered sum
  for its PSN, and its ICRC verifies (recomputed here: scapy for IPv4, zlib for IPv6);
- each connection's PSNs come out in order, every expected packet comes out at least once;
- every background frame comes out byte-identical on every other port, and never on its own.

- with --station-ports P0,P1,...: every aggregated packet leaves only on the port of the station
  it is addressed to (rank r's station is behind port Pr), never flooded to another;
- with --partial (a job stopped midway): expected packets may be missing; those that came out are
  checked as above.

  check_output.py [--station-ports P0,P1,...] [--partial] GEN_DIR OUT0.pcap OUT1.pcap ...
  (out pcap i is port i's TX)
"""
import collections
import logging
import struct
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, IPv6, UDP, rdpcap, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def icrc_ok(raw: bytes) -> bool:
    pkt = Ether(raw)
    stored = struct.unpack("<I", raw[-4:])[0]
    if IP in pkt:
        p2 = Ether(raw)
        del p2[BTH].icrc
        return struct.unpack("<I", bytes(Ether(bytes(p2)))[-4:])[0] == stored
    l3 = len(raw) - len(bytes(pkt[IPv6]))
    b = bytearray(raw[l3:-4])
    b[0] |= 0x0F
    b[1:4] = b"\xff\xff\xff"
    b[7] = 0xFF
    b[46:48] = b"\xff\xff"
    b[52] = 0xFF
    return (zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF) == stored


def main() -> int:
    args = sys.argv[1:]
    station_port = None
    if args and args[0] == "--station-ports":
        station_port = [int(p) for p in args[1].split(",")]
        args = args[2:]
    partial = bool(args) and args[0] == "--partial"
    if partial:
        args = args[1:]
    gen, outs = args[0], args[1:]
    expected = {}
    for line in open(f"{gen}/expected.txt"):
        ip, qpn, psn, s = line.split()
        expected[(ip, int(qpn, 16), int(psn))] = bytes.fromhex(s)
    registered = {k[:2] for k in expected}
    background = [(int(p), bytes.fromhex(h)) for p, h in (l.split() for l in open(f"{gen}/background.txt") if l.strip())]
    errors = []
    seen = collections.Counter()
    last_psn = {}
    out_frames = []
    for port, path in enumerate(outs):
        for pkt in rdpcap(path):
            raw = bytes(pkt)
            out_frames.append((port, raw))
            if UDP not in pkt or pkt[UDP].dport != 4791 or BTH not in pkt:
                continue
            ip = pkt[IP].dst if IP in pkt else pkt[IPv6].dst
            key = (ip, pkt[BTH].dqpn, pkt[BTH].psn)
            conn = key[:2]
            if conn not in registered:
                continue  # not a registered connection (background RoCE)
            if key not in expected:
                errors.append(f"port {port}: unexpected PSN {key}")
                continue
            if station_port is not None:
                dst_rank = int.from_bytes(bytes.fromhex(pkt[Ether].dst.replace(":", ""))[4:], "big")  # gen-pcap's mac()
                if station_port[dst_rank] != port:
                    errors.append(f"port {port}: {key} for rank {dst_rank}'s station, which is behind port {station_port[dst_rank]}")
                    continue
            if not icrc_ok(raw):
                errors.append(f"port {port}: bad ICRC on {key}")
            hdr = len(raw) - 4 - len(expected[key])
            if raw[hdr:-4] != expected[key]:
                errors.append(f"port {port}: {key} does not carry the expected sum")
            if seen[key] == 0:
                prev = last_psn.get(conn)
                if prev is not None and ((key[2] - prev) & 0xFFFFFF) != 1:
                    errors.append(f"{conn}: PSN {key[2]} released after {prev}")
                last_psn[conn] = key[2]
            seen[key] += 1
    missing = [k for k in expected if seen[k] == 0]
    if missing and not partial:
        errors.append(f"{len(missing)} expected packets never came out, e.g. {missing[:3]}")
    out_set = collections.Counter(out_frames)
    for port, raw in background:
        for p in range(len(outs)):
            want = 0 if p == port else 1
            if out_set[(p, raw)] < want:
                errors.append(f"background frame from port {port} missing or altered on port {p}: {raw[:24].hex()}...")
            if p == port and out_set[(p, raw)]:
                errors.append(f"background frame sent back out of its ingress port {port}")
    for e in errors[:20]:
        print("FAIL:", e)
    print(f"checked {sum(seen.values())} aggregated packets ({len(expected)} expected"
          f"{f', {len(missing)} never came out' if partial else ''}), {len(background)} background frames: "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
