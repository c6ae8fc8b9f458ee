// The ranks' out-of-band exchange (client::Rendezvous) on 127.0.0.1, one thread per rank, and the
// job text a rank 0 registers with the connections a transport made (RackPlan::connections): what
// VerbsTransport relies on, without an RDMA device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/client/rendezvous.hpp"
#include "inagg/control/job_file.hpp"

namespace inagg::client {
namespace {

uint16_t test_port(unsigned k) { return static_cast<uint16_t>(30000 + (::getpid() * 7 + k * 101) % 20000); }

RankEndpoint endpoint_of(unsigned r, uint32_t payload = 1024) {
  RankEndpoint e;
  e.rank = r;
  e.gid = *util::parse_ip("::ffff:10.77.0." + std::to_string(101 + r));
  e.send_qpn = 0x11 + 2 * r;
  e.recv_qpn = 0x12 + 2 * r;
  e.start_psn = 0xfff000 + r;
  e.recv_addr = 0x7f0000001000ull + (uint64_t{r} << 20);
  e.recv_rkey = 0xabc00 + r;
  e.payload = payload;
  return e;
}

TEST(Rendezvous, EndpointLineRoundTrip) {
  const RankEndpoint e = endpoint_of(2);
  std::string err;
  const std::optional<RankEndpoint> back = parse_endpoint(format_endpoint(e), &err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(back->rank, 2u);
  EXPECT_EQ(back->gid, e.gid);
  EXPECT_EQ(back->send_qpn, e.send_qpn);
  EXPECT_EQ(back->recv_qpn, e.recv_qpn);
  EXPECT_EQ(back->start_psn, e.start_psn);
  EXPECT_EQ(back->recv_addr, e.recv_addr);
  EXPECT_EQ(back->recv_rkey, e.recv_rkey);
  EXPECT_EQ(back->payload, 1024u);
  EXPECT_FALSE(parse_endpoint("endpoint rank=1 gid=::ffff:10.0.0.1", &err));
  EXPECT_NE(err.find("not an endpoint line"), std::string::npos) << err;
}

// runs n ranks; ranks[r] gets payload payloads[r]; returns each rank's error ("" = ok).
std::vector<std::string> run_ranks(unsigned n, uint16_t port, const std::vector<uint32_t>& payloads,
                                   std::vector<std::vector<RankEndpoint>>* tables, bool barrier) {
  std::vector<std::string> errors(n);
  tables->assign(n, {});
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      RendezvousConfig c;
      c.rank = r;
      c.workers = n;
      c.host = *util::parse_ip("127.0.0.1");
      c.port = port;
      c.deadline_ns = now_ns() + 5'000'000'000ull;
      if (!rv.exchange(c, endpoint_of(r, payloads[r]), &(*tables)[r], &errors[r])) return;
      if (barrier && !rv.barrier("connected", &errors[r])) return;
      if (barrier && !rv.barrier("done", &errors[r])) return;
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(Rendezvous, EveryRankLearnsEveryEndpointThenMeetsInTheBarrier) {
  std::vector<std::vector<RankEndpoint>> tables;
  const std::vector<std::string> errors = run_ranks(3, test_port(1), {1024, 1024, 1024}, &tables, true);
  for (unsigned r = 0; r < 3; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(tables[r].size(), 3u);
    for (unsigned p = 0; p < 3; ++p) {
      EXPECT_EQ(tables[r][p].rank, p);
      EXPECT_EQ(tables[r][p].recv_qpn, endpoint_of(p).recv_qpn);
      EXPECT_EQ(tables[r][p].recv_rkey, endpoint_of(p).recv_rkey);
      EXPECT_EQ(tables[r][p].gid, endpoint_of(p).gid);
    }
  }
}

// A rank whose process ends between two barriers (its Rendezvous, and so its connection to rank 0,
// goes): the others' next barrier fails at once with the rank that went away, not at the deadline
// (30 s here); a rank at another barrier than rank 0 is refused with both names.
TEST(Rendezvous, ARankThatWentAwayFailsTheOthersBarrierAtOnce) {
  const unsigned n = 4;
  std::vector<std::string> errors(n);
  std::vector<uint64_t> took_ms(n, 0);
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto rv = std::make_unique<Rendezvous>();
      RendezvousConfig c;
      c.rank = r;
      c.workers = n;
      c.host = *util::parse_ip("127.0.0.1");
      c.port = test_port(5);
      c.deadline_ns = now_ns() + 30'000'000'000ull;
      std::vector<RankEndpoint> table;
      if (!rv->exchange(c, endpoint_of(r, 1024), &table, &errors[r])) return;
      if (!rv->barrier("one", &errors[r])) return;
      if (r == 2) {
        rv.reset();  // rank 2's process ends
        return;
      }
      const uint64_t t0 = now_ns();
      if (rv->barrier("two", &errors[r])) errors[r] = "the barrier passed without rank 2";
      took_ms[r] = (now_ns() - t0) / 1'000'000;
      std::string again;
      EXPECT_FALSE(rv->barrier("three", &again)) << "rank " << r << ": a barrier after a failed one passed";
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors[2], "");
  for (unsigned r : {0u, 1u, 3u}) {
    EXPECT_NE(errors[r].find("rank 2 went away"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_LT(took_ms[r], 5000u) << "rank " << r << " waited for the deadline";
  }

  errors.assign(2, "");
  threads.clear();
  for (unsigned r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      RendezvousConfig c;
      c.rank = r;
      c.workers = 2;
      c.host = *util::parse_ip("127.0.0.1");
      c.port = test_port(6);
      c.deadline_ns = now_ns() + 30'000'000'000ull;
      std::vector<RankEndpoint> table;
      if (!rv.exchange(c, endpoint_of(r, 1024), &table, &errors[r])) return;
      rv.barrier(r == 0 ? "size 4096" : "size 8192", &errors[r]);
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("rank 1 came to 'barrier size 8192' while rank 0 was at 'barrier size 4096'"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
}

TEST(Rendezvous, DifferentPayloadsAreRefused) {
  std::vector<std::vector<RankEndpoint>> tables;
  const std::vector<std::string> errors = run_ranks(3, test_port(2), {1024, 4096, 1024}, &tables, false);
  for (unsigned r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("every rank needs the same"), std::string::npos) << errors[r];
}

TEST(Rendezvous, NoRankZeroIsADeadlineWithAMessage) {
  Rendezvous rv;
  RendezvousConfig c;
  c.rank = 1;
  c.workers = 2;
  c.host = *util::parse_ip("127.0.0.1");
  c.port = test_port(3);
  c.deadline_ns = now_ns() + 300'000'000ull;
  std::vector<RankEndpoint> all;
  std::string err;
  EXPECT_FALSE(rv.exchange(c, endpoint_of(1), &all, &err));
  EXPECT_NE(err.find("could not reach rank 0 at 127.0.0.1:" + std::to_string(c.port)), std::string::npos) << err;
}

// A rank that is its own NIC (the software transport among verbs ranks) keeps its RC running
// while it waits for the others: the idle function is called, in short turns, in rank 0's wait
// for a late rank and in a late rank 0's answer, and the barriers still complete.
TEST(Rendezvous, TheIdleFunctionRunsWhileARankWaits) {
  const uint16_t port = test_port(4);
  std::string errors[2];
  unsigned idles[2] = {0, 0};
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rendezvous rv;
      RendezvousConfig c;
      c.rank = r;
      c.workers = 2;
      c.host = *util::parse_ip("127.0.0.1");
      c.port = port;
      c.deadline_ns = now_ns() + 5'000'000'000ull;
      std::vector<RankEndpoint> all;
      if (!rv.exchange(c, endpoint_of(r), &all, &errors[r])) return;
      rv.set_idle([&, r](int wait_ms) {
        EXPECT_LE(wait_ms, Rendezvous::kIdleMs);
        ++idles[r];
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      });
      // Rank 1 comes late to the first barrier, rank 0 to the second.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (!rv.barrier("connected", &errors[r])) return;
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (!rv.barrier("done", &errors[r])) return;
    });
  for (std::thread& t : threads) t.join();
  for (unsigned r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_GE(idles[r], 10u) << "rank " << r << " waited ~150 ms without running its idle function";
  }
}

// The job rank 0 registers from the exchanged connections: the appliance's own parser reads it,
// and an IPv4-mapped GID is the IPv4 address.
TEST(Rendezvous, JobTextWithTheTransportsConnections) {
  RackPlan plan;
  plan.workers = 3;
  plan.ip_base = *util::parse_ip("10.77.0.100");
  plan.job_id = 5;
  plan.message = 4096;
  plan.payload = 1024;
  for (unsigned r = 0; r < 3; ++r) {
    const RankEndpoint e = endpoint_of(r);
    plan.connections.push_back({e.gid, e.send_qpn, e.recv_qpn, e.start_psn});
  }
  std::string err;
  const std::optional<control::JobSpec> j = control::parse_job(plan.job_text(), &err);
  ASSERT_TRUE(j) << err << "\n" << plan.job_text();
  ASSERT_EQ(j->conns.size(), 3u);
  for (unsigned r = 0; r < 3; ++r) {
    const control::ConnectionSpec& c = j->conns[r];
    EXPECT_EQ(c.src_ip, *util::parse_ip("10.77.0." + std::to_string(101 + r)));
    EXPECT_EQ(c.dst_ip, *util::parse_ip("10.77.0." + std::to_string(101 + (r + 1) % 3)));
    EXPECT_EQ(c.src_qpn, endpoint_of(r).send_qpn);
    EXPECT_EQ(c.dst_qpn, endpoint_of((r + 1) % 3).recv_qpn);
    EXPECT_EQ(c.start_psn, endpoint_of(r).start_psn);
  }
}

}  // namespace
}  // namespace inagg::client
