// Scripted sequences for the RC engine (docs/protocol.md), checked against sums from a plain loop.
#include <gtest/gtest.h>

#include "engine_harness.hpp"
#include "inagg/util/pcap.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;
using agg::Engine;
using agg::EngineConfig;

// ---- in order, all n ------------------------------------------------------------------------

class EngineInOrder : public EngineTest, public ::testing::WithParamInterface<std::tuple<unsigned, Dtype>> {};

TEST_P(EngineInOrder, EveryRankEverySlotCarriesTheRankOrderedSum) {
  const auto [n, dtype] = GetParam();
  JobFixture j(1, n, dtype, 4 * 256, 256, 2);
  add(j);
  for (uint64_t seq = 0; seq < 3 * 4 * 2; ++seq) {  // three windows' worth: slots are reused
    std::vector<Out> outs;
    for (unsigned r = 0; r < n; ++r) {
      auto o = send(j.data_frame(r, seq));
      if (r + 1 < n) {
        ASSERT_TRUE(o.empty()) << "released before all ranks arrived";
      }
      outs = std::move(o);
    }
    expect_released(j, seq, outs);
    // Receivers acknowledge, so nothing is kept for resends beyond the current slots.
    for (unsigned r = 0; r < n; ++r) ASSERT_EQ(send(j.ack_frame(r, seq)).size(), 1u);
  }
  const auto i = info(1);
  EXPECT_EQ(i.counters.slots_released, 24u);
  EXPECT_EQ(i.counters.aggregated_packets, 24u * n);
  EXPECT_EQ(i.counters.released_packets, 24u * n);
  EXPECT_EQ(i.held_packets, 0u);
  EXPECT_EQ(i.retained_packets, 0u);
  EXPECT_EQ(i.state, agg::JobState::active);
}

INSTANTIATE_TEST_SUITE_P(Sizes, EngineInOrder,
                         ::testing::Combine(::testing::Values(2u, 4u, 8u, 64u),
                                            ::testing::Values(Dtype::fp32, Dtype::int32, Dtype::fp16, Dtype::bf16)));

TEST_F(EngineTest, InterleavedArrivalsAndALateWorkerReleaseInPsnOrder) {
  JobFixture j(1, 4, Dtype::fp32, 4 * 128, 128, 2);
  add(j);
  // Ranks 0..2 send the whole window (2 messages = 8 packets) in an interleaved order; rank 3 is late.
  for (uint64_t seq = 0; seq < 8; ++seq)
    for (unsigned r : {2u, 0u, 1u}) ASSERT_TRUE(send(j.data_frame(r, seq)).empty());
  // Rank 3 sends seq 0: exactly slot 0 is released.
  expect_released(j, 0, send(j.data_frame(3, 0)));
  // Then the rest, each releasing its own slot in order.
  for (uint64_t seq = 1; seq < 8; ++seq) expect_released(j, seq, send(j.data_frame(3, seq)));
}

TEST_F(EngineTest, ACompleteSlotWaitsForEarlierIncompleteSlots) {
  JobFixture j(1, 2, Dtype::int32, 2 * 64, 64, 2);
  add(j);
  // Rank 0 sends seq 0..2; rank 1 sends 1 and 2 first, completing slots 1 and 2 but not 0.
  for (uint64_t seq = 0; seq < 3; ++seq) ASSERT_TRUE(send(j.data_frame(0, seq)).empty());
  ASSERT_EQ(send(j.data_frame(1, 1)).size(), 1u);  // rank 1 jumped past seq 0: a NAK to it
  ASSERT_TRUE(send(j.data_frame(1, 2)).empty());   // one NAK per gap
  EXPECT_EQ(info(1).counters.slots_completed, 2u);
  // Slot 0 completes: 0, 1, 2 go out together, in PSN order per connection.
  auto outs = send(j.data_frame(1, 0));
  ASSERT_EQ(outs.size(), 6u);
  for (uint64_t seq = 0; seq < 3; ++seq) expect_released(j, seq, {outs.begin() + 2 * seq, outs.begin() + 2 * seq + 2});
}

// ---- how long a slot waits for its last rank ------------------------------------------------

// The histogram's bucket by a plain loop: the first bound 2^(10 + i) ns at or above the wait.
unsigned bucket_by_loop(uint64_t ns) {
  using H = agg::SlotCompletionHistogram;
  for (unsigned i = 0; i < H::kBounds; ++i)
    if (ns <= (uint64_t{1} << (10 + i))) return i;
  return H::kBounds;
}

