// client::InaRank without an appliance, on loopback addresses of its own (127.88.0.x, no root):
// the endpoints it publishes, the checks open() makes of every rank's endpoint, the job file it
// describes, and a ring of real software transports whose allreduce, with no appliance to sum it,
// fails on the tally on every rank instead of returning a predecessor's data.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/ina_rank.hpp"
#include "inagg/control/job_file.hpp"

using namespace inagg;
using namespace inagg::client;

namespace {

InaRankOptions options_of(unsigned rank, unsigned workers, const char* address) {
  InaRankOptions o;
  o.rank = rank;
  o.workers = workers;
  o.address = *util::parse_ip(address);
  o.payload = 1024;
  o.message = 16384;
  o.chunk_bytes = 65536;
  o.ack_timeout_ms = 50;
  o.retry = 3;
  o.stall_s = 5;
  return o;
}

std::vector<RankEndpoint> endpoints_of(std::vector<InaRank>& ranks) {
  std::vector<RankEndpoint> all;
  for (InaRank& r : ranks) all.push_back(r.endpoint());
  return all;
}

}  // namespace

TEST(InaRank, EndpointIsTheRackPlansQpsAtItsOwnAddress) {
  InaRank r;
  ASSERT_EQ(r.configure(options_of(2, 4, "127.88.0.7")), "");
  const RankEndpoint e = r.endpoint();
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(util::ip_text(e.gid), "::ffff:127.88.0.7");
  EXPECT_EQ(e.send_qpn, RackPlan::send_qpn(2));
  EXPECT_EQ(e.recv_qpn, RackPlan::recv_qpn(2));
  EXPECT_EQ(e.start_psn, RackPlan::start_psn(2));
  EXPECT_EQ(e.payload, 1024u);
  EXPECT_EQ(e.workers, 4u);
  // The receive region's key is the rank's own, drawn at random: another rank's differs, and
  // neither is the fixed one of ranks that never meet.
  InaRank other;
  ASSERT_EQ(other.configure(options_of(3, 4, "127.88.0.8")), "");
  const RegionKey mine{e.recv_addr, e.recv_rkey}, theirs{other.endpoint().recv_addr, other.endpoint().recv_rkey};
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

TEST(InaRank, ConfigureNamesTheOptionToChange) {
  InaRank r;
  InaRankOptions o = options_of(0, 4, "127.88.0.1");
  o.dtype = "fp64";
  EXPECT_EQ(r.configure(o).rfind("dtype must be fp32", 0), 0u);
  o = options_of(0, 4, "127.88.0.1");
  o.message = 1000;  // not a multiple of the payload
  EXPECT_NE(r.configure(o).find("message must be a multiple of payload"), std::string::npos) << r.configure(o);
  o = options_of(0, 1, "127.88.0.1");
  EXPECT_NE(r.configure(o).find("workers must be between 2 and 64"), std::string::npos);
  o = options_of(0, 4, "127.88.0.1");
  o.address = *util::parse_ip("fd00::1");
  EXPECT_NE(r.configure(o).find("IPv4"), std::string::npos);
}

TEST(InaRank, OpenChecksEveryRanksEndpoint) {
  std::vector<InaRank> ranks(3);
  const char* addresses[] = {"127.88.0.1", "127.88.0.2", "127.88.0.3"};
  for (unsigned r = 0; r < 3; ++r) ASSERT_EQ(ranks[r].configure(options_of(r, 3, addresses[r])), "");
  std::string why;
  std::vector<RankEndpoint> all = endpoints_of(ranks);
  all.pop_back();
  EXPECT_FALSE(ranks[0].open(all, &why));
  EXPECT_EQ(why, "2 endpoints for 3 ranks");
  all = endpoints_of(ranks);
  all[2].payload = 4096;
  EXPECT_FALSE(ranks[0].open(all, &why));
  EXPECT_NE(why.find("rank 2: its path MTU payload is 4096, this rank's 1024"), std::string::npos) << why;
  all = endpoints_of(ranks);
  all[2].gid = all[1].gid;
  EXPECT_FALSE(ranks[0].open(all, &why));
  EXPECT_EQ(why, "rank 2: it has the same address as rank 1 (127.88.0.2): every rank needs an address of its own");
  all = endpoints_of(ranks);
  std::swap(all[0], all[1]);
  EXPECT_FALSE(ranks[0].open(all, &why));
  EXPECT_EQ(why, "rank 0: its endpoint names rank 1");
  all = endpoints_of(ranks);
  all[1].workers = 4;
  EXPECT_FALSE(ranks[0].open(all, &why));
  EXPECT_EQ(why, "rank 1: it was started for 4 ranks, this rank for 3");
  // Not opened: an allreduce says so.
  float x = 1;
  EXPECT_FALSE(ranks[0].allreduce(reinterpret_cast<uint8_t*>(&x), sizeof x, &why));
  EXPECT_EQ(why, "allreduce before open()");
}

TEST(InaRank, JobTextNamesEveryRanksConnection) {
  std::vector<InaRank> ranks(2);
  ASSERT_EQ(ranks[0].configure(options_of(0, 2, "127.88.1.1")), "");
  ASSERT_EQ(ranks[1].configure(options_of(1, 2, "127.88.1.9")), "");
  std::string why;
  ASSERT_TRUE(ranks[0].open(endpoints_of(ranks), &why)) << why;
  std::string error;
  const std::optional<control::JobSpec> spec = control::parse_job(ranks[0].job_text(77), &error);
  ASSERT_TRUE(spec) << error << "\n" << ranks[0].job_text(77);
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

// Three ranks whose ring is connected straight, no appliance: every rank receives its
// predecessor's data unsummed, and the tally (1, not 3) fails the allreduce on every rank.
TEST(InaRank, WithoutTheApplianceEveryRankFailsOnTheTally) {
  constexpr unsigned n = 3;
  std::vector<InaRank> ranks(n);
  const char* addresses[] = {"127.88.2.1", "127.88.2.2", "127.88.2.3"};
  for (unsigned r = 0; r < n; ++r) ASSERT_EQ(ranks[r].configure(options_of(r, n, addresses[r])), "");
  const std::vector<RankEndpoint> all = endpoints_of(ranks);
  std::string why;
  for (unsigned r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].open(all, &why)) << why;
  for (unsigned r = 0; r < n; ++r) ASSERT_TRUE(ranks[r].open_receive(&why)) << why;
  std::vector<std::string> errors(n);
  std::vector<std::vector<float>> data(n, std::vector<float>(10000, 1.0f));
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (ranks[r].allreduce(reinterpret_cast<uint8_t*>(data[r].data()), data[r].size() * 4, &errors[r]))
        errors[r] = "returned";
      ranks[r].finish(now_ns() + 2'000'000'000ull);
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < n; ++r) {
    EXPECT_NE(errors[r].find("without the appliance's sum"), std::string::npos) << "rank " << r << ": " << errors[r];
    // The failure stays: a later allreduce says the same.
    std::string again;
    EXPECT_FALSE(ranks[r].allreduce(reinterpret_cast<uint8_t*>(data[r].data()), 4, &again));
    EXPECT_EQ(again, errors[r]);
  }
}
