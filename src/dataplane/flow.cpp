#include "inagg/dataplane/flow.hpp"

#include <rte_byteorder.h>
#include <rte_ethdev.h>

#include <cstring>
#include <set>
#include <utility>

#include "inagg/util/log.hpp"

namespace inagg::dataplane {
namespace {

constexpr uint16_t kRoceUdpPort = 4791;

// ETH / IPv4|IPv6 / UDP dst 4791; the IP item matches any address until a caller fills it.
std::unique_ptr<FlowRule> roce_match(bool ipv6, uint32_t priority) {
  auto r = std::make_unique<FlowRule>();
  r->attr.ingress = 1;
  r->attr.priority = priority;
  r->udp_spec.hdr.dst_port = RTE_BE16(kRoceUdpPort);
  r->udp_mask.hdr.dst_port = RTE_BE16(0xffff);
  r->pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
  r->pattern[1].type = ipv6 ? RTE_FLOW_ITEM_TYPE_IPV6 : RTE_FLOW_ITEM_TYPE_IPV4;
  r->pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
  r->pattern[2].spec = &r->udp_spec;
  r->pattern[2].mask = &r->udp_mask;
  r->pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
  r->actions[1].type = RTE_FLOW_ACTION_TYPE_END;
  return r;
}

std::string describe(const rte_flow_error& e) {
  std::string s = e.message ? e.message : "no reason given";
  return s + " (rte_flow error type " + std::to_string(static_cast<int>(e.type)) + ")";
}

}  // namespace

std::unique_ptr<FlowRule> roce_queue_rule(bool ipv6, uint16_t queue, uint32_t priority) {
  auto r = roce_match(ipv6, priority);
  r->queue.index = queue;
  r->actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
  r->actions[0].conf = &r->queue;
  return r;
}

std::unique_ptr<FlowRule> roce_rss_rule(bool ipv6, uint16_t queues, uint32_t priority) {
  auto r = roce_match(ipv6, priority);
  for (uint16_t q = 0; q < queues; ++q) r->rss_queues.push_back(q);
  r->rss.func = RTE_ETH_HASH_FUNCTION_DEFAULT;
  r->rss.level = 0;  // the outer headers: RoCEv2 is not a tunnel
  r->rss.types = (ipv6 ? RTE_ETH_RSS_NONFRAG_IPV6_UDP : RTE_ETH_RSS_NONFRAG_IPV4_UDP) | RTE_ETH_RSS_L4_SRC_ONLY;
  r->rss.key_len = 0;  // the PMD's default key
  r->rss.key = nullptr;
  r->rss.queue_num = queues;
  r->rss.queue = r->rss_queues.data();
  r->actions[0].type = RTE_FLOW_ACTION_TYPE_RSS;
  r->actions[0].conf = &r->rss;
  return r;
}

std::unique_ptr<FlowRule> connection_rule(const util::IpAddr& src, const util::IpAddr& dst, uint16_t queue,
                                          uint32_t priority) {
  const bool v6 = src.version == util::IpVersion::v6;
  auto r = roce_queue_rule(v6, queue, priority);
  if (v6) {
    std::memcpy(r->ip6_spec.hdr.src_addr, src.bytes.data(), 16);
    std::memcpy(r->ip6_spec.hdr.dst_addr, dst.bytes.data(), 16);
    std::memset(r->ip6_mask.hdr.src_addr, 0xff, 16);
    std::memset(r->ip6_mask.hdr.dst_addr, 0xff, 16);
    r->pattern[1].spec = &r->ip6_spec;
    r->pattern[1].mask = &r->ip6_mask;
  } else {
    std::memcpy(&r->ip4_spec.hdr.src_addr, src.bytes.data(), 4);  // IpAddr keeps network order
    std::memcpy(&r->ip4_spec.hdr.dst_addr, dst.bytes.data(), 4);
    r->ip4_mask.hdr.src_addr = RTE_BE32(0xffffffff);
    r->ip4_mask.hdr.dst_addr = RTE_BE32(0xffffffff);
    r->pattern[1].spec = &r->ip4_spec;
    r->pattern[1].mask = &r->ip4_mask;
  }
  return r;
}

const char* steering_mode_name(SteeringMode m) {
  switch (m) {
    case SteeringMode::rss:
      return "rss";
    case SteeringMode::queue:
      return "queue";
    case SteeringMode::software:
      break;
  }
  return "software";
}

rte_flow* FlowSteering::create(uint16_t port, const FlowRule& r, std::string* reason) const {
  rte_flow_error err{};
  if (ops_.validate(port, &r.attr, r.pattern, r.actions, &err) != 0) {
    *reason = describe(err);
    return nullptr;
  }
  rte_flow* f = ops_.create(port, &r.attr, r.pattern, r.actions, &err);
  if (f == nullptr) *reason = describe(err);
  return f;
}

PortSteering FlowSteering::add_port(uint16_t port, uint16_t queues) {
  std::lock_guard<std::mutex> lock(mutex_);
  PortSteering ps;
  ps.port = port;
  // Both IP versions or neither: a mode that steers IPv4 but not IPv6 would split one lcore's jobs.
  auto try_mode = [&](SteeringMode mode, uint32_t priority) {
    for (bool v6 : {false, true}) {
      std::unique_ptr<FlowRule> r =
          mode == SteeringMode::rss ? roce_rss_rule(v6, queues, priority) : roce_queue_rule(v6, 0, priority);
      std::string why;
      rte_flow* f = create(port, *r, &why);
      if (f == nullptr) {
        ps.reason += (ps.reason.empty() ? "" : "; ") + std::string(steering_mode_name(mode)) + " at priority " +
                     std::to_string(priority) + ": " + why;
        rte_flow_error err{};
        for (rte_flow* g : ps.flows) ops_.destroy(port, g, &err);
        ps.flows.clear();
        return false;
      }
      ps.flows.push_back(f);
    }
    ps.mode = mode;
    return true;
  };
  // With one queue there is nothing to spread; the queue rule still tells whether the PMD steers.
  if (queues > 1 && try_mode(SteeringMode::rss, kRoceRulePriority)) {
    ps.job_rules = true;
  } else if (queues > 1 && try_mode(SteeringMode::rss, kJobRulePriority)) {
    // The PMD takes only priority 0: spread, but no per-job rules could outrank this one.
  } else if (!try_mode(SteeringMode::queue, kRoceRulePriority) && !try_mode(SteeringMode::queue, kJobRulePriority)) {
    ps.mode = SteeringMode::software;
  }
  ports_.push_back(ps);
  return ps;
}

PortSteering FlowSteering::add_unsteered_port(uint16_t port, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  PortSteering ps;
  ps.port = port;
  ps.reason = reason;
  ports_.push_back(ps);
  return ps;
}

std::vector<SteeredPair> job_pairs(const std::vector<control::ConnectionSpec>& conns, uint16_t queue) {
  std::vector<SteeredPair> out;
  auto add = [&](const util::IpAddr& src, const util::IpAddr& dst) {
    if (src.version != dst.version) return;
    for (const SteeredPair& p : out)
      if (p.src == src && p.dst == dst) return;
    out.push_back({src, dst, queue});
  };
  for (const control::ConnectionSpec& c : conns) add(c.src_ip, c.dst_ip);  // data
  for (const control::ConnectionSpec& c : conns) add(c.dst_ip, c.src_ip);  // ACKs and NAKs
  return out;
}

unsigned FlowSteering::steer_job(uint32_t id, const std::vector<SteeredPair>& pairs) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<RuleKey> mine;
  unsigned refused = 0, contended = 0;
  std::string first_reason;
  for (const PortSteering& ps : ports_) {
    if (!ps.job_rules) continue;
    for (const SteeredPair& p : pairs) {
      const RuleKey key{ps.port, static_cast<uint8_t>(p.src.version), p.src.bytes, p.dst.bytes};
      if (auto it = rules_.find(key); it != rules_.end()) {
        if (it->second.queue == p.queue) {
          it->second.jobs.insert(id);
          mine.insert(key);
        } else if (it->second.jobs.count(id) && it->second.jobs.size() == 1) {
          // Only this job holds it, on another queue (its owner moved): a new rule, then the old
          // one goes. Two rules of one match briefly coexist; either queue reaches the owner.
          std::string why;
          rte_flow* f = create(ps.port, *connection_rule(p.src, p.dst, p.queue, kJobRulePriority), &why);
          if (f == nullptr) {
            if (refused++ == 0) first_reason = "port " + std::to_string(ps.port) + ": " + why;
            continue;  // the old rule goes below, with the job's others it no longer needs
          }
          rte_flow_error err{};
          ops_.destroy(ps.port, it->second.flow, &err);
          it->second.flow = f;
          it->second.queue = p.queue;
          mine.insert(key);
        } else {
          ++contended;
        }
        continue;
      }
      std::string why;
      rte_flow* f = create(ps.port, *connection_rule(p.src, p.dst, p.queue, kJobRulePriority), &why);
      if (f == nullptr) {
        if (refused++ == 0) first_reason = "port " + std::to_string(ps.port) + ": " + why;
        continue;
      }
      rules_[key] = SharedRule{f, p.queue, {id}};
      mine.insert(key);
    }
  }
  release_locked(id, mine);  // the job's earlier rules it no longer needs, after the new ones exist
  if (!mine.empty()) job_rules_[id] = std::move(mine);
  job_rules_refused_ += refused;
  job_rules_contended_ += contended;
  if (refused)
    util::log(util::LogModule::dataplane, util::LogLevel::notice,
              "job %u: %u of its rte_flow rules refused (%s); its packets that land on other queues reach their "
              "lcore through the handover ring",
              id, refused, first_reason.c_str());
  if (contended)
    util::log(util::LogModule::dataplane, util::LogLevel::info,
              "job %u: %u of its address pairs are steered to another queue for another job; those packets reach "
              "their lcore through the handover ring",
              id, contended);
  return refused + contended;
}

