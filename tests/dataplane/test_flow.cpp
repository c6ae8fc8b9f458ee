// rte_flow steering (flow.hpp): the rules as built, and the choice of mode and the per-job rules
// against a fake PMD that takes or refuses each kind of rule. No virtual device here takes rte_flow
// rules, so the fake is how the hardware paths are exercised; the software fallback on real virtual
// devices is covered by the appliance tests (stats "steering software").
#include <gtest/gtest.h>
#include <rte_byteorder.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "inagg/dataplane/flow.hpp"

using namespace inagg::dataplane;
using inagg::control::ConnectionSpec;
using inagg::util::IpAddr;

namespace {

const rte_flow_item_udp& udp_of(const FlowRule& r) { return *static_cast<const rte_flow_item_udp*>(r.pattern[2].spec); }
const rte_flow_item_udp& udp_mask_of(const FlowRule& r) {
  return *static_cast<const rte_flow_item_udp*>(r.pattern[2].mask);
}

void expect_roce_match(const FlowRule& r, bool v6, uint32_t priority) {
  EXPECT_EQ(r.attr.ingress, 1u);
  EXPECT_EQ(r.attr.priority, priority);
  EXPECT_EQ(r.pattern[0].type, RTE_FLOW_ITEM_TYPE_ETH);
  EXPECT_EQ(r.pattern[1].type, v6 ? RTE_FLOW_ITEM_TYPE_IPV6 : RTE_FLOW_ITEM_TYPE_IPV4);
  EXPECT_EQ(r.pattern[2].type, RTE_FLOW_ITEM_TYPE_UDP);
  EXPECT_EQ(rte_be_to_cpu_16(udp_of(r).hdr.dst_port), 4791);
  EXPECT_EQ(udp_mask_of(r).hdr.dst_port, 0xffff);
  EXPECT_EQ(udp_mask_of(r).hdr.src_port, 0);  // RoCE NICs vary the source port per QP
  EXPECT_EQ(r.pattern[3].type, RTE_FLOW_ITEM_TYPE_END);
  EXPECT_EQ(r.actions[1].type, RTE_FLOW_ACTION_TYPE_END);
}

// The fake PMD: which action types it takes, and what it holds.
struct FakePmd {
  bool take_rss = true, take_queue = true, take_job_rules = true;
  uint32_t max_priority = 7;  // i40e, iavf, igb: 0
  struct Held {
    uint16_t port;
    uint32_t priority;
    rte_flow_action_type action;
    uint16_t queue;
    std::vector<uint16_t> rss_queues;
    uint64_t rss_types;
    bool has_ip;
    uint32_t src, dst;  // IPv4 rules, network order
  };
  std::vector<std::unique_ptr<Held>> held;
  int destroyed = 0, created = 0;
};
FakePmd* pmd;

int fake_validate(uint16_t, const rte_flow_attr* attr, const rte_flow_item pattern[], const rte_flow_action actions[],
                  rte_flow_error* err) {
  const bool job_rule = pattern[1].spec != nullptr;
  const bool ok =
      job_rule ? pmd->take_job_rules : (actions[0].type == RTE_FLOW_ACTION_TYPE_RSS ? pmd->take_rss : pmd->take_queue);
  if (!ok) {
    err->type = RTE_FLOW_ERROR_TYPE_ACTION;
    err->message = "fake PMD refuses this rule";
    return -ENOTSUP;
  }
  if (attr->priority > pmd->max_priority) {
    err->type = RTE_FLOW_ERROR_TYPE_ATTR_PRIORITY;
    err->message = "fake PMD: no such priority";
    return -ENOTSUP;
  }
  return 0;
}

rte_flow* fake_create(uint16_t port, const rte_flow_attr* attr, const rte_flow_item pattern[],
                      const rte_flow_action actions[], rte_flow_error* err) {
  if (fake_validate(port, attr, pattern, actions, err) != 0) return nullptr;
  auto h = std::make_unique<FakePmd::Held>();
  h->port = port;
  h->priority = attr->priority;
  h->action = actions[0].type;
  if (h->action == RTE_FLOW_ACTION_TYPE_QUEUE)
    h->queue = static_cast<const rte_flow_action_queue*>(actions[0].conf)->index;
  if (h->action == RTE_FLOW_ACTION_TYPE_RSS) {
    const auto* rss = static_cast<const rte_flow_action_rss*>(actions[0].conf);
    h->rss_queues.assign(rss->queue, rss->queue + rss->queue_num);
    h->rss_types = rss->types;
  }
  h->has_ip = pattern[1].spec != nullptr;
  if (h->has_ip && pattern[1].type == RTE_FLOW_ITEM_TYPE_IPV4) {
    h->src = static_cast<const rte_flow_item_ipv4*>(pattern[1].spec)->hdr.src_addr;
    h->dst = static_cast<const rte_flow_item_ipv4*>(pattern[1].spec)->hdr.dst_addr;
  }
  pmd->held.push_back(std::move(h));
  ++pmd->created;
  return reinterpret_cast<rte_flow*>(pmd->held.back().get());
}

int fake_destroy(uint16_t, rte_flow* f, rte_flow_error*) {
  auto it = std::find_if(pmd->held.begin(), pmd->held.end(),
                         [&](const auto& h) { return reinterpret_cast<rte_flow*>(h.get()) == f; });
  EXPECT_NE(it, pmd->held.end()) << "destroyed a rule the PMD does not hold";
  if (it != pmd->held.end()) pmd->held.erase(it);
  ++pmd->destroyed;
  return 0;
}

constexpr FlowOps kFakeOps{fake_validate, fake_create, fake_destroy};

uint32_t be_ip(uint8_t d) { return rte_cpu_to_be_32(0x0a000000u | d); }  // 10.0.0.d

// A 3-rank ring: rank r writes from 10.0.0.(r+1) to 10.0.0.(succ+1).
std::vector<ConnectionSpec> ring3() {
  std::vector<ConnectionSpec> conns;
  for (unsigned r = 0; r < 3; ++r) {
    ConnectionSpec c;
    c.rank = r;
    c.src_ip = IpAddr::v4(0x0a000001u + r);
    c.dst_ip = IpAddr::v4(0x0a000001u + (r + 1) % 3);
    conns.push_back(c);
  }
  return conns;
}

class FlowSteeringTest : public ::testing::Test {
 protected:
  void SetUp() override { pmd = &fake; }
  void TearDown() override { pmd = nullptr; }
  FakePmd fake;
};

}  // namespace

