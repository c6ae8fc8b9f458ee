// Building RoCEv2 frames (the appliance's NAKs, the software workers' packets, tests). The builder
// fills every length, the IPv4 header checksum, the pad count and the ICRC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "inagg/wire/parse.hpp"

namespace inagg::wire {

using MacAddr = std::array<uint8_t, 6>;

// Addresses are util::IpAddr (util/ip_addr.hpp), below control, whose job descriptions name them too.

struct RoceFrameSpec {
  MacAddr dst_mac{}, src_mac{};
  std::optional<uint16_t> vlan_tci;  // adds an 802.1Q tag
  // Raw VLAN tags (TPID, TCI pairs, 4 bytes each) written after the MACs instead of vlan_tci: how a
  // reply keeps the 802.1Q / 802.1ad / QinQ tags of the frame it answers (the appliance's NAKs).
  std::array<uint8_t, 16> l2_tags{};
  uint8_t l2_tags_len = 0;      // a multiple of 4, at most 16
  util::IpAddr src_ip, dst_ip;  // same version for both
  uint8_t tos = 0;              // IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  uint8_t ttl = 64;             // IPv4 TTL / IPv6 hop limit
  uint16_t ip_id = 0;
  bool dont_fragment = true;
  uint32_t flow_label = 0;    // IPv6
  uint16_t src_port = 49152;  // RoCEv2 uses the source port for ECMP entropy

  // BTH.
  uint8_t opcode = 0;
  bool solicited = false, migreq = true, fecn = false, becn = false, ack_req = false;
  uint16_t pkey = 0xffff;
  uint32_t dest_qp = 0;
  uint32_t psn = 0;

  // Extension headers, written when the opcode has them.
  uint64_t reth_va = 0;
  uint32_t reth_rkey = 0, reth_dma_len = 0;
  uint32_t immdt = 0;
  uint8_t aeth_syndrome = 0;
  uint32_t aeth_msn = 0;
  uint32_t deth_qkey = 0, deth_src_qp = 0;
};

// Size build_roce_frame() needs for a payload of `payload_len` bytes.
size_t roce_frame_size(const RoceFrameSpec& spec, size_t payload_len);

// Writes Ethernet / [802.1Q] / IPv4|IPv6 / UDP (checksum 0) / BTH / extension headers / payload /
// pad (zeros) / ICRC into `out`. Returns the frame length, or 0 when the opcode is unknown, the
// addresses' versions differ, the payload is not allowed for the opcode or `out` is too small.
size_t build_roce_frame(std::span<uint8_t> out, const RoceFrameSpec& spec, std::span<const uint8_t> payload);

}  // namespace inagg::wire
