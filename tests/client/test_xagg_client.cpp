// The XDP tier's worker side (client::XaggClient) on loopback: RESULT datagrams forged from another
// address, from the head's address but another port, or from the head's address and port but
// without a valid MAC under the job's key never reach the worker, which counts them and goes on;
// the head's own result does. The worker's DATA carries its MAC. The datagrams are built by hand
// on a raw socket (any source), so root only.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/transport/xagg_client.hpp"
#include "inagg/wire/xagg.h"
#include "inagg/wire/xagg_mac.hpp"

namespace inagg::client {
namespace {

// One RESULT of `job`, chunk `seq`, with these values, from src:sport to 127.0.0.1:dport, signed
// with `key` (or its MAC replaced by `mac` when given).
void send_result(const char* src, uint16_t sport, uint16_t dport, unsigned job, uint32_t seq,
                 const std::vector<int32_t>& values, uint32_t weight, const wire::XaggKey& key,
                 const uint8_t* mac = nullptr) {
  std::vector<uint8_t> pkt(sizeof(iphdr) + sizeof(udphdr) + sizeof(xagg_hdr) + 4 * values.size());
  auto* ip = reinterpret_cast<iphdr*>(pkt.data());
  auto* udp = reinterpret_cast<udphdr*>(pkt.data() + sizeof(iphdr));
  ip->version = 4;
  ip->ihl = 5;
  ip->ttl = 64;
  ip->protocol = IPPROTO_UDP;
  ip->tot_len = htons(static_cast<uint16_t>(pkt.size()));
  ip->saddr = inet_addr(src);
  ip->daddr = inet_addr("127.0.0.1");
  udp->source = htons(sport);
  udp->dest = htons(dport);
  udp->len = htons(static_cast<uint16_t>(pkt.size() - sizeof(iphdr)));
  const xagg_hdr h{XAGG_VERSION,
                   XAGG_RESULT,
                   htons(static_cast<uint16_t>(job)),
                   0,
                   htons(static_cast<uint16_t>(values.size())),
                   htonl(seq),
                   htonl(weight),
                   {}};
  uint8_t* x = pkt.data() + sizeof(iphdr) + sizeof(udphdr);
  std::memcpy(x, &h, sizeof h);
  std::memcpy(x + sizeof h, values.data(), 4 * values.size());
  wire::xagg_sign(key, x, sizeof h + 4 * values.size());
  if (mac) std::memcpy(x + offsetof(xagg_hdr, mac), mac, XAGG_MAC_BYTES);
  const int fd = ::socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = inet_addr("127.0.0.1");
  EXPECT_EQ(::sendto(fd, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(pkt.size()))
      << std::strerror(errno);
  ::close(fd);
}

// Waits (up to 3 s) for the worker's first DATA to the head's port, seen on a raw UDP socket that
// gets a copy of every UDP datagram on this host: once it is there, the worker waits for results.
// Returns the tier's packet (header and values), empty on the deadline.
std::vector<uint8_t> first_data(int raw, uint16_t port) {
  std::vector<uint8_t> buf(65536);
  const uint64_t deadline = now_ns() + 3'000'000'000ull;
  while (now_ns() < deadline) {
    pollfd p{raw, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t got = ::recv(raw, buf.data(), buf.size(), 0);
    if (got < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr) + sizeof(xagg_hdr))) continue;
    const auto* ip = reinterpret_cast<const iphdr*>(buf.data());
    const auto* udp = reinterpret_cast<const udphdr*>(buf.data() + 4 * ip->ihl);
    const uint8_t* x = buf.data() + 4 * ip->ihl + sizeof(udphdr);
    if (udp->dest != htons(port) || ip->daddr != inet_addr("127.0.0.2") || x[1] != XAGG_DATA) continue;
    return std::vector<uint8_t>(x, static_cast<const uint8_t*>(buf.data()) + got);
  }
  return {};
}

TEST(XaggClient, OnlyTheHeadsSignedResultsReachTheWorker) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a raw socket forges the datagrams)";
  const uint16_t port = static_cast<uint16_t>(40000 + ::getpid() % 20000);
  std::mt19937_64 rng(static_cast<uint64_t>(::getpid()));
  XaggConfig cfg;
  cfg.local = *util::parse_ip("127.0.0.1");
  cfg.head = *util::parse_ip("127.0.0.2");
  cfg.group = *util::parse_ip("239.77.9.9");
  cfg.port = port;
  cfg.job = 3;
  cfg.values = 4;
  cfg.window = 1;
  cfg.total_weight = 2;
  cfg.timeout_ns = 5'000'000'000ull;  // no repeats while the test runs
  for (uint8_t& b : cfg.key.bytes) b = static_cast<uint8_t>(rng());
  wire::XaggKey other = cfg.key;
  other.bytes[0] ^= 1;
  const int raw = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
  ASSERT_GE(raw, 0) << std::strerror(errno);
  XaggClient c;
  std::string err;
  ASSERT_TRUE(c.open(cfg, &err)) << err;
  std::vector<int32_t> v = {1, 2, 3, 4};
  bool ok = false;
  std::thread worker([&] { ok = c.allreduce(v.data(), v.size(), now_ns() + 3'000'000'000ull, &err); });
  const std::vector<uint8_t> data = first_data(raw, port);
  ::close(raw);
  EXPECT_FALSE(data.empty()) << "the worker sent no DATA within 3 s";
  EXPECT_TRUE(wire::xagg_verify(cfg.key, data.data(), data.size())) << "the worker's DATA carries its MAC";
  // Each arrives before the head's own (one socket, loopback: in order).
  send_result("127.0.0.3", port, port, 3, 0, {66, 66, 66, 66}, 2, cfg.key);  // another host
  send_result("127.0.0.2", 5555, port, 3, 0, {77, 77, 77, 77}, 2, cfg.key);  // the head's address, another port
  const uint8_t zeros[XAGG_MAC_BYTES] = {};
  send_result("127.0.0.2", port, port, 3, 0, {88, 88, 88, 88}, 2, cfg.key, zeros);  // no key: a MAC of zeros
  send_result("127.0.0.2", port, port, 3, 0, {99, 99, 99, 99}, 2, other);           // another job's key
  send_result("127.0.0.2", port, port, 3, 0, {55, 55, 55, 55}, 7, other);           // would end the job
  send_result("127.0.0.2", port, port, 3, 0, {10, 20, 30, 40}, 2, cfg.key);         // the head
  worker.join();
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(v, (std::vector<int32_t>{10, 20, 30, 40}));
  EXPECT_EQ(c.counters().results, 1u);
  EXPECT_EQ(c.counters().bad_mac, 3u) << "the forged results from the head's address and port, counted";
  // The two forged elsewhere, and the worker's own DATA (to 127.0.0.2, which is this host: it comes
  // back to the worker's port from 127.0.0.1).
  EXPECT_EQ(c.counters().wrong_source, 2u + c.counters().sent);
  EXPECT_EQ(c.counters().results_ignored + c.counters().malformed, 0u);
}

}  // namespace
}  // namespace inagg::client
