#include "inagg/wire/icrc.hpp"

#include <cstring>

namespace inagg::wire {

uint32_t icrc_header_crc(const uint8_t* frame, const Layout& l) {
  // Largest masked part: 8 + IPv4 with 40 bytes of options (60) + UDP + BTH + AtomicETH (28).
  uint8_t buf[8 + 60 + kUdpHeaderLen + kBthLen + 28 + 16];
  const size_t len = static_cast<size_t>(l.payload) - l.l3;
  static_assert(sizeof(buf) >= 8 + 60 + kUdpHeaderLen + kBthLen + 28);
  std::memset(buf, 0xff, 8);
  std::memcpy(buf + 8, frame + l.l3, len);
  uint8_t* ip = buf + 8;
  if (l.ip == IpVersion::v4) {
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
