#!/usr/bin/python3
"""Independent check of the NAKs the engine built for VLAN-tagged senders. The pcap holds pairs
(a sender's data frame, the NAK the engine answered it with). scapy decodes both tag stacks
(Dot1AD / Dot1Q layers, whatever the TPID) and the NAK's RoCEv2 headers and recomputes its ICRC.
Exits 1 unless every NAK carries its data frame's tags, TPIDs and VLAN ids in the same order,
goes back to the data frame's source MAC, is an RC ACKNOWLEDGE with a PSN-sequence-error AETH, and
has a valid ICRC; prints "checked N NAKs"."""
import logging
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Dot1AD, Dot1Q, Ether, bind_layers, rdpcap, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import AETH, BTH  # noqa: E402

# scapy knows 0x8100 and 0x88a8; the pre-802.1ad QinQ TPID 0x9100 is the same 4-byte tag.
bind_layers(Ether, Dot1AD, type=0x9100)
bind_layers(Dot1AD, Dot1AD, type=0x9100)
bind_layers(Dot1Q, Dot1AD, type=0x9100)


def tag_stack(pkt):
    """[(tpid, vlan, prio)] outermost first, read from the layers scapy decoded."""
    tags, tpid, layer = [], pkt[Ether].type, pkt[Ether].payload
    while isinstance(layer, (Dot1Q, Dot1AD)):
        tags.append((tpid, layer.vlan, layer.prio))
        tpid, layer = layer.type, layer.payload
    return tags


def main(path: str, expect: int) -> int:
    pkts = rdpcap(path)
    bad = checked = 0
    for i in range(0, len(pkts) - 1, 2):
        data, nak = Ether(bytes(pkts[i])), Ether(bytes(pkts[i + 1]))
        problems = []
        if not tag_stack(data):
            problems.append("the data frame has no tags (bad fixture)")
        if tag_stack(nak) != tag_stack(data):
            problems.append(f"tags {tag_stack(nak)} != the data frame's {tag_stack(data)}")
        if nak[Ether].dst != data[Ether].src or nak[Ether].src != data[Ether].dst:
            problems.append("MACs not reversed")
        if BTH not in nak or nak[BTH].opcode != 0x11 or AETH not in nak or (nak[AETH].syndrome & 0xE0) != 0x60:
            problems.append("not a NAK")
        else:
            stored = struct.unpack("<I", bytes(nak)[-4:])[0]
            again = nak.copy()
            del again[BTH].icrc
            want = struct.unpack("<I", bytes(Ether(bytes(again)))[-4:])[0]
            if stored != want:
                problems.append(f"ICRC 0x{stored:08x}, scapy computes 0x{want:08x}")
        checked += 1
        if problems:
            bad += 1
            print(f"pair {i // 2}: " + "; ".join(problems))
    print(f"checked {checked} NAKs, {bad} bad")
    return 1 if bad or checked != expect else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
