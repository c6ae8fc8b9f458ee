// The engine fails closed: on a registered connection only its registered source, on the port its
// rank was pinned to, is heard; what cannot be placed is dropped and counted, never forwarded raw;
// contract breaks are dropped and counted (a forger can send them), named at the job's timeout;
// NAKs keep the frame's own VLAN tags; the appliance's own queue backlog CE-marks the sums.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine_harness.hpp"
#include "inagg/util/pcap.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;
using agg::EngineCounters;

namespace {

class FailClosed : public EngineTest {
 protected:
  JobFixture j{1, 3, Dtype::fp32, 2 * 64, 64, 2};

  void SetUp() override {
    EngineTest::SetUp();
    add(j);
  }
  // Every rank sends `seq` (rank 0 last) on its port (port = rank): the sum is released.
  void complete(uint64_t seq) {
    for (unsigned r = 1; r < j.spec.workers; ++r)
      ASSERT_TRUE(send(j.data_frame(r, seq), static_cast<uint16_t>(r)).empty());
    expect_released(j, seq, send(j.data_frame(0, seq), 0));
  }
  std::vector<uint8_t> forged(unsigned rank, uint64_t seq, const char* from) {
    auto s = j.frame_spec(rank, seq);
    s.src_ip = *util::parse_ip(from);
    return JobFixture::build(s,
                             std::vector<uint8_t>(j.spec.payload_bytes, 0x66));  // a valid ICRC: forgers compute it too
  }
  // Rank 0's first packet of `f`'s job with both addresses written IPv4-mapped in an IPv6 header.
  static std::vector<uint8_t> mapped_frame(const JobFixture& f) {
    auto s = f.frame_spec(0, 0);
    std::array<uint8_t, 16> src{}, dst{};
    src[10] = src[11] = dst[10] = dst[11] = 0xff;
    std::memcpy(&src[12], f.spec.conns[0].src_ip.bytes.data(), 4);
    std::memcpy(&dst[12], f.spec.conns[0].dst_ip.bytes.data(), 4);
    s.src_ip = util::IpAddr::v6(src);
    s.dst_ip = util::IpAddr::v6(dst);
    return JobFixture::build(s, f.payload(0, 0));
  }
  std::vector<uint8_t> ack_from(unsigned rank, uint64_t seq, const char* from, uint8_t syndrome) {
    auto f = j.ack_frame(rank, seq, syndrome);
    wire::Layout l;
    EXPECT_EQ(wire::parse_frame(f, l), wire::ParseStatus::roce);
    auto ip = util::parse_ip(from);
    std::memcpy(&f[l.l3 + 12], ip->bytes.data(), 4);
    f[l.l3 + 10] = f[l.l3 + 11] = 0;
    wire::store_be16(&f[l.l3 + 10], wire::ipv4_header_checksum(&f[l.l3], 20));
    wire::icrc_store(f.data(), l, wire::icrc_compute(f.data(), l));
    return f;
  }
};

}  // namespace

// ---- the registered source only -----------------------------------------------------

TEST_F(FailClosed, AForgedWriteNextInLineIsDroppedAndTheRealSumFollows) {
  complete(0);
  // A forger writes rank 0's receiver's next PSN from an address of its own.
  EXPECT_TRUE(send(forged(0, 1, "10.0.1.200"), 0).empty()) << "a forged WRITE reached the receiver";
  EXPECT_EQ(info(1).counters.drop_wrong_source, 1u);
  EXPECT_EQ(engine->counters().drop_wrong_source, 1u);
  EXPECT_EQ(info(1).held_packets, 0u);
  // The job goes on: the real packets of seq 1 are summed exactly.
  complete(1);
  EXPECT_EQ(info(1).state, agg::JobState::active);
  EXPECT_EQ(info(1).counters.aggregated_packets, 6u);
}

TEST_F(FailClosed, ForgedAcksAndNaksAreDroppedRealOnesPass) {
  complete(0);
  // A forged ACK would free the retained copies; a forged NAK would make the sender go back.
  EXPECT_TRUE(send(ack_from(1, 0, "10.0.1.99", wire::aeth::kAckUnlimitedCredits)).empty());
  EXPECT_TRUE(send(ack_from(1, 0, "10.0.1.99", wire::aeth::kNakPsnSequenceError)).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_source, 2u);
  EXPECT_EQ(info(1).retained_packets, 3u) << "a forged ACK was believed";
  EXPECT_EQ(send(j.ack_frame(1, 0)).size(), 1u);  // from rank 2's address: the real receiver
  EXPECT_EQ(info(1).retained_packets, 2u);
  EXPECT_EQ(info(1).counters.acks_observed, 1u);
}

