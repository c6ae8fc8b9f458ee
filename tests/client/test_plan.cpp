// The rack plan's job file and transport configs for a job of channels: the text parses as the
// appliance reads it (control::parse_job), every channel is a ring an engine accepts, and each
// rank's channel QPs, first PSNs and source ports are the ones the job file registers.
#include <gtest/gtest.h>

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