TEST(SlotCompletionHistogram, BucketsAgreeWithAPlainLoopAtEveryBound) {
  using H = agg::SlotCompletionHistogram;
  std::vector<uint64_t> waits = {0, 1, 2, 999, ~0ull, ~0ull - 1};
  for (unsigned k = 0; k < 64; ++k)
    for (const int64_t d : {-1, 0, 1}) waits.push_back((uint64_t{1} << k) + static_cast<uint64_t>(d));
  for (const uint64_t w : waits) EXPECT_EQ(H::bucket_of(w), bucket_by_loop(w)) << w << " ns";
  EXPECT_EQ(H::upper_bound_ns(0), 1024u);
  EXPECT_EQ(H::upper_bound_ns(H::kBounds - 1), uint64_t{1} << 30);  // ~1.07 s
  H a, b;
  a.observe(1500);
  a.observe(2'000'000'000);
  b.observe(1000);
  b.add(a);
  EXPECT_EQ(b.count(), 3u);
  EXPECT_EQ(b.sum_ns, 2'000'002'500u);
  EXPECT_EQ(b.counts[0], 1u);
  EXPECT_EQ(b.counts[1], 1u);
  EXPECT_EQ(b.counts[H::kBounds], 1u);
}

TEST_F(EngineTest, ASlotsWaitRunsFromItsFirstRanksPacketToItsLast) {
  JobFixture j(1, 3, Dtype::int32, 2 * 64, 64, 2);
  add(j);
  // Slot 0: ranks in 3 us apart, the last 10 us after the first (a duplicate in between changes
  // nothing). Slot 1: all at once.
  const uint64_t t0 = now;
  ASSERT_TRUE(send(j.data_frame(0, 0)).empty());
  now = t0 + 3'000;
  ASSERT_TRUE(send(j.data_frame(1, 0)).empty());
  ASSERT_TRUE(send(j.data_frame(0, 0)).empty());
  now = t0 + 10'000;
  expect_released(j, 0, send(j.data_frame(2, 0)));
  for (unsigned r = 0; r < 3; ++r) send(j.data_frame(r, 1));
  const agg::SlotCompletionHistogram h = info(1).slot_completion;
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.sum_ns, 10'000u);
  EXPECT_EQ(h.counts[0], 1u);  // 0 ns
  EXPECT_EQ(h.counts[4], 1u);  // 10 us: at most 2^14 ns
}

// ---- duplicates -----------------------------------------------------------------------------

TEST_F(EngineTest, DuplicateWhileCollectingReplacesTheHeldPacketAndIsNotAddedTwice) {
  JobFixture j(1, 3, Dtype::int32, 256, 256, 1);
  add(j);
  ASSERT_TRUE(send(j.data_frame(0, 0, /*variant=*/99)).empty());  // an older copy with other bytes
  ASSERT_TRUE(send(j.data_frame(0, 0)).empty());                  // its retransmission replaces it
  ASSERT_TRUE(send(j.data_frame(1, 0)).empty());
  ASSERT_TRUE(send(j.data_frame(1, 0)).empty());
  expect_released(j, 0, send(j.data_frame(2, 0)));  // sum of one copy per rank, the newest
  const auto i = info(1);
  EXPECT_EQ(i.counters.duplicates_collecting, 2u);
  EXPECT_EQ(i.counters.aggregated_packets, 3u);
}

TEST_F(EngineTest, DuplicateForACompleteSlotIsDropped) {
  JobFixture j(1, 2, Dtype::fp32, 2 * 64, 64, 2);
  add(j);
  ASSERT_TRUE(send(j.data_frame(0, 0)).empty());
  ASSERT_TRUE(send(j.data_frame(0, 1)).empty());
  ASSERT_EQ(send(j.data_frame(1, 1)).size(), 1u);  // slot 1 complete, waiting for slot 0 (and a NAK: rank 1 jumped)
  ASSERT_TRUE(send(j.data_frame(1, 1)).empty());   // duplicate: dropped
  EXPECT_EQ(info(1).counters.duplicates_dropped, 1u);
  auto outs = send(j.data_frame(1, 0));
  ASSERT_EQ(outs.size(), 4u);
}

TEST_F(EngineTest, RetransmissionOfAReleasedSlotIsAnsweredWithTheRetainedSum) {
  JobFixture j(1, 4, Dtype::fp32, 4 * 128, 128, 2);
  add(j);
  for (unsigned r = 0; r < 4; ++r) send(j.data_frame(r, 0));
  // Rank 2 retransmits seq 0 (its ACK was lost, say): the copy goes to its receiver with the sum.
  auto outs = send(j.data_frame(2, 0, /*variant=*/5));  // even if the bytes differ, the sum is sent
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].dest_qp(), j.spec.conns[2].dst_qpn);
  EXPECT_EQ(outs[0].psn(), j.psn(2, 0));
  EXPECT_EQ(outs[0].payload(), j.expected_sum(0));
  EXPECT_TRUE(outs[0].icrc_ok());
  EXPECT_EQ(info(1).counters.retransmits_answered, 1u);
}