TEST_F(FailClosed, TrafficFromAnotherPortThanItsRankWasPinnedToIsDropped) {
  complete(0);  // rank r first seen on port r
  // Rank 1's own address, but on port 0 (where a forger sits): dropped, however right it looks.
  EXPECT_TRUE(send(j.data_frame(1, 1), 0).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_port, 1u);
  EXPECT_EQ(info(1).held_packets, 0u);
  // The ACK direction learns its own port: rank 0's receiver (rank 1's host) ACKs from port 1.
  EXPECT_EQ(send(j.ack_frame(0, 0), 1).size(), 1u);
  EXPECT_TRUE(send(j.ack_frame(0, 0), 2).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_port, 2u);
  complete(1);
  EXPECT_EQ(info(1).state, agg::JobState::active);
}

// The appliance learns a station's port from a frame only when process() vouches for it: a forged
// frame carrying a rank's MAC must not move the rank (its sums would leave by the forger's port).
TEST_F(FailClosed, ProcessSaysWhichFramesAreUntrustworthy) {
  EXPECT_TRUE(send(j.data_frame(1, 0), 1).empty());
  EXPECT_TRUE(last_trusted) << "an honest WRITE, held";
  EXPECT_TRUE(send(j.data_frame(1, 0), 1).empty());
  EXPECT_TRUE(last_trusted) << "an honest duplicate: dropped, but from the rank itself";
  EXPECT_TRUE(send(forged(0, 1, "10.0.1.200"), 0).empty());
  EXPECT_FALSE(last_trusted) << "wrong source";
  EXPECT_TRUE(send(j.data_frame(1, 1), 0).empty());
  EXPECT_FALSE(last_trusted) << "wrong port";
  auto bad = j.data_frame(2, 0);
  bad.back() ^= 0xff;
  EXPECT_TRUE(send(bad, 2).empty());
  EXPECT_FALSE(last_trusted) << "bad ICRC";
  auto truncated = j.data_frame(2, 0);
  truncated.resize(50);
  EXPECT_TRUE(send(truncated, 2).empty());
  EXPECT_FALSE(last_trusted) << "malformed";
  EXPECT_TRUE(send(j.data_frame(2, 0), 2).empty());
  EXPECT_TRUE(last_trusted);
  EXPECT_EQ(send(j.data_frame(0, 0), 0).size(), 3u);
  EXPECT_TRUE(last_trusted) << "the last rank in: the sum released";
}

TEST_F(FailClosed, CnpsKeepFlowingFromAnywhere) {
  complete(0);
  auto s = j.frame_spec(0, 0);
  s.opcode = wire::op::kCnp;
  s.dest_qp = j.spec.conns[0].src_qpn;  // to the sender's QP, from its receiver
  s.src_ip = j.spec.conns[0].dst_ip;
  s.dst_ip = j.spec.conns[0].src_ip;
  const auto cnp = JobFixture::build(s, {});
  s.src_ip = *util::parse_ip("10.0.1.77");  // even from elsewhere: a CNP only slows a sender down
  const auto stray = JobFixture::build(s, {});
  for (const auto& f : {cnp, stray}) {
    for (uint16_t port : {uint16_t{1}, uint16_t{5}}) {
      auto outs = send(f, port);
      ASSERT_EQ(outs.size(), 1u);
      EXPECT_EQ(outs[0].frame, f);
    }
  }
  EXPECT_EQ(info(1).counters.cnp_forwarded, 4u);
  EXPECT_EQ(info(1).counters.drop_wrong_source + info(1).counters.drop_wrong_port, 0u);
}

