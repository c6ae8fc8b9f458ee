// What the appliance tells of each of its ports (PortInfo): the PMD, the MTU and how RoCEv2 is
// steered to the lcores' queues.
#pragma once

#include <cstdint>
#include <string>

namespace inagg::dataplane {

struct PortInfo {
  uint16_t port;
  std::string name;
  std::string flow_reason;  // why the PMD refused the better steering modes, when it did
  uint32_t mtu;
  std::string flow_mode = "software";  // rss, queue or software (flow.hpp)
  bool flow_steered() const { return flow_mode != "software"; }
};

}  // namespace inagg::dataplane