TEST_F(EngineTest, StalePacketOlderThanTheSlotEpochIsDropped) {
  JobFixture j(1, 2, Dtype::int32, 64, 64, 1);  // 2 slots
  add(j);
  for (uint64_t seq = 0; seq < 3; ++seq) {
    for (unsigned r = 0; r < 2; ++r) send(j.data_frame(r, seq));
    for (unsigned r = 0; r < 2; ++r) send(j.ack_frame(r, seq));
  }
  // Slot 0 now holds seq 2; a network duplicate of seq 0 is stale.
  EXPECT_TRUE(send(j.data_frame(0, 0)).empty());
  EXPECT_EQ(info(1).counters.stale, 1u);
}

// ---- loss recovery ---------------------------------------------------------------------------

TEST_F(EngineTest, PsnJumpNaksTheSenderAtItsReceiversAckedPsnNotTheMissingOne) {
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 2);
  add(j);
  for (unsigned r = 0; r < 2; ++r) send(j.data_frame(r, 0));
  for (unsigned r = 0; r < 2; ++r) send(j.ack_frame(r, 0));  // receivers have seq 0
  send(j.data_frame(0, 1));
  // Rank 0's seq 2 is lost before the appliance; seq 3 arrives: a jump.
  auto outs = send(j.data_frame(0, 3));
  ASSERT_EQ(outs.size(), 1u);
  const Out& nak = outs[0];
  ASSERT_EQ(nak.opcode(), wire::op::kRc | wire::op::kAcknowledge);
  EXPECT_TRUE(nak.icrc_ok());
  EXPECT_EQ(nak.dest_qp(), j.spec.conns[0].src_qpn);
  EXPECT_EQ(nak.psn(), j.psn(0, 1));  // receiver's last acknowledged (seq 0) + 1, not the missing seq 2
  const wire::AethView aeth = wire::aeth_of(nak.frame.data(), nak.l);
  EXPECT_TRUE(aeth.is_nak());
  EXPECT_EQ(aeth.nak_code(), 0);  // PSN sequence error
  EXPECT_EQ(std::vector<uint8_t>(nak.frame.begin() + nak.l.l3 + 12, nak.frame.begin() + nak.l.l3 + 16),
            std::vector<uint8_t>(j.spec.conns[0].dst_ip.bytes.begin(), j.spec.conns[0].dst_ip.bytes.begin() + 4))
      << "from the receiver's address";
  // One NAK per gap: seq 4 arriving next does not NAK again.
  EXPECT_TRUE(send(j.data_frame(0, 4)).empty());
  EXPECT_EQ(info(1).counters.naks_sent, 1u);
  // The sender goes back to seq 1: duplicates are absorbed, the missing seq 2 fills in.
  for (uint64_t seq = 1; seq < 5; ++seq) send(j.data_frame(0, seq));
  std::vector<Out> released;
  for (uint64_t seq = 1; seq < 5; ++seq) {
    auto o = send(j.data_frame(1, seq));
    released.insert(released.end(), o.begin(), o.end());
  }
  ASSERT_EQ(released.size(), 8u);
  for (uint64_t seq = 1; seq < 5; ++seq)
    expect_released(j, seq, {released.begin() + 2 * (seq - 1), released.begin() + 2 * seq});
}