TEST_F(FailClosed, DropsAreLoggedAtMostOncePerSecondPerJob) {
  complete(0);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 100; ++i) send(forged(0, 1, "10.0.1.200"), 0);
  now += cfg.drop_log_interval_ns;
  send(forged(0, 1, "10.0.1.200"), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << log;
  EXPECT_NE(log.find("job 1: dropped a packet on rank 0's data connection: not from the registered source address "
                     "(from 10.0.1.200, port 0; registered 10.0.1.1, pinned to port 0); 0 more"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("; 99 more dropped since the last line"), std::string::npos) << log;
  EXPECT_EQ(info(1).counters.drop_wrong_source, 101u);
}

TEST_F(FailClosed, ARegistrationThatIsNotARingIsRefused) {
  JobFixture k(2, 4, Dtype::fp32, 64, 64, 1);
  k.spec.conns[2].dst_ip = *util::parse_ip("10.0.2.9");  // rank 2 writes to a host rank 3 is not on
  std::string err;
  EXPECT_FALSE(engine->add_job(k.spec, &err));
  EXPECT_EQ(err,
            "job 2: not a ring: rank 2 writes to 10.0.2.9 but rank 3, its successor, sends from 10.0.2.4 "
            "(each rank's destination must be its successor's source; check the conn lines' addresses)");
  JobFixture one(3, 1, Dtype::fp32, 64, 64, 1);  // one rank writes to itself: a ring of one
  add(one);
}

TEST_F(FailClosed, AMisregisteredDestinationIsNamedWhenTheJobEnds) {
  JobFixture k(2, 2, Dtype::int32, 64, 64, 1);
  const uint32_t real_qpn = k.spec.conns[0].dst_qpn;
  k.spec.conns[0].dst_qpn = 0x777;  // registered wrong
  add(k);
  k.spec.conns[0].dst_qpn = real_qpn;
  auto outs = send(k.data_frame(0, 0));  // not matched: forwarded as any unregistered traffic is
  ASSERT_EQ(outs.size(), 1u);
  send(k.data_frame(1, 0));  // rank 1's, registered right: held
  send(k.ack_frame(0, 0));   // rank 0's receiver ACKs what the appliance never released: dropped
  EXPECT_EQ(info(2).state, agg::JobState::active);
  poll(now + cfg.abort_timeout_ns + 1);
  EXPECT_EQ(info(2).state, agg::JobState::failed);
  EXPECT_NE(info(2).error.find("rank 0's destination 10.0.2.2 qpn 0x777 is registered wrong"), std::string::npos)
      << info(2).error;
}

// ---- what cannot be placed is dropped, never raw -----------------------------------------

TEST_F(FailClosed, RoceBehindIpv6ExtensionHeadersToARegisteredConnectionIsDropped) {
  JobFixture v6(2, 2, Dtype::fp32, 64, 64, 1, 0x10, /*ipv6=*/true);
  add(v6);
  auto with_hop_by_hop = [](std::vector<uint8_t> f) {
    std::vector<uint8_t> g(f.begin(), f.begin() + 54);
    g.insert(g.end(), {17, 0, 1, 4, 0, 0, 0, 0});  // next header UDP, 8 bytes, a PadN option
    g[20] = 0;
    g.insert(g.end(), f.begin() + 54, f.end());
    wire::store_be16(&g[18], static_cast<uint16_t>(wire::load_be16(&f[18]) + 8));
    return g;
  };
  EXPECT_TRUE(send(with_hop_by_hop(v6.data_frame(0, 0))).empty()) << "forwarded raw";
  EXPECT_TRUE(send(with_hop_by_hop(v6.ack_frame(0, 0))).empty());
  EXPECT_EQ(info(2).counters.drop_unplaceable, 2u);
  // The same to a QP nobody registered is someone else's business: forwarded untouched.
  auto s = v6.frame_spec(0, 0);
  s.dest_qp = 0x4242;
  const auto other = with_hop_by_hop(JobFixture::build(s, v6.payload(0, 0)));
  auto outs = send(other);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].frame, other);
  // The job itself is unharmed.
  send(v6.data_frame(0, 0));
  expect_released(v6, 0, send(v6.data_frame(1, 0)));
}

TEST_F(FailClosed, AnIpv4ConnectionAddressedInIpv4MappedIpv6IsDropped) {
  EXPECT_TRUE(send(mapped_frame(j)).empty());
  EXPECT_EQ(info(1).counters.drop_unplaceable, 1u);
}

TEST_F(FailClosed, MalformedPacketsToARegisteredConnectionCountOnTheJob) {
  auto f = j.data_frame(0, 0);
  f[42] = 0x1f;  // an opcode inagg does not know, BTH intact
  EXPECT_TRUE(send(f).empty());
  EXPECT_EQ(info(1).counters.malformed, 1u);
  EXPECT_EQ(engine->counters().malformed, 1u);
}

TEST_F(FailClosed, QinQTaggedConnectionsAreAggregatedWithTheirTagsKept) {
  JobFixture k(2, 3, Dtype::fp32, 64, 64, 1);
  add(k);
  const uint8_t tags[8] = {0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x07};
  std::vector<Out> outs;
  for (unsigned r = 0; r < 3; ++r) {
    auto s = k.frame_spec(r, 0);
    std::memcpy(s.l2_tags.data(), tags, 8);
    s.l2_tags_len = 8;
    outs = send(JobFixture::build(s, k.payload(r, 0)));
  }
  ASSERT_EQ(outs.size(), 3u);
  for (const Out& o : outs) {
    EXPECT_EQ(std::vector<uint8_t>(o.frame.begin() + 12, o.frame.begin() + 20), std::vector<uint8_t>(tags, tags + 8));
    EXPECT_EQ(o.payload(), k.expected_sum(0));
    EXPECT_TRUE(o.icrc_ok());
  }
}

