#include "inagg/util/ip_addr.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace inagg::util {

IpAddr IpAddr::v4(uint32_t host_order) {
  IpAddr a;
  a.version = IpVersion::v4;
  for (size_t i = 0; i < 4; ++i) a.bytes[i] = static_cast<uint8_t>(host_order >> (24 - 8 * i));
  return a;
}

IpAddr IpAddr::v6(const std::array<uint8_t, 16>& b) {
  IpAddr a;
  a.version = IpVersion::v6;
  a.bytes = b;
  return a;
}

uint32_t IpAddr::v4_host_order() const {
  return static_cast<uint32_t>(bytes[0]) << 24 | static_cast<uint32_t>(bytes[1]) << 16 |
         static_cast<uint32_t>(bytes[2]) << 8 | bytes[3];
}

bool IpAddr::is_v4_mapped() const { return version == IpVersion::v6 && is_v4_mapped_bytes(bytes.data()); }

IpAddr gid_address(const IpAddr& ip) {
  if (!ip.is_v4_mapped()) return ip;
  IpAddr a;
  a.version = IpVersion::v4;
  std::memcpy(a.bytes.data(), ip.bytes.data() + 12, 4);
  return a;
}

std::optional<IpAddr> parse_gid(std::string_view text) {
  std::optional<IpAddr> a = parse_ip(text);
  if (a) *a = gid_address(*a);
  return a;
}

std::optional<IpAddr> parse_ip(std::string_view text) {
  const std::string s(text);
  IpAddr a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) {
    a.version = IpVersion::v4;
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) {
    a.version = IpVersion::v6;
    return a;
  }
  return std::nullopt;
}

std::string ip_text(const IpAddr& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  const int family = ip.version == IpVersion::v6 ? AF_INET6 : AF_INET;
  return inet_ntop(family, ip.bytes.data(), buf, sizeof buf) ? buf : "?";
}

}  // namespace inagg::util
