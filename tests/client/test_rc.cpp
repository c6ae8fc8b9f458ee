// The software RC endpoint over kernel UDP on loopback: two QPs, 127.0.0.1 -> 127.0.0.2. ICRCs are
// verified on receive, which also checks that the kernel writes the IP/UDP fields the sender put
// into its ICRC (ID 0 with DF, source port 4791).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "inagg/client/transport/rc.hpp"
#include "inagg/client/transport/udp_transport.hpp"
#include "inagg/wire/bytes.hpp"
#include "inagg/wire/icrc.hpp"

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
    EXPECT_TRUE(a.open(*util::parse_ip("127.0.0.1"), 2, &err)) << err;
    EXPECT_TRUE(b.open(*util::parse_ip("127.0.0.2"), 2, &err)) << err;
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

// A QP with a UDP source port of its own (a channel's: RSS on the source port spreads a rank's
// channels): its data and its ACKs leave from that port, and their ICRCs, which cover the UDP
// header, verify at the other end. An unbound source port is refused, never sent from 4791.
TEST(RcLoopback, AQpSendsFromItsOwnSourcePort) {
  constexpr size_t kMsg = 8 * 1024, kCount = 6;
  Pair p(kMsg * kCount);
  std::string err;
  ASSERT_TRUE(p.a.add_source_port(49200, &err)) << err;
  ASSERT_TRUE(p.b.add_source_port(49201, &err)) << err;
  p.ca.src_port = 49200;
  p.cb.src_port = 49201;
  p.req = std::make_unique<RcRequester>(p.a, p.ca);
  p.rsp = std::make_unique<RcResponder>(p.b, p.cb, p.mr.data(), p.mr.size(), 0x10000, 0x77);
  std::vector<uint8_t> src(kMsg * kCount);
  std::mt19937 rng(3);
  for (auto& x : src) x = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < kCount; ++i)
    p.req->post_write(src.data() + i * kMsg, kMsg, 0x10000 + i * kMsg, 0x77, static_cast<uint32_t>(i));
  // Run by hand to see every datagram's source port.
  std::set<uint16_t> data_ports, ack_ports;
  const uint64_t end = now_ns() + 10'000'000'000ull;
  Datagram d;
  while (now_ns() < end && !p.req->idle() && !p.req->failed()) {
    const uint64_t t = now_ns();
    p.req->progress(t);
    p.rsp->progress(t);
    while (p.b.receive(&d)) {
      data_ports.insert(d.src_port);
      p.rsp->on_data(d, t);
    }
    while (p.a.receive(&d)) {
      ack_ports.insert(d.src_port);
      p.req->on_ack(d, t);
    }
  }
  ASSERT_TRUE(p.req->idle()) << p.req->error();
  EXPECT_EQ(p.mr, src);
  EXPECT_EQ(data_ports, std::set<uint16_t>{49200});
  EXPECT_EQ(ack_ports, std::set<uint16_t>{49201});
  EXPECT_EQ(p.rsp->counters().bad_icrc, 0u);
  EXPECT_EQ(p.req->counters().bad_icrc, 0u);
  // A frame from a source port no socket is bound to is refused.
  RcConfig unbound = p.ca;
  unbound.src_port = 49202;
  RcRequester stray(p.a, unbound);
  const uint64_t errors = p.a.send_errors();
  stray.post_write(src.data(), 1024, 0x10000, 0x77, 0);
  stray.progress(now_ns());
  p.a.flush();
  EXPECT_GT(p.a.send_errors(), errors);
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

// A WRITE the real peer sends outside the region (twice its size, the right rkey) is dropped
// unanswered like a forger's, never written: the requester then runs out of retries.
TEST(RcLoopback, AWriteOutsideTheMemoryRegionIsDroppedAndCounted) {
  Pair p(4096);
  p.ca.retry_count = 2;
  p.ca.ack_timeout_ns = 1'000'000;
  p.req = std::make_unique<RcRequester>(p.a, p.ca);
  std::vector<uint8_t> src(8192, 1);
  p.req->post_write(src.data(), 8192, 0x10000, 0x77, std::nullopt);  // twice the region
  EXPECT_FALSE(p.run(2));
  EXPECT_TRUE(p.req->failed());
  EXPECT_GT(p.rsp->counters().refused_key, 0u);
  EXPECT_EQ(p.rsp->counters().accepted, 0u);
  // (Its MIDDLE and LAST packets come past the PSN expected, the FIRST's: they draw the sequence
  // NAK any such packet does; nothing is acknowledged.)
  EXPECT_EQ(p.rsp->counters().acks_sent, 0u) << "a refused WRITE was acknowledged";
  EXPECT_EQ(std::count(p.mr.begin(), p.mr.end(), 1), 0) << "nothing written";
}