TEST_F(FailClosed, ARemovedJobsConnectionsStayClosedForAWhile) {
  complete(0);
  std::string err;
  ASSERT_TRUE(engine->remove_job(1, &err)) << err;
  EXPECT_TRUE(send(j.data_frame(0, 1)).empty()) << "a late WRITE of the removed job went out raw";
  EXPECT_TRUE(send(j.ack_frame(0, 0)).empty());
  EXPECT_EQ(engine->counters().drop_closed, 2u);
  EXPECT_EQ(engine->closed_connections(), 6u);
  auto cnp = j.frame_spec(0, 0);
  cnp.opcode = wire::op::kCnp;
  EXPECT_EQ(send(JobFixture::build(cnp, {})).size(), 1u) << "CNPs keep flowing";
  // Re-adding the job takes its connections back at once.
  add(j);
  complete(0);
  ASSERT_TRUE(engine->remove_job(1, &err)) << err;
  // Once the hold is over, the QPs are nobody's: forwarded as any unregistered traffic.
  now += cfg.closed_hold_ns;
  EXPECT_EQ(send(j.data_frame(0, 1)).size(), 1u);
  engine->poll(now, tx);
  EXPECT_EQ(engine->closed_connections(), 0u);
}

TEST_F(FailClosed, ConnectionsHeldClosedWhileAJobIsAddedElsewhere) {
  JobFixture k(2, 2, Dtype::int32, 64, 64, 1);
  engine->hold_closed(k.spec);  // another lcore is adding job 2
  EXPECT_EQ(engine->closed_connections(), 4u);
  EXPECT_TRUE(send(k.data_frame(0, 0)).empty());
  EXPECT_EQ(engine->counters().drop_closed, 1u);
  // That lcore refused it: the hold ends at once and the QPs are ordinary traffic again.
  engine->release_closed(2, 0);
  EXPECT_EQ(send(k.data_frame(0, 0)).size(), 1u);
  // Held again, then this engine adds the job itself: it takes the connections over.
  engine->hold_closed(k.spec);
  add(k);
  EXPECT_EQ(engine->closed_connections(), 0u);
  send(k.data_frame(0, 0));
  expect_released(k, 0, send(k.data_frame(1, 0)));
  // A hold never shadows this engine's own job.
  engine->hold_closed(k.spec);
  EXPECT_EQ(engine->closed_connections(), 0u);
  // Released with a linger: closed that much longer.
  JobFixture m(3, 2, Dtype::int32, 64, 64, 1);
  engine->hold_closed(m.spec);
  engine->release_closed(3, 1'000'000);
  EXPECT_TRUE(send(m.data_frame(0, 0)).empty());
  now += 1'000'000;
  EXPECT_EQ(send(m.data_frame(0, 0)).size(), 1u);
}

// The datapath's routes live in the same table: which lcore takes a packet, for another lcore's
// job (held closed here), that job moved to another lcore, this engine's own job, and an
// IPv4-mapped destination.
TEST_F(FailClosed, RoutesShareTheConnectionTable) {
  auto route = [&](const std::vector<uint8_t>& f) {
    wire::Layout l;
    EXPECT_EQ(wire::parse_frame(f, l), wire::ParseStatus::roce);
    return engine->route_of(f.data(), l);
  };
  JobFixture k(2, 2, Dtype::int32, 64, 64, 1);
  EXPECT_EQ(route(k.data_frame(0, 0)), nullptr);
  // Job 2 lives on lcore 3: its data and ACKs go there; here its connections are held closed.
  engine->hold_closed(k.spec);
  engine->route_job(k.spec, 3);
  for (const auto& f : {k.data_frame(0, 0), k.data_frame(1, 5), k.ack_frame(0, 0)}) {
    const agg::Engine::Route* r = route(f);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->owner, 3u);
  }
  EXPECT_TRUE(send(k.data_frame(0, 0)).empty());  // reaching this engine anyway: dropped, never raw
  EXPECT_EQ(engine->counters().drop_closed, 1u);
  // IPv4-mapped IPv6 destinations find the IPv4 connection's route.
  ASSERT_NE(route(mapped_frame(k)), nullptr);
  EXPECT_EQ(route(mapped_frame(k))->owner, 3u);
  // Routed again, to lcore 1: the new route replaces the old one, data and ACKs alike.
  engine->route_job(k.spec, 1);
  for (const auto& f : {k.data_frame(0, 1), k.data_frame(1, 1), k.ack_frame(0, 0)}) {
    const agg::Engine::Route* r = route(f);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->owner, 1u);
  }
  // This engine's own job keeps its place and gains a route; unrouting leaves it as it was.
  engine->route_job(j.spec, 0);
  EXPECT_EQ(route(j.data_frame(0, 0))->owner, 0u);
  complete(0);
  engine->unroute_job(1);
  engine->unroute_job(2);
  EXPECT_EQ(route(j.data_frame(0, 1)), nullptr);
  EXPECT_EQ(route(k.data_frame(0, 0)), nullptr);
  complete(1);
  EXPECT_TRUE(send(k.data_frame(0, 0)).empty());  // job 2's hold is still on
}

