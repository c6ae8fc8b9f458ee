// rte_flow steering of RoCEv2 (UDP destination port 4791) to the aggregation queue. DPDK 22.11 has
// no BTH item, so the rule matches the UDP port. Where a PMD cannot take the rule (every virtual
// device here), the software classification in the lcore loop does the same job; the outcome is
// logged once and shown in the stats.
#pragma once

#include <rte_flow.h>

#include <cstdint>
#include <string>

namespace inagg::dataplane {

// The rule, built without touching a port so it can be unit-tested: ingress, ETH / IPv4 or IPv6 /
// UDP dst 4791 -> QUEUE `queue`. The object owns the item specs the pattern points to.
struct RoceSteeringRule {
  rte_flow_attr attr{};
  rte_flow_item pattern[4]{};
  rte_flow_action actions[2]{};
  rte_flow_item_udp udp_spec{}, udp_mask{};
  rte_flow_action_queue queue{};

  RoceSteeringRule(bool ipv6, uint16_t queue_index);
  RoceSteeringRule(const RoceSteeringRule&) = delete;
  RoceSteeringRule& operator=(const RoceSteeringRule&) = delete;
};

enum class SteeringMode : uint8_t { hardware, software };

struct SteeringResult {
  SteeringMode mode = SteeringMode::software;
  std::string reason;  // why the PMD refused, when it did
  rte_flow* v4 = nullptr;
  rte_flow* v6 = nullptr;
};

// Validates and creates both rules on `port`; on any refusal destroys what was created and returns
// software mode with the PMD's reason.
SteeringResult install_roce_steering(uint16_t port, uint16_t queue_index);
void remove_roce_steering(uint16_t port, SteeringResult& r);

}  // namespace inagg::dataplane