namespace {

// A frame as a forger builds it, with a valid ICRC: the spec of `from`'s socket toward `to`.
std::vector<uint8_t> forged_frame(const RoceSocket& from, const util::IpAddr& to, uint8_t opcode, uint32_t qpn,
                                  uint32_t psn, uint64_t va, uint32_t rkey, const std::vector<uint8_t>& payload) {
  wire::RoceFrameSpec s;
  from.fill_spec(s, to);
  s.opcode = wire::op::kRc | opcode;
  s.dest_qp = qpn;
  s.psn = psn;
  s.ack_req = true;
  s.reth_va = va;
  s.reth_rkey = rkey;
  s.reth_dma_len = static_cast<uint32_t>(payload.size());
  std::vector<uint8_t> f(payload.size() + 256);
  f.resize(wire::build_roce_frame(f, s, payload));
  return f;
}

// Waits (1 s at most) until `sock` has a datagram and hands each one to `take`; how many it took.
template <typename Take>
size_t deliver(RoceSocket& sock, Take take) {
  const uint64_t end = now_ns() + 1'000'000'000ull;
  Datagram d;
  size_t n = 0;
  while (n == 0 && now_ns() < end) {
    pollfd pfd{sock.fd(), POLLIN, 0};
    ::poll(&pfd, 1, 10);
    while (sock.receive(&d)) {
      take(d);
      ++n;
    }
  }
  return n;
}

}  // namespace

// The responder of 127.0.0.2 (the peer 127.0.0.1, rkey 0x77, region [0x10000, +4096)) and WRITEs
// at the PSN it expects next, each with one thing wrong: another source address, another rkey, a
// VA below or past the region, a MIDDLE or LAST with no message begun. Each is dropped and
// counted, unanswered; the region keeps its bytes; the real peer's write after them lands.
TEST(RcResponderRefuses, ForgedWritesLeaveTheRegionAsItWas) {
  Pair p(4096);
  RoceSocket forger;
  std::string err;
  ASSERT_TRUE(forger.open(*util::parse_ip("127.0.0.3"), 2, &err)) << err;
  const util::IpAddr to = p.b.local();
  const uint32_t psn = p.cb.recv_start_psn;
  const std::vector<uint8_t> bytes(1024, 0xee);
  const std::vector<uint8_t> before = p.mr;
  using namespace wire::op;
  struct Case {
    const char* what;
    RoceSocket* from;
    uint8_t opcode;
    uint64_t va;
    uint32_t rkey;
    uint64_t RcCounters::*counter;
  } cases[] = {
      {"another source address", &forger, kWriteOnly, 0x10000, 0x77, &RcCounters::refused_source},
      {"another rkey", &p.a, kWriteOnly, 0x10000, 0x78, &RcCounters::refused_key},
      {"the old fixed rkey and VA", &p.a, kWriteOnly, UdpRcTransport::kUnmetKey.va, UdpRcTransport::kUnmetKey.rkey,
       &RcCounters::refused_key},
      {"a VA below the region", &p.a, kWriteOnly, 0x10000 - 512, 0x77, &RcCounters::refused_key},
      {"a VA running past the region", &p.a, kWriteFirst, 0x10000 + 4096 - 512, 0x77, &RcCounters::refused_key},
      {"a MIDDLE with no message begun", &p.a, kWriteMiddle, 0, 0, &RcCounters::refused_key},
      {"a LAST with no message begun", &p.a, kWriteLastImm, 0, 0, &RcCounters::refused_key},
  };
  for (const Case& c : cases) {
    const uint64_t was = p.rsp->counters().*c.counter;
    ASSERT_TRUE(c.from->send_frame(forged_frame(*c.from, to, c.opcode, p.cb.local_qpn, psn, c.va, c.rkey, bytes)));
    ASSERT_EQ(deliver(p.b, [&](const Datagram& d) { p.rsp->on_data(d, now_ns()); }), 1u) << c.what;
    EXPECT_EQ(p.rsp->counters().*c.counter, was + 1) << c.what;
    EXPECT_EQ(p.mr, before) << c.what << ": the region changed";
    EXPECT_EQ(p.rsp->counters().accepted, 0u) << c.what;
    EXPECT_EQ(p.rsp->counters().acks_sent + p.rsp->counters().naks_sent, 0u) << c.what << " was answered";
  }
  EXPECT_EQ(p.rsp->counters().bad_icrc, 0u) << "the forged frames' ICRCs are valid: the checks above refused them";
  // The real peer's write at the same PSN is still taken.
  std::vector<uint8_t> src(4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 5 + 1);
  p.req->post_write(src.data(), 4096, 0x10000, 0x77, 7u);
  ASSERT_TRUE(p.run(5)) << p.req->error();
  EXPECT_EQ(p.mr, src);
}