TEST_F(FailClosed, AJobRegisteredWithIpv4MappedGidsMatchesIpv4Packets) {
  JobFixture k(2, 2, Dtype::int32, 64, 64, 1);
  control::JobSpec s = k.spec;
  for (auto& c : s.conns) {
    for (util::IpAddr* a : {&c.src_ip, &c.dst_ip}) {
      std::array<uint8_t, 16> m{};
      m[10] = m[11] = 0xff;
      std::memcpy(&m[12], a->bytes.data(), 4);
      *a = util::IpAddr::v6(m);
    }
  }
  std::string err;
  ASSERT_TRUE(engine->add_job(s, &err)) << err;
  send(k.data_frame(0, 0));
  expect_released(k, 0, send(k.data_frame(1, 0)));
}

// ---- a packet that breaks the contract is dropped and counted, never ends the job ----------------
// (A forger can send any of them, from the rank's own address and port.) A real contract break ends
// the job at its no-progress timeout, whose reason names the rule.

TEST_F(FailClosed, ASendOnADataQpIsDroppedAndTheJobGoesOn) {
  complete(0);
  send(j.data_frame(1, 1), 1);
  auto s = j.frame_spec(0, 1);
  s.opcode = wire::op::kRc | wire::op::kSendOnly;
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(0, 1)), 0).empty()) << "forwarded";
  auto i = info(1);
  EXPECT_EQ(i.state, agg::JobState::active) << i.error;
  EXPECT_EQ(i.counters.err_not_write, 1u);
  EXPECT_EQ(i.counters.drop_unfit, 1u);
  EXPECT_EQ(i.held_packets, 1u) << "rank 1's packet of seq 1 must stay";
  send(j.data_frame(2, 1), 2);
  expect_released(j, 1, send(j.data_frame(0, 1), 0));
  poll(now + cfg.abort_timeout_ns + 1);  // nothing more comes: the timeout names the broken rule
  i = info(1);
  EXPECT_EQ(i.state, agg::JobState::failed);
  EXPECT_NE(i.error.find("the first: job contract, rule 'writes only': rank 0 sent RC_SEND_ONLY"), std::string::npos)
      << i.error;
}

TEST_F(FailClosed, AReadRequestOnADataQpIsDropped) {
  auto s = j.frame_spec(2, 0);
  s.opcode = wire::op::kRc | wire::op::kReadRequest;
  EXPECT_TRUE(send(JobFixture::build(s, {})).empty());
  EXPECT_EQ(info(1).state, agg::JobState::active);
  EXPECT_EQ(info(1).counters.err_not_write, 1u);
  complete(0);
}

TEST_F(FailClosed, ARequestOnTheReverseDirectionIsDropped) {
  complete(0);
  auto s = j.frame_spec(1, 0);  // rank 1's receiver (rank 2's host) writes back to rank 1's QP
  s.src_ip = j.spec.conns[1].dst_ip;
  s.dst_ip = j.spec.conns[1].src_ip;
  s.dest_qp = j.spec.conns[1].src_qpn;
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(1, 0))).empty());
  EXPECT_EQ(info(1).state, agg::JobState::active);
  EXPECT_EQ(info(1).counters.err_not_write, 1u);
  complete(1);
}

