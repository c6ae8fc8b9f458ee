// The rack plan's job file and transport configs for a job of channels: the text parses as the
// appliance reads it (control::parse_job), every channel is a ring an engine accepts, and each
// rank's channel QPs, first PSNs and source ports are the ones the job file registers; the MAC a
// rank's text reports.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "inagg/agg/engine.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/control/job_file.hpp"

using namespace inagg;
using namespace inagg::client;

namespace {

RackPlan plan(unsigned rank, unsigned channels) {
  RackPlan p;
  p.workers = 4;
  p.rank = rank;
  p.ip_base = *util::parse_ip("10.77.0.0");
  p.job_id = 3;
  p.channels = channels;
  return p;
}

}  // namespace

// A rank's job text reports its own MAC on its own conn lines (every channel's), for the appliance
// to check against its frames; the other ranks' lines have none, since it does not know theirs. The
// digest every rank compares is the same whichever rank made the text.
TEST(RackPlanMac, ARanksJobTextReportsItsOwnMacOnly) {
  for (unsigned channels : {1u, 2u}) {
    RackPlan p0 = plan(0, channels), p2 = plan(2, channels);
    p0.mac = std::array<uint8_t, 6>{2, 0x77, 0, 0, 0, 1};
    p2.mac = std::array<uint8_t, 6>{2, 0x77, 0, 0, 0, 3};
    std::string err;
    const std::optional<control::JobSpec> j0 = control::parse_job(p0.job_text(), &err);
    ASSERT_TRUE(j0) << err;
    for (const control::ConnectionSpec& c : j0->conns) {
      EXPECT_EQ(c.port, control::kAnyPort);
      EXPECT_EQ(c.has_mac(), c.rank == 0) << "rank " << c.rank;
      if (c.rank == 0) EXPECT_EQ(c.mac, (std::array<uint8_t, 6>{2, 0x77, 0, 0, 0, 1}));
    }
    const std::optional<control::JobSpec> j2 = control::parse_job(p2.job_text(), &err);
    const std::optional<control::JobSpec> none = control::parse_job(plan(1, channels).job_text(), &err);
    ASSERT_TRUE(j2 && none) << err;
    EXPECT_EQ(control::job_digest(*j0), control::job_digest(*j2));
    EXPECT_EQ(control::job_digest(*j0), control::job_digest(*none));
  }
}

// The interface MAC of an address this host holds, against what the kernel shows in
// /sys/class/net/IFACE/address (also through its IPv4-mapped GID); the loopback's has none, and an
// address no interface holds has none.
TEST(RackPlanMac, InterfaceMacIsTheOneOfTheInterfaceHoldingTheAddress) {
  EXPECT_FALSE(interface_mac(*util::parse_ip("127.0.0.1")));
  EXPECT_FALSE(interface_mac(*util::parse_ip("203.0.113.254")));
  ifaddrs* list = nullptr;
  ASSERT_EQ(::getifaddrs(&list), 0);
  std::string name;
  util::IpAddr ip;
  for (const ifaddrs* a = list; a && name.empty(); a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && !(a->ifa_flags & IFF_LOOPBACK)) {
      name = a->ifa_name;
      ip = util::IpAddr::v4(ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr));
    }
  ::freeifaddrs(list);
  std::ifstream sys("/sys/class/net/" + name + "/address");
  std::string want;
  if (name.empty() || !(sys >> want) || want == "00:00:00:00:00:00") GTEST_SKIP() << "no IPv4 interface with a MAC";
  for (const util::IpAddr& a : {ip, *util::parse_ip("::ffff:" + util::ip_text(ip))}) {
    const std::optional<std::array<uint8_t, 6>> m = interface_mac(a);
    ASSERT_TRUE(m) << name << " holds " << util::ip_text(a);
    char got[18];
    std::snprintf(got, sizeof got, "%02x:%02x:%02x:%02x:%02x:%02x", (*m)[0], (*m)[1], (*m)[2], (*m)[3], (*m)[4],
                  (*m)[5]);
    EXPECT_EQ(got, want) << name;
  }
}

TEST(RackPlanChannels, TheJobFileHasEveryChannelAndAnEngineTakesEach) {
  for (unsigned channels : {1u, 2u, 4u}) {
    std::string err;
    const std::optional<control::JobSpec> job = control::parse_job(plan(0, channels).job_text(), &err);
    ASSERT_TRUE(job) << err;
    EXPECT_EQ(job->channels, channels);
    ASSERT_EQ(job->conns.size(), 4u * channels);
    agg::Engine engine(agg::EngineConfig{}, agg::BufferOps{});
    for (unsigned c = 0; c < channels; ++c)
      EXPECT_TRUE(engine.add_job(control::channel_spec(*job, c), &err)) << "channel " << c << ": " << err;
    // A job of one channel keeps the text it had before channels: no channels line.
    EXPECT_EQ(plan(0, channels).job_text().find("channels =") == std::string::npos, channels == 1);
  }
}

TEST(RackPlanChannels, EachRanksChannelQpsAreTheOnesRegistered) {
  constexpr unsigned kChannels = 3;
  std::string err;
  const std::optional<control::JobSpec> job = control::parse_job(plan(0, kChannels).job_text(), &err);
  ASSERT_TRUE(job) << err;
  for (unsigned r = 0; r < 4; ++r) {
    const UdpRcConfig cfg = plan(r, kChannels).rc_config(false, 250, 7, 1 << 20, 1 << 20);
    ASSERT_EQ(cfg.channels.size(), kChannels - 1);
    std::set<uint16_t> ports{cfg.send.src_port};
    for (unsigned c = 0; c < kChannels; ++c) {
      const RcConfig& send = c == 0 ? cfg.send : cfg.channels[c - 1].first;
      const RcConfig& receive = c == 0 ? cfg.receive : cfg.channels[c - 1].second;
      const control::JobSpec ch = control::channel_spec(*job, c);
      const control::ConnectionSpec& mine = ch.conns[r];
      const control::ConnectionSpec& pred = ch.conns[(r + 3) % 4];
      EXPECT_EQ(mine.rank, r);
      EXPECT_EQ(send.local_qpn, mine.src_qpn) << "rank " << r << " channel " << c;
      EXPECT_EQ(send.remote_qpn, mine.dst_qpn);
      EXPECT_EQ(send.send_start_psn, mine.start_psn);
      EXPECT_EQ(receive.local_qpn, pred.dst_qpn);
      EXPECT_EQ(receive.remote_qpn, pred.src_qpn);
      EXPECT_EQ(receive.recv_start_psn, pred.start_psn);
      EXPECT_EQ(send.src_port, receive.src_port);
      ports.insert(send.src_port);
    }
    EXPECT_EQ(ports.size(), kChannels) << "each channel its own UDP source port";
    // The ring's QPs have no channels: the appliance does not sum them.
    EXPECT_TRUE(plan(r, kChannels).rc_config(true, 250, 7, 1 << 20, 1 << 20).channels.empty());
  }
}