TEST(FlowRules, QueueRuleMatchesUdp4791IntoTheQueue) {
  for (bool v6 : {false, true}) {
    auto r = roce_queue_rule(v6, 3, kRoceRulePriority);
    expect_roce_match(*r, v6, kRoceRulePriority);
    EXPECT_EQ(r->pattern[1].spec, nullptr);  // any address
    EXPECT_EQ(r->actions[0].type, RTE_FLOW_ACTION_TYPE_QUEUE);
    EXPECT_EQ(static_cast<const rte_flow_action_queue*>(r->actions[0].conf)->index, 3);
  }
}

TEST(FlowRules, RssRuleSpreadsOverEveryQueueByTheUdpSourcePortOnly) {
  for (bool v6 : {false, true}) {
    auto r = roce_rss_rule(v6, 4, kRoceRulePriority);
    expect_roce_match(*r, v6, kRoceRulePriority);
    ASSERT_EQ(r->actions[0].type, RTE_FLOW_ACTION_TYPE_RSS);
    const auto* rss = static_cast<const rte_flow_action_rss*>(r->actions[0].conf);
    ASSERT_EQ(rss->queue_num, 4u);
    for (uint16_t q = 0; q < 4; ++q) EXPECT_EQ(rss->queue[q], q);
    EXPECT_EQ(rss->types, (v6 ? RTE_ETH_RSS_NONFRAG_IPV6_UDP : RTE_ETH_RSS_NONFRAG_IPV4_UDP) | RTE_ETH_RSS_L4_SRC_ONLY);
    EXPECT_EQ(rss->level, 0u);
  }
}

