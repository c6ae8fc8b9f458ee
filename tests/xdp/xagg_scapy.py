"""The XDP tier's header as a scapy layer, written from the format in
include/inagg/wire/xagg.h, for the tests to build and decode packets independently of the
project's C++ and BPF code; with SipHash-2-4 written here from its paper (Aumasson & Bernstein,
"SipHash: a fast short-input PRF", 2012) for the packets' MACs."""
import struct

from scapy.all import Packet, bind_layers, UDP
from scapy.fields import ByteField, ShortField, IntField, StrFixedLenField

PORT = 4792
VERSION = 2
DATA, RESULT = 1, 2
HDR_LEN = 24
MAC_OFF = 16

# The MAC key of each job id the tests use: an Xagg layer built with mac=None is signed with its
# job's key (all zeros when the job has none here).
KEYS = {}

_M64 = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & _M64


def siphash24(key, msg):
    """SipHash-2-4 of the bytes msg under the 16-byte key, as the paper defines it: the 64-bit
    result (its wire form is the little-endian 8 bytes)."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]

    def sipround():
        v[0] = (v[0] + v[1]) & _M64
        v[1] = _rotl(v[1], 13) ^ v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & _M64
        v[3] = _rotl(v[3], 16) ^ v[2]
        v[0] = (v[0] + v[3]) & _M64
        v[3] = _rotl(v[3], 21) ^ v[0]
        v[2] = (v[2] + v[1]) & _M64
        v[1] = _rotl(v[1], 17) ^ v[2]
        v[2] = _rotl(v[2], 32)

    words = [struct.unpack_from("<Q", msg, i)[0] for i in range(0, len(msg) // 8 * 8, 8)]
    tail = msg[len(msg) // 8 * 8:]
    words.append(((len(msg) & 0xff) << 56) | int.from_bytes(tail, "little"))
    for m in words:
        v[3] ^= m
        sipround()
        sipround()
        v[0] ^= m
    v[2] ^= 0xff
    for _ in range(4):
        sipround()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def xagg_mac(key, packet):
    """The MAC bytes of a tier packet (header and values): SipHash-2-4 over it with the header's
    mac field as zeros."""
    msg = packet[:MAC_OFF] + b"\0" * 8 + packet[HDR_LEN:]
    return struct.pack("<Q", siphash24(key, msg))


class Xagg(Packet):
    name = "Xagg"
    fields_desc = [ByteField("version", VERSION), ByteField("type", DATA), ShortField("job", 0),
                   ShortField("rank", 0), ShortField("count", None), IntField("seq", 0), IntField("weight", 1),
                   StrFixedLenField("mac", None, 8)]

    def post_build(self, p, pay):
        if self.count is None:
            p = p[:6] + struct.pack("!H", len(pay) // 4) + p[8:]
        if self.mac is None:
            p = p[:MAC_OFF] + xagg_mac(KEYS.get(self.job, b"\0" * 16), p + pay)
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


# The paper's test vector (its appendix A): key 00..0f, message 00..0e.
assert siphash24(bytes(range(16)), bytes(range(15))) == 0xa129ca6149be45e5
