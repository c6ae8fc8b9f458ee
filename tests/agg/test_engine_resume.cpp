// A job reloaded after the appliance restarted (JobStart::resume): its ranks are far past their
// start PSNs. Nothing of it is forwarded before a rank begins a message; from that message on it is
// summed exactly (checked against a plain loop), and what is older never leaves, summed or raw.
#include <gtest/gtest.h>

#include "engine_harness.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;

namespace {

class Resume : public EngineTest {
 protected:
  // 4 ranks, 2 packets per message, window 2; start PSNs near the 24-bit wrap (the harness's).
  JobFixture j{1, 4, Dtype::fp32, 2 * 64, 64, 2};
  // Where the ranks were when the appliance came back: message 5000, past the PSN wrap.
  static constexpr uint64_t kAt = 2 * 5000;

  void add_resumed() {
    std::string err;
    ASSERT_TRUE(engine->add_job(j.spec, &err, {}, agg::JobStart::resume)) << err;
  }
  // Every rank sends `seq` on its port (port = rank); the last one releases the sum.
  void complete(uint64_t seq) {
    for (unsigned r = 1; r < j.spec.workers; ++r)
      ASSERT_TRUE(send(j.data_frame(r, seq), static_cast<uint16_t>(r)).empty()) << "seq " << seq;
    expect_released(j, seq, send(j.data_frame(0, seq), 0));
  }
};

}  // namespace

// What a resumed job is for: a job added fresh cannot take ranks that went on (its window is at
// the start PSN), so the ranks' next allreduce would stall.
TEST_F(Resume, AFreshJobRefusesRanksPastItsStartPsn) {
  add(j);
  EXPECT_TRUE(send(j.data_frame(0, kAt), 0).empty());
  EXPECT_EQ(info(1).counters.err_ahead_of_window, 1u);
}

TEST_F(Resume, AResumedJobIsSummedFromTheFirstMessageARankBegins) {
  add_resumed();
  // The tail of the message before (a retransmission) and an ACK of it: nothing can be placed yet.
  EXPECT_TRUE(send(j.data_frame(2, kAt - 1), 2).empty());
  EXPECT_FALSE(last_trusted) << "a frame that pinned nothing vouched for its source";
  EXPECT_TRUE(send(j.ack_frame(1, kAt - 1), 2).empty());
  EXPECT_EQ(info(1).counters.drop_resuming, 2u);
  EXPECT_EQ(info(1).held_packets, 0u);
  // Message 5000 and the next ones, each summed exactly; the receivers' ACKs pass.
  for (uint64_t seq = kAt; seq < kAt + 8; ++seq) {
    complete(seq);
    for (unsigned r = 0; r < j.spec.workers; ++r)
      EXPECT_EQ(send(j.ack_frame(r, seq), static_cast<uint16_t>((r + 1) % j.spec.workers)).size(), 1u);
  }
  const agg::JobInfo i = info(1);
  EXPECT_EQ(i.state, agg::JobState::active);
  EXPECT_EQ(i.counters.slots_released, 8u);
  EXPECT_EQ(i.counters.drop_resuming, 2u);
  EXPECT_EQ(i.retained_packets, 0u);
  // Older than the message it resumed at: stale, never answered (it has no sum for it).
  EXPECT_TRUE(send(j.data_frame(3, kAt - 2), 3).empty());
  EXPECT_EQ(info(1).counters.stale, 1u);
}

// Ranks caught in different places: one begins message 5000, the others still resend the end of
// message 4999, whose sum is gone with the appliance's memory. Nothing of 4999 leaves; message
// 5000 does once all are in.
TEST_F(Resume, RanksCaughtMidMessageGetNoPartialOrStaleSum) {
  add_resumed();
  EXPECT_TRUE(send(j.data_frame(0, kAt), 0).empty());  // rank 0 begins message 5000: the job resumes there
  for (unsigned r = 1; r < j.spec.workers; ++r) {
    EXPECT_TRUE(send(j.data_frame(r, kAt - 2), static_cast<uint16_t>(r)).empty());
    EXPECT_TRUE(send(j.data_frame(r, kAt - 1), static_cast<uint16_t>(r)).empty());
  }
  EXPECT_EQ(info(1).counters.stale, 6u);
  EXPECT_EQ(info(1).counters.slots_released, 0u);
  for (unsigned r = 1; r < j.spec.workers - 1; ++r)
    EXPECT_TRUE(send(j.data_frame(r, kAt), static_cast<uint16_t>(r)).empty());
  expect_released(j, kAt, send(j.data_frame(3, kAt), 3));
}

// Only a WRITE that begins a message, of the job's size, with a good ICRC, from the rank's own
// address resumes the job: anything else is dropped and resumes nothing.
TEST_F(Resume, OnlyAValidMessageBeginningFromARankResumesTheJob) {
  add_resumed();
  auto bad_icrc = j.data_frame(0, kAt);
  bad_icrc.back() ^= 1;
  EXPECT_TRUE(send(bad_icrc, 0).empty());
  auto s = j.frame_spec(0, kAt);
  EXPECT_TRUE(send(JobFixture::build(s, std::vector<uint8_t>(32, 1)), 0).empty());  // short: not the job's size
  s.src_ip = util::IpAddr::v4(0x0a0001c8);                                          // 10.0.1.200: not rank 0
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(0, kAt)), 0).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_source, 1u);
  EXPECT_EQ(info(1).counters.drop_resuming, 2u);
  // Still not resumed: a message that begins two later is where it resumes.
  complete(kAt + 4);
  complete(kAt + 5);
  EXPECT_EQ(info(1).counters.slots_released, 2u);
}

// A replayed capture starts over at its start PSN: it is never resumed elsewhere.
TEST_F(Resume, AReplayJobStartsFreshAnyway) {
  j.spec.replay = true;
  add_resumed();
  complete(0);
}
