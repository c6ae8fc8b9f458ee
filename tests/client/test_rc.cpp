// The software RC endpoint over kernel UDP on loopback: two QPs, 127.0.0.1 -> 127.0.0.2. ICRCs are
// verified on receive, which also checks that the kernel writes the IP/UDP fields the sender put
// into its ICRC (ID 0 with DF, source port 4791).
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <random>

#include "inagg/client/rc.hpp"

using namespace inagg;
using namespace inagg::client;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

struct Pair {
  RoceSocket a, b;
  RcConfig ca, cb;
  std::unique_ptr<RcRequester> req;
  std::unique_ptr<RcResponder> rsp;
  std::vector<uint8_t> mr;

  explicit Pair(size_t mr_len, uint32_t mtu = 1024, unsigned window = 2) : mr(mr_len, 0) {
    std::string err;
    EXPECT_TRUE(a.open(*wire::parse_ip("127.0.0.1"), 2, &err)) << err;
    EXPECT_TRUE(b.open(*wire::parse_ip("127.0.0.2"), 2, &err)) << err;
    ca.local_qpn = 0x11;
    ca.remote_qpn = 0x22;
    ca.remote_ip = b.local();
    ca.send_start_psn = 0xfffff0;  // wraps during the test
    ca.mtu_payload = mtu;
    ca.window = window;
    ca.ack_timeout_ns = 2'000'000;
    cb = ca;
    cb.local_qpn = 0x22;
    cb.remote_qpn = 0x11;
    cb.remote_ip = a.local();
    cb.recv_start_psn = ca.send_start_psn;
    req = std::make_unique<RcRequester>(a, ca);
    rsp = std::make_unique<RcResponder>(b, cb, mr.data(), mr.size(), 0x10000, 0x77);
  }

  // Runs both ends until the requester is idle or failed, or the deadline passes.
  bool run(double seconds, bool deliver_to_responder = true) {
    const uint64_t end = now_ns() + static_cast<uint64_t>(seconds * 1e9);
    Datagram d;
    while (now_ns() < end) {
      const uint64_t t = now_ns();
      req->progress(t);
      rsp->progress(t);
      while (b.receive(&d))
        if (deliver_to_responder) rsp->on_data(d, t);
      while (a.receive(&d)) req->on_ack(d, t);
      if (req->idle() || req->failed()) return req->idle();
    }
    return false;
  }
};

}  // namespace

TEST(RcLoopback, WritesLandInOrderWithImmediatesAndValidIcrcs) {
  constexpr size_t kMsg = 16 * 1024, kCount = 24;
  Pair p(kMsg * kCount);
  std::vector<uint8_t> src(kMsg * kCount);
  std::mt19937 rng(1);
  for (auto& x : src) x = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < kCount; ++i)
    p.req->post_write(src.data() + i * kMsg, kMsg, 0x10000 + i * kMsg, 0x77, static_cast<uint32_t>(i));
  ASSERT_TRUE(p.run(10)) << p.req->error();
  EXPECT_EQ(p.mr, src);
  EXPECT_EQ(p.rsp->messages(), kCount);
  std::vector<uint32_t> want(kCount);
  std::iota(want.begin(), want.end(), 0u);
  EXPECT_EQ(p.rsp->immediates(), want);
  EXPECT_EQ(p.rsp->counters().bad_icrc, 0u);
  EXPECT_EQ(p.req->counters().bad_icrc, 0u);
  EXPECT_EQ(p.req->counters().messages_completed, kCount);
  EXPECT_EQ(p.req->counters().packets_sent, kCount * kMsg / 1024);  // nothing lost, nothing resent
}

TEST(RcLoopback, GoBackNRecoversFromLossInBothDirections) {
  constexpr size_t kMsg = 8 * 1024, kCount = 40;
  Pair p(kMsg * kCount, 1024, 3);
  p.a.set_loss(0.05, 1);
  p.b.set_loss(0.05, 2);
  std::vector<uint8_t> src(kMsg * kCount);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < kCount; ++i)
    p.req->post_write(src.data() + i * kMsg, kMsg, 0x10000 + i * kMsg, 0x77, std::nullopt);
  ASSERT_TRUE(p.run(30)) << p.req->error();
  EXPECT_EQ(p.mr, src);
  EXPECT_GT(p.a.dropped() + p.b.dropped(), 0u);
  EXPECT_GT(p.req->counters().retransmitted, 0u);
  EXPECT_GT(p.rsp->counters().naks_sent + p.req->counters().timeouts, 0u);
}

TEST(RcLoopback, TheRequesterFailsAfterItsRetryCount) {
  Pair p(4096);
  p.ca.retry_count = 2;
  p.ca.ack_timeout_ns = 1'000'000;
  p.req = std::make_unique<RcRequester>(p.a, p.ca);
  std::vector<uint8_t> src(4096, 1);
  p.req->post_write(src.data(), 4096, 0x10000, 0x77, std::nullopt);
  EXPECT_FALSE(p.run(2, /*deliver_to_responder=*/false));
  ASSERT_TRUE(p.req->failed());
  EXPECT_NE(p.req->error().find("retry count (2) exceeded"), std::string::npos) << p.req->error();
  EXPECT_EQ(p.req->counters().timeouts, 3u);
}

TEST(RcLoopback, AWriteOutsideTheMemoryRegionIsRefusedWithARemoteAccessNak) {
  Pair p(4096);
  std::vector<uint8_t> src(8192, 1);
  p.req->post_write(src.data(), 8192, 0x10000, 0x77, std::nullopt);  // twice the region
  EXPECT_FALSE(p.run(2));
  EXPECT_TRUE(p.req->failed());
  EXPECT_NE(p.rsp->error().find("outside the memory region"), std::string::npos);
  EXPECT_EQ(std::count(p.mr.begin(), p.mr.end(), 1), 0) << "nothing written";
}