// An ACK for everything in flight from an address other than the successor's completes nothing.
TEST(RcResponderRefuses, TheRequesterTakesAcksOnlyFromItsPeer) {
  Pair p(4096);
  RoceSocket forger;
  std::string err;
  ASSERT_TRUE(forger.open(*util::parse_ip("127.0.0.3"), 2, &err)) << err;
  std::vector<uint8_t> src(4096, 3);
  p.req->post_write(src.data(), 4096, 0x10000, 0x77, std::nullopt);
  p.req->progress(now_ns());  // the 4 packets leave; the responder is not given them
  wire::RoceFrameSpec s;
  forger.fill_spec(s, p.a.local());
  s.opcode = wire::op::kRc | wire::op::kAcknowledge;
  s.dest_qp = p.ca.local_qpn;
  s.psn = (p.ca.send_start_psn + 3) & wire::kPsnMask;
  s.aeth_syndrome = wire::aeth::kAckUnlimitedCredits;
  std::vector<uint8_t> f(256);
  f.resize(wire::build_roce_frame(f, s, {}));
  ASSERT_TRUE(forger.send_frame(f));
  ASSERT_EQ(deliver(p.a, [&](const Datagram& d) { p.req->on_ack(d, now_ns()); }), 1u);
  EXPECT_EQ(p.req->counters().refused_source, 1u);
  EXPECT_FALSE(p.req->idle()) << "a forged ACK completed the write";
  EXPECT_EQ(p.req->counters().messages_completed, 0u);
}