TEST_F(EngineTest, UnacknowledgedReleasedPacketsAreSentAgainAfterTheResendTimeout) {
  cfg.resend_timeout_ns = 100'000;
  make_engine();
  JobFixture j(1, 2, Dtype::fp32, 2 * 64, 64, 2);
  add(j);
  for (uint64_t seq = 0; seq < 2; ++seq)
    for (unsigned r = 0; r < 2; ++r) send(j.data_frame(r, seq));
  send(j.ack_frame(0, 1));                  // rank 0's receiver has both; rank 1's acknowledged nothing (tail lost)
  EXPECT_TRUE(poll(now + 50'000).empty());  // not yet
  auto outs = poll(now + 100'000);
  ASSERT_EQ(outs.size(), 2u);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    EXPECT_EQ(outs[seq].dest_qp(), j.spec.conns[1].dst_qpn);
    EXPECT_EQ(outs[seq].psn(), j.psn(1, seq));
    EXPECT_EQ(outs[seq].payload(), j.expected_sum(seq));
    EXPECT_TRUE(outs[seq].icrc_ok());
  }
  EXPECT_EQ(info(1).counters.resends, 2u);
  send(j.ack_frame(1, 1));
  EXPECT_TRUE(poll(now + 1'000'000).empty());
  EXPECT_EQ(info(1).retained_packets, 0u);
}

// ---- job errors -------------------------------------------------------------------------------

class EngineErrors : public EngineTest {
 protected:
  JobFixture j{1, 3, Dtype::fp32, 4 * 64, 64, 2};
  JobFixture other{2, 2, Dtype::int32, 64, 64, 1};

  void SetUp() override {
    EngineTest::SetUp();
    add(j);
    add(other);
    send(j.data_frame(0, 0));
    send(j.data_frame(1, 0));  // slot 0 holds two of three: a partial sum must never leave
  }
  void expect_aborted(uint64_t agg::EngineCounters::*kind) {
    const auto i = info(1);
    EXPECT_EQ(i.state, agg::JobState::failed);
    EXPECT_FALSE(i.error.empty());
    EXPECT_EQ(i.counters.*kind, 1u);
    EXPECT_EQ(i.held_packets, 0u);
    EXPECT_EQ(i.memory_bytes, 0u);
    // Later packets of the job are dropped, the partial slot is never released.
    EXPECT_TRUE(send(j.data_frame(2, 0)).empty());
    EXPECT_GE(info(1).counters.failed_job_drops, 1u);
    // The other job is unaffected.
    expect_other_job_works();
  }
  // A packet that breaks the contract is dropped and counted; the job goes on (a forger could send
  // any of them): slot 0 completes with rank 2's real packet and its exact sum is released.
  void expect_refused(uint64_t agg::EngineCounters::*kind) {
    const auto i = info(1);
    EXPECT_EQ(i.state, agg::JobState::active) << i.error;
    EXPECT_EQ(i.counters.*kind, 1u);
    EXPECT_EQ(i.counters.drop_unfit, 1u);
    EXPECT_EQ(i.counters.job_errors, 0u);
    EXPECT_EQ(i.held_packets, 2u);
    expect_released(j, 0, send(j.data_frame(2, 0)));
    expect_other_job_works();
  }
  void expect_other_job_works() {
    send(other.data_frame(0, 0));
    expect_released(other, 0, send(other.data_frame(1, 0)));
  }
};

TEST_F(EngineErrors, WrongLengthIsDropped) {
  auto s = j.frame_spec(2, 0);
  auto f = JobFixture::build(s, std::vector<uint8_t>(60, 1));
  EXPECT_TRUE(send(f).empty());
  expect_refused(&agg::EngineCounters::err_length_or_opcode);
  // A real contract break still ends the job, at its no-progress timeout, whose reason names it.
  poll(now + cfg.abort_timeout_ns + 1);
  EXPECT_EQ(info(1).state, agg::JobState::failed);
  EXPECT_NE(info(1).error.find("the first: job contract, rule 'message size'"), std::string::npos) << info(1).error;
}

TEST_F(EngineErrors, WrongOpcodeClassIsDropped) {
  auto s = j.frame_spec(2, 0);
  s.opcode = wire::op::kRc | wire::op::kWriteMiddle;  // seq 0 must be FIRST
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(2, 0))).empty());
  expect_refused(&agg::EngineCounters::err_length_or_opcode);
}

TEST_F(EngineErrors, PacketAheadOfTheWindowIsDropped) {
  // Message 0 is incomplete; W = 2, so message 2 (seq 8) is ahead of the window.
  EXPECT_TRUE(send(j.data_frame(0, 8)).empty());
  expect_refused(&agg::EngineCounters::err_ahead_of_window);
}

TEST_F(EngineErrors, AckForAPsnNeverReleasedIsDropped) {
  auto outs = send(j.ack_frame(0, 0));  // nothing released yet: a bypass, or forged
  EXPECT_TRUE(outs.empty()) << "an ACK for a PSN never released reached the sender";
  expect_refused(&agg::EngineCounters::err_ack_bypass);
}

TEST_F(EngineErrors, NoProgressTimeoutAbortsTheJob) {
  EXPECT_TRUE(poll(now + cfg.abort_timeout_ns / 2).empty());
  EXPECT_EQ(info(1).state, agg::JobState::active);
  poll(now + cfg.abort_timeout_ns + 1);
  expect_aborted(&agg::EngineCounters::timeouts);
}

TEST_F(EngineErrors, ReAddingAFailedJobStartsItAfresh) {
  poll(now + cfg.abort_timeout_ns + 1);
  ASSERT_EQ(info(1).state, agg::JobState::failed);
  add(j);
  EXPECT_EQ(info(1).state, agg::JobState::active);
  for (unsigned r = 0; r < 2; ++r) send(j.data_frame(r, 0));
  expect_released(j, 0, send(j.data_frame(2, 0)));
}

