// What the agent learns from the host it runs on: an interface's index, Ethernet and IPv4
// address, and a neighbour's Ethernet address (ARP), so head job files need only IP addresses.
#pragma once

#include <optional>
#include <string>

#include "inagg/wire/build.hpp"

namespace inagg::xdp {

struct Interface {
  std::string name;
  int ifindex = 0;
  wire::MacAddr mac{};
  std::optional<util::IpAddr> ipv4;  // the first IPv4 address, if it has one
};

// nullopt with *error ("no interface 'eth9' in this network namespace ...").
std::optional<Interface> query_interface(const std::string& name, std::string* error);

// The Ethernet address of `ip` on `iface`: from the kernel's neighbour table, after provoking an
// ARP request (a datagram to the discard port) when it is not there yet. Waits up to timeout_ms.
std::optional<wire::MacAddr> resolve_neighbor(const Interface& iface, const util::IpAddr& ip, int timeout_ms,
                                              std::string* error);

}  // namespace inagg::xdp
