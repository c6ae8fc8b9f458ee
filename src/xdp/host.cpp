#include "inagg/xdp/host.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "inagg/xdp/head_job.hpp"

namespace inagg::xdp {
namespace {

// /proc/net/arp: "IP address  HW type  Flags  HW address  Mask  Device"; flags 0x2 = complete.
std::optional<wire::MacAddr> arp_entry(const std::string& ifname, const std::string& ip) {
  std::ifstream arp("/proc/net/arp");
  std::string line;
  std::getline(arp, line);  // header
  while (std::getline(arp, line)) {
    std::istringstream f(line);
    std::string addr, hw, flags, mac, mask, dev;
    if (!(f >> addr >> hw >> flags >> mac >> mask >> dev)) continue;
    if (addr == ip && dev == ifname && (std::stoul(flags, nullptr, 16) & 0x2)) return parse_mac(mac);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Interface> query_interface(const std::string& name, std::string* error) {
  Interface i;
  i.name = name;
  i.ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (i.ifindex == 0) {
    *error = "no interface '" + name + "' in this network namespace (ip link shows the ones there are)";
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const bool got_mac = fd >= 0 && ::ioctl(fd, SIOCGIFHWADDR, &req) == 0;
  if (fd >= 0) ::close(fd);
  if (!got_mac) {
    *error = "cannot read the Ethernet address of '" + name + "': " + std::strerror(errno);
    return std::nullopt;
  }
  std::memcpy(i.mac.data(), req.ifr_hwaddr.sa_data, 6);
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) == 0) {
    for (ifaddrs* a = all; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) continue;
      util::IpAddr ip;
      std::memcpy(ip.bytes.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      i.ipv4 = ip;
      break;
    }
    ::freeifaddrs(all);
  }
  return i;
}

std::optional<wire::MacAddr> resolve_neighbor(const Interface& iface, const util::IpAddr& ip, int timeout_ms,
                                              std::string* error) {
  const std::string text = util::ip_text(ip);
  if (auto mac = arp_entry(iface.name, text)) return mac;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0)
    ::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, iface.name.c_str(), static_cast<socklen_t>(iface.name.size()));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // discard: only the ARP request it causes matters
  std::memcpy(&to.sin_addr, ip.bytes.data(), 4);
  const auto start = std::chrono::steady_clock::now();
  std::optional<wire::MacAddr> mac;
  for (int round = 0; !mac; ++round) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    if (ms > timeout_ms) break;
    if (fd >= 0 && round % 10 == 0) ::sendto(fd, "", 0, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    ::poll(nullptr, 0, 20);
    mac = arp_entry(iface.name, text);
  }
  if (fd >= 0) ::close(fd);
  if (!mac)
    *error = "no ARP answer from " + text + " on " + iface.name + " within " + std::to_string(timeout_ms) +
             " ms (is it up and on this segment?)";
  return mac;
}

}  // namespace inagg::xdp