// ---- replay ---------------------------------------------------------------------------------

TEST_F(EngineTest, ReplayJobStartsANewGenerationAtTheStartPsn) {
  JobFixture j(1, 2, Dtype::fp32, 2 * 64, 64, 1);
  j.spec.replay = true;
  add(j);
  for (int gen = 0; gen < 3; ++gen) {
    for (uint64_t seq = 0; seq < 4; ++seq) {  // two messages, looping like a capture would
      send(j.data_frame(0, seq));
      expect_released(j, seq, send(j.data_frame(1, seq)));
    }
  }
  EXPECT_EQ(info(1).counters.generations, 2u);
  EXPECT_EQ(info(1).counters.slots_released, 12u);
  EXPECT_EQ(info(1).counters.retransmits_answered, 0u);
}

TEST_F(EngineTest, NonReplayJobTreatsTheStartPsnAgainAsARetransmission) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 2);
  add(j);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    send(j.data_frame(0, seq));
    send(j.data_frame(1, seq));
  }
  auto outs = send(j.data_frame(0, 0));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(info(1).counters.retransmits_answered, 1u);
  EXPECT_EQ(info(1).counters.generations, 0u);
}

// ---- ECN, ICRC, pass-through ---------------------------------------------------------------------

TEST_F(EngineTest, CeOnOneInputMarksEveryEcnCapableOutput) {
  JobFixture j(1, 3, Dtype::fp32, 64, 64, 1);
  add(j);
  auto s0 = j.frame_spec(0, 0);
  s0.tos = wire::kEcnCe;  // congested on rank 0's path
  send(JobFixture::build(s0, j.payload(0, 0)));
  auto s1 = j.frame_spec(1, 0);
  s1.tos = wire::kEcnNotEct;  // not ECN-capable: must not be marked
  send(JobFixture::build(s1, j.payload(1, 0)));
  auto outs = send(j.data_frame(2, 0));  // ECT(0)
  ASSERT_EQ(outs.size(), 3u);
  auto ecn = [](const Out& o) { return o.frame[o.l.l3 + 1] & 3; };
  EXPECT_EQ(ecn(outs[0]), wire::kEcnCe);
  EXPECT_EQ(ecn(outs[1]), wire::kEcnNotEct);
  EXPECT_EQ(ecn(outs[2]), wire::kEcnCe);
  for (const Out& o : outs) {
    EXPECT_EQ(wire::ipv4_header_checksum(o.frame.data() + o.l.l3, 20), 0) << "IPv4 checksum fixed after TOS";
    EXPECT_TRUE(o.icrc_ok());
    EXPECT_EQ(o.payload(), j.expected_sum(0));
  }
  EXPECT_EQ(info(1).counters.ecn_marked, 2u);
}

TEST_F(EngineTest, FecnOnAnInputAlsoMarks) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  auto s0 = j.frame_spec(0, 0);
  s0.fecn = true;
  send(JobFixture::build(s0, j.payload(0, 0)));
  auto outs = send(j.data_frame(1, 0));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].frame[outs[1].l.l3 + 1] & 3, wire::kEcnCe);
}

TEST_F(EngineTest, BadIcrcIsDroppedAndCounted) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  auto f = j.data_frame(0, 0);
  f[f.size() - 10] ^= 1;  // a payload bit
  EXPECT_TRUE(send(f).empty());
  EXPECT_EQ(info(1).counters.bad_icrc, 1u);
  EXPECT_EQ(info(1).held_packets, 0u);
  send(j.data_frame(0, 0));
  expect_released(j, 0, send(j.data_frame(1, 0)));
}

TEST_F(EngineTest, EverythingElsePassesByteIdentical) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  std::vector<std::vector<uint8_t>> frames;
  // An unregistered QP.
  auto s = j.frame_spec(0, 0);
  s.dest_qp = 0x777;
  frames.push_back(JobFixture::build(s, j.payload(0, 0)));
  // A CNP on the job's registered QP (SEND and READ there break the job's contract: see
  // test_engine_fail_closed.cpp).
  s = j.frame_spec(0, 0);
  s.opcode = wire::op::kCnp;
  frames.push_back(JobFixture::build(s, {}));
  // ARP and plain UDP.
  std::vector<uint8_t> arp(60, 0xaa);
  arp[12] = 0x08;
  arp[13] = 0x06;
  frames.push_back(arp);
  auto udp = j.data_frame(0, 0);
  udp[36] = 0x00;
  udp[37] = 0x35;
  frames.push_back(udp);
  for (const auto& f : frames) {
    auto outs = send(f);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].frame, f);
  }
  EXPECT_EQ(engine->counters().passthrough + engine->counters().cnp_forwarded, frames.size());
  EXPECT_EQ(info(1).counters.cnp_forwarded, 1u);
  EXPECT_EQ(info(1).held_packets, 0u);
}

