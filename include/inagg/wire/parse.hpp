// Parsing a frame into a validated Layout of offsets (zero-copy: nothing is copied or allocated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "inagg/util/ip_addr.hpp"
#include "inagg/wire/headers.hpp"
#include "inagg/wire/opcodes.hpp"

namespace inagg::wire {

// Every outcome of parse_frame(). The first four are well-formed frames (RoCEv2 or not); then one
// RoCEv2 packet inagg does not handle (it is addressed, but not aggregated); the rest are malformed
// RoCEv2 candidates, each with its own code so that counters say what was wrong.
#define INAGG_PARSE_STATUS(X)                                                           \
  X(roce, "RoCEv2 packet")                                                              \
  X(not_ip, "not IPv4 or IPv6")                                                         \
  X(not_udp, "IP but not UDP")                                                          \
  X(not_roce, "UDP, but not to port 4791")                                              \
  X(ipv6_ext_headers, "RoCEv2 behind IPv6 extension headers (no RoCE NIC sends them)")  \
  X(truncated_l2, "frame shorter than its Ethernet (+802.1Q/802.1ad tags) header")      \
  X(truncated_ip, "frame shorter than the IP header")                                   \
  X(bad_ip_version, "IP version field does not match the EtherType")                    \
  X(bad_ipv4_ihl, "IPv4 IHL below 5 or past the IPv4 total length")                     \
  X(bad_ip_length, "IP length field shorter than the headers or longer than the frame") \
  X(ip_fragment, "IPv4 fragment to the RoCEv2 port (RoCEv2 is never fragmented)")       \
  X(truncated_udp, "IP payload shorter than a UDP header")                              \
  X(bad_udp_length, "UDP length field disagrees with the IP payload length")            \
  X(truncated_bth, "UDP payload shorter than BTH + ICRC")                               \
  X(bad_bth_version, "BTH transport version is not 0")                                  \
  X(unknown_opcode, "BTH opcode is not one inagg knows")                                \
  X(truncated_ext, "UDP payload shorter than the opcode's extension headers + ICRC")    \
  X(bad_pad_count, "BTH pad count larger than the payload")                             \
  X(bad_payload_length, "payload on an opcode that carries none, or not a multiple of 4 bytes")

enum class ParseStatus : uint8_t {
#define X(name, text) name,
  INAGG_PARSE_STATUS(X)
#undef X
};

inline constexpr size_t kParseStatusCount = 0
#define X(name, text) +1
    INAGG_PARSE_STATUS(X)
#undef X
    ;

std::string_view parse_status_name(ParseStatus s);  // "bad_udp_length"
std::string_view parse_status_text(ParseStatus s);  // a sentence for logs

inline constexpr bool is_malformed(ParseStatus s) { return s > ParseStatus::ipv6_ext_headers; }

// Offsets are from the start of the frame; 0 means "absent" (no header starts at byte 0 but
// Ethernet). Frames up to 64 KiB.
struct Layout {
  uint16_t ethertype = 0;  // after any VLAN tags
  uint16_t vlan_tci = 0;   // the outermost tag's, valid when has_vlan
  uint16_t vlan_tpid = 0;  // the outermost tag's TPID (0x8100, 0x88a8 or 0x9100)
  bool has_vlan = false;
  uint8_t vlan_tags = 0;  // how many tags: bytes [12, l3 - 2) hold them, TPID and TCI each
  util::IpVersion ip = util::IpVersion::none;
  uint8_t opcode = 0;
  uint8_t pad = 0;   // BTH pad count
  uint16_t l3 = 0;   // IP header
  uint16_t l4 = 0;   // UDP header
  uint16_t bth = 0;  // set once 12 BTH bytes (+ 4 ICRC) are known to be inside the frame
  uint16_t reth = 0, immdt = 0, aeth = 0, deth = 0, ieth = 0, atomic_eth = 0, atomic_ack = 0;
  uint16_t payload = 0;      // first payload byte (== end of the extension headers)
  uint16_t payload_len = 0;  // without pad bytes
  uint16_t icrc = 0;         // offset of the 4 ICRC bytes
  uint16_t end = 0;          // one past the ICRC; bytes beyond are Ethernet padding or trailer
  const OpcodeInfo* info = nullptr;

  // Payload plus pad bytes: what the ICRC covers after the headers.
  size_t padded_payload_len() const { return static_cast<size_t>(payload_len) + pad; }
};

// Parses Ethernet (any stack of 802.1Q/802.1ad tags), IPv4 or IPv6, UDP and, for UDP port 4791, the
// BTH and the extension headers its opcode implies. Never reads past frame.size(). For
// ParseStatus::roce every offset in `out` is valid; for not_ip/not_udp/not_roce the L2/L3 fields that
// were reached are filled; for ipv6_ext_headers l3, l4 and bth are; for a malformed frame `out` holds
// what was parsed before the error.
ParseStatus parse_frame(std::span<const uint8_t> frame, Layout& out);

// Where a RoCEv2 packet is going, whenever parse_frame() got as far as its BTH (l.bth != 0): for
// roce, ipv6_ext_headers and the malformed statuses past the BTH. The engine uses it to hold every
// packet addressed to a registered connection, placeable or not, away from the receiver.
struct RoceDestination {
  util::IpVersion ip = util::IpVersion::none;
  const uint8_t* addr = nullptr;  // 4 or 16 bytes inside the frame
  uint32_t qpn = 0;
};
inline bool roce_destination(const uint8_t* frame, const Layout& l, RoceDestination* out);

// A cheap pre-filter for the datapath: false only for frames that cannot be RoCEv2 (after any VLAN
// tags: not IP, IPv4 but not UDP to 4791, IPv6 whose first next header is neither UDP to 4791 nor
// an extension header). Every frame for which parse_frame() sets l.bth passes it (fuzzed).
bool is_roce_candidate(std::span<const uint8_t> frame);

inline bool is_vlan_tpid(uint16_t type) {
  return type == kEtherTypeVlan || type == kEtherTypeQinQ || type == kEtherTypeQinQ9100;
}

inline BthView bth_of(const uint8_t* frame, const Layout& l) { return {frame + l.bth}; }
inline RethView reth_of(const uint8_t* frame, const Layout& l) { return {frame + l.reth}; }
inline AethView aeth_of(const uint8_t* frame, const Layout& l) { return {frame + l.aeth}; }
inline uint32_t immdt_of(const uint8_t* frame, const Layout& l) { return load_be32(frame + l.immdt); }

inline bool roce_destination(const uint8_t* frame, const Layout& l, RoceDestination* out) {
  if (l.bth == 0 || l.l3 == 0) return false;
  out->ip = l.ip;
  out->addr = frame + l.l3 + (l.ip == util::IpVersion::v4 ? 16 : 24);
  out->qpn = load_be24(frame + l.bth + 5);
  return true;
}

}  // namespace inagg::wire
