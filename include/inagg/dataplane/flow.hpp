// rte_flow steering of RoCEv2 (UDP destination port 4791). DPDK 22.11 has no BTH item, so the
// rules match the UDP port.
//
// On a port, best first:
//   rss      ETH / IPv4|IPv6 / UDP dst 4791 -> RSS over every datapath queue, hashing the UDP source
//            port only. RoCE NICs pick a source port per QP (rxe: 49152 + a hash of the QPN), so
//            connections spread over the queues and each connection stays on one queue. Priority 1,
//            under the per-job rules below.
//   queue    the same match -> QUEUE 0 (one datapath lcore, or a PMD without the RSS action).
//   software the PMD refused both (every virtual device here): the lcore loop classifies every
//            frame itself, with the same result; the reason is logged once and shown in the stats.
// On a port in rss mode, a job's connections get rules of their own (priority 0): both directions
// of each connection, ETH / IP src, dst / UDP dst 4791 -> the queue of the lcore that owns the job,
// so the owner receives its packets directly instead of through another lcore's handover ring.
// A per-job rule the PMD refuses costs only that handover: it is counted and logged once per job.
#pragma once

#include <rte_flow.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::dataplane {

// A rule with the storage its pattern and actions point to; built without touching a port so it
// can be unit-tested. Not copyable (the pattern points into it).
struct FlowRule {
  rte_flow_attr attr{};
  rte_flow_item pattern[4]{};
  rte_flow_action actions[2]{};
  rte_flow_item_ipv4 ip4_spec{}, ip4_mask{};
  rte_flow_item_ipv6 ip6_spec{}, ip6_mask{};
  rte_flow_item_udp udp_spec{}, udp_mask{};
  rte_flow_action_queue queue{};
  rte_flow_action_rss rss{};
  std::vector<uint16_t> rss_queues;

  FlowRule() = default;
  FlowRule(const FlowRule&) = delete;
  FlowRule& operator=(const FlowRule&) = delete;
};

constexpr uint32_t kJobRulePriority = 0, kRoceRulePriority = 1;

// ETH / IPv4|IPv6 / UDP dst 4791 -> QUEUE `queue`.
std::unique_ptr<FlowRule> roce_queue_rule(bool ipv6, uint16_t queue, uint32_t priority);
// ETH / IPv4|IPv6 / UDP dst 4791 -> RSS over queues 0..queues-1 by the UDP source port.
std::unique_ptr<FlowRule> roce_rss_rule(bool ipv6, uint16_t queues, uint32_t priority);
// ETH / IP src / IP dst / UDP dst 4791 -> QUEUE `queue` (one direction of one connection).
std::unique_ptr<FlowRule> connection_rule(const util::IpAddr& src, const util::IpAddr& dst, uint16_t queue,
                                          uint32_t priority);

// The rte_flow calls, replaceable so that tests can play a PMD that takes or refuses each rule.
struct FlowOps {
  int (*validate)(uint16_t, const rte_flow_attr*, const rte_flow_item[], const rte_flow_action[],
                  rte_flow_error*) = rte_flow_validate;
  rte_flow* (*create)(uint16_t, const rte_flow_attr*, const rte_flow_item[], const rte_flow_action[],
                      rte_flow_error*) = rte_flow_create;
  int (*destroy)(uint16_t, rte_flow*, rte_flow_error*) = rte_flow_destroy;
};

enum class SteeringMode : uint8_t { rss, queue, software };
const char* steering_mode_name(SteeringMode m);  // "rss", "queue", "software"

struct PortSteering {
  uint16_t port = 0;
  SteeringMode mode = SteeringMode::software;
  std::string reason;  // why the PMD refused the better modes, when it did
  std::vector<rte_flow*> flows;
};

struct SteeringCounters {
  uint64_t job_rules = 0;          // per-job rules in place now
  uint64_t job_rules_refused = 0;  // per-job rules a PMD refused, since start
};

// The steering of every port. Control side only (start-up, the control thread, telemetry); the
// lcores never call it. Thread-safe.
class FlowSteering {
 public:
  explicit FlowSteering(FlowOps ops = {}) : ops_(ops) {}
  ~FlowSteering() { remove_all(); }
  FlowSteering(const FlowSteering&) = delete;
  FlowSteering& operator=(const FlowSteering&) = delete;

  // Installs the best mode the port takes for `queues` datapath queues; returns it.
  PortSteering add_port(uint16_t port, uint16_t queues);
  // The port's entry when it is not steered at all (--no-flow): software with `reason`.
  PortSteering add_unsteered_port(uint16_t port, const std::string& reason);
  // Rules sending both directions of every connection of job `id` to `queue`, on every port in
  // rss mode. Replaces the job's earlier rules. Returns how many the PMDs refused (0: all taken).
  unsigned steer_job(uint32_t id, const std::vector<control::ConnectionSpec>& conns, uint16_t queue);
  void unsteer_job(uint32_t id);
  void remove_all();  // before the ports stop
  SteeringCounters counters() const;

 private:
  rte_flow* create(uint16_t port, const FlowRule& r, std::string* reason) const;
  void unsteer_locked(uint32_t id);

  FlowOps ops_;
  mutable std::mutex mutex_;
  std::vector<PortSteering> ports_;  // stable after start-up: add_port is called before any job
  std::map<uint32_t, std::vector<std::pair<uint16_t, rte_flow*>>> job_flows_;
  uint64_t job_rules_refused_ = 0;
};

}  // namespace inagg::dataplane