TEST_F(EngineTest, MalformedRoceIsDroppedAndCounted) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  auto f = j.data_frame(0, 0);
  f.resize(f.size() - 3);  // cut into the ICRC: the IP length now exceeds the frame
  EXPECT_TRUE(send(f).empty());
  EXPECT_EQ(engine->counters().malformed, 1u);
}

// ---- IPv6, wrap -------------------------------------------------------------------------------------

namespace {
// The IPv6 UDP checksum, written here independently of the engine's.
uint16_t udp6_sum(const std::vector<uint8_t>& f, const wire::Layout& l) {
  uint32_t sum = 0;
  const size_t len = wire::load_be16(&f[l.l4 + 4]);
  for (size_t i = 0; i < 32; i += 2) sum += wire::load_be16(&f[l.l3 + 8 + i]);
  sum += static_cast<uint32_t>(len) + 17;
  for (size_t i = 0; i < len; i += 2) {
    if (i == 6) continue;
    sum += i + 1 < len ? wire::load_be16(&f[l.l4 + i]) : static_cast<uint32_t>(f[l.l4 + i]) << 8;
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum) == 0 ? 0xffff : static_cast<uint16_t>(~sum);
}
}  // namespace

TEST_F(EngineTest, Ipv6JobAggregatesAndFixesItsUdpChecksum) {
  JobFixture j(1, 3, Dtype::bf16, 2 * 128, 128, 2, 0x100, /*ipv6=*/true);
  add(j);
  for (uint64_t seq = 0; seq < 4; ++seq) {
    std::vector<Out> outs;
    for (unsigned r = 0; r < 3; ++r) {
      auto f = j.data_frame(r, seq);
      wire::Layout l;
      ASSERT_EQ(wire::parse_frame(f, l), wire::ParseStatus::roce);
      wire::store_be16(&f[l.l4 + 6], udp6_sum(f, l));  // masked by the ICRC: it still verifies
      outs = send(f);
    }
    expect_released(j, seq, outs);
    for (const Out& o : outs) EXPECT_EQ(wire::load_be16(&o.frame[o.l.l4 + 6]), udp6_sum(o.frame, o.l));
  }
}

TEST_F(EngineTest, PsnsWrapAt24Bits) {
  JobFixture j(1, 2, Dtype::int32, 4 * 64, 64, 2, 0xfffffd);
  add(j);
  for (uint64_t seq = 0; seq < 20; ++seq) {  // crosses 0xffffff -> 0 for both ranks
    send(j.data_frame(0, seq));
    expect_released(j, seq, send(j.data_frame(1, seq)));
    send(j.ack_frame(0, seq));
    send(j.ack_frame(1, seq));
  }
  EXPECT_EQ(info(1).counters.stale, 0u);
  EXPECT_EQ(info(1).counters.naks_sent, 0u);
}

// ---- validation and budgets --------------------------------------------------------------------------

TEST_F(EngineTest, InvalidJobsAreRefusedWithAReason) {
  std::string err;
  auto refused = [&](control::JobSpec s, const char* needle) {
    err.clear();
    EXPECT_FALSE(engine->add_job(s, &err));
    EXPECT_NE(err.find(needle), std::string::npos) << "error was: " << err;
  };
  JobFixture base(1, 4, Dtype::fp32, 1024, 256, 2);
  auto s = base.spec;
  s.workers = 0;
  refused(s, "between 1 and 64");
  s = JobFixture(1, 65, Dtype::fp32, 1024, 256, 2).spec;
  refused(s, "between 1 and 64");
  s = base.spec;
  s.message_bytes = 1000;
  refused(s, "multiple of payload_bytes");
  s = base.spec;
  s.payload_bytes = 254;
  refused(s, "payload_bytes");
  s = base.spec;
  s.window = 0;
  refused(s, "window");
  s = base.spec;
  s.conns[2].rank = 1;
  refused(s, "rank 1 has two");
  s = base.spec;
  s.conns.pop_back();
  refused(s, "one connection per worker");
  s = base.spec;
  s.conns[1].dst_ip = *util::parse_ip("fd00::1");
  refused(s, "both be IPv4 or both IPv6");
  add(base);
  s = JobFixture(2, 2, Dtype::fp32, 1024, 256, 2).spec;
  s.conns[0].dst_ip = base.spec.conns[3].dst_ip;
  s.conns[0].dst_qpn = base.spec.conns[3].dst_qpn;
  refused(s, "not a ring: rank 0 writes to 10.0.1.1 but rank 1, its successor, sends from 10.0.2.2");
  s.conns[1].src_ip = base.spec.conns[3].dst_ip;  // a ring again, but on a QP job 1 has
  refused(s, "already belongs to job 1");
  refused(base.spec, "already exists");
}

