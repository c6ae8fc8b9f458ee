#include "inagg/wire/build.hpp"

#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "inagg/wire/icrc.hpp"

namespace inagg::wire {

namespace {

size_t header_size(const RoceFrameSpec& s, const OpcodeInfo& info) {
  return kEthHeaderLen +
         (s.l2_tags_len ? s.l2_tags_len
          : s.vlan_tci  ? kVlanTagLen
                        : 0) +
         (s.src_ip.version == util::IpVersion::v6 ? kIpv6HeaderLen : kIpv4HeaderLen) + kUdpHeaderLen + kBthLen +
         info.ext_bytes;
}

}  // namespace

size_t roce_frame_size(const RoceFrameSpec& spec, size_t payload_len) {
  const OpcodeInfo* info = opcode_info(spec.opcode);
  if (info == nullptr) return 0;
  const size_t pad = (4 - payload_len % 4) % 4;
  return header_size(spec, *info) + payload_len + pad + kIcrcLen;
}

size_t build_roce_frame(std::span<uint8_t> out, const RoceFrameSpec& s, std::span<const uint8_t> payload) {
  const OpcodeInfo* info = opcode_info(s.opcode);
  if (info == nullptr || s.src_ip.version != s.dst_ip.version || s.src_ip.version == util::IpVersion::none) return 0;
  if (s.l2_tags_len % kVlanTagLen != 0 || s.l2_tags_len > s.l2_tags.size()) return 0;
  if (!info->carries_payload && !payload.empty()) return 0;
  const size_t pad = (4 - payload.size() % 4) % 4;
  const size_t total = roce_frame_size(s, payload.size());
  if (total > out.size() || total > 0xffff) return 0;
  uint8_t* f = out.data();
  std::memset(f, 0, total);

  // Ethernet.
  std::memcpy(f, s.dst_mac.data(), 6);
  std::memcpy(f + 6, s.src_mac.data(), 6);
  size_t off = 12;
  if (s.l2_tags_len) {
    std::memcpy(f + off, s.l2_tags.data(), s.l2_tags_len);
    off += s.l2_tags_len;
  } else if (s.vlan_tci) {
    store_be16(f + off, kEtherTypeVlan);
    store_be16(f + off + 2, *s.vlan_tci);
    off += 4;
  }
  const bool v6 = s.src_ip.version == util::IpVersion::v6;
  store_be16(f + off, v6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  off += 2;

  // IP.
  uint8_t* ip = f + off;
  const size_t l4_len = total - (off + (v6 ? kIpv6HeaderLen : kIpv4HeaderLen));
  if (v6) {
    store_be32(ip, 6u << 28 | static_cast<uint32_t>(s.tos) << 20 | (s.flow_label & 0xfffff));
    store_be16(ip + 4, static_cast<uint16_t>(l4_len));
    ip[6] = kIpProtoUdp;
    ip[7] = s.ttl;
    std::memcpy(ip + 8, s.src_ip.bytes.data(), 16);
    std::memcpy(ip + 24, s.dst_ip.bytes.data(), 16);
    off += kIpv6HeaderLen;
  } else {
    ip[0] = 0x45;
    ip[1] = s.tos;
    store_be16(ip + 2, static_cast<uint16_t>(kIpv4HeaderLen + l4_len));
    store_be16(ip + 4, s.ip_id);
    store_be16(ip + 6, s.dont_fragment ? 0x4000 : 0);
    ip[8] = s.ttl;
    ip[9] = kIpProtoUdp;
    std::memcpy(ip + 12, s.src_ip.bytes.data(), 4);
    std::memcpy(ip + 16, s.dst_ip.bytes.data(), 4);
    store_be16(ip + 10, ipv4_header_checksum(ip, kIpv4HeaderLen));
    off += kIpv4HeaderLen;
  }

  // UDP, checksum 0 (RoCEv2 over IPv4 allows it; the ICRC protects the payload).
  uint8_t* udp = f + off;
  store_be16(udp, s.src_port);
  store_be16(udp + 2, kRoceV2Port);
  store_be16(udp + 4, static_cast<uint16_t>(l4_len));
  off += kUdpHeaderLen;

  // BTH.
  uint8_t* bth = f + off;
  bth[0] = s.opcode;
  bth[1] = static_cast<uint8_t>((s.solicited ? 0x80 : 0) | (s.migreq ? 0x40 : 0) | pad << 4);
  store_be16(bth + 2, s.pkey);
  bth[4] = static_cast<uint8_t>((s.fecn ? 0x80 : 0) | (s.becn ? 0x40 : 0));
  store_be24(bth + 5, s.dest_qp & kPsnMask);
  bth[8] = s.ack_req ? 0x80 : 0;
  store_be24(bth + 9, s.psn & kPsnMask);
  off += kBthLen;

  // Extension headers in IBTA order (AtomicETH / AtomicAckETH / IETH are left zero).
  if (info->has_deth) {
    store_be32(f + off, s.deth_qkey);
    store_be24(f + off + 5, s.deth_src_qp & 0xffffff);
    off += 8;
  }
  if (info->has_reth) {
    store_be64(f + off, s.reth_va);
    store_be32(f + off + 8, s.reth_rkey);
    store_be32(f + off + 12, s.reth_dma_len);
    off += kRethLen;
  }
  if (info->has_atomic_eth) off += 28;
  if (info->has_aeth) {
    f[off] = s.aeth_syndrome;
    store_be24(f + off + 1, s.aeth_msn & 0xffffff);
    off += kAethLen;
  }
  if (info->has_atomic_ack) off += 8;
  if (info->has_immdt) {
    store_be32(f + off, s.immdt);
    off += kImmDtLen;
  }
  if (info->has_ieth) off += 4;
  if (info->kind == OpKind::cnp) off += 16;

  if (!payload.empty()) std::memcpy(f + off, payload.data(), payload.size());

  Layout l;
  if (parse_frame({f, total}, l) != ParseStatus::roce) return 0;  // cannot happen for a known opcode
  icrc_store(f, l, icrc_compute(f, l));
  return total;
}

}  // namespace inagg::wire