// A UdpRcTransport on 127.0.5.2 whose predecessor is 127.0.5.1: a forger on the predecessor's own
// address and port, with a valid ICRC and the PSN expected next. Before open_receive() even the
// right WRITE is dropped; after it, one to a QPN the rank does not have, one to its send QP and one
// with the old fixed key are; counted as such; the region keeps its bytes, and none of them counts
// as an arrival from the predecessor. Then the right one lands.
TEST(UdpRcTransportRefuses, WritesBeforeTheReceiveSideOpensOrToAnotherQpOrKey) {
  const util::IpAddr self = *util::parse_ip("127.0.5.2"), pred = *util::parse_ip("127.0.5.1");
  UdpRcConfig cfg;
  cfg.local = self;
  cfg.send.local_qpn = 0x301;
  cfg.send.remote_qpn = 0x402;
  cfg.send.remote_ip = pred;
  cfg.receive = cfg.send;
  cfg.receive.local_qpn = 0x302;
  cfg.receive.remote_qpn = 0x401;
  cfg.receive.recv_start_psn = 0x123;
  cfg.send_bytes = cfg.receive_bytes = 8192;
  UdpRcTransport t;
  std::string err;
  ASSERT_TRUE(t.open(cfg, &err)) << err;
  const RegionKey key = t.receive_key();
  EXPECT_NE(key, UdpRcTransport::kUnmetKey);
  EXPECT_NE(key.rkey, 0u);
  EXPECT_EQ(key.va % 4096, 0u);
  UdpRcTransport other;  // a second draw: another key
  UdpRcConfig ocfg = cfg;
  ocfg.local = *util::parse_ip("127.0.5.3");
  ASSERT_TRUE(other.open(ocfg, &err)) << err;
  EXPECT_NE(other.receive_key(), key);
  RoceSocket forger;
  ASSERT_TRUE(forger.open(pred, 2, &err)) << err;
  const std::vector<uint8_t> bytes(1024, 0xab);
  const std::vector<uint8_t> zeros(8192, 0);
  auto send = [&](uint32_t qpn, const RegionKey& k) {
    ASSERT_TRUE(
        forger.send_frame(forged_frame(forger, self, wire::op::kWriteOnlyImm, qpn, 0x123, k.va, k.rkey, bytes)));
    const uint64_t end = now_ns() + 1'000'000'000ull;
    const auto seen = [&] {
      const TransportCounters c = t.counters();
      return c.accepted + c.rx_refused_early + c.rx_refused_qpn + c.rx_refused_rkey + c.rx_refused_source;
    };
    const uint64_t was = seen();
    while (seen() == was && now_ns() < end) t.poll(10);
  };
  auto region = [&] { return std::vector<uint8_t>(t.receive_region().begin(), t.receive_region().end()); };
  const uint64_t opened_at = t.last_arrival_ns();
  send(0x302, key);
  EXPECT_EQ(t.counters().rx_refused_early, 1u);
  EXPECT_EQ(region(), zeros) << "a WRITE before open_receive() landed";
  ASSERT_TRUE(t.open_receive(&err)) << err;
  send(0x303, key);
  EXPECT_EQ(t.counters().rx_refused_qpn, 1u);
  send(0x301, key);
  EXPECT_EQ(t.counters().rx_refused_qpn, 2u);
  send(0x302, UdpRcTransport::kUnmetKey);
  EXPECT_EQ(t.counters().rx_refused_rkey, 1u);
  send(0x302, {key.va + 8192, key.rkey});
  EXPECT_EQ(t.counters().rx_refused_rkey, 2u);
  EXPECT_EQ(region(), zeros) << "a refused WRITE landed";
  EXPECT_EQ(t.messages_received(), 0u);
  // Refused packets are no sign of the predecessor (a rank waiting for quiet in finish() would
  // wait for the forger to stop).
  EXPECT_EQ(t.last_arrival_ns(), opened_at);
  send(0x302, key);
  EXPECT_EQ(t.counters().accepted, 1u);
  EXPECT_EQ(t.messages_received(), 1u);
  std::vector<uint8_t> want = zeros;
  std::copy(bytes.begin(), bytes.end(), want.begin());
  EXPECT_EQ(region(), want);
  EXPECT_EQ(t.counters().rx_refused_source, 0u);
  EXPECT_GT(t.last_arrival_ns(), opened_at);
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

// A NIC's packet as the kernel's Soft-RoCE sends it: its own UDP source port and a non-zero IP ID,
// which the ICRC covers. A UDP socket shows neither the ID nor the rest of the header, so the
// rebuilt header fails the ICRC; with receive_ip_headers() (a raw socket) the datagram arrives with
// its header as sent and verifies. Root only (both raw sockets); sent as IP_HDRINCL on loopback.
TEST(RoceSocketRaw, ANicsNonZeroIpIdVerifiesOnlyWithTheIpHeadersReceived) {
  const int tx = ::socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  if (tx < 0 && (errno == EPERM || errno == EACCES)) GTEST_SKIP() << "needs CAP_NET_RAW (root)";
  ASSERT_GE(tx, 0) << std::strerror(errno);
  RoceSocket b;
  std::string err;
  ASSERT_TRUE(b.open(*util::parse_ip("127.0.0.3"), 2, &err)) << err;
  const std::vector<uint8_t> payload(64, 0x5a);
  wire::RoceFrameSpec s;
  s.src_ip = *util::parse_ip("127.0.0.4");
  s.dst_ip = b.local();
  s.src_port = 49152 + 0x1d3;
  s.ip_id = 0x4a1b;
  s.opcode = wire::op::kRc | wire::op::kWriteOnly;
  s.dest_qp = 0x22;
  s.psn = 7;
  s.reth_va = 0x10000;
  s.reth_rkey = 0x77;
  s.reth_dma_len = 64;
  std::vector<uint8_t> frame(wire::roce_frame_size(s, payload.size()));
  ASSERT_EQ(wire::build_roce_frame(frame, s, payload), frame.size());
  // receive_one: sends the frame (from its IP header on) and returns what b decodes.
  const auto receive_one = [&](Datagram* d) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    std::memcpy(&to.sin_addr, b.local().bytes.data(), 4);
    const size_t l3 = wire::kEthHeaderLen;
    EXPECT_EQ(::sendto(tx, frame.data() + l3, frame.size() - l3, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(frame.size() - l3))
        << std::strerror(errno);
    pollfd p{b.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 2000), 1);
    return b.receive(d);
  };
  Datagram d;
  ASSERT_TRUE(receive_one(&d));
  ASSERT_TRUE(d.roce);
  EXPECT_EQ(d.src_port, s.src_port);
  EXPECT_FALSE(wire::icrc_verify(d.frame.data(), d.layout)) << "the UDP socket cannot know the IP ID";
  ASSERT_TRUE(b.receive_ip_headers(&err)) << err;
  ASSERT_TRUE(receive_one(&d));
  ASSERT_TRUE(d.roce);
  EXPECT_EQ(d.src_port, s.src_port);
  EXPECT_EQ(wire::load_be16(d.frame.data() + wire::kEthHeaderLen + 4), s.ip_id);
  EXPECT_TRUE(wire::icrc_verify(d.frame.data(), d.layout));
  EXPECT_EQ(std::memcmp(d.frame.data() + d.layout.payload, payload.data(), payload.size()), 0);
  EXPECT_FALSE(b.receive(&d)) << "the UDP socket's own copy must not be delivered too";
  ::close(tx);
}