TEST_F(EngineTest, BudgetsRefuseAJobThatDoesNotFit) {
  cfg.mbuf_budget = 100;
  make_engine();
  std::string err;
  JobFixture big(1, 8, Dtype::fp32, 16 * 256, 256, 2);  // 64 slots x 8 ranks = 512 buffers
  EXPECT_FALSE(engine->add_job(big.spec, &err));
  EXPECT_NE(err.find("mbuf budget"), std::string::npos) << err;
  cfg.mbuf_budget = 1 << 20;
  cfg.memory_budget_bytes = 16 << 10;
  make_engine();
  EXPECT_FALSE(engine->add_job(big.spec, &err));
  EXPECT_NE(err.find("KiB"), std::string::npos) << err;
  JobFixture small(2, 2, Dtype::fp32, 256, 256, 1);
  add(small);
  EXPECT_GT(engine->memory_in_use(), 0u);
}

TEST_F(EngineTest, RemovingAJobReturnsItsMemoryAndBuffers) {
  JobFixture j(1, 4, Dtype::fp32, 4 * 64, 64, 2);
  add(j);
  for (uint64_t seq = 0; seq < 6; ++seq)
    for (unsigned r = 0; r < 3; ++r) send(j.data_frame(r, seq));  // held, incomplete
  EXPECT_EQ(engine->held_packets(), 18u);
  std::string err;
  ASSERT_TRUE(engine->remove_job(1, &err)) << err;
  EXPECT_EQ(engine->memory_in_use(), 0u);
  EXPECT_EQ(pool.live(), 0u);
  EXPECT_FALSE(engine->remove_job(1, &err));
  EXPECT_NE(err.find("no job 1"), std::string::npos);
  // Its packets are dropped while its connections stay closed, then pass untouched: the QPs are no
  // longer registered.
  EXPECT_TRUE(send(j.data_frame(0, 0)).empty());
  now += cfg.closed_hold_ns;
  EXPECT_EQ(send(j.data_frame(0, 0)).size(), 1u);
}

TEST_F(EngineTest, NakNotSentWhenOutOfBuffersIsCounted) {
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 2);
  add(j);
  pool.fail_alloc = true;
  std::vector<uint8_t> f = j.data_frame(0, 2);
  pool.fail_alloc = false;
  auto p = pool.wrap(f);
  pool.fail_alloc = true;
  engine->process(p, now, tx);
  pool.fail_alloc = false;
  EXPECT_TRUE(drain(pool, tx).empty());
  EXPECT_EQ(info(1).counters.nak_alloc_failed, 1u);
}

TEST_F(EngineTest, ReleaseLargerThanTxSpaceContinuesInPoll) {
  agg::TxList small(4);
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 2);
  add(j);
  for (uint64_t seq = 1; seq < 6; ++seq) {
    engine->process(pool.wrap(j.data_frame(0, seq)), now, small);
    engine->process(pool.wrap(j.data_frame(1, seq)), now, small);
    drain(pool, small);  // NAKs for the jump
  }
  engine->process(pool.wrap(j.data_frame(0, 0)), now, small);
  engine->process(pool.wrap(j.data_frame(1, 0)), now, small);  // completes slot 0: 6 slots x 2 ready
  std::vector<Out> all = drain(pool, small);
  while (all.size() < 12) {
    engine->poll(now, small);
    auto more = drain(pool, small);
    ASSERT_FALSE(more.empty());
    all.insert(all.end(), more.begin(), more.end());
  }
  ASSERT_EQ(all.size(), 12u);
  for (uint64_t seq = 0; seq < 6; ++seq) expect_released(j, seq, {all.begin() + 2 * seq, all.begin() + 2 * seq + 2});
  EXPECT_EQ(info(1).counters.tx_full, 0u);
}

// ---- an independent ICRC check -------------------------------------------------------------------