TEST_F(FailClosed, EveryContractBreakIsDroppedAndNamesItsRuleAtTheTimeout) {
  struct Case {
    const char* rule;
    uint64_t EngineCounters::*counter;
    std::function<std::vector<uint8_t>(JobFixture&)> packet;
  };
  const std::vector<Case> cases = {
      {"window", &EngineCounters::err_ahead_of_window, [](JobFixture& k) { return k.data_frame(0, 4 * k.ppm); }},
      {"message size", &EngineCounters::err_length_or_opcode,
       [](JobFixture& k) {
         return JobFixture::build(k.frame_spec(0, 0), std::vector<uint8_t>(k.spec.payload_bytes - 4, 1));
       }},
      {"RC only", &EngineCounters::err_not_rc,
       [](JobFixture& k) {
         auto s = k.frame_spec(0, 0);
         s.opcode = wire::op::kUc | wire::op::kWriteFirst;
         return JobFixture::build(s, k.payload(0, 0));
       }},
      {"every packet crosses the appliance", &EngineCounters::err_ack_bypass,
       [](JobFixture& k) { return k.ack_frame(0, 0); }},
  };
  uint32_t id = 10;
  for (const Case& c : cases) {
    JobFixture k(id, 2, Dtype::fp32, 2 * 64, 64, 2);
    add(k);
    send(k.data_frame(1, 0));  // held: the job has work pending, so it can time out
    EXPECT_TRUE(send(c.packet(k)).empty()) << c.rule;
    EXPECT_EQ(info(id).state, agg::JobState::active) << c.rule;
    EXPECT_EQ(info(id).counters.*c.counter, 1u) << c.rule;
    EXPECT_EQ(info(id).counters.drop_unfit, 1u) << c.rule;
    ++id;
  }
  poll(now + cfg.abort_timeout_ns + 1);
  id = 10;
  for (const Case& c : cases) {
    EXPECT_EQ(info(id).state, agg::JobState::failed) << c.rule;
    EXPECT_NE(info(id).error.find(std::string("the first: job contract, rule '") + c.rule + "': "), std::string::npos)
        << info(id).error;
    ++id;
  }
}

// ---- a forged packet cannot pin a rank's port ------------------------------------------------------
// A rank's ports are pinned by the first packet that fits its connection's state: a WRITE of the
// right size at or after the start PSN within the window, an ACK that acknowledges something released.

namespace {
constexpr uint16_t kForgerPort = 7;
}

TEST_F(FailClosed, ForgersBeforeTheFirstRealPacketPinNothing) {
  // The attack: one WRITE at start_psn - 1 and one ACK at start_psn - 1, from the forger's port, with
  // the ranks' own addresses and valid ICRCs, before the job's traffic.
  for (unsigned r = 0; r < j.spec.workers; ++r) {
    EXPECT_TRUE(send(j.data_frame(r, ~uint64_t{0}), kForgerPort).empty());  // PSN start_psn - 1
    EXPECT_FALSE(last_trusted);
    EXPECT_TRUE(send(j.ack_frame(r, ~uint64_t{0}), kForgerPort).empty()) << "a forged ACK reached the sender";
    EXPECT_FALSE(last_trusted);
  }
  // Then each kind that broke the job before: a SEND, an out-of-window WRITE, an early ACK.
  auto send_spec = j.frame_spec(1, 0);
  send_spec.opcode = wire::op::kRc | wire::op::kSendOnly;
  EXPECT_TRUE(send(JobFixture::build(send_spec, j.payload(1, 0)), kForgerPort).empty());
  EXPECT_TRUE(send(j.data_frame(2, 4 * j.ppm), kForgerPort).empty());
  EXPECT_TRUE(send(j.ack_frame(2, 0), kForgerPort).empty());
  auto i = info(1);
  EXPECT_EQ(i.state, agg::JobState::active) << i.error;
  EXPECT_EQ(i.counters.stale, 3u);
  EXPECT_EQ(i.counters.drop_ack_unpinned, 3u);
  EXPECT_EQ(i.counters.drop_unfit, 3u);
  // The real traffic, each rank on its own port: every sum exact, nothing dropped as from a wrong port.
  complete(0);
  complete(1);
  for (unsigned r = 0; r < j.spec.workers; ++r)
    EXPECT_EQ(send(j.ack_frame(r, 1), static_cast<uint16_t>((r + 1) % 3)).size(), 1u);
  i = info(1);
  EXPECT_EQ(i.counters.drop_wrong_port, 0u);
  EXPECT_EQ(i.counters.acks_observed, 3u);
  EXPECT_EQ(i.retained_packets, 0u);
  // Now pinned: the forger's port is refused in both directions.
  EXPECT_TRUE(send(j.data_frame(0, 2), kForgerPort).empty());
  EXPECT_TRUE(send(j.ack_frame(0, 1), kForgerPort).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_port, 2u);
}

