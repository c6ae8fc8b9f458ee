#include "inagg/wire/parse.hpp"

#include <array>

namespace inagg::wire {
namespace {

constexpr std::array<std::string_view, kParseStatusCount> kNames = {
#define X(name, text) #name,
    INAGG_PARSE_STATUS(X)
#undef X
};
constexpr std::array<std::string_view, kParseStatusCount> kTexts = {
#define X(name, text) text,
    INAGG_PARSE_STATUS(X)
#undef X
};

}  // namespace

std::string_view parse_status_name(ParseStatus s) { return kNames[static_cast<size_t>(s)]; }
std::string_view parse_status_text(ParseStatus s) { return kTexts[static_cast<size_t>(s)]; }

uint16_t ipv4_header_checksum(const uint8_t* ip, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += load_be16(ip + i);
  if (len & 1) sum += static_cast<uint32_t>(ip[len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

ParseStatus parse_frame(std::span<const uint8_t> frame, Layout& out) {
  out = Layout{};
  const uint8_t* f = frame.data();
  // Frames longer than the offsets can express are not RoCEv2 candidates (9 KiB jumbo is the max).
  const size_t n = frame.size() > 0xffff ? 0xffff : frame.size();

  // L2.
  if (n < kEthHeaderLen) return ParseStatus::truncated_l2;
  size_t off = 12;
  uint16_t type = load_be16(f + off);
  if (type == kEtherTypeVlan || type == kEtherTypeQinQ) {
    if (n < kEthHeaderLen + kVlanTagLen) return ParseStatus::truncated_l2;
    out.has_vlan = true;
    out.vlan_tci = load_be16(f + 14);
    type = load_be16(f + 16);
    off = 18;
  } else {
    off = 14;
  }
  out.ethertype = type;
  out.l3 = static_cast<uint16_t>(off);

  // L3: find the IP payload [l4, ip_end).
  size_t ip_end = 0;
  if (type == kEtherTypeIpv4) {
    out.ip = IpVersion::v4;
    if (n < off + kIpv4HeaderLen) return ParseStatus::truncated_ip;
    const uint8_t* ip = f + off;
    if ((ip[0] >> 4) != 4) return ParseStatus::bad_ip_version;
    const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
    const size_t total = load_be16(ip + 2);
    if (ihl < kIpv4HeaderLen) return ParseStatus::bad_ipv4_ihl;
    if (total > n - off) return ParseStatus::bad_ip_length;
    if (ihl > total) return ParseStatus::bad_ipv4_ihl;
    if (ip[9] != kIpProtoUdp) return ParseStatus::not_udp;
    const uint16_t frag = load_be16(ip + 6);
    const bool fragment = (frag & 0x3fff) != 0;  // MF set or a non-zero offset
    ip_end = off + total;
    off += ihl;
    out.l4 = static_cast<uint16_t>(off);
    if (fragment) {
      // A later fragment has no UDP header: it cannot be classified, so it is not RoCEv2. The first
      // fragment of a datagram to 4791 is a malformed RoCEv2 packet.
      if ((frag & 0x1fff) != 0 || ip_end - off < kUdpHeaderLen) return ParseStatus::not_roce;
      return load_be16(f + off + 2) == kRoceV2Port ? ParseStatus::ip_fragment : ParseStatus::not_roce;
    }
  } else if (type == kEtherTypeIpv6) {
    out.ip = IpVersion::v6;
    if (n < off + kIpv6HeaderLen) return ParseStatus::truncated_ip;
    const uint8_t* ip = f + off;
    if ((ip[0] >> 4) != 6) return ParseStatus::bad_ip_version;
    const size_t payload = load_be16(ip + 4);
    if (payload > n - off - kIpv6HeaderLen) return ParseStatus::bad_ip_length;
    if (ip[6] != kIpProtoUdp) return ParseStatus::not_udp;
    off += kIpv6HeaderLen;
    ip_end = off + payload;
    out.l4 = static_cast<uint16_t>(off);
  } else {
    return ParseStatus::not_ip;
  }

  // UDP.
  if (ip_end - off < kUdpHeaderLen) return ParseStatus::truncated_udp;
  const uint8_t* udp = f + off;
  if (load_be16(udp + 2) != kRoceV2Port) return ParseStatus::not_roce;
  if (load_be16(udp + 4) != ip_end - off) return ParseStatus::bad_udp_length;
  off += kUdpHeaderLen;

  // BTH.
  if (ip_end - off < kBthLen + kIcrcLen) return ParseStatus::truncated_bth;
  out.bth = static_cast<uint16_t>(off);
  const BthView bth{f + off};
  out.opcode = bth.opcode();
  out.pad = bth.pad_count();
  if (bth.tver() != 0) return ParseStatus::bad_bth_version;
  const OpcodeInfo* info = opcode_info(out.opcode);
  if (info == nullptr) return ParseStatus::unknown_opcode;
  out.info = info;
  off += kBthLen;

  // Extension headers, in IBTA order.
  if (ip_end - off < static_cast<size_t>(info->ext_bytes) + kIcrcLen) return ParseStatus::truncated_ext;
  auto take = [&](bool present, uint16_t& field, size_t len) {
    if (present) {
      field = static_cast<uint16_t>(off);
      off += len;
    }
  };
  take(info->has_deth, out.deth, 8);
  take(info->has_reth, out.reth, kRethLen);
  take(info->has_atomic_eth, out.atomic_eth, 28);
  take(info->has_aeth, out.aeth, kAethLen);
  take(info->has_atomic_ack, out.atomic_ack, 8);
  take(info->has_immdt, out.immdt, kImmDtLen);
  take(info->has_ieth, out.ieth, 4);
  if (info->kind == OpKind::cnp) off += 16;  // reserved bytes, covered by the ICRC like a header

  // Payload + pad, then the ICRC.
  out.payload = static_cast<uint16_t>(off);
  const size_t padded = ip_end - off - kIcrcLen;
  if (!info->carries_payload && padded != 0) return ParseStatus::bad_payload_length;
  if (padded % 4 != 0) return ParseStatus::bad_payload_length;
  if (out.pad > padded) return ParseStatus::bad_pad_count;
  out.payload_len = static_cast<uint16_t>(padded - out.pad);
  out.icrc = static_cast<uint16_t>(ip_end - kIcrcLen);
  out.end = static_cast<uint16_t>(ip_end);
  return ParseStatus::roce;
}

}  // namespace inagg::wire
