// client::Rank through a channel the caller owns (its own address, endpoints handed over by the
// caller), without an appliance, on loopback addresses of its own (127.88.0.x, no root): the
// endpoints it publishes, the checks open() makes of every rank's endpoint, the job files it
// describes, and a ring of real software transports whose allreduce, with no appliance to sum it,
// fails on the tally on every rank instead of returning a predecessor's data.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"
#include "inagg/control/job_file.hpp"

using namespace inagg;
using namespace inagg::client;

namespace {

RankOptions options_of(unsigned rank, unsigned workers, const char* address) {
  RankOptions o;
  o.geometry.rank = rank;
  o.geometry.ranks = workers;
  o.address = *util::parse_ip(address);
  o.geometry.payload = 1024;
  o.geometry.message = 16384;
  o.geometry.chunk_bytes = 65536;
  o.ack_timeout_ms = 50;
  o.retry = 3;
  o.stall_s = 5;
  o.timeout_s = 5;
  o.lanes = true;
  return o;
}

// validate()d options, for a rank of `workers` at `address`.
std::unique_ptr<Rank> rank_at(unsigned rank, unsigned workers, const char* address) {
  RankOptions o = options_of(rank, workers, address);
  const std::string why = o.validate();
  EXPECT_EQ(why, "");
  auto r = std::make_unique<Rank>(o);
  EXPECT_EQ(r->error(), "");
  return r;
}

std::vector<RankEndpoint> endpoints_of(std::vector<std::unique_ptr<Rank>>& ranks) {
  std::vector<RankEndpoint> all;
  for (auto& r : ranks) all.push_back(r->endpoint());
  return all;
}

}  // namespace

TEST(RankPeers, EndpointIsTheRackPlansQpsAtItsOwnAddress) {
  const std::unique_ptr<Rank> r = rank_at(2, 4, "127.88.0.7");
  const RankEndpoint e = r->endpoint();
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(util::ip_text(e.gid), "::ffff:127.88.0.7");
  EXPECT_EQ(e.send_qpn, RackPlan::send_qpn(2));
  EXPECT_EQ(e.recv_qpn, RackPlan::recv_qpn(2));
  EXPECT_EQ(e.start_psn, RackPlan::start_psn(2));
  EXPECT_EQ(e.payload, 1024u);
  EXPECT_EQ(e.workers, 4u);
  // The receive region's key is the rank's own, drawn at random: another rank's differs, and
  // neither is the fixed one of ranks that never meet.
  const std::unique_ptr<Rank> other = rank_at(3, 4, "127.88.0.8");
  const RegionKey mine{e.recv_addr, e.recv_rkey}, theirs{other->endpoint().recv_addr, other->endpoint().recv_rkey};
  EXPECT_NE(mine, theirs);
  EXPECT_NE(mine, UdpRcTransport::kUnmetKey);
  EXPECT_NE(mine.rkey, 0u);
  // The line travels as text and comes back the same.
  std::string why;
  const std::optional<RankEndpoint> back = parse_endpoint(format_endpoint(e), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->gid, e.gid);
  EXPECT_EQ(back->send_qpn, e.send_qpn);
  EXPECT_EQ(back->recv_addr, e.recv_addr);
  EXPECT_EQ(back->recv_rkey, e.recv_rkey);
}

TEST(RankPeers, OpenChecksEveryRanksEndpoint) {
  const char* addresses[] = {"127.88.0.1", "127.88.0.2", "127.88.0.3"};
  // A rank that failed open() stays failed (its error stands): a fresh one for each case.
  auto fresh = [&] { return rank_at(0, 3, addresses[0]); };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (unsigned r = 0; r < 3; ++r) ranks.push_back(rank_at(r, 3, addresses[r]));
  auto open_fails = [&](const std::vector<RankEndpoint>& all) {
    std::unique_ptr<Rank> r0 = fresh();
    EXPECT_FALSE(r0->open(all));
    return r0->error();
  };
  std::string why;
  std::vector<RankEndpoint> all = endpoints_of(ranks);
  all.pop_back();
  why = open_fails(all);
  EXPECT_EQ(why, "2 endpoints for 3 ranks");
  all = endpoints_of(ranks);
  all[2].payload = 4096;
  why = open_fails(all);
  EXPECT_NE(why.find("rank 2: its path MTU payload is 4096, this rank's 1024"), std::string::npos) << why;
  all = endpoints_of(ranks);
  all[2].gid = all[1].gid;
  why = open_fails(all);
  EXPECT_EQ(why, "rank 2: it has the same address as rank 1 (127.88.0.2): every rank needs an address of its own");
  all = endpoints_of(ranks);
  std::swap(all[0], all[1]);
  why = open_fails(all);
  EXPECT_EQ(why, "rank 0: its endpoint names rank 1");
  all = endpoints_of(ranks);
  all[1].workers = 4;
  why = open_fails(all);
  EXPECT_EQ(why, "rank 1: it was started for 4 ranks, this rank for 3");
  // Not opened: an allreduce says so.
  float x = 1;
  auto* p = reinterpret_cast<uint8_t*>(&x);
  EXPECT_FALSE(ranks[0]->allreduce(p, p, sizeof x));
  EXPECT_EQ(ranks[0]->error(), "allreduce before the rank was started or opened");
}

