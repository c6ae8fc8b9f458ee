// A job reloaded after the appliance restarted (JobStart::resume): its ranks are far past their
// start PSNs. Nothing of it is forwarded until every rank went back (its RC retransmission after
// the drops); from the furthest of those points it is summed exactly (checked against a plain
// loop), and what is older never leaves, summed or raw.
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
    ASSERT_TRUE(engine->add_job(j.spec, &err, agg::JobStart::resume)) << err;
  }
  uint16_t port(unsigned r) const { return static_cast<uint16_t>(r); }
  // Rank r sends seqs [from, to) on its port; nothing may come out.
  void pass(unsigned r, uint64_t from, uint64_t to) {
    for (uint64_t s = from; s < to; ++s) ASSERT_TRUE(send(j.data_frame(r, s), port(r)).empty()) << "seq " << s;
  }
  // Every rank sends `seq` (rank 0 last): the sum comes out.
  void complete(uint64_t seq) {
    for (unsigned r = 1; r < j.spec.workers; ++r) pass(r, seq, seq + 1);
    expect_released(j, seq, send(j.data_frame(0, seq), port(0)));
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

// Ranks between two allreduces: each begins its next message, is dropped, and sends it again.
TEST_F(Resume, RanksBetweenAllreducesResumeAtTheirNextMessage) {
  add_resumed();
  for (unsigned r = 0; r < 4; ++r) pass(r, kAt, kAt + 2);  // the first try of message 5000: dropped
  EXPECT_TRUE(send(j.ack_frame(1, kAt - 1), port(2)).empty());
  EXPECT_EQ(info(1).counters.drop_resuming, 9u);
  EXPECT_FALSE(last_trusted) << "a frame that pinned nothing vouched for its source";
  for (unsigned r = 0; r < 3; ++r) pass(r, kAt, kAt + 1);  // they go back; rank 3 last
  EXPECT_EQ(info(1).counters.drop_resuming, 12u);
  pass(3, kAt, kAt + 1);  // every rank went back: the job resumes at message 5000, with this packet
  EXPECT_EQ(info(1).counters.drop_resuming, 12u);
  EXPECT_EQ(info(1).held_packets, 1u);
  // The others' packets of message 5000 again (their retransmissions), then on as usual.
  for (unsigned r = 1; r < 3; ++r) pass(r, kAt, kAt + 1);
  expect_released(j, kAt, send(j.data_frame(0, kAt), port(0)));
  for (uint64_t seq = kAt + 1; seq < kAt + 8; ++seq) {
    complete(seq);
    for (unsigned r = 0; r < 4; ++r) EXPECT_EQ(send(j.ack_frame(r, seq), port((r + 1) % 4)).size(), 1u);
  }
  const agg::JobInfo i = info(1);
  EXPECT_EQ(i.state, agg::JobState::active);
  EXPECT_EQ(i.counters.slots_released, 8u);
  EXPECT_EQ(i.retained_packets, 0u);
  // Older than where it resumed: stale, never answered (it has no sum for it).
  EXPECT_TRUE(send(j.data_frame(3, kAt - 1), port(3)).empty());
  EXPECT_EQ(info(1).counters.stale, 1u);
}

// The appliance died mid-message: every receiver holds message 5000's first packet, the senders
// had sent more. They go back to the second packet; the job resumes there, inside the message.
TEST_F(Resume, RanksCaughtMidMessageResumeWhereTheirReceiversAre) {
  add_resumed();
  for (unsigned r = 0; r < 4; ++r) pass(r, kAt + 2, kAt + 4);  // what they send next: dropped
  for (unsigned r = 0; r < 4; ++r) pass(r, kAt + 1, kAt + 2);  // the go-back
  EXPECT_EQ(info(1).held_packets, 1u) << "only the last go-back packet is held";
  for (unsigned r = 1; r < 3; ++r) pass(r, kAt + 1, kAt + 2);
  expect_released(j, kAt + 1, send(j.data_frame(0, kAt + 1), port(0)));
  complete(kAt + 2);
  complete(kAt + 3);
  EXPECT_TRUE(send(j.data_frame(0, kAt), port(0)).empty());  // below where it resumed
  EXPECT_EQ(info(1).counters.stale, 1u);
  EXPECT_EQ(info(1).counters.slots_released, 3u);
}

// Receivers at different points: the job resumes at the furthest (a slot needs every sender, and
// each sends only from its own point). What rank 3's receiver lacks below it never leaves.
TEST_F(Resume, ReceiversAtDifferentPointsResumeAtTheFurthest) {
  add_resumed();
  for (unsigned r = 0; r < 4; ++r) pass(r, kAt + 2, kAt + 4);
  pass(3, kAt, kAt + 1);  // rank 3's receiver lacks kAt
  for (unsigned r = 0; r < 3; ++r) pass(r, kAt + 1, kAt + 2);
  pass(3, kAt + 1, kAt + 2);  // rank 3 goes on with its go-back pass
  for (unsigned r = 1; r < 3; ++r) pass(r, kAt + 1, kAt + 2);
  expect_released(j, kAt + 1, send(j.data_frame(0, kAt + 1), port(0)));
  pass(3, kAt, kAt + 1);  // rank 3 tries again from kAt: stale
  EXPECT_EQ(info(1).counters.stale, 1u);
  EXPECT_EQ(info(1).counters.slots_released, 1u);
}

// Only a WRITE of the job's size and position, with a good ICRC, from the rank's own address
// counts: anything else is dropped and tells nothing of where the rank is.
TEST_F(Resume, OnlyPacketsThatFitCount) {
  add_resumed();
  for (unsigned r = 0; r < 4; ++r) pass(r, kAt, kAt + 1);
  auto bad_icrc = j.data_frame(0, kAt);
  bad_icrc.back() ^= 1;
  EXPECT_TRUE(send(bad_icrc, 0).empty());
  auto s = j.frame_spec(0, kAt);
  EXPECT_TRUE(send(JobFixture::build(s, std::vector<uint8_t>(32, 1)), 0).empty());  // short: not the job's size
  auto mid = j.frame_spec(0, kAt);
  mid.opcode = wire::op::kRc | wire::op::kWriteMiddle;  // a MIDDLE where a message begins
  EXPECT_TRUE(send(JobFixture::build(mid, j.payload(0, kAt)), 0).empty());
  s.src_ip = util::IpAddr::v4(0x0a0001c8);  // 10.0.1.200: not rank 0
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(0, kAt)), 0).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_source, 1u);
  EXPECT_EQ(info(1).counters.drop_resuming, 7u);
  // None of them counted as rank 0 going back: the ranks still have to.
  for (unsigned r = 1; r < 4; ++r) pass(r, kAt, kAt + 1);
  EXPECT_EQ(info(1).counters.drop_resuming, 10u);
  EXPECT_TRUE(send(j.data_frame(0, kAt), 0).empty());  // rank 0 goes back: resumed, held
  EXPECT_EQ(info(1).held_packets, 1u);
  for (unsigned r = 1; r < 3; ++r) pass(r, kAt, kAt + 1);
  expect_released(j, kAt, send(j.data_frame(3, kAt), port(3)));
}

// A replayed capture starts over at its start PSN: it is never resumed elsewhere.
TEST_F(Resume, AReplayJobStartsFreshAnyway) {
  j.spec.replay = true;
  add_resumed();
  complete(0);
}