namespace {

uint64_t seq_of(const Datagram& d, uint32_t start) {
  return (wire::bth_of(d.frame.data(), d.layout).psn() - start) & wire::kPsnMask;
}

// Delivers what reached the responder's socket, except the packet of sequence `drop`; returns how
// many packets arrived.
unsigned deliver_all_but(Pair& p, uint64_t drop) {
  Datagram d;
  unsigned n = 0;
  while (p.b.receive(&d)) {
    ++n;
    if (seq_of(d, p.ca.send_start_psn) != drop) p.rsp->on_data(d, now_ns());
  }
  return n;
}

void acks_to_requester(Pair& p) {
  Datagram d;
  while (p.a.receive(&d)) p.req->on_ack(d, now_ns());
}

}  // namespace

// Congestion response (RFC 5681 over go-back-N): a window of 64 packets in flight, packet 10 lost.
// The responder's NAK halves the window to 32 and the requester resends 10..41, not the 54 it had
// in flight; a second loss in the same window (packet 20 of the resend) goes back again without
// another cut; once what was in flight at the cut is acknowledged, the window grows again.
TEST(RcLoopback, ANakHalvesTheCongestionWindowOncePerLossAndItGrowsBack) {
  constexpr size_t kMsg = 16 * 1024, kCount = 32;         // 16 packets per message
  Pair p(kMsg * kCount, 1024, 4);                         // 4 messages: 64 packets may be in flight
  p.ca.cwnd_min_bytes = 4096;                             // a floor of 4 packets
  p.ca.ack_timeout_ns = p.ca.rto_min_ns = 1'000'000'000;  // only NAKs recover (no spurious timeout on a busy host)
  p.req = std::make_unique<RcRequester>(p.a, p.ca);
  std::vector<uint8_t> src(kMsg * kCount);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 11 + 5);
  for (size_t i = 0; i < kCount; ++i)
    p.req->post_write(src.data() + i * kMsg, kMsg, 0x10000 + i * kMsg, 0x77, std::nullopt);
  EXPECT_EQ(p.req->cwnd(), 64.0) << "the window starts as open as the message window";

  p.req->progress(now_ns());
  ASSERT_EQ(p.req->counters().packets_sent, 64u);
  ASSERT_EQ(deliver_all_but(p, 10), 64u);
  EXPECT_EQ(p.rsp->counters().naks_sent, 1u) << "one NAK per gap";
  acks_to_requester(p);
  EXPECT_EQ(p.req->counters().naks_received, 1u);
  EXPECT_EQ(p.req->counters().window_cuts, 1u);
  EXPECT_EQ(p.req->cwnd(), 32.0) << "halved";
  EXPECT_EQ(p.req->ssthresh(), 32.0);

  p.req->progress(now_ns());
  EXPECT_EQ(p.req->counters().packets_sent, 64u + 32u) << "the resend is limited to the halved window: 10..41";
  ASSERT_EQ(deliver_all_but(p, 20), 32u);
  acks_to_requester(p);
  EXPECT_EQ(p.req->counters().naks_received, 2u);
  EXPECT_EQ(p.req->counters().window_cuts, 1u) << "a second loss before the recovery point is the same event";
  EXPECT_EQ(p.req->cwnd(), 32.0);

  ASSERT_TRUE(p.run(10)) << p.req->error();
  EXPECT_EQ(p.mr, src);
  EXPECT_EQ(p.req->counters().window_cuts, 1u);
  EXPECT_GT(p.req->cwnd(), 40.0) << "congestion avoidance: about one packet per window over the 448 after recovery";
  EXPECT_LE(p.req->cwnd(), 64.0) << "never past the message window";
}

