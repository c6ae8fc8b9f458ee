#!/usr/bin/python3
"""Mixes adversarial packets into the honest traffic scripts/gen-pcap wrote, for the adversarial
replay test: every bad packet is aimed at the registered job's connections, and
each kind has the one engine counter that must account for it.

  gen_adversarial.py GEN_DIR --bad N [--seed S] [--warmup W]

Reads GEN_DIR/port<P>.pcap and job.job (gen-pcap's, rank r behind port r mod PORTS), keeps them as
honest<P>.pcap, and writes port<P>.pcap again with N bad packets spread evenly between the honest
ones after each port's first W honest frames (by then every rank has been seen on its own port).
Writes GEN_DIR/adversarial.txt: one line per kind, "<engine counter> <count> <kind>".

The kinds (scapy builds each template; the N packets cycle through a few hundred templates):
  truncated     an honest frame cut inside its RoCE headers or payload          -> malformed
  bad_icrc      an honest frame with its ICRC flipped                           -> bad_icrc
  forged_write  a WRITE (valid ICRC, live PSN) to a receiver, from an address
                no rank has                                                     -> drop_wrong_source
  forged_send   the same as a SEND (source is checked before the job contract)  -> drop_wrong_source
  forged_ack    an ACK or NAK to a sender's QP from a forged address            -> drop_wrong_source
  wrong_port    a rank's honest frame arriving on another port than its own     -> drop_wrong_port
  mapped_v6     a WRITE over IPv6 between the ranks' IPv4-mapped addresses      -> drop_unplaceable
"""
import argparse
import importlib.machinery
import importlib.util
import logging
import os
import random
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, IPv6, UDP, Raw  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("gen_pcap", os.path.join(HERE, "..", "..", "scripts", "gen-pcap"))
_spec = importlib.util.spec_from_loader("gen_pcap", _loader)
gen_pcap = importlib.util.module_from_spec(_spec)
_loader.exec_module(gen_pcap)
BTH = gen_pcap.BTH