TEST_F(EngineTest, EveryReleasedIcrcVerifiesInScapy) {
  JobFixture v4(1, 4, Dtype::fp32, 4 * 512, 512, 2);
  JobFixture v6(2, 3, Dtype::int32, 2 * 256, 256, 2, 0x42, /*ipv6=*/true);
  add(v4);
  add(v6);
  const std::string path = ::testing::TempDir() + "/inagg_engine_released.pcap";
  util::PcapWriter w;
  std::string err;
  ASSERT_TRUE(w.open(path, &err)) << err;
  size_t written = 0;
  for (const JobFixture* j : {&v4, &v6}) {
    for (uint64_t seq = 0; seq < 8; ++seq) {
      for (unsigned r = 0; r < j->spec.workers; ++r) {
        for (const Out& o : send(j->data_frame(r, seq))) {
          ASSERT_TRUE(w.write(o.frame.data(), o.frame.size(), written * 1000));
          ++written;
        }
      }
      // A retransmission answered from the retained sum, and the receivers' ACKs.
      for (const Out& o : send(j->data_frame(0, seq))) {
        ASSERT_TRUE(w.write(o.frame.data(), o.frame.size(), written * 1000));
        ++written;
      }
      for (unsigned r = 0; r < j->spec.workers; ++r) send(j->ack_frame(r, seq));
    }
  }
  ASSERT_TRUE(w.close());
  ASSERT_EQ(written, 8u * (4 + 1) + 8u * (3 + 1));
  const std::string script = std::string(INAGG_SOURCE_DIR) + "/tests/agg/check_icrc_scapy.py";
  const std::string cmd = "/usr/bin/python3 " + script + " " + path + " " + std::to_string(written);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(path.c_str());
}

// ---- regressions from review ----------------------------------------------------------------------

TEST_F(EngineTest, AClockSlightlyBehindTheLastPacketDoesNotAbort) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  now = 5'000'000;
  send(j.data_frame(0, 0));
  poll(now - 1000);  // timestamps are taken per burst: poll may run with an older one
  EXPECT_EQ(info(1).state, agg::JobState::active);
}

TEST_F(EngineTest, UcWritesOnARegisteredQpAreDropped) {
  JobFixture j(1, 2, Dtype::fp32, 64, 64, 1);
  add(j);
  send(j.data_frame(1, 0));
  auto s = j.frame_spec(0, 0);
  s.opcode = wire::op::kUc | wire::op::kWriteOnly;
  EXPECT_TRUE(send(JobFixture::build(s, j.payload(0, 0))).empty());
  EXPECT_EQ(info(1).state, agg::JobState::active);
  EXPECT_EQ(info(1).counters.err_not_rc, 1u);
  poll(now + cfg.abort_timeout_ns + 1);
  EXPECT_EQ(info(1).state, agg::JobState::failed);
  EXPECT_NE(info(1).error.find("must be RC"), std::string::npos) << info(1).error;
}

TEST_F(EngineTest, NakCopiesThePKeyAndCarriesAnIpv6UdpChecksum) {
  JobFixture j(1, 2, Dtype::fp32, 4 * 64, 64, 2, 0x10, /*ipv6=*/true);
  add(j);
  auto s = j.frame_spec(0, 2);  // a jump: seq 0 and 1 lost
  s.pkey = 0x8001;
  auto outs = send(JobFixture::build(s, j.payload(0, 2)));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(wire::bth_of(outs[0].frame.data(), outs[0].l).pkey(), 0x8001);
  EXPECT_TRUE(outs[0].icrc_ok());
  EXPECT_EQ(wire::load_be16(&outs[0].frame[outs[0].l.l4 + 6]), udp6_sum(outs[0].frame, outs[0].l));
}

TEST_F(EngineTest, AFullTxListNeverStarvesOtherJobsOrCausesAResendStorm) {
  cfg.resend_timeout_ns = 1000;
  make_engine();
  JobFixture a(1, 2, Dtype::fp32, 4 * 64, 64, 2), b(2, 2, Dtype::fp32, 64, 64, 2);
  add(a);
  add(b);
  for (uint64_t seq = 0; seq < 8; ++seq)
    for (unsigned r = 0; r < 2; ++r) send(a.data_frame(r, seq));  // released, never acknowledged
  agg::TxList small(2);
  for (int i = 1; i <= 10; ++i) {
    engine->poll(now + 2000 * i, small);
    drain(pool, small);
  }
  // Two packets per connection per round at most, and rank 1 gets its turn too.
  EXPECT_LE(info(1).counters.resends, 2u * 2 * 10);
  EXPECT_GT(info(1).counters.resends, 0u);
  // Job 2's slot, completed while TX was full, is released by a later poll.
  engine->process(pool.wrap(b.data_frame(0, 0)), now, small);
  engine->process(pool.wrap(b.data_frame(1, 0)), now, small);
  drain(pool, small);
  EXPECT_EQ(info(2).counters.slots_released, 1u);
}