// A timeout cuts the window to its floor (4 KiB: 4 packets), so the go-back resends 4 packets,
// not the 32 in flight; without a congestion window (cwnd_min_bytes 0) it resends all 32.
TEST(RcLoopback, ATimeoutCutsTheCongestionWindowToItsFloor) {
  for (const size_t floor : {size_t{4096}, size_t{0}}) {
    constexpr size_t kMsg = 16 * 1024;
    Pair p(kMsg * 2);
    p.ca.cwnd_min_bytes = floor;
    p.ca.ack_timeout_ns = 1'000'000;
    p.ca.rto_min_ns = 1'000'000;
    p.req = std::make_unique<RcRequester>(p.a, p.ca);
    std::vector<uint8_t> src(kMsg * 2, 9);
    p.req->post_write(src.data(), kMsg, 0x10000, 0x77, std::nullopt);
    p.req->post_write(src.data() + kMsg, kMsg, 0x10000 + kMsg, 0x77, std::nullopt);
    const uint64_t t0 = now_ns();
    p.req->progress(t0);
    ASSERT_EQ(p.req->counters().packets_sent, 32u);
    ASSERT_EQ(deliver_all_but(p, UINT64_MAX - 1), 32u);  // arrive...
    Datagram d;
    while (p.a.receive(&d)) {}  // ...but every ACK is lost
    p.req->progress(t0 + p.req->rto_ns() + 1);
    EXPECT_EQ(p.req->counters().timeouts, 1u);
    if (floor) {
      EXPECT_EQ(p.req->cwnd(), 4.0);
      EXPECT_EQ(p.req->counters().window_cuts, 1u);
      EXPECT_EQ(p.req->counters().packets_sent, 32u + 4u);
    } else {
      EXPECT_EQ(p.req->counters().window_cuts, 0u);
      EXPECT_EQ(p.req->counters().packets_sent, 32u + 32u);
    }
    ASSERT_TRUE(p.run(10)) << p.req->error();
    EXPECT_EQ(p.mr, src);
  }
}

// Two ranks' UdpRcTransports on 127.0.4.1 and .2, each writing to the other, with a second QP pair
// (a lane) on the same socket: the writes of both pairs arrive, each in its own region, whole and
// in order, while either pair is polled, with 2% loss on every datagram either side sends.
TEST(UdpRcTransportLanes, TwoQpPairsOnOneSocketEachGetTheirOwnWrites) {
  const char* ips[2] = {"127.0.4.1", "127.0.4.2"};
  constexpr uint32_t kMsg = 4096;
  constexpr uint64_t kBytes = 16 * kMsg;
  UdpRcTransport t[2];
  Transport* lane[2] = {};
  for (int i = 0; i < 2; ++i) {
    const util::IpAddr self = *util::parse_ip(ips[i]), peer = *util::parse_ip(ips[1 - i]);
    auto rc = [&](uint32_t local, uint32_t remote) {
      RcConfig c;
      c.local_qpn = local;
      c.remote_qpn = remote;
      c.remote_ip = peer;
      c.send_start_psn = 0xfffff0u + 0x10 * static_cast<uint32_t>(i);
      c.recv_start_psn = 0xfffff0u + 0x10 * static_cast<uint32_t>(1 - i);
      c.mtu_payload = 1024;
      c.window = 2;
      c.ack_timeout_ns = 5'000'000;
      return c;
    };
    UdpRcConfig cfg;
    cfg.local = self;
    cfg.send = rc(0x100 + i, 0x200 + (1 - i));
    cfg.receive = rc(0x200 + i, 0x100 + (1 - i));
    cfg.send_bytes = cfg.receive_bytes = kBytes;
    std::string err;
    ASSERT_TRUE(t[i].open(cfg, &err)) << err;
    lane[i] = &t[i].add_lane(rc(0x1100 + i, 0x1200 + (1 - i)), rc(0x1200 + i, 0x1100 + (1 - i)), kBytes, kBytes);
    t[i].socket().set_loss(0.02, 7 + i);
  }
  for (int i = 0; i < 2; ++i) {  // what the ranks' meeting would tell each: the other's region key
    std::string err;
    t[i].set_successor_key(t[1 - i].receive_key());
    ASSERT_TRUE(lane[i]->open_receive(&err)) << err;
  }
  for (int i = 0; i < 2; ++i) {
    for (uint64_t k = 0; k < kBytes; ++k) {
      t[i].send_region()[k] = static_cast<uint8_t>(k * 7 + i);
      lane[i]->send_region()[k] = static_cast<uint8_t>(k * 13 + 100 + i);
    }
    for (uint32_t m = 0; m < kBytes / kMsg; ++m) {
      t[i].post_write(m * kMsg, kMsg, m * kMsg, m);
      lane[i]->post_write(m * kMsg, kMsg, m * kMsg, m);
    }
  }
  const uint64_t end = now_ns() + 20'000'000'000ull;
  auto done = [&] {
    for (int i = 0; i < 2; ++i)
      if (!t[i].writes_done() || !lane[i]->writes_done() || t[i].messages_received() < kBytes / kMsg ||
          lane[i]->messages_received() < kBytes / kMsg)
        return false;
    return true;
  };
  for (int round = 0; !done() && now_ns() < end; ++round) {
    // Either side polled through the lane or the transport: both run every pair.
    (round % 2 ? *lane[0] : static_cast<Transport&>(t[0])).poll(0);
    (round % 3 ? static_cast<Transport&>(t[1]) : *lane[1]).poll(0);
  }
  ASSERT_TRUE(done()) << "main pairs: " << t[0].messages_received() << "/" << t[1].messages_received()
                      << " messages, lanes: " << lane[0]->messages_received() << "/" << lane[1]->messages_received()
                      << "; errors '" << t[0].error() << "' '" << lane[0]->error() << "'";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t[i].error(), "");
    EXPECT_EQ(lane[i]->error(), "");
    const int from = 1 - i;
    for (uint64_t k = 0; k < kBytes; ++k) {
      ASSERT_EQ(t[i].receive_region()[k], static_cast<uint8_t>(k * 7 + from)) << "main pair, byte " << k;
      ASSERT_EQ(lane[i]->receive_region()[k], static_cast<uint8_t>(k * 13 + 100 + from)) << "lane, byte " << k;
    }
  }
  EXPECT_GT(t[0].counters().retransmitted + t[1].counters().retransmitted + lane[0]->counters().retransmitted +
                lane[1]->counters().retransmitted,
            0u)
      << "2% loss and nothing retransmitted";
  // The whole socket's counters: the main pair's and the lane's together.
  for (int i = 0; i < 2; ++i) {
    const TransportCounters a = t[i].counters(), b = lane[i]->counters(), all = t[i].counters_with_lanes();
    EXPECT_EQ(all.packets_sent, a.packets_sent + b.packets_sent);
    EXPECT_EQ(all.retransmitted, a.retransmitted + b.retransmitted);
    EXPECT_EQ(all.accepted, a.accepted + b.accepted);
    EXPECT_EQ(all.duplicates, a.duplicates + b.duplicates);
    EXPECT_EQ(all.messages_received, a.messages_received + b.messages_received);
    EXPECT_GE(all.packets_sent, 2 * kBytes / 1024);  // both pairs' messages, in 1 KiB packets
  }
}

