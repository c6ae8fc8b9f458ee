// The XDP tier's worker side (client::XaggClient) on loopback: RESULT datagrams forged from another
// address, or from the head's address but another port, never reach the worker; the head's own
// result does. The datagrams are built by hand on a raw socket (any source), so root only.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/transport/xagg_client.hpp"
#include "inagg/wire/xagg.h"

namespace inagg::client {
namespace {

// One RESULT of `job`, chunk `seq`, with these values, from src:sport to 127.0.0.1:dport.
void send_result(const char* src, uint16_t sport, uint16_t dport, unsigned job, uint32_t seq,
                 const std::vector<int32_t>& values, uint32_t weight) {
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
  const xagg_hdr h{
      XAGG_VERSION, XAGG_RESULT,  htons(static_cast<uint16_t>(job)), 0, htons(static_cast<uint16_t>(values.size())),
      htonl(seq),   htonl(weight)};
  std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr), &h, sizeof h);
  std::memcpy(pkt.data() + sizeof(iphdr) + sizeof(udphdr) + sizeof h, values.data(), 4 * values.size());
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

TEST(XaggClient, OnlyTheHeadsResultsReachTheWorker) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a raw socket forges the datagrams)";
  const uint16_t port = static_cast<uint16_t>(40000 + ::getpid() % 20000);
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
  XaggClient c;
  std::string err;
  ASSERT_TRUE(c.open(cfg, &err)) << err;
  std::vector<int32_t> v = {1, 2, 3, 4};
  bool ok = false;
  std::thread worker([&] { ok = c.allreduce(v.data(), v.size(), now_ns() + 3'000'000'000ull, &err); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send_result("127.0.0.3", port, port, 3, 0, {66, 66, 66, 66}, 2);  // another host
  send_result("127.0.0.2", 5555, port, 3, 0, {77, 77, 77, 77}, 2);  // the head's address, another port
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send_result("127.0.0.2", port, port, 3, 0, {10, 20, 30, 40}, 2);  // the head
  worker.join();
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(v, (std::vector<int32_t>{10, 20, 30, 40}));
  EXPECT_EQ(c.counters().results, 1u);
  // The two forged ones, and the worker's own DATA (to 127.0.0.2, which is this host: it comes back
  // to the worker's port from 127.0.0.1).
  EXPECT_EQ(c.counters().wrong_source, 2u + c.counters().sent);
  EXPECT_EQ(c.counters().results_ignored + c.counters().malformed, 0u);
}

}  // namespace
}  // namespace inagg::client
