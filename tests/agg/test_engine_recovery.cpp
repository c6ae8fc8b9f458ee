// Recovery without storms or stalls (docs/protocol.md section 12): resends back off exponentially
// within a budget, so a dead receiver costs a handful of packets until the job's timeout ends it;
// a NAK the sender did not act on is sent again, so a lost NAK (or a lost tail) costs well under
// an RC timeout.
#include <gtest/gtest.h>

#include "engine_harness.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;

namespace {

constexpr uint64_t kPollNs = 10'000;  // the appliance polls its engine every 10 us

class Recovery : public EngineTest {
 protected:
  bool is_nak(const Out& o) const { return o.opcode() == (wire::op::kRc | wire::op::kAcknowledge); }
  // The sequence a NAK names for rank r's sender.
  uint64_t nak_seq(const JobFixture& j, unsigned r, const Out& o) const {
    return (o.psn() - j.spec.conns[r].start_psn) & 0xffffff;
  }
};

}  // namespace

// ---- resends back off, within a budget ------------------------------------------------

TEST_F(Recovery, ADeadReceiverEndsTheJobAfterItsTimeoutWithAHandfulOfResends) {
  cfg.abort_timeout_ns = 1'000'000'000;  // 1 s, polled every 10 us as the appliance does
  make_engine();
  JobFixture j(1, 3, Dtype::fp32, 2 * 64, 64, 2);
  add(j);
  const uint64_t t0 = now;
  for (uint64_t seq = 0; seq < 4; ++seq)
    for (unsigned r = 0; r < 3; ++r) send(j.data_frame(r, seq));
  for (unsigned r : {0u, 2u}) send(j.ack_frame(r, 3));  // rank 1's receiver is dead: it never ACKs
  std::vector<uint64_t> rounds;                         // when each resend round went out
  uint64_t resent = 0, failed_at = 0;
  for (uint64_t t = t0; t <= t0 + cfg.abort_timeout_ns + 10 * kPollNs; t += kPollNs) {
    auto outs = poll(t);
    for (const Out& o : outs) {
      ASSERT_EQ(o.dest_qp(), j.spec.conns[1].dst_qpn) << "a resend to a receiver that has everything";
      EXPECT_EQ(o.payload(), j.expected_sum((o.psn() - j.spec.conns[1].start_psn) & 0xffffff));
    }
    if (!outs.empty()) rounds.push_back(t - t0);
    resent += outs.size();
    if (!failed_at && info(1).state == agg::JobState::failed) failed_at = t - t0;
  }
  // A handful, not a flood: at most two packets a round, resend_budget rounds.
  EXPECT_EQ(rounds.size(), cfg.resend_budget);
  EXPECT_LE(resent, 2u * cfg.resend_budget);
  EXPECT_EQ(info(1).counters.resends, resent);
  EXPECT_EQ(info(1).counters.resend_budget_spent, 1u);
  // Each wait at least twice the one before (the first: the resend timeout), up to the cap.
  uint64_t wait = cfg.resend_timeout_ns, prev = 0;
  for (uint64_t at : rounds) {
    EXPECT_GE(at - prev, wait) << "round at " << at << " ns";
    EXPECT_LE(at - prev, wait + 2 * kPollNs) << "round at " << at << " ns";
    prev = at;
    wait = std::min(2 * wait, cfg.resend_max_ns);
  }
  // The job ends at its timeout, not before and not much after.
  EXPECT_EQ(info(1).state, agg::JobState::failed);
  EXPECT_EQ(info(1).counters.timeouts, 1u);
  EXPECT_GT(failed_at, cfg.abort_timeout_ns);
  EXPECT_LE(failed_at, cfg.abort_timeout_ns + 2 * kPollNs);
  EXPECT_NE(info(1).error.find("no progress for 1000 ms"), std::string::npos) << info(1).error;
}