void FlowSteering::release_locked(uint32_t id, const std::set<RuleKey>& keep) {
  auto it = job_rules_.find(id);
  if (it == job_rules_.end()) return;
  rte_flow_error err{};
  for (const RuleKey& key : it->second) {
    if (keep.count(key)) continue;
    auto r = rules_.find(key);
    if (r == rules_.end()) continue;
    r->second.jobs.erase(id);
    if (r->second.jobs.empty()) {
      ops_.destroy(std::get<0>(key), r->second.flow, &err);
      rules_.erase(r);
    }
  }
  job_rules_.erase(it);
}

void FlowSteering::unsteer_job(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  release_locked(id, {});
}

void FlowSteering::remove_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  rte_flow_error err{};
  for (auto& [key, r] : rules_) ops_.destroy(std::get<0>(key), r.flow, &err);
  rules_.clear();
  job_rules_.clear();
  for (PortSteering& ps : ports_) {
    for (rte_flow* f : ps.flows) ops_.destroy(ps.port, f, &err);
    ps.flows.clear();
  }
  ports_.clear();
}

SteeringCounters FlowSteering::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SteeringCounters c;
  c.job_rules = rules_.size();
  c.job_rules_refused = job_rules_refused_;
  c.job_rules_contended = job_rules_contended_;
  return c;
}

}  // namespace inagg::dataplane
