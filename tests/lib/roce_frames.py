"""RoCEv2 RC packets built by scapy for the tests that inject them onto a link (tests/rxe/inject_roce.py,
tests/e2e/forge_write.py)."""
import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def frames(src_ip, dst_ip, dqpn, psn, count, kind, opcode, payload, dst_mac="ff:ff:ff:ff:ff:ff", ip_id=0x4000,
           src_mac="02:77:00:00:09:09"):
    """`count` packets of `opcode` with `payload` (bytes: headers after the BTH and the data), PSNs
    from `psn` on; kind "good": scapy's ICRC, "bad": the same ICRC with its bits flipped. The source
    MAC is by default one no host has: a switch that learns it learns nothing that matters."""
    out = []
    for i in range(count):
        pkt = (Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip, flags="DF", id=ip_id + i) /
               UDP(sport=49152, dport=4791, chksum=0) /
               BTH(opcode=opcode, pkey=0xFFFF, dqpn=dqpn, psn=(psn + i) & 0xFFFFFF) / Raw(payload))
        raw = bytearray(bytes(pkt))
        if kind == "bad":
            for k in range(1, 5):
                raw[-k] ^= 0xFF
        out.append(Ether(bytes(raw)))
    return out