TEST_F(Recovery, EveryReceiverDeadIsStillOnlyAHandfulPerConnection) {
  // The flood an unbounded resend timer caused: receivers that never ACK, every connection's oldest and newest
  // unacknowledged packets every ~200 us. Here: 8 s of it.
  cfg.abort_timeout_ns = 8'000'000'000ull;
  make_engine();
  JobFixture j(1, 4, Dtype::fp32, 4 * 64, 64, 2);
  add(j);
  for (uint64_t seq = 0; seq < 8; ++seq)
    for (unsigned r = 0; r < 4; ++r) send(j.data_frame(r, seq));
  uint64_t resent = 0;
  const uint64_t t0 = now;  // poll() moves `now`
  for (uint64_t t = t0; t < t0 + cfg.abort_timeout_ns; t += kPollNs) resent += poll(t).size();
  EXPECT_LE(resent, 4u * 2 * cfg.resend_budget);
  EXPECT_GT(resent, 0u);
  EXPECT_EQ(info(1).state, agg::JobState::active) << "ended before its timeout";
}

TEST_F(Recovery, ProgressByTheReceiverRenewsTheBudgetAndTheBackoff) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 4);
  add(j);
  for (uint64_t seq = 0; seq < 4; ++seq)
    for (unsigned r = 0; r < 2; ++r) send(j.data_frame(r, seq));
  send(j.ack_frame(0, 3));
  const uint64_t t0 = now;
  uint64_t t = t0;
  size_t before = 0;
  for (; t < t0 + 2'000'000'000ull; t += kPollNs) before += poll(t).size();
  EXPECT_EQ(info(1).counters.resend_budget_spent, 1u);
  EXPECT_TRUE(poll(t + 100'000'000).empty()) << "the budget is spent";
  // Rank 1's receiver comes back and acknowledges seq 1: seq 2 and 3 are resent again, first after
  // the plain resend timeout.
  const uint64_t back = t + 200'000'000;
  now = back;
  send(j.ack_frame(1, 1));
  EXPECT_TRUE(poll(back + cfg.resend_timeout_ns - kPollNs).empty());
  auto outs = poll(back + cfg.resend_timeout_ns + kPollNs);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].psn(), j.psn(1, 2));
  EXPECT_EQ(outs[1].psn(), j.psn(1, 3));
  EXPECT_GT(before, 0u);
}

// ---- a lost NAK is sent again ---------------------------------------------------------

// Rank 0's packet 2 is lost before the appliance, then the NAK the engine sends is lost too. Its
// sender has nothing more to send (its window is full), so only the engine can break the silence:
// the NAK goes again from poll(), the sender goes back, the job completes well inside the RC
// timeout (here 16 ms; real NICs: 2^timeout x 4.096 us, ~67 ms at timeout 14).
TEST_F(Recovery, ALostNakIsSentAgainAndTheJobRecoversWellInsideTheRcTimeout) {
  constexpr uint64_t kRcTimeoutNs = 16'000'000;
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 1);  // one message of 4 packets in flight per QP
  add(j);
  const uint64_t t0 = now;
  ASSERT_EQ(send(j.data_frame(0, 0)).size(), 0u);
  ASSERT_EQ(send(j.data_frame(0, 1)).size(), 0u);
  auto first = send(j.data_frame(0, 3));  // 2 was lost: a jump
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(is_nak(first[0]));  // ... and this NAK is lost on its way to the sender
  auto outs = send(j.data_frame(1, 0));
  expect_released(j, 0, outs);
  expect_released(j, 1, send(j.data_frame(1, 1)));
  EXPECT_TRUE(send(j.data_frame(1, 2)).empty());
  EXPECT_TRUE(send(j.data_frame(1, 3)).empty());
  for (unsigned r = 0; r < 2; ++r) send(j.ack_frame(r, 1));  // the receivers have slots 0 and 1
  // The sender waits for its RC timeout; the appliance polls.
  std::vector<Out> renak;
  for (uint64_t t = t0; renak.empty() && t < t0 + kRcTimeoutNs; t += kPollNs) renak = poll(t);
  ASSERT_EQ(renak.size(), 1u) << "no NAK was sent again before the RC timeout";
  ASSERT_TRUE(is_nak(renak[0]));
  EXPECT_EQ(renak[0].dest_qp(), j.spec.conns[0].src_qpn);
  EXPECT_EQ(nak_seq(j, 0, renak[0]), 2u) << "the receiver's acknowledged PSN + 1 (which here is the missing one)";
  EXPECT_TRUE(renak[0].icrc_ok());
  EXPECT_EQ(info(1).counters.naks_resent, 1u);
  // The sender goes back to the NAK's PSN: the missing packet completes slot 2, slots 2 and 3 go
  // out in order, and the repeated 3 is answered from the retained sum.
  auto released = send(j.data_frame(0, 2));
  ASSERT_EQ(released.size(), 4u);
  expect_released(j, 2, {released.begin(), released.begin() + 2});
  expect_released(j, 3, {released.begin() + 2, released.end()});
  auto again = send(j.data_frame(0, 3));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].payload(), j.expected_sum(3));
  EXPECT_LT(now - t0, kRcTimeoutNs / 20) << "recovered in " << (now - t0) / 1000 << " us";
  // Nothing more is owed: no more NAKs.
  const uint64_t t1 = now;
  for (uint64_t t = t1; t < t1 + 10'000'000; t += kPollNs)
    for (const Out& o : poll(t)) EXPECT_FALSE(is_nak(o));
  EXPECT_EQ(info(1).counters.naks_resent, 1u);
}