// A registration that names each rank's port (IP source guard): the rank's packets from any other
// port are dropped from the very first one, so no forger can pin a port first.
TEST_F(FailClosed, PortsNamedInTheRegistrationArePinnedFromTheFirstPacket) {
  JobFixture k(2, 3, Dtype::fp32, 2 * 64, 64, 2);
  for (unsigned r = 0; r < 3; ++r) k.spec.conns[r].port = static_cast<uint16_t>(10 + r);
  add(k);
  // Before any real packet: rank 1's exact WRITE from port 0, its receiver's ACK from port 12.
  EXPECT_TRUE(send(k.data_frame(1, 0), 0).empty());
  EXPECT_TRUE(send(k.ack_frame(0, 0), 12).empty());
  EXPECT_EQ(info(2).counters.drop_wrong_port, 2u);
  EXPECT_EQ(info(2).held_packets, 0u);
  EXPECT_FALSE(last_trusted);
  // The ranks from their own ports: summed as usual; rank 0's receiver (rank 1) ACKs from port 11.
  for (unsigned r = 1; r < 3; ++r) EXPECT_TRUE(send(k.data_frame(r, 0), static_cast<uint16_t>(10 + r)).empty());
  expect_released(k, 0, send(k.data_frame(0, 0), 10));
  EXPECT_EQ(send(k.ack_frame(0, 0), 11).size(), 1u);
  EXPECT_EQ(info(2).counters.drop_wrong_port, 2u);
}

TEST_F(FailClosed, ForgersOfEachKindOnThePinnedPortAreDroppedAndCounted) {
  complete(0);
  for (unsigned r = 0; r < j.spec.workers; ++r) send(j.ack_frame(r, 0), static_cast<uint16_t>((r + 1) % 3));
  // From rank 0's own port and address: each is dropped, the job goes on.
  auto sendop = j.frame_spec(0, 1);
  sendop.opcode = wire::op::kRc | wire::op::kSendOnly;
  auto read = j.frame_spec(0, 1);
  read.opcode = wire::op::kRc | wire::op::kReadRequest;
  auto uc = j.frame_spec(0, 1);
  uc.opcode = wire::op::kUc | wire::op::kWriteFirst;
  const std::vector<std::vector<uint8_t>> forged_frames = {
      JobFixture::build(sendop, j.payload(0, 1)),
      JobFixture::build(read, {}),
      JobFixture::build(uc, j.payload(0, 1)),
      JobFixture::build(j.frame_spec(0, 1), std::vector<uint8_t>(j.spec.payload_bytes - 4, 1)),
      j.data_frame(0, 4 * j.ppm),  // out of the window
  };
  for (const auto& f : forged_frames) EXPECT_TRUE(send(f, 0).empty());
  EXPECT_TRUE(send(j.ack_frame(0, 3), 1).empty()) << "an early ACK reached the sender";
  auto i = info(1);
  EXPECT_EQ(i.state, agg::JobState::active) << i.error;
  EXPECT_EQ(i.counters.err_not_write, 2u);
  EXPECT_EQ(i.counters.err_not_rc, 1u);
  EXPECT_EQ(i.counters.err_length_or_opcode, 1u);
  EXPECT_EQ(i.counters.err_ahead_of_window, 1u);
  EXPECT_EQ(i.counters.err_ack_bypass, 1u);
  EXPECT_EQ(i.counters.drop_unfit, 6u);
  EXPECT_EQ(i.counters.job_errors, 0u);
  complete(1);
  EXPECT_EQ(info(1).state, agg::JobState::active);
}

// ---- a NAK keeps the frame's own tags ----------------------------------------------------

