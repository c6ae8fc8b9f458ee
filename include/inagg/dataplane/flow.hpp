// rte_flow steering of RoCEv2 (UDP destination port 4791). DPDK 22.11 has no BTH item, so the
// rules match the UDP port.
//
// On a port, best first:
//   rss      ETH / IPv4|IPv6 / UDP dst 4791 -> RSS over every datapath queue, hashing the UDP source
//            port only. RoCE NICs pick a source port per QP (rxe: 49152 + a hash of the QPN), so
//            connections spread over the queues and each connection stays on one queue. Priority 1,
//            under the per-job rules below; at priority 0 where the PMD takes no other.
//   queue    the same match -> QUEUE 0 (one datapath lcore, or a PMD without the RSS action).
//   software the PMD refused both (every virtual device here): the lcore loop classifies every
//            frame itself, with the same result; the reason is logged once and shown in the stats.
// On a port in rss mode whose port-wide rule sits at priority 1, a job's connections get rules of
// their own (priority 0): per direction of each connection, ETH / IP src, dst / UDP dst 4791 -> the
// queue of the job's owner (job_pairs below), so it receives them directly instead of through
// another lcore's handover ring. A per-job rule the PMD refuses costs only that handover: it is counted and
// logged once per job.
#pragma once

#include <rte_flow.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
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
  // Per-job rules need the port-wide rule below them (priority 1). A PMD that takes only priority 0
  // (i40e, iavf, igb) gets the port-wide rule at 0 and no per-job rules.
  bool job_rules = false;
  std::string reason;  // why the PMD refused the better modes, when it did
  std::vector<rte_flow*> flows;
};

// One direction of one connection, and the queue its packets should land on.
struct SteeredPair {
  util::IpAddr src, dst;
  uint16_t queue = 0;
};

// The directions of a job's connections, each once, all to `queue` (the owner's): every
// connection's data (src -> dst) and its ACKs and NAKs (dst -> src). In a ring of two ranks a pair
// carries one connection's data and the other's ACKs.
std::vector<SteeredPair> job_pairs(const std::vector<control::ConnectionSpec>& conns, uint16_t queue);

struct SteeringCounters {
  uint64_t job_rules = 0;            // per-job rules in place now (one per port and address pair)
  uint64_t job_rules_refused = 0;    // per-job rules a PMD refused, since start
  uint64_t job_rules_contended = 0;  // pairs already steered elsewhere for another job, since start
};

// The steering of every port. Control side only (start-up, the control thread, telemetry); the
// lcores never call it. Thread-safe.
//
// Per-job rules are shared: two jobs between the same hosts (two communicators on the same
// workers) use the same address pairs, and identical matches at one priority are undefined in
// rte_flow. A pair's rule is made for the first job that needs it and destroyed with the last; a
// later job that wants the pair on another queue gets no rule for it (counted as contended: its
// packets reach their lcore through the handover ring). Re-steering a job makes its new rules
// before it destroys the old ones and keeps those that do not change, so a job's packets never
// fall back to RSS in between (a switch of queue mid-stream can reorder a connection).
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
  // Job `id`'s rules: `pairs` on every port that takes per-job rules. Replaces the job's earlier
  // ones. Returns how many rules it lacks (refused by a PMD or contended; 0: all in place).
  unsigned steer_job(uint32_t id, const std::vector<SteeredPair>& pairs);
  void unsteer_job(uint32_t id);
  void remove_all();  // before the ports stop
  SteeringCounters counters() const;

 private:
  // A rule's identity: port, IP version, source and destination addresses.
  using RuleKey = std::tuple<uint16_t, uint8_t, std::array<uint8_t, 16>, std::array<uint8_t, 16>>;
  struct SharedRule {
    rte_flow* flow = nullptr;
    uint16_t queue = 0;
    std::set<uint32_t> jobs;
  };

  rte_flow* create(uint16_t port, const FlowRule& r, std::string* reason) const;
  void release_locked(uint32_t id, const std::set<RuleKey>& keep);

  FlowOps ops_;
  mutable std::mutex mutex_;
  std::vector<PortSteering> ports_;  // stable after start-up: add_port is called before any job
  std::map<RuleKey, SharedRule> rules_;
  std::map<uint32_t, std::set<RuleKey>> job_rules_;  // the rules each job holds a share of
  uint64_t job_rules_refused_ = 0, job_rules_contended_ = 0;
};

}  // namespace inagg::dataplane
