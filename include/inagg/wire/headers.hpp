// Header sizes, field offsets and zero-copy views of RoCEv2 headers. Views hold a pointer into the
// frame and decode fields on access; they never copy, allocate, or check bounds themselves: only
// build them from a Layout that parse_frame() has validated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inagg/wire/bytes.hpp"

namespace inagg::wire {

inline constexpr size_t kEthHeaderLen = 14;
inline constexpr size_t kVlanTagLen = 4;
inline constexpr size_t kIpv4HeaderLen = 20;  // without options
inline constexpr size_t kIpv6HeaderLen = 40;
inline constexpr size_t kUdpHeaderLen = 8;
inline constexpr size_t kBthLen = 12;
inline constexpr size_t kRethLen = 16;
inline constexpr size_t kImmDtLen = 4;
inline constexpr size_t kAethLen = 4;
inline constexpr size_t kIcrcLen = 4;
inline constexpr uint16_t kRoceV2Port = 4791;

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeQinQ = 0x88a8;      // 802.1ad service tag
inline constexpr uint16_t kEtherTypeQinQ9100 = 0x9100;  // the pre-802.1ad QinQ TPID some switches use
inline constexpr uint8_t kIpProtoUdp = 17;

// ECN codepoints (the low two bits of IPv4 TOS / IPv6 traffic class).
inline constexpr uint8_t kEcnNotEct = 0, kEcnEct1 = 1, kEcnEct0 = 2, kEcnCe = 3;

// BTH, IBTA Vol 1 §9.2: opcode | SE M Pad(2) TVer(4) | P_Key(16) | F B resv(6) | DestQP(24) |
// A resv(7) | PSN(24).
struct BthView {
  const uint8_t* p;
  uint8_t opcode() const { return p[0]; }
  bool solicited() const { return p[1] & 0x80; }
  bool migreq() const { return p[1] & 0x40; }
  uint8_t pad_count() const { return (p[1] >> 4) & 0x3; }
  uint8_t tver() const { return p[1] & 0x0f; }
  uint16_t pkey() const { return load_be16(p + 2); }
  bool fecn() const { return p[4] & 0x80; }
  bool becn() const { return p[4] & 0x40; }
  uint32_t dest_qp() const { return load_be24(p + 5); }
  bool ack_req() const { return p[8] & 0x80; }
  uint32_t psn() const { return load_be24(p + 9); }
};

// RETH: virtual address(64) | R_Key(32) | DMA length(32).
struct RethView {
  const uint8_t* p;
  uint64_t va() const { return load_be64(p); }
  uint32_t rkey() const { return load_be32(p + 8); }
  uint32_t dma_len() const { return load_be32(p + 12); }
};

// AETH: syndrome(8) | MSN(24). Syndrome bits 7..5 say ACK (000), RNR NAK (001) or NAK (011).
struct AethView {
  const uint8_t* p;
  uint8_t syndrome() const { return p[0]; }
  uint32_t msn() const { return load_be24(p + 1); }
  bool is_ack() const { return (p[0] & 0xe0) == 0x00; }
  bool is_rnr_nak() const { return (p[0] & 0xe0) == 0x20; }
  bool is_nak() const { return (p[0] & 0xe0) == 0x60; }
  uint8_t nak_code() const { return p[0] & 0x1f; }  // 0 = PSN sequence error
  uint8_t credits() const { return p[0] & 0x1f; }   // ACK: credit count (0x1f = invalid/unlimited)
};

// AETH syndromes inagg builds.
namespace aeth {
inline constexpr uint8_t kAckUnlimitedCredits = 0x1f;
inline constexpr uint8_t kNakPsnSequenceError = 0x60;
inline constexpr uint8_t kNakInvalidRequest = 0x61;
inline constexpr uint8_t kNakRemoteAccessError = 0x62;
inline constexpr uint8_t kNakRemoteOperationalError = 0x63;
}  // namespace aeth

// 24-bit PSN arithmetic.
inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }

// The standard ones'-complement IPv4 header checksum over `len` bytes (the checksum field must be
// zero or is included as it stands).
uint16_t ipv4_header_checksum(const uint8_t* ip, size_t len);

}  // namespace inagg::wire