TEST(FlowRules, ConnectionRuleMatchesBothAddressesExactly) {
  auto r = connection_rule(IpAddr::v4(0x0a000001), IpAddr::v4(0x0a000002), 1, kJobRulePriority);
  expect_roce_match(*r, false, kJobRulePriority);
  EXPECT_LT(kJobRulePriority, kRoceRulePriority);  // rte_flow: lower is matched first
  const auto* spec = static_cast<const rte_flow_item_ipv4*>(r->pattern[1].spec);
  const auto* mask = static_cast<const rte_flow_item_ipv4*>(r->pattern[1].mask);
  EXPECT_EQ(spec->hdr.src_addr, be_ip(1));
  EXPECT_EQ(spec->hdr.dst_addr, be_ip(2));
  EXPECT_EQ(mask->hdr.src_addr, 0xffffffffu);
  EXPECT_EQ(mask->hdr.dst_addr, 0xffffffffu);
  EXPECT_EQ(static_cast<const rte_flow_action_queue*>(r->actions[0].conf)->index, 1);

  auto parsed = inagg::util::parse_ip("fd00::7");
  auto other = inagg::util::parse_ip("fd00::8");
  auto r6 = connection_rule(*parsed, *other, 0, kJobRulePriority);
  expect_roce_match(*r6, true, kJobRulePriority);
  const auto* s6 = static_cast<const rte_flow_item_ipv6*>(r6->pattern[1].spec);
  EXPECT_EQ(std::memcmp(s6->hdr.src_addr, parsed->bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(s6->hdr.dst_addr, other->bytes.data(), 16), 0);
}

TEST_F(FlowSteeringTest, TakesRssWhenThePmdDoes) {
  FlowSteering s(kFakeOps);
  const PortSteering ps = s.add_port(0, 2);
  EXPECT_EQ(ps.mode, SteeringMode::rss);
  ASSERT_EQ(fake.held.size(), 2u);  // IPv4 and IPv6
  for (const auto& h : fake.held) {
    EXPECT_EQ(h->action, RTE_FLOW_ACTION_TYPE_RSS);
    EXPECT_EQ(h->rss_queues, (std::vector<uint16_t>{0, 1}));
    EXPECT_EQ(h->priority, kRoceRulePriority);
  }
}

TEST_F(FlowSteeringTest, OneQueueNeedsNoRss) {
  FlowSteering s(kFakeOps);
  EXPECT_EQ(s.add_port(0, 1).mode, SteeringMode::queue);
  for (const auto& h : fake.held) EXPECT_EQ(h->action, RTE_FLOW_ACTION_TYPE_QUEUE);
}

TEST_F(FlowSteeringTest, FallsBackToQueueThenSoftwareWithThePmdsReasons) {
  fake.take_rss = false;
  FlowSteering s(kFakeOps);
  PortSteering ps = s.add_port(0, 2);
  EXPECT_EQ(ps.mode, SteeringMode::queue);
  EXPECT_NE(ps.reason.find("rss at priority 1: fake PMD refuses this rule"), std::string::npos) << ps.reason;
  EXPECT_FALSE(ps.job_rules);
  ASSERT_EQ(fake.held.size(), 2u);
  for (const auto& h : fake.held) EXPECT_EQ(h->queue, 0);

  fake.take_queue = false;
  ps = s.add_port(1, 2);
  EXPECT_EQ(ps.mode, SteeringMode::software);
  EXPECT_NE(ps.reason.find("queue at priority 0: fake PMD"), std::string::npos) << ps.reason;
  EXPECT_EQ(fake.held.size(), 2u);  // port 1 holds nothing
  // No job rules where the port is not in rss mode.
  EXPECT_EQ(s.steer_job(7, job_pairs(ring3(), 1)), 0u);
  EXPECT_EQ(s.counters().job_rules, 0u);
}

TEST_F(FlowSteeringTest, JobRulesCoverBothDirectionsOfEveryConnectionOnEveryRssPort) {
  FlowSteering s(kFakeOps);
  s.add_port(0, 2);
  s.add_port(1, 2);
  EXPECT_EQ(s.steer_job(7, job_pairs(ring3(), 1)), 0u);
  // A 3-ring has 3 connections, 6 directed address pairs; on 2 ports.
  EXPECT_EQ(s.counters().job_rules, 12u);
  std::vector<std::pair<uint32_t, uint32_t>> seen;
  for (const auto& h : fake.held) {
    if (!h->has_ip) continue;
    EXPECT_EQ(h->action, RTE_FLOW_ACTION_TYPE_QUEUE);
    EXPECT_EQ(h->queue, 1);
    EXPECT_EQ(h->priority, kJobRulePriority);
    if (h->port == 0) seen.emplace_back(h->src, h->dst);
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::pair<uint32_t, uint32_t>> want;
  for (uint8_t a = 1; a <= 3; ++a)
    for (uint8_t b = 1; b <= 3; ++b)
      if (a != b) want.emplace_back(be_ip(a), be_ip(b));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);

  // Re-steering (a job re-added to the same owner) keeps its rules: none destroyed and re-made, so
  // its packets never fall back to RSS in between.
  const int created = fake.created, destroyed = fake.destroyed;
  s.steer_job(7, job_pairs(ring3(), 1));
  EXPECT_EQ(s.counters().job_rules, 12u);
  EXPECT_EQ(fake.created, created);
  EXPECT_EQ(fake.destroyed, destroyed);
  s.unsteer_job(7);
  EXPECT_EQ(s.counters().job_rules, 0u);
  EXPECT_EQ(fake.held.size(), 4u);  // the ports' RSS rules stay
  s.remove_all();
  EXPECT_TRUE(fake.held.empty());
}

TEST_F(FlowSteeringTest, RefusedJobRulesAreCountedNotFatal) {
  fake.take_job_rules = false;
  FlowSteering s(kFakeOps);
  s.add_port(0, 2);
  EXPECT_EQ(s.steer_job(9, job_pairs(ring3(), 0)), 6u);
  EXPECT_EQ(s.counters().job_rules, 0u);
  EXPECT_EQ(s.counters().job_rules_refused, 6u);
}

TEST_F(FlowSteeringTest, TwoRankJobSharesOneRulePerDirection) {
  FlowSteering s(kFakeOps);
  s.add_port(0, 2);
  std::vector<ConnectionSpec> conns(2);
  conns[0].src_ip = conns[1].dst_ip = IpAddr::v4(0x0a000001);
  conns[0].dst_ip = conns[1].src_ip = IpAddr::v4(0x0a000002);
  s.steer_job(1, job_pairs(conns, 1));
  EXPECT_EQ(s.counters().job_rules, 2u);
}

TEST_F(FlowSteeringTest, DestructorRemovesEveryRule) {
  {
    FlowSteering s(kFakeOps);
    s.add_port(0, 2);
    s.steer_job(1, job_pairs(ring3(), 1));
    EXPECT_FALSE(fake.held.empty());
  }
  EXPECT_TRUE(fake.held.empty());
}

TEST_F(FlowSteeringTest, APmdWithOnlyPriorityZeroSpreadsButTakesNoJobRules) {
  fake.max_priority = 0;
  FlowSteering s(kFakeOps);
  const PortSteering ps = s.add_port(0, 2);
  EXPECT_EQ(ps.mode, SteeringMode::rss);
  EXPECT_FALSE(ps.job_rules);  // nothing could outrank the port-wide rule
  EXPECT_NE(ps.reason.find("rss at priority 1: fake PMD: no such priority"), std::string::npos) << ps.reason;
  for (const auto& h : fake.held) EXPECT_EQ(h->priority, 0u);
  EXPECT_EQ(s.steer_job(1, job_pairs(ring3(), 1)), 0u);
  EXPECT_EQ(s.counters().job_rules, 0u);
}

TEST_F(FlowSteeringTest, TwoJobsBetweenTheSameHostsShareRulesAndNeverClash) {
  FlowSteering s(kFakeOps);
  s.add_port(0, 2);
  EXPECT_EQ(s.steer_job(1, job_pairs(ring3(), 0)), 0u);
  // Job 2 (another communicator on the same workers, owned by lcore 1) wants the same pairs elsewhere.
  EXPECT_EQ(s.steer_job(2, job_pairs(ring3(), 1)), 6u);
  EXPECT_EQ(s.counters().job_rules, 6u);  // each pair held once
  EXPECT_EQ(s.counters().job_rules_contended, 6u);
  // Job 3 wants them where job 1 has them: shares.
  EXPECT_EQ(s.steer_job(3, job_pairs(ring3(), 0)), 0u);
  EXPECT_EQ(s.counters().job_rules, 6u);
  // Removing job 1 leaves job 3's (the same) rules in place, untouched.
  const int destroyed = fake.destroyed;
  s.unsteer_job(1);
  EXPECT_EQ(s.counters().job_rules, 6u);
  EXPECT_EQ(fake.destroyed, destroyed);
  s.unsteer_job(3);
  EXPECT_EQ(s.counters().job_rules, 0u);
  EXPECT_EQ(fake.held.size(), 2u);  // the port's RSS rules
  s.unsteer_job(2);                 // held nothing: harmless
  EXPECT_EQ(fake.held.size(), 2u);
}

TEST_F(FlowSteeringTest, AJobWhoseOwnerMovedGetsItsRulesMovedNewBeforeOld) {
  FlowSteering s(kFakeOps);
  s.add_port(0, 2);
  s.steer_job(1, job_pairs(ring3(), 0));
  s.steer_job(1, job_pairs(ring3(), 1));
  EXPECT_EQ(s.counters().job_rules, 6u);
  for (const auto& h : fake.held)
    if (h->has_ip) EXPECT_EQ(h->queue, 1);
}

TEST(FlowJobPairs, EveryDirectionOfEveryConnectionGoesToTheOwnerOnce) {
  // A 3-ring owned by lcore 2: each connection's data and its ACKs, six address pairs.
  const std::vector<SteeredPair> pairs = job_pairs(ring3(), 2);
  ASSERT_EQ(pairs.size(), 6u);
  for (const ConnectionSpec& c : ring3()) {
    int data = -1, acks = -1;
    for (const SteeredPair& p : pairs) {
      if (p.src == c.src_ip && p.dst == c.dst_ip) data = p.queue;
      if (p.src == c.dst_ip && p.dst == c.src_ip) acks = p.queue;
    }
    EXPECT_EQ(data, 2) << "rank " << c.rank;
    EXPECT_EQ(acks, 2) << "rank " << c.rank;
  }
  // Two ranks: each pair carries one connection's data and the other's ACKs, and is steered once.
  std::vector<ConnectionSpec> two(2);
  two[0].rank = 0;
  two[1].rank = 1;
  two[0].src_ip = two[1].dst_ip = IpAddr::v4(0x0a000001);
  two[0].dst_ip = two[1].src_ip = IpAddr::v4(0x0a000002);
  const std::vector<SteeredPair> p2 = job_pairs(two, 1);
  ASSERT_EQ(p2.size(), 2u);
  for (const SteeredPair& p : p2) EXPECT_EQ(p.queue, 1);
}