SEND_ONLY, ACK = 4, 17
KINDS = [  # kind, engine counter
    ("truncated", "malformed"),
    ("bad_icrc", "bad_icrc"),
    ("forged_write", "drop_wrong_source"),
    ("forged_send", "drop_wrong_source"),
    ("forged_ack", "drop_wrong_source"),
    ("wrong_port", "drop_wrong_port"),
    ("mapped_v6", "drop_unplaceable"),
]


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack_from("<I", data, 0)
    if magic != 0xA1B2C3D4:
        raise SystemExit(f"{path}: not a little-endian classic pcap (gen-pcap writes those)")
    frames, off = [], 24
    while off < len(data):
        _, _, incl, _ = struct.unpack_from("<IIII", data, off)
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def write_pcap(path, frames):
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, f in enumerate(frames):
            out.write(struct.pack("<IIII", 1700000000 + i // 1000000, i % 1000000, len(f), len(f)) + f)


def read_job(path):
    conns = []  # (rank, src_ip, src_qpn, dst_ip, dst_qpn, start_psn)
    for line in open(path):
        key, _, value = line.partition("=")
        if key.strip() == "conn":
            r, sip, sq, dip, dq, psn = (v.strip() for v in value.split(",")[:6])  # then the rank's port, MAC
            conns.append((int(r), sip, int(sq, 0), dip, int(dq, 0), int(psn, 0)))
    if not conns or ":" in conns[0][1]:
        raise SystemExit(f"{path}: expected an IPv4 job from gen-pcap")
    return conns


def templates(kind, honest, conns, ports, rng, count=400):
    """`count` distinct (port, frame) pairs of one kind."""
    out = []
    by_rank = {}
    for port, f in honest:
        by_rank.setdefault(f[14 + 12:14 + 16], []).append((port, f))  # keyed by source IPv4
    for i in range(count):
        r, sip, sq, dip, dq, psn0 = conns[i % len(conns)]
        home = r % ports
        psn = (psn0 + rng.randrange(64)) & 0xFFFFFF  # inside the job's live range
        eth = Ether(src=gen_pcap.mac(r), dst=gen_pcap.mac((r + 1) % len(conns)))
        udp = UDP(sport=49152 + r, dport=4791, chksum=0)
        payload = Raw(bytes(rng.getrandbits(8) for _ in range(256)))
        if kind in ("truncated", "bad_icrc", "wrong_port"):
            port, f = rng.choice(honest)
            if kind == "truncated":
                out.append((port, f[:rng.randrange(14 + 20 + 8, len(f) - 1)]))
            elif kind == "bad_icrc":
                out.append((port, f[:-4] + bytes(b ^ 0x5A for b in f[-4:])))
            else:
                out.append(((port + 1 + rng.randrange(ports - 1)) % ports, f))
            continue
        forged = f"10.0.{rng.randrange(200, 250)}.{rng.randrange(1, 250)}"
        if kind == "forged_write":
            reth = struct.pack("!QII", 0x7F0000000000, 0x1234, 256)
            p = eth / IP(src=forged, dst=dip, tos=2, flags="DF") / udp / BTH(opcode=10, pkey=0xFFFF, dqpn=dq, psn=psn) / Raw(reth) / payload
        elif kind == "forged_send":
            p = eth / IP(src=forged, dst=dip, tos=2, flags="DF") / udp / BTH(opcode=SEND_ONLY, pkey=0xFFFF, dqpn=dq, psn=psn) / payload
        elif kind == "forged_ack":
            syndrome = 0 if i % 2 else 0x60  # ACK, or NAK (PSN sequence error)
            aeth = struct.pack("!I", syndrome << 24 | (i & 0xFFFFFF))
            p = (Ether(src=gen_pcap.mac((r + 1) % len(conns)), dst=gen_pcap.mac(r)) / IP(src=forged, dst=sip, flags="DF") /
                 UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=ACK, pkey=0xFFFF, dqpn=sq, psn=psn) / Raw(aeth))
        elif kind == "mapped_v6":
            reth = struct.pack("!QII", 0x7F0000000000, 0x1234, 256)
            p = eth / IPv6(src="::ffff:" + sip, dst="::ffff:" + dip, tc=2) / udp / BTH(opcode=10, pkey=0xFFFF, dqpn=dq, psn=psn) / Raw(reth) / payload
            raw = bytearray(bytes(p))  # scapy leaves room for the ICRC; IPv6 ICRCs are computed here
            raw[-4:] = struct.pack("<I", gen_pcap.icrc_ipv6(bytes(raw[14:-4])))
            out.append((home, bytes(raw)))
            continue
        else:
            raise ValueError(kind)
        out.append((home, bytes(p)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gen_dir")
    ap.add_argument("--bad", type=int, required=True, help="how many bad packets in all")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=64,
                    help="honest frames per port before the first bad one: two of the appliance's RX bursts, so "
                         "every rank is seen on its own port before a copy of its frames arrives on another")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    conns = read_job(os.path.join(args.gen_dir, "job.job"))
    ports = 0
    honest_by_port = []
    while os.path.exists(os.path.join(args.gen_dir, f"port{ports}.pcap")):
        honest_by_port.append(read_pcap(os.path.join(args.gen_dir, f"port{ports}.pcap")))
        ports += 1
    if ports < 2:
        raise SystemExit(f"{args.gen_dir}: needs gen-pcap's port0.pcap and port1.pcap at least")
    registered = {c[4] for c in conns}  # receive QPNs

    def is_job_write(f):  # IPv4, UDP to 4791, BTH to one of the job's receive QPs
        return (len(f) > 54 and f[12:14] == b"\x08\x00" and f[14 + 9] == 17 and f[36:38] == b"\x12\xb7" and
                int.from_bytes(f[47:50], "big") in registered)

    honest = [(p, f) for p in range(ports) for f in honest_by_port[p] if is_job_write(f)]
    pools = {kind: templates(kind, honest, conns, ports, rng) for kind, _ in KINDS}
    counts = {kind: 0 for kind, _ in KINDS}
    bad_by_port = [[] for _ in range(ports)]
    for i in range(args.bad):
        kind = KINDS[i % len(KINDS)][0]
        port, f = pools[kind][(i // len(KINDS)) % len(pools[kind])]
        bad_by_port[port].append(f)
        counts[kind] += 1
    for p in range(ports):
        good = honest_by_port[p]
        os.replace(os.path.join(args.gen_dir, f"port{p}.pcap"), os.path.join(args.gen_dir, f"honest{p}.pcap"))
        mixed = good[:args.warmup]
        rest, bad = good[args.warmup:], bad_by_port[p]
        per = len(bad) / max(1, len(rest))
        taken = 0
        for j, f in enumerate(rest):
            upto = round((j + 1) * per) if j + 1 < len(rest) else len(bad)
            mixed.extend(bad[taken:upto])
            taken = upto
            mixed.append(f)
        mixed.extend(bad[taken:])
        write_pcap(os.path.join(args.gen_dir, f"port{p}.pcap"), mixed)
    with open(os.path.join(args.gen_dir, "adversarial.txt"), "w") as out:
        for kind, counter in KINDS:
            out.write(f"{counter} {counts[kind]} {kind}\n")
    print(f"gen_adversarial: {args.bad} bad packets ({', '.join(f'{counts[k]} {k}' for k, _ in KINDS)}) "
          f"mixed into {len(honest)} honest RoCEv2 frames on {ports} ports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