TEST(RankPeers, JobTextNamesEveryRanksConnection) {
  std::vector<std::unique_ptr<Rank>> ranks;
  ranks.push_back(rank_at(0, 2, "127.88.1.1"));
  ranks.push_back(rank_at(1, 2, "127.88.1.9"));
  ASSERT_TRUE(ranks[0]->open(endpoints_of(ranks))) << ranks[0]->error();
  std::string error;
  const std::optional<control::JobSpec> spec = control::parse_job(ranks[0]->job_text(77), &error);
  ASSERT_TRUE(spec) << error << "\n" << ranks[0]->job_text(77);
  EXPECT_EQ(spec->id, 77u);
  EXPECT_EQ(spec->workers, 2u);
  ASSERT_EQ(spec->conns.size(), 2u);
  EXPECT_EQ(util::ip_text(spec->conns[0].src_ip), "127.88.1.1");
  EXPECT_EQ(util::ip_text(spec->conns[0].dst_ip), "127.88.1.9");
  EXPECT_EQ(spec->conns[0].dst_qpn, RackPlan::recv_qpn(1));
  EXPECT_EQ(util::ip_text(spec->conns[1].src_ip), "127.88.1.9");
  EXPECT_EQ(spec->conns[1].src_qpn, RackPlan::send_qpn(1));
  EXPECT_EQ(spec->conns[1].start_psn, RackPlan::start_psn(1));
}

// Channels through the caller's channel (the torch backend's INAGG_CHANNELS): the job file lists
// every channel at the endpoints' addresses (not the plan's ip-base ones), channel c's QPNs and
// first PSN 0x10000 x c above the endpoint's; a reduce-scatter lane's job has one channel.
TEST(RankPeers, JobTextOfChannelsFollowsTheEndpoints) {
  constexpr unsigned kChannels = 3;
  std::vector<std::unique_ptr<Rank>> ranks;
  for (const auto& [rank, address] : {std::pair{0u, "127.88.3.1"}, std::pair{1u, "127.88.3.9"}}) {
    RankOptions o = options_of(rank, 2, address);
    o.geometry.channels = kChannels;
    ASSERT_EQ(o.validate(), "");
    ranks.push_back(std::make_unique<Rank>(o));
    ASSERT_EQ(ranks.back()->error(), "");
  }
  ASSERT_TRUE(ranks[1]->open(endpoints_of(ranks))) << ranks[1]->error();
  std::string error;
  const std::optional<control::JobSpec> spec = control::parse_job(ranks[1]->job_text(78), &error);
  ASSERT_TRUE(spec) << error << "\n" << ranks[1]->job_text(78);
  EXPECT_EQ(spec->channels, kChannels);
  ASSERT_EQ(spec->conns.size(), 2u * kChannels);
  const char* address[] = {"127.88.3.1", "127.88.3.9"};
  for (unsigned c = 0; c < kChannels; ++c)
    for (unsigned r = 0; r < 2; ++r) {
      const control::ConnectionSpec& conn = spec->conns[c * 2 + r];
      SCOPED_TRACE("channel " + std::to_string(c) + " rank " + std::to_string(r));
      EXPECT_EQ(conn.rank, r);
      EXPECT_EQ(util::ip_text(conn.src_ip), address[r]);
      EXPECT_EQ(util::ip_text(conn.dst_ip), address[1 - r]);
      EXPECT_EQ(conn.src_qpn, RackPlan::send_qpn(r) + 0x10000 * c);
      EXPECT_EQ(conn.dst_qpn, RackPlan::recv_qpn(1 - r) + 0x10000 * c);
      EXPECT_EQ(conn.start_psn, (RackPlan::start_psn(r) + 0x10000 * c) & 0xffffff);
    }
  const std::optional<control::JobSpec> lane =
      control::parse_job(ranks[1]->job_text(79, control::Collective::reduce_scatter), &error);
  ASSERT_TRUE(lane) << error;
  EXPECT_EQ(lane->channels, 1u);
  EXPECT_EQ(lane->conns.size(), 2u);
}

// Three ranks whose ring is connected straight, no appliance: every rank receives its
// predecessor's data unsummed, and the tally (1, not 3) fails the allreduce on every rank.
TEST(RankPeers, WithoutTheApplianceEveryRankFailsOnTheTally) {
  constexpr unsigned n = 3;
  std::vector<std::unique_ptr<Rank>> ranks;
  const char* addresses[] = {"127.88.2.1", "127.88.2.2", "127.88.2.3"};
  for (unsigned r = 0; r < n; ++r) ranks.push_back(rank_at(r, n, addresses[r]));
  const std::vector<RankEndpoint> all = endpoints_of(ranks);
  for (unsigned r = 0; r < n; ++r) ASSERT_TRUE(ranks[r]->open(all)) << ranks[r]->error();
  for (unsigned r = 0; r < n; ++r) ASSERT_TRUE(ranks[r]->open_receive()) << ranks[r]->error();
  std::vector<std::string> errors(n);
  std::vector<std::vector<float>> data(n, std::vector<float>(10000, 1.0f));
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto* p = reinterpret_cast<uint8_t*>(data[r].data());
      errors[r] = ranks[r]->allreduce(p, p, data[r].size() * 4) ? "returned" : ranks[r]->error();
      ranks[r]->finish();
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < n; ++r) {
    EXPECT_NE(errors[r].find("without the appliance's sum"), std::string::npos) << "rank " << r << ": " << errors[r];
    // The failure stays: a later allreduce says the same.
    auto* p = reinterpret_cast<uint8_t*>(data[r].data());
    EXPECT_FALSE(ranks[r]->allreduce(p, p, 4));
    EXPECT_EQ(ranks[r]->error(), errors[r]);
    // And so do the other collectives: the rank's failure is one.
    EXPECT_FALSE(ranks[r]->reduce_scatter(p, p, 4));
    EXPECT_EQ(ranks[r]->error(), errors[r]);
  }
}
