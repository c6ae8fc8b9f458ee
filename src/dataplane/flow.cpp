#include "inagg/dataplane/flow.hpp"

#include <rte_byteorder.h>

namespace inagg::dataplane {

RoceSteeringRule::RoceSteeringRule(bool ipv6, uint16_t queue_index) {
  attr.ingress = 1;
  udp_spec.hdr.dst_port = RTE_BE16(4791);
  udp_mask.hdr.dst_port = RTE_BE16(0xffff);
  queue.index = queue_index;
  pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
  pattern[1].type = ipv6 ? RTE_FLOW_ITEM_TYPE_IPV6 : RTE_FLOW_ITEM_TYPE_IPV4;
  pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
  pattern[2].spec = &udp_spec;
  pattern[2].mask = &udp_mask;
  pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
  actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
  actions[0].conf = &queue;
  actions[1].type = RTE_FLOW_ACTION_TYPE_END;
}

namespace {
std::string describe(const rte_flow_error& e) {
  std::string s = e.message ? e.message : "no reason given";
  return s + " (rte_flow error type " + std::to_string(static_cast<int>(e.type)) + ")";
}
}  // namespace

SteeringResult install_roce_steering(uint16_t port, uint16_t queue_index) {
  SteeringResult r;
  for (bool v6 : {false, true}) {
    RoceSteeringRule rule(v6, queue_index);
    rte_flow_error err{};
    if (rte_flow_validate(port, &rule.attr, rule.pattern, rule.actions, &err) != 0) {
      r.reason = describe(err);
      remove_roce_steering(port, r);
      return r;
    }
    rte_flow* f = rte_flow_create(port, &rule.attr, rule.pattern, rule.actions, &err);
    if (f == nullptr) {
      r.reason = describe(err);
      remove_roce_steering(port, r);
      return r;
    }
    (v6 ? r.v6 : r.v4) = f;
  }
  r.mode = SteeringMode::hardware;
  return r;
}

void remove_roce_steering(uint16_t port, SteeringResult& r) {
  rte_flow_error err{};
  if (r.v4) rte_flow_destroy(port, r.v4, &err);
  if (r.v6) rte_flow_destroy(port, r.v6, &err);
  r.v4 = r.v6 = nullptr;
  r.mode = SteeringMode::software;
}

}  // namespace inagg::dataplane
