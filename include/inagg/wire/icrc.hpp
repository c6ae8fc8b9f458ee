// RoCEv2 invariant CRC (docs/protocol.md section 9): zlib's CRC-32 over 8 bytes of 0xff, the IP
// header with its variant fields set to ones, the UDP header with its checksum set to ones, the BTH
// with byte 4 (FECN, BECN, reserved) set to ones, the extension headers, and the payload with its
// pad bytes. Stored least-significant byte first after the payload.
#pragma once

#include <cstdint>
#include <span>

#include "inagg/wire/crc32.hpp"
#include "inagg/wire/parse.hpp"

namespace inagg::wire {

// CRC of the masked header part alone: 0xff x 8, IP .. end of the extension headers.
uint32_t icrc_header_crc(const uint8_t* frame, const Layout& l);

// icrc_header_crc for a stream of packets of one connection, derived from an earlier packet's:
// consecutive WRITEs of a connection differ in their masked headers only in the BTH's last word (A
// bit and PSN) and, over IPv4, the IP ID. CRC-32 is affine, so for headers of equal length
// crc(h) = crc(t) ^ crc_raw(h ^ t), and the raw CRC of a few bytes is a few table look-ups
// (crc_raw of leading zeros is zero). Every header byte is still compared with the cached header;
// any other difference, or another layout, takes icrc_header_crc and caches that header when its
// BTH ends it (no extension header, at most 64 bytes from IP to payload). Exact: the result
// always equals icrc_header_crc(frame, l); ~3 ns against ~20 ns for the full CRC (bench/README.md).
class IcrcHeaderCache {
 public:
  uint32_t header_crc(const uint8_t* frame, const Layout& l);

 private:
  uint32_t refill(const uint8_t* frame, const Layout& l);
  uint8_t bytes_[64] = {};  // the cached header, IP .. end of BTH, masked; zero beyond len
  uint8_t mask_[64] = {};   // ones over the ICRC's masked bits of this layout
  uint32_t layout_ = 0;     // len | (l4 - l3) << 8 | IP version << 16; 0: empty
  uint32_t crc_ = 0;        // icrc_header_crc of the cached header
};

// CRC of the payload plus pad bytes alone.
inline uint32_t icrc_payload_crc(const uint8_t* frame, const Layout& l) {
  return crc32({frame + l.payload, l.padded_payload_len()});
}

// The ICRC the packet should carry.
uint32_t icrc_compute(const uint8_t* frame, const Layout& l);

// The same from a header CRC and a payload CRC computed separately (the engine computes the summed
// payload's CRC once per slot and combines it with each packet's own header CRC). `shift` must be
// Crc32Shift(l.padded_payload_len()).
inline uint32_t icrc_combine(uint32_t header_crc, uint32_t payload_crc, const Crc32Shift& shift) {
  return shift.combine(header_crc, payload_crc);
}

inline uint32_t icrc_stored(const uint8_t* frame, const Layout& l) { return load_le32(frame + l.icrc); }
inline void icrc_store(uint8_t* frame, const Layout& l, uint32_t icrc) { store_le32(frame + l.icrc, icrc); }
inline bool icrc_verify(const uint8_t* frame, const Layout& l) {
  return icrc_compute(frame, l) == icrc_stored(frame, l);
}

}  // namespace inagg::wire