TEST_F(FailClosed, NaksKeepTheTagsAndTpidsOfTheFrameTheyAnswer) {
  JobFixture k(2, 2, Dtype::fp32, 4 * 64, 64, 2);
  add(k);
  const std::string path = ::testing::TempDir() + "/inagg_nak_tags.pcap";
  util::PcapWriter w;
  std::string err;
  ASSERT_TRUE(w.open(path, &err)) << err;
  const std::vector<std::vector<uint8_t>> stacks = {
      {0x88, 0xa8, 0x00, 0x64},                          // 802.1ad alone
      {0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x07},  // QinQ
      {0x91, 0x00, 0x00, 0x05, 0x81, 0x00, 0x00, 0x09},  // the old 0x9100 QinQ TPID
  };
  for (unsigned r = 0; r < 2; ++r) {
    auto s = k.frame_spec(r, 2);  // seq 0 and 1 lost: a jump, so a NAK
    const auto& tags = stacks[r];
    std::copy(tags.begin(), tags.end(), s.l2_tags.begin());
    s.l2_tags_len = static_cast<uint8_t>(tags.size());
    const auto data = JobFixture::build(s, k.payload(r, 2));
    auto outs = send(data);
    ASSERT_EQ(outs.size(), 1u);
    const Out& nak = outs[0];
    EXPECT_EQ(std::vector<uint8_t>(nak.frame.begin() + 12, nak.frame.begin() + 12 + tags.size()), tags)
        << "rank " << r << ": the NAK lost the frame's tags";
    EXPECT_EQ(nak.l.vlan_tags, tags.size() / 4);
    EXPECT_TRUE(nak.icrc_ok());
    ASSERT_TRUE(w.write(data.data(), data.size(), 0));
    ASSERT_TRUE(w.write(nak.frame.data(), nak.frame.size(), 0));
  }
  // The NAK sent again by the timer keeps them too: the third stack on a fresh job.
  ASSERT_TRUE(engine->remove_job(2, &err)) << err;
  JobFixture m(3, 2, Dtype::fp32, 4 * 64, 64, 2);
  add(m);
  auto s = m.frame_spec(0, 2);
  std::copy(stacks[2].begin(), stacks[2].end(), s.l2_tags.begin());
  s.l2_tags_len = 8;
  const auto data = JobFixture::build(s, m.payload(0, 2));
  ASSERT_EQ(send(data).size(), 1u);  // the first NAK, lost
  auto again = poll(now + 2 * cfg.resend_timeout_ns);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(std::vector<uint8_t>(again[0].frame.begin() + 12, again[0].frame.begin() + 20), stacks[2]);
  ASSERT_TRUE(w.write(data.data(), data.size(), 0));
  ASSERT_TRUE(w.write(again[0].frame.data(), again[0].frame.size(), 0));
  ASSERT_TRUE(w.close());
  // scapy decodes the tag stacks (Dot1AD / Dot1Q layers) and recomputes the NAKs' ICRCs.
  const std::string cmd =
      "/usr/bin/python3 " + std::string(INAGG_SOURCE_DIR) + "/tests/agg/check_nak_tags_scapy.py " + path + " 3";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(path.c_str());
}

// ---- the appliance's own queues back up: CE marks ---------------------------------------

namespace {
struct FakeQueues {
  std::map<uint16_t, uint32_t> depth;
  int asked = 0;
  static bool above(void* ctx, uint16_t port, uint32_t threshold) {
    auto* q = static_cast<FakeQueues*>(ctx);
    ++q->asked;
    return q->depth[port] >= threshold;
  }
};
}  // namespace

TEST_F(FailClosed, SumsTowardsABackedUpPortAreCeMarked) {
  FakeQueues q;
  cfg.ecn_threshold_packets = 32;
  agg::BufferOps ops = pool.ops;
  ops.queue_ctx = &q;
  ops.tx_queue_above = FakeQueues::above;
  engine = std::make_unique<agg::Engine>(cfg, ops);
  add(j);
  complete(0);  // rank r's host is behind port r: rank r's receiver, rank r+1's host, behind r+1
  for (unsigned r = 0; r < 3; ++r) send(j.ack_frame(r, 0), static_cast<uint16_t>((r + 1) % 3));
  q.depth[2] = 31;  // below the threshold: nothing marked
  complete(1);
  EXPECT_EQ(info(1).counters.ecn_marked_queue, 0u);
  q.depth[2] = 32;  // rank 1's receiver sits behind port 2
  for (unsigned r = 1; r < 3; ++r) send(j.data_frame(r, 2), static_cast<uint16_t>(r));
  auto outs = send(j.data_frame(0, 2), 0);
  ASSERT_EQ(outs.size(), 3u);
  auto ecn = [](const Out& o) { return o.frame[o.l.l3 + 1] & 3; };
  EXPECT_EQ(ecn(outs[0]), wire::kEcnEct0);
  EXPECT_EQ(ecn(outs[1]), wire::kEcnCe);
  EXPECT_EQ(ecn(outs[2]), wire::kEcnEct0);
  for (const Out& o : outs) {
    EXPECT_TRUE(o.icrc_ok()) << "the ICRC masks TOS";
    EXPECT_EQ(wire::ipv4_header_checksum(o.frame.data() + o.l.l3, 20), 0);
    EXPECT_EQ(o.payload(), j.expected_sum(2));
  }
  EXPECT_EQ(info(1).counters.ecn_marked_queue, 1u);
  EXPECT_EQ(engine->counters().ecn_marked_queue, 1u);
  // A packet that is not ECN-capable is never marked.
  auto s = j.frame_spec(1, 3);
  s.tos = wire::kEcnNotEct;
  send(JobFixture::build(s, j.payload(1, 3)), 1);
  send(j.data_frame(2, 3), 2);
  outs = send(j.data_frame(0, 3), 0);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(ecn(outs[1]), wire::kEcnNotEct);
  EXPECT_EQ(info(1).counters.ecn_marked_queue, 1u);
  EXPECT_GT(q.asked, 0);
}
