#include "inagg/wire/icrc.hpp"

#include <array>
#include <cstring>

#include "inagg/wire/bytes.hpp"

namespace inagg::wire {

namespace {

// Raw CRC-32 (no initial or final inversion) of a short message, slice-by-4 style: kRaw[3 - i]
// holds byte i's contribution when 3 - i bytes follow it.
using RawTables = std::array<std::array<uint32_t, 256>, 4>;
constexpr RawTables make_raw_tables() {
  RawTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 4; ++k)
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}
constexpr RawTables kRaw = make_raw_tables();

// The raw CRC of the 4 bytes of w (little-endian: its low byte first).
inline uint32_t raw4(uint32_t w) {
  return kRaw[3][w & 0xff] ^ kRaw[2][(w >> 8) & 0xff] ^ kRaw[1][(w >> 16) & 0xff] ^ kRaw[0][w >> 24];
}

// IPv4 without options, no extension header: 20 + 8 + 12 bytes from IP to payload, the ID at bytes
// 4-5, so 34 bytes follow it.
constexpr size_t kV4PlainLen = 40;
constexpr size_t kV4IdTrail = kV4PlainLen - 6;

uint64_t load64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace

uint32_t icrc_header_crc(const uint8_t* frame, const Layout& l) {
  // Largest masked part: 8 + IPv4 with 40 bytes of options (60) + UDP + BTH + AtomicETH (28).
  uint8_t buf[8 + 60 + kUdpHeaderLen + kBthLen + 28 + 16];
  const size_t len = static_cast<size_t>(l.payload) - l.l3;
  static_assert(sizeof(buf) >= 8 + 60 + kUdpHeaderLen + kBthLen + 28);
  std::memset(buf, 0xff, 8);
  std::memcpy(buf + 8, frame + l.l3, len);
  uint8_t* ip = buf + 8;
  if (l.ip == util::IpVersion::v4) {
    ip[1] = 0xff;            // TOS (DSCP + ECN)
    ip[8] = 0xff;            // TTL
    ip[10] = ip[11] = 0xff;  // header checksum
  } else {
    ip[0] |= 0x0f;                 // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = 0xff;  // traffic class, low nibble + flow label
    ip[7] = 0xff;                  // hop limit
  }
  uint8_t* udp = buf + 8 + (l.l4 - l.l3);
  udp[6] = udp[7] = 0xff;              // UDP checksum
  buf[8 + (l.bth - l.l3) + 4] = 0xff;  // BTH FECN, BECN, resv6
  return crc32({buf, 8 + len});
}

uint32_t icrc_compute(const uint8_t* frame, const Layout& l) {
  const uint32_t header = icrc_header_crc(frame, l);
  const uint8_t* payload = frame + l.payload;
  const size_t len = l.padded_payload_len();
  // One pass: continuing the header CRC over the payload equals combining the two.
  return crc32({payload, len}, header);
}

}  // namespace inagg::wire

namespace inagg::wire {

uint32_t IcrcHeaderCache::header_crc(const uint8_t* frame, const Layout& l) {
  const size_t len = static_cast<size_t>(l.payload) - l.l3;
  const uint32_t layout =
      static_cast<uint32_t>(len) | static_cast<uint32_t>(l.l4 - l.l3) << 8 | static_cast<uint32_t>(l.ip) << 16;
  if (layout != layout_) return refill(frame, l);
  // Same length and field positions, and the BTH ends the header (refill only caches such).
  const uint8_t* h = frame + l.l3;
  uint64_t diff = 0;
  const size_t words = (len - 4) / 8;
  const uint64_t first = (load64(h) | load64(mask_)) ^ load64(bytes_);
  // Over plain IPv4 the ID may change per packet: its contribution is added below.
  const uint64_t id_bits = len == kV4PlainLen && l.ip == util::IpVersion::v4 ? 0xffffull << 32 : 0;
  diff |= first & ~id_bits;
  for (size_t i = 1; i < words; ++i) diff |= (load64(h + 8 * i) | load64(mask_ + 8 * i)) ^ load64(bytes_ + 8 * i);
  if ((len - 4) % 8) diff |= (load_le32(h + len - 8) | load_le32(mask_ + len - 8)) ^ load_le32(bytes_ + len - 8);
  if (diff != 0) return refill(frame, l);
  // The BTH's last word (A bit, PSN) is never masked.
  uint32_t crc = crc_ ^ raw4(load_le32(h + len - 4) ^ load_le32(bytes_ + len - 4));
  if (const uint64_t id = first & id_bits) {
    // The ID's two bytes, then 34 more: the raw CRC of [id0, id1] shifted over them.
    static const Crc32Shift id_shift(kV4IdTrail);
    const uint32_t raw2 = kRaw[1][(id >> 32) & 0xff] ^ kRaw[0][(id >> 40) & 0xff];
    crc ^= id_shift.combine(raw2, 0);
  }
  return crc;
}

uint32_t IcrcHeaderCache::refill(const uint8_t* frame, const Layout& l) {
  const uint32_t crc = icrc_header_crc(frame, l);
  const size_t len = static_cast<size_t>(l.payload) - l.l3;
  if (len > sizeof(bytes_) || len % 4 != 0 || l.payload != l.bth + kBthLen) return crc;
  std::memset(mask_, 0, sizeof mask_);
  uint8_t* ip = mask_;
  if (l.ip == util::IpVersion::v4) {
    ip[1] = ip[8] = ip[10] = ip[11] = 0xff;  // TOS, TTL, header checksum
  } else {
    ip[0] = 0x0f;                          // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = ip[7] = 0xff;  // traffic class, flow label, hop limit
  }
  mask_[l.l4 - l.l3 + 6] = mask_[l.l4 - l.l3 + 7] = 0xff;  // UDP checksum
  mask_[l.bth - l.l3 + 4] = 0xff;                          // FECN, BECN, resv6
  std::memset(bytes_, 0, sizeof bytes_);
  for (size_t i = 0; i < len; ++i) bytes_[i] = frame[l.l3 + i] | mask_[i];
  crc_ = crc;
  layout_ = static_cast<uint32_t>(len) | static_cast<uint32_t>(l.l4 - l.l3) << 8 | static_cast<uint32_t>(l.ip) << 16;
  return crc;
}

}  // namespace inagg::wire
