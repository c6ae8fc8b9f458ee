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

// IPv6 extension headers RoCEv2 could hide behind (RFC 8200 §4): hop-by-hop, routing, fragment,
// destination options, AH. No RoCE NIC sends them, so inagg does not aggregate such a packet; but
// one addressed to a registered connection must be found (and dropped), never forwarded raw.
ParseStatus ipv6_beyond_extensions(const uint8_t* f, uint8_t next, size_t off, size_t ip_end, Layout& out) {
  for (int hops = 0; hops < 16; ++hops) {
    size_t len = 0;
    if (next == 0 || next == 43 || next == 60) {
      if (ip_end - off < 8) return ParseStatus::not_udp;  // a cut chain: nothing to address
      len = (static_cast<size_t>(f[off + 1]) + 1) * 8;
    } else if (next == 44) {
      if (ip_end - off < 8) return ParseStatus::not_udp;
      if ((load_be16(f + off + 2) & 0xfff8) != 0) return ParseStatus::not_roce;  // a later fragment: no UDP header
      len = 8;
    } else if (next == 51) {
      if (ip_end - off < 8) return ParseStatus::not_udp;
      len = (static_cast<size_t>(f[off + 1]) + 2) * 4;
    } else if (next == kIpProtoUdp) {
      if (ip_end - off < kUdpHeaderLen) return ParseStatus::not_udp;
      if (load_be16(f + off + 2) != kRoceV2Port) return ParseStatus::not_roce;
      out.l4 = static_cast<uint16_t>(off);
      if (ip_end - off - kUdpHeaderLen >= kBthLen + kIcrcLen) out.bth = static_cast<uint16_t>(off + kUdpHeaderLen);
      return ParseStatus::ipv6_ext_headers;
    } else {
      return ParseStatus::not_udp;
    }
    if (len > ip_end - off) return ParseStatus::not_udp;
    next = f[off];
    off += len;
  }
  return ParseStatus::not_udp;
}

}  // namespace

bool is_roce_candidate(std::span<const uint8_t> frame) {
  const uint8_t* f = frame.data();
  const size_t n = frame.size();
  if (n < kEthHeaderLen) return false;
  size_t off = 12;
  uint16_t type = load_be16(f + off);
  while (is_vlan_tpid(type)) {
    if (n < off + kVlanTagLen + 2) return false;
    off += kVlanTagLen;
    type = load_be16(f + off);
  }
  off += 2;
  if (type == kEtherTypeIpv4) {
    if (n < off + kIpv4HeaderLen) return false;
    const size_t ihl = static_cast<size_t>(f[off] & 0x0f) * 4;
    return f[off + 9] == kIpProtoUdp && n >= off + ihl + kUdpHeaderLen && load_be16(f + off + ihl + 2) == kRoceV2Port;
  }
  if (type == kEtherTypeIpv6) {
    if (n < off + kIpv6HeaderLen) return false;
    const uint8_t next = f[off + 6];
    if (next == kIpProtoUdp) return n >= off + kIpv6HeaderLen + kUdpHeaderLen && load_be16(f + off + 42) == kRoceV2Port;
    return next == 0 || next == 43 || next == 44 || next == 51 || next == 60;
  }
  return false;
}

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

  // L2: any stack of 802.1Q / 802.1ad tags (QinQ), each kept as it is.
  if (n < kEthHeaderLen) return ParseStatus::truncated_l2;
  size_t off = 12;
  uint16_t type = load_be16(f + off);
  while (is_vlan_tpid(type)) {
    if (n < off + kVlanTagLen + 2) return ParseStatus::truncated_l2;
    if (!out.has_vlan) {
      out.has_vlan = true;
      out.vlan_tpid = type;
      out.vlan_tci = load_be16(f + off + 2);
    }
    if (out.vlan_tags < 0xff) ++out.vlan_tags;
    off += kVlanTagLen;
    type = load_be16(f + off);
  }
  off += 2;
  out.ethertype = type;
  out.l3 = static_cast<uint16_t>(off);

  // L3: find the IP payload [l4, ip_end).
  size_t ip_end = 0;
  if (type == kEtherTypeIpv4) {
    out.ip = util::IpVersion::v4;
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
    out.ip = util::IpVersion::v6;
    if (n < off + kIpv6HeaderLen) return ParseStatus::truncated_ip;
    const uint8_t* ip = f + off;
    if ((ip[0] >> 4) != 6) return ParseStatus::bad_ip_version;
    const size_t payload = load_be16(ip + 4);
    if (payload > n - off - kIpv6HeaderLen) return ParseStatus::bad_ip_length;
    off += kIpv6HeaderLen;
    ip_end = off + payload;
    if (ip[6] != kIpProtoUdp) return ipv6_beyond_extensions(f, ip[6], off, ip_end, out);
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