TEST_F(Recovery, NaksAreSentAgainWithBackoffAndWithinTheBudget) {
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 1);
  add(j);
  send(j.data_frame(0, 0));
  ASSERT_EQ(send(j.data_frame(0, 2)).size(), 1u);  // a jump: the first NAK
  std::vector<uint64_t> at;
  const uint64_t t0 = now;
  for (uint64_t t = t0; t < t0 + 2'000'000'000ull; t += kPollNs)
    for (const Out& o : poll(t))
      if (is_nak(o)) at.push_back(t - t0);
  ASSERT_EQ(at.size(), cfg.resend_budget - 1u) << "the first NAK counts against the budget";
  uint64_t wait = cfg.resend_timeout_ns, prev = 0;
  for (uint64_t a : at) {
    EXPECT_GE(a - prev, wait);
    prev = a;
    wait = std::min(2 * wait, cfg.resend_max_ns);
  }
}

TEST_F(Recovery, ReorderingThatFillsTheGapNeedsNoMoreNaks) {
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 1);
  add(j);
  send(j.data_frame(0, 0));
  ASSERT_EQ(send(j.data_frame(0, 2)).size(), 1u);  // 1 looks lost ...
  send(j.data_frame(0, 1));                        // ... but was only late
  send(j.data_frame(0, 3));
  const uint64_t t0 = now;
  for (uint64_t t = t0; t < t0 + 10'000'000; t += kPollNs) EXPECT_TRUE(poll(t).empty());
  EXPECT_EQ(info(1).counters.naks_resent, 0u);
}

TEST_F(Recovery, ALostTailIsNakedWhenTheWholeJobWaitsForIt) {
  JobFixture j(1, 3, Dtype::fp32, 4 * 64, 64, 1);
  add(j);
  for (unsigned r : {1u, 2u})
    for (uint64_t seq = 0; seq < 4; ++seq) send(j.data_frame(r, seq));
  for (uint64_t seq = 0; seq < 3; ++seq) send(j.data_frame(0, seq));  // rank 0's packet 3 is lost: no jump follows
  // Slots 0..2 went out; the receivers ACK them.
  for (unsigned r = 0; r < 3; ++r) send(j.ack_frame(r, 2));
  const uint64_t t0 = now;
  std::vector<Out> nak;
  for (uint64_t t = t0; nak.empty() && t < t0 + 16'000'000; t += kPollNs) nak = poll(t);
  ASSERT_EQ(nak.size(), 1u);
  ASSERT_TRUE(is_nak(nak[0]));
  EXPECT_EQ(nak[0].dest_qp(), j.spec.conns[0].src_qpn);
  EXPECT_EQ(nak_seq(j, 0, nak[0]), 3u);
  EXPECT_EQ(info(1).counters.tail_naks, 1u);
  expect_released(j, 3, send(j.data_frame(0, 3)));
  const uint64_t t1 = now;
  for (uint64_t t = t1; t < t1 + 10'000'000; t += kPollNs)
    for (const Out& o : poll(t)) EXPECT_FALSE(is_nak(o));
}

TEST_F(Recovery, NoTailNakWhileOtherRanksHaveNotSentEither) {
  JobFixture j(1, 3, Dtype::fp32, 4 * 64, 64, 1);
  add(j);
  for (unsigned r = 0; r < 2; ++r)
    for (uint64_t seq = 0; seq < 2; ++seq) send(j.data_frame(r, seq));  // rank 2 is just slow
  const uint64_t t0 = now;
  for (uint64_t t = t0; t < t0 + 50'000'000; t += kPollNs) EXPECT_TRUE(poll(t).empty());
}
