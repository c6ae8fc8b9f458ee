"""The XDP tier's header as a scapy layer, written from the format in
include/inagg/wire/xagg.h, for the tests to build and decode packets independently of the
project's C++ and BPF code."""
import struct

from scapy.all import Packet, bind_layers, UDP
from scapy.fields import ByteField, ShortField, IntField

PORT = 4792
DATA, RESULT = 1, 2


class Xagg(Packet):
    name = "Xagg"
    fields_desc = [ByteField("version", 1), ByteField("type", DATA), ShortField("job", 0), ShortField("rank", 0),
                   ShortField("count", None), IntField("seq", 0), IntField("weight", 1)]

    def post_build(self, p, pay):
        if self.count is None:
            p = p[:6] + struct.pack("!H", len(pay) // 4) + p[8:]
        return p + pay


bind_layers(UDP, Xagg, dport=PORT)


def values_bytes(values):
    """int32 values as the wire carries them: little-endian two's complement."""
    return struct.pack("<%di" % len(values), *values)


def values_of(payload):
    return list(struct.unpack("<%di" % (len(payload) // 4), payload))


def wrap32(x):
    """A wrapping int32 add, the tier's arithmetic, as a plain scalar reference."""
    x &= 0xffffffff
    return x - (1 << 32) if x & 0x80000000 else x


def scalar_sum(vectors):
    out = [0] * len(vectors[0])
    for v in vectors:
        for i, x in enumerate(v):
            out[i] = wrap32(out[i] + x)
    return out
