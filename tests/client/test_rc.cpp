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

// RFC 6298: after round trips were measured on loopback (tens of microseconds), the RTO sits at
// its floor, far below the ACK timeout; a lost tail (the last packets of a message, so no later
// packet makes the responder NAK) is then resent after that RTO, not after the ACK timeout.
TEST(RcLoopback, TheRetransmissionTimeoutFollowsTheRoundTrip) {
  constexpr size_t kMsg = 8 * 1024;
  Pair p(kMsg * 2);
  p.ca.ack_timeout_ns = 2'000'000'000;  // 2 s: what a fixed timer would wait
  p.ca.rto_min_ns = 50'000'000;         // 50 ms
  p.req = std::make_unique<RcRequester>(p.a, p.ca);
  EXPECT_EQ(p.req->rto_ns(), 2'000'000'000u) << "before any sample, the RTO is the ACK timeout (RFC 6298 (2.1))";
  std::vector<uint8_t> src(kMsg * 2);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
  p.req->post_write(src.data(), kMsg, 0x10000, 0x77, std::nullopt);
  ASSERT_TRUE(p.run(5)) << p.req->error();
  ASSERT_GT(p.req->counters().rtt_samples, 0u);
  EXPECT_GT(p.req->srtt_ns(), 0u);
  EXPECT_EQ(p.req->rto_ns(), 50'000'000u) << "SRTT + 4 RTTVAR on loopback is below the floor";

  // The second message's packets all vanish once: nothing reaches the responder, so only the
  // retransmission timer can recover them.
  p.req->post_write(src.data() + kMsg, kMsg, 0x10000 + kMsg, 0x77, std::nullopt);
  const uint64_t t0 = now_ns();
  EXPECT_FALSE(p.run(0.01, /*deliver_to_responder=*/false));
  ASSERT_TRUE(p.run(5)) << p.req->error();
  const uint64_t took = now_ns() - t0;
  EXPECT_EQ(p.mr, src);
  EXPECT_EQ(p.req->counters().timeouts, 1u);
  EXPECT_GT(p.req->counters().retransmitted, 0u);
  EXPECT_LT(took, 1'000'000'000u) << "recovered after the 50 ms RTO, not the 2 s ACK timeout";
  EXPECT_EQ(p.req->rto_ns(), 100'000'000u) << "one timeout doubles the RTO (RFC 6298 (5.5)) until a new sample";
}

// Batched system calls: 48 packets queued by the requester leave in one sendmmsg() and arrive in
// recvmmsg() batches of up to 32.
TEST(RcLoopback, BatchingSendsAWindowInOneSystemCall) {
  constexpr size_t kMsg = 48 * 1024;
  Pair p(kMsg);
  p.a.set_batching(true);
  std::vector<uint8_t> src(kMsg, 5);
  p.req->post_write(src.data(), kMsg, 0x10000, 0x77, std::nullopt);
  p.req->progress(now_ns());  // 48 packets of 1 KiB
  EXPECT_EQ(p.a.sent(), 0u) << "queued, not sent, until flush()";
  p.a.flush();
  EXPECT_EQ(p.a.send_calls(), 1u);
  EXPECT_EQ(p.a.sent(), 48u);
  Datagram d;
  unsigned got = 0;
  while (p.b.receive(&d)) {
    ++got;
    p.rsp->on_data(d, now_ns());
  }
  EXPECT_EQ(got, 48u);
  EXPECT_EQ(p.b.receive_calls(), 2u);
  EXPECT_EQ(p.rsp->counters().accepted, 48u);
}