// A job of three channels on one transport (docs/protocol.md section 22): message m of the region
// goes on channel m mod 3, each channel its own QP pair and UDP source port, under 2% loss; every
// byte lands where one connection would put it, and each channel carried its third.
TEST(UdpRcTransportChannels, MessagesStripeOverTheChannelsQpsAndSourcePorts) {
  const char* ips[2] = {"127.0.5.1", "127.0.5.2"};
  constexpr uint32_t kMsg = 4096, kChannels = 3;
  constexpr uint64_t kBytes = 18 * kMsg;
  UdpRcTransport t[2];
  for (int i = 0; i < 2; ++i) {
    const util::IpAddr self = *util::parse_ip(ips[i]), peer = *util::parse_ip(ips[1 - i]);
    auto rc = [&](uint32_t c, uint32_t local, uint32_t remote) {
      RcConfig r;
      r.local_qpn = local + 0x10000 * c;
      r.remote_qpn = remote + 0x10000 * c;
      r.remote_ip = peer;
      r.send_start_psn = 0xfffff0u + 0x10 * static_cast<uint32_t>(i) + c;
      r.recv_start_psn = 0xfffff0u + 0x10 * static_cast<uint32_t>(1 - i) + c;
      r.src_port = static_cast<uint16_t>(c == 0 ? wire::kRoceV2Port : 49152 + c);
      r.mtu_payload = 1024;
      r.window = 2;
      r.ack_timeout_ns = 5'000'000;
      return r;
    };
    UdpRcConfig cfg;
    cfg.local = self;
    cfg.send = rc(0, 0x100 + i, 0x200 + (1 - i));
    cfg.receive = rc(0, 0x200 + i, 0x100 + (1 - i));
    for (uint32_t c = 1; c < kChannels; ++c)
      cfg.channels.push_back({rc(c, 0x100 + i, 0x200 + (1 - i)), rc(c, 0x200 + i, 0x100 + (1 - i))});
    cfg.send_bytes = cfg.receive_bytes = kBytes;
    std::string err;
    ASSERT_TRUE(t[i].open(cfg, &err)) << err;
    t[i].socket().set_loss(0.02, 11 + i);
  }
  for (int i = 0; i < 2; ++i) {
    std::string err;
    t[i].set_successor_key(t[1 - i].receive_key());
    ASSERT_TRUE(t[i].open_receive(&err)) << err;
    for (uint64_t k = 0; k < kBytes; ++k) t[i].send_region()[k] = static_cast<uint8_t>(k * 5 + 3 * i);
    for (uint32_t m = 0; m < kBytes / kMsg; ++m) t[i].post_write(m * kMsg, kMsg, m * kMsg, m);
  }
  const uint64_t end = now_ns() + 20'000'000'000ull;
  auto done = [&] {
    return t[0].writes_done() && t[1].writes_done() && t[0].messages_received() == kBytes / kMsg &&
           t[1].messages_received() == kBytes / kMsg;
  };
  while (!done() && now_ns() < end) {
    t[0].poll(0);
    t[1].poll(0);
  }
  ASSERT_TRUE(done()) << t[0].messages_received() << "/" << t[1].messages_received() << " messages; errors '"
                      << t[0].error() << "' '" << t[1].error() << "'";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t[i].error(), "");
    for (uint64_t k = 0; k < kBytes; ++k)
      ASSERT_EQ(t[i].receive_region()[k], static_cast<uint8_t>(k * 5 + 3 * (1 - i))) << "byte " << k;
    // Every packet of 18 messages of 4 packets went once at least: a third on each channel's QP.
    EXPECT_GE(t[i].counters().packets_sent, kBytes / 1024);
    EXPECT_EQ(t[i].counters().messages_received, kBytes / kMsg);
  }
  EXPECT_GT(t[0].counters().retransmitted + t[1].counters().retransmitted, 0u) << "2% loss and nothing retransmitted";
}

