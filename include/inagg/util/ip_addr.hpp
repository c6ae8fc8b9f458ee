// IP addresses as inagg's modules exchange them: the wire layer builds and parses them, job
// descriptions (control) and the workers' rack plans (client) name them. Kept here, below both,
// so that control need not depend on the wire layer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace inagg::util {

enum class IpVersion : uint8_t { none = 0, v4 = 4, v6 = 6 };

struct IpAddr {
  IpVersion version = IpVersion::v4;
  std::array<uint8_t, 16> bytes{};  // IPv4 in the first 4 bytes, network order

  static IpAddr v4(uint32_t host_order);
  static IpAddr v6(const std::array<uint8_t, 16>& b);
  uint32_t v4_host_order() const;
  // ::ffff:a.b.c.d, how rdma-core and the kernel's Soft-RoCE write the RoCEv2 GID of an IPv4
  // address (RFC 4291 §2.5.5.2).
  bool is_v4_mapped() const;
  bool operator==(const IpAddr&) const = default;
};

// Whether 16 address bytes are IPv4-mapped (::ffff:a.b.c.d): the one check the datapath and the
// engine both use to find the IPv4 key such an address names.
inline bool is_v4_mapped_bytes(const uint8_t* a16) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < 12; ++i)
    if (a16[i] != kPrefix[i]) return false;
  return true;
}

// Parses "10.0.0.1" or "fd00::1".
std::optional<IpAddr> parse_ip(std::string_view text);
// The address a RoCEv2 GID names: an IPv4-mapped IPv6 address is its IPv4 address (RoCEv2 sends
// such a GID's packets as IPv4); any other address is itself.
IpAddr gid_address(const IpAddr& ip);
// parse_ip, then gid_address: what job files and registrations accept.
std::optional<IpAddr> parse_gid(std::string_view text);
// The reverse: "10.0.0.1", "fd00::1".
std::string ip_text(const IpAddr& ip);

}  // namespace inagg::util