// What channel 2's QP and source port carry, seen by a plain socket: the datagrams of messages
// 2, 5, 8 ... and nothing else, from port 49154.
TEST(UdpRcTransportChannels, EachChannelCarriesItsOwnMessagesFromItsOwnPort) {
  constexpr uint32_t kMsg = 1024, kChannels = 3, kMessages = 9;
  const util::IpAddr self = *util::parse_ip("127.0.6.1"), peer = *util::parse_ip("127.0.6.2");
  RoceSocket sniff;
  std::string err;
  ASSERT_TRUE(sniff.open(peer, 2, &err)) << err;
  UdpRcTransport t;
  UdpRcConfig cfg;
  cfg.local = self;
  auto rc = [&](uint32_t c, uint32_t local, uint32_t remote) {
    RcConfig r;
    r.local_qpn = local + 0x10000 * c;
    r.remote_qpn = remote + 0x10000 * c;
    r.remote_ip = peer;
    r.src_port = static_cast<uint16_t>(c == 0 ? wire::kRoceV2Port : 49152 + c);
    r.mtu_payload = 1024;
    r.window = kMessages;
    return r;
  };
  cfg.send = rc(0, 0x100, 0x200);
  cfg.receive = rc(0, 0x101, 0x201);
  for (uint32_t c = 1; c < kChannels; ++c) cfg.channels.push_back({rc(c, 0x100, 0x200), rc(c, 0x101, 0x201)});
  cfg.send_bytes = cfg.receive_bytes = kMessages * kMsg;
  ASSERT_TRUE(t.open(cfg, &err)) << err;
  for (uint32_t m = 0; m < kMessages; ++m) t.post_write(m * kMsg, kMsg, m * kMsg, m);
  // The sniffer never ACKs: the requesters send again after their timeouts; each write counts once.
  std::map<uint32_t, std::set<uint32_t>> imm_by_qpn;
  std::map<uint32_t, std::set<uint16_t>> port_by_qpn;
  size_t seen = 0;
  Datagram d;
  for (const uint64_t end = now_ns() + 5'000'000'000ull; seen < kMessages && now_ns() < end;) {
    t.poll(0);
    while (sniff.receive(&d)) {
      ASSERT_TRUE(d.roce && d.layout.immdt);
      const uint32_t qpn = wire::bth_of(d.frame.data(), d.layout).dest_qp();
      imm_by_qpn[qpn].insert(wire::load_be32(d.frame.data() + d.layout.immdt));
      port_by_qpn[qpn].insert(d.src_port);
      seen = 0;
      for (const auto& [q, imms] : imm_by_qpn) seen += imms.size();
    }
  }
  for (uint32_t c = 0; c < kChannels; ++c) {
    const uint32_t qpn = 0x200 + 0x10000 * c;
    EXPECT_EQ(imm_by_qpn[qpn], (std::set<uint32_t>{c, c + 3, c + 6})) << "channel " << c;
    EXPECT_EQ(port_by_qpn[qpn], std::set<uint16_t>{static_cast<uint16_t>(c == 0 ? wire::kRoceV2Port : 49152 + c)})
        << "channel " << c;
  }
}
