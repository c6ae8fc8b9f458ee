// One job spread over K engines, slots sharded by index (protocol.md section 4): scripted cases for
// what the shards share (the release ticket, the receivers' ACKs, a failure, replay generations),
// checked against sums from a plain loop; and two shards on two threads, as two lcores run them.
// The seeded lossy simulation of sharded jobs is in test_engine_sim.cpp (EngineSimShards).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "engine_harness.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;

namespace {

// K engines with one spread job, an ordered path the test drains (and can close), and one TX list
// per engine for what each sends outside releases (ACKs forwarded, NAKs).
class ShardedTest : public ::testing::Test {
 protected:
  agg::EngineConfig cfg;
  Pool pool;
  std::vector<std::unique_ptr<agg::Engine>> engines;
  std::shared_ptr<agg::JobShards> shared;
  std::vector<PacketRef> ordered;
  bool ordered_open = true;
  // Runs once, inside the next hand-over to the ordered path, after it took the packets and before
  // the releasing shard moves the ticket: what the owner lcore and the network may do meanwhile.
  std::function<void()> during_send;
  agg::TxList tx{1 << 12};
  uint64_t now = 1'000'000;

  void make(unsigned k, const JobFixture& j, agg::JobStart start = agg::JobStart::fresh) {
    agg::OrderedTx otx;
    otx.ctx = this;
    otx.send = [](void* ctx, const PacketRef* pkts, unsigned n) {
      ShardedTest& t = *static_cast<ShardedTest*>(ctx);
      if (!t.ordered_open) return false;
      for (unsigned i = 0; i < n; ++i) t.ordered.push_back(pkts[i]);
      if (t.during_send) std::exchange(t.during_send, nullptr)();
      return true;
    };
    shared = std::make_shared<agg::JobShards>(k, otx);
    for (unsigned i = 0; i < k; ++i) {
      engines.push_back(std::make_unique<agg::Engine>(cfg, pool.ops));
      std::string err;
      ASSERT_TRUE(engines.back()->add_job(j.spec, &err, {shared, i}, start)) << err;
    }
  }
  void TearDown() override {
    for (auto& e : engines) {
      for (uint32_t id : e->job_ids()) {
        std::string err;
        EXPECT_TRUE(e->remove_job(id, &err)) << err;
      }
      EXPECT_EQ(e->memory_in_use(), 0u);
      EXPECT_EQ(e->mbufs_reserved(), 0u);
    }
    engines.clear();
    take_ordered();
    drain(pool, tx);
    EXPECT_EQ(pool.live(), 0u) << "buffers leaked";
  }
  unsigned shard_of(const JobFixture& j, unsigned rank, uint64_t seq) const {
    return shared->shard_of(j.psn(rank, seq), j.spec.conns[rank].start_psn);
  }
  // A data packet to the shard of its PSN; returns what that engine put in its TX list.
  std::vector<Out> send_data(const JobFixture& j, unsigned rank, uint64_t seq) {
    engines[shard_of(j, rank, seq)]->process(pool.wrap(j.data_frame(rank, seq)), now, tx);
    return drain(pool, tx);
  }
  std::vector<Out> take_ordered() {
    std::vector<Out> v;
    for (const PacketRef& p : ordered) {
      Out o;
      o.frame = pool.take(p);
      EXPECT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
      v.push_back(std::move(o));
    }
    ordered.clear();
    return v;
  }
  agg::JobInfo info(unsigned shard) {
    agg::JobInfo i{};
    EXPECT_TRUE(engines[shard]->job_info(1, &i));
    return i;
  }
  // `outs` holds, in this order, the n packets of each of `seqs`, each with the plain-loop sum.
  void expect_in_order(const JobFixture& j, const std::vector<uint64_t>& seqs, const std::vector<Out>& outs) {
    const unsigned n = j.spec.workers;
    ASSERT_EQ(outs.size(), seqs.size() * n);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto sum = j.expected_sum(seqs[i]);
      for (unsigned r = 0; r < n; ++r) {
        const Out& o = outs[i * n + r];
        EXPECT_EQ(o.dest_qp(), j.spec.conns[r].dst_qpn) << "seq " << seqs[i];
        EXPECT_EQ(o.psn(), j.psn(r, seqs[i])) << "rank " << r;
        EXPECT_EQ(o.payload(), sum) << "rank " << r << " seq " << seqs[i];
        EXPECT_TRUE(o.icrc_ok()) << "rank " << r << " seq " << seqs[i];
      }
    }
  }
};

TEST_F(ShardedTest, EachShardHoldsEveryKthSequenceAndReleasesOnlyInTicketOrder) {
  JobFixture j(1, 3, Dtype::fp32, 4 * 256, 256, 2);  // 4 packets per message: 16 sequences in 2 windows
  make(2, j);
  // Sequence 1 (shard 1) completes first: summed there, but it may not leave before sequence 0.
  for (unsigned r = 0; r < 3; ++r) EXPECT_TRUE(send_data(j, r, 1).empty());
  EXPECT_EQ(shard_of(j, 0, 1), 1u);
  EXPECT_EQ(info(1).counters.slots_completed, 1u);
  engines[1]->release_turns(now, tx);
  EXPECT_TRUE(ordered.empty()) << "shard 1 released sequence 1 before sequence 0 went out";
  // Sequence 0 completes on shard 0 and goes out; sequence 1 follows at shard 1's next look.
  for (unsigned r = 0; r < 3; ++r) send_data(j, r, 0);
  expect_in_order(j, {0}, take_ordered());
  EXPECT_EQ(shared->ticket(), 1u);
  engines[1]->release_turns(now, tx);
  expect_in_order(j, {1}, take_ordered());
  // With the ordered path full, a turn waits (nothing lost, nothing out of order) and is retried.
  ordered_open = false;
  for (unsigned r = 0; r < 3; ++r) send_data(j, r, 2);
  for (unsigned r = 0; r < 3; ++r) send_data(j, r, 3);
  engines[1]->release_turns(now, tx);
  EXPECT_TRUE(ordered.empty());
  ordered_open = true;
  engines[1]->release_turns(now, tx);  // not its turn yet: 2 is shard 0's
  EXPECT_TRUE(ordered.empty());
  engines[0]->release_turns(now, tx);
  engines[1]->release_turns(now, tx);
  expect_in_order(j, {2, 3}, take_ordered());
  // Each shard released its own half: its part of the release cursor.
  EXPECT_EQ(info(0).released_slots, 2u);
  EXPECT_EQ(info(1).released_slots, 2u);
  EXPECT_EQ(info(0).counters.slots_released + info(1).counters.slots_released, 4u);
}

// The window is the job's: measured from the first sequence not yet released by any shard, not from
// the shard's own cursor (which can be up to K - 1 ahead of it).
TEST_F(ShardedTest, AheadOfTheJobsWindowIsDroppedOnEveryShard) {
  JobFixture j(1, 2, Dtype::int32, 64, 64, 1);  // one packet per message, window 1: 2 slots in all
  make(2, j);
  send_data(j, 0, 0);  // message 0 incomplete (rank 1 missing)
  send_data(j, 0, 1);  // message 1: ahead of a window of 1 while message 0 is incomplete
  const agg::JobInfo one = info(1);
  EXPECT_EQ(one.state, agg::JobState::active) << one.error;
  EXPECT_EQ(one.counters.err_ahead_of_window, 1u);
  EXPECT_EQ(one.counters.drop_unfit, 1u);
  EXPECT_EQ(one.counters.job_errors, 0u);
  // The job goes on: message 0 completes and is released.
  send_data(j, 1, 0);
  for (auto& e : engines) e->release_turns(now, tx);
  expect_in_order(j, {0}, take_ordered());
  EXPECT_EQ(info(0).state, agg::JobState::active);
}

// Shard 0 takes every ACK and publishes it; the others free what their receivers have from it.
TEST_F(ShardedTest, AcknowledgementsSeenByShardZeroFreeEveryShardsRetainedCopies) {
  JobFixture j(1, 2, Dtype::fp32, 128, 128, 2);
  make(2, j);
  for (uint64_t seq = 0; seq < 4; ++seq) {
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
    for (auto& e : engines) e->release_turns(now, tx);
  }
  expect_in_order(j, {0, 1, 2, 3}, take_ordered());
  EXPECT_EQ(info(0).retained_packets, 4u);
  EXPECT_EQ(info(1).retained_packets, 4u);
  // Both receivers acknowledge through sequence 2: shard 0 forwards the ACKs.
  for (unsigned r = 0; r < 2; ++r) {
    engines[0]->process(pool.wrap(j.ack_frame(r, 2)), now, tx);
    EXPECT_EQ(drain(pool, tx).size(), 1u);
  }
  EXPECT_EQ(info(0).retained_packets, 0u);  // sequences 0 and 2 acknowledged: nothing of its own left
  EXPECT_EQ(info(0).counters.acks_observed, 2u);
  now += 20'000;
  engines[1]->poll(now, tx);                // shard 1 reads them at its next poll
  EXPECT_EQ(info(1).retained_packets, 2u);  // sequence 1 freed, sequence 3 kept for a resend
  EXPECT_EQ(info(1).counters.acks_observed, 0u);
  drain(pool, tx);
}

// An ACK past what any shard released means a path around the appliance: shard 0 sees it against
// the job's ticket.
TEST_F(ShardedTest, AnAckPastTheJobsReleasesIsDropped) {
  JobFixture j(1, 2, Dtype::fp32, 128, 128, 2);
  make(2, j);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 0);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 1);
  engines[1]->release_turns(now, tx);
  take_ordered();
  engines[0]->process(pool.wrap(j.ack_frame(0, 1)), now, tx);  // sequence 1 was released by shard 1
  drain(pool, tx);
  EXPECT_EQ(info(0).state, agg::JobState::active);
  engines[0]->process(pool.wrap(j.ack_frame(0, 2)), now, tx);  // sequence 2 never was
  EXPECT_TRUE(drain(pool, tx).empty()) << "an ACK for a PSN never released reached the sender";
  EXPECT_EQ(info(0).state, agg::JobState::active);
  EXPECT_EQ(info(0).counters.err_ack_bypass, 1u);
  EXPECT_EQ(info(0).counters.drop_unfit, 1u);
  engines[1]->poll(now, tx);
  EXPECT_EQ(info(1).state, agg::JobState::active);
  drain(pool, tx);
}

// A shard hands a slot to the ordered path before it moves the ticket past it, so the owner lcore
// may send the slot, its receivers acknowledge it and the ACKs reach shard 0 while the ticket still
// names that slot (the releasing lcore interrupted or preempted between the two). Such an ACK is
// for a released PSN, not a bypass.
TEST_F(ShardedTest, AnAckForTheSlotBeingHandedOverIsNoBypass) {
  JobFixture j(1, 2, Dtype::fp32, 128, 128, 2);
  make(2, j);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 0);
  expect_in_order(j, {0}, take_ordered());
  during_send = [&] {  // sequence 1 (shard 1's) is on the ordered path; the ticket still says 1
    for (unsigned r = 0; r < 2; ++r) engines[0]->process(pool.wrap(j.ack_frame(r, 1)), now, tx);
  };
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 1);
  EXPECT_FALSE(during_send) << "sequence 1 was not handed over";
  EXPECT_EQ(shared->ticket(), 2u);
  EXPECT_EQ(info(0).state, agg::JobState::active) << info(0).error;
  EXPECT_EQ(info(0).counters.err_ack_bypass, 0u);
  EXPECT_EQ(info(0).counters.acks_observed, 2u);
  expect_in_order(j, {1}, take_ordered());
  // An ACK past that slot still is a bypass (or forged): dropped.
  engines[0]->process(pool.wrap(j.ack_frame(0, 2)), now, tx);
  EXPECT_EQ(info(0).state, agg::JobState::active);
  EXPECT_EQ(info(0).counters.err_ack_bypass, 1u);
  drain(pool, tx);
}

// The same for the window: with the slot at the ticket acknowledged, its senders may send the
// message a window after it, which may reach another shard before the ticket moves.
TEST_F(ShardedTest, AMessageTheHandedOverSlotLetInIsInsideTheWindow) {
  JobFixture j(1, 2, Dtype::int32, 64, 64, 1);  // one packet per message, window 1
  make(2, j);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 0);
  expect_in_order(j, {0}, take_ordered());
  during_send = [&] {  // sequence 1 is out and acknowledged: rank 0 sends message 2 (shard 0's)
    engines[0]->process(pool.wrap(j.data_frame(0, 2)), now, tx);
  };
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 1);
  EXPECT_FALSE(during_send) << "sequence 1 was not handed over";
  EXPECT_EQ(info(0).state, agg::JobState::active) << info(0).error;
  EXPECT_EQ(info(0).counters.err_ahead_of_window, 0u);
  send_data(j, 1, 2);
  expect_in_order(j, {1, 2}, take_ordered());
  // Message 3 while message 2 is not acknowledged... and message 4 is ahead of the window.
  send_data(j, 0, 3);
  EXPECT_EQ(info(1).state, agg::JobState::active) << info(1).error;
  send_data(j, 0, 4);
  EXPECT_EQ(info(0).state, agg::JobState::active);
  EXPECT_EQ(info(0).counters.err_ahead_of_window, 1u);
  drain(pool, tx);
}

// A replayed capture looping over two shards starts a new generation on both each time round, in
// the one ticket numbering, and every generation's sums go out in order.
TEST_F(ShardedTest, AReplayJobLoopsOverShardsGenerationAfterGeneration) {
  JobFixture j(1, 2, Dtype::fp32, 2 * 128, 128, 2);
  j.spec.replay = true;
  make(2, j);
  const uint64_t len = 8;  // the capture: 4 messages of 2 packets
  for (int loop = 0; loop < 3; ++loop) {
    for (uint64_t seq = 0; seq < len; ++seq) {
      for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
      for (auto& e : engines) e->release_turns(now, tx);
    }
    std::vector<uint64_t> all;
    for (uint64_t s = 0; s < len; ++s) all.push_back(s);
    expect_in_order(j, all, take_ordered());
    ASSERT_FALSE(HasFailure()) << "loop " << loop;
  }
  EXPECT_EQ(shared->ticket(), 3 * len);
  // Counted once per loop for the job, by shard 0; shard 1 started each loop too (or its packets
  // would have been answered as retransmissions of the last).
  EXPECT_EQ(info(0).counters.generations, 2u);
  EXPECT_EQ(info(1).counters.generations, 0u);
  EXPECT_EQ(info(0).counters.stale + info(1).counters.stale, 0u);
  EXPECT_EQ(info(0).counters.retransmits_answered + info(1).counters.retransmits_answered, 0u);
}

// The first loop's length is agreed when a shard sees its first sequence again with all it holds
// released; but the loop's last sequences may still be on their way to another shard (on its
// handover ring, or behind in its queue). Agreeing on a length short of them numbers every later
// loop wrong: the tail takes the ticket the next loop's sequence 0 was given, which then never goes
// out, and the next loop's other sequences are released without it (a PSN gap to every receiver).
// A loop is whole messages: a claim that ends inside one is not the loop's end.
TEST_F(ShardedTest, AReplayLoopsLengthIsNotAgreedWhileItsTailIsOnItsWayToAnotherShard) {
  JobFixture j(1, 2, Dtype::fp32, 2 * 128, 128, 2);
  j.spec.replay = true;
  make(2, j);
  const uint64_t len = 8;  // the capture: 4 messages of 2 packets; sequence 7 is shard 1's
  for (uint64_t seq = 0; seq + 1 < len; ++seq) {
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
    for (auto& e : engines) e->release_turns(now, tx);
  }
  expect_in_order(j, {0, 1, 2, 3, 4, 5, 6}, take_ordered());
  // Rank 0 starts loop 2 on shard 0 while both ranks' sequence 7 has not reached shard 1 yet.
  send_data(j, 0, 0);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, len - 1);  // loop 1's tail arrives
  for (auto& e : engines) e->release_turns(now, tx);
  send_data(j, 1, 0);  // and the rest of loop 2
  for (auto& e : engines) e->release_turns(now, tx);
  for (uint64_t seq = 1; seq < len; ++seq) {
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
    for (auto& e : engines) e->release_turns(now, tx);
  }
  // Rank 0's receiver: after loop 1's last sequence, a sequence of loop 2 only once its sequence 0.
  std::vector<uint64_t> out;
  for (const Out& o : take_ordered())
    if (o.dest_qp() == j.spec.conns[0].dst_qpn) out.push_back((o.psn() - j.psn(0, 0)) & wire::kPsnMask);
  const auto tail = std::find(out.begin(), out.end(), len - 1);
  ASSERT_NE(tail, out.end()) << "loop 1's last sequence never went out";
  bool zero = false;
  for (auto it = tail + 1; it != out.end(); ++it) {
    if (*it == 0) zero = true;
    EXPECT_TRUE(zero) << "loop 2's sequence " << *it << " went out before its sequence 0";
  }
  // Not checked: that the job goes on. Rank 0's first packet of loop 2 came before loop 1 was all
  // released, so it was taken for a retransmission of loop 1 (as one lcore takes it when a rank
  // loops ahead of the others), loop 2's sequence 0 never completes and the rest of loop 2 is
  // ahead of the window: the job aborts, with a reason, instead of releasing out of order.
}

// Two shards on two threads, as two lcores run them, each fed the packets of its own sequences by
// the senders' windows (a thread takes a packet only once its message is inside the job's window);
// a third thread drains the ordered path. Every slot goes out once, in order, with its sum.
TEST_F(ShardedTest, TwoShardsOnTwoThreadsReleaseEverySlotInOrder) {
  JobFixture j(1, 4, Dtype::fp32, 4 * 256, 256, 2);
  const uint64_t total = 4 * 4 * 64;  // 64 windows' worth of sequences: the slots are reused many times
  std::mutex mu;                      // the test's ordered path (the appliance's is an rte_ring)
  std::vector<PacketRef> path;
  agg::OrderedTx otx;
  struct Ctx {
    std::mutex* mu;
    std::vector<PacketRef>* path;
  } octx{&mu, &path};
  otx.ctx = &octx;
  otx.send = [](void* ctx, const PacketRef* pkts, unsigned n) {
    Ctx& c = *static_cast<Ctx*>(ctx);
    std::lock_guard<std::mutex> g(*c.mu);
    for (unsigned i = 0; i < n; ++i) c.path->push_back(pkts[i]);
    return true;
  };
  shared = std::make_shared<agg::JobShards>(2, otx);
  // The frames, built up front (the pool is not thread-safe; the engines only reference them).
  std::vector<std::vector<uint8_t>> frames(total * 4);
  for (uint64_t s = 0; s < total; ++s)
    for (unsigned r = 0; r < 4; ++r) frames[s * 4 + r] = j.data_frame(r, s);
  // The frames are the buffers; their references are counted across both threads: every packet
  // given to an engine is one, every ref() one more, every free() and every packet on the ordered
  // path one less. With the jobs removed, nothing may be left.
  static std::atomic<int64_t> refs{0};
  refs = 0;
  agg::BufferOps ops;
  ops.free = [](void*, void*) { refs.fetch_sub(1); };
  ops.ref = [](void*, void*) { refs.fetch_add(1); };
  ops.alloc = [](void*, uint16_t) { return PacketRef{}; };
  std::vector<std::unique_ptr<agg::Engine>> es;
  for (unsigned i = 0; i < 2; ++i) {
    es.push_back(std::make_unique<agg::Engine>(cfg, ops));
    std::string err;
    ASSERT_TRUE(es.back()->add_job(j.spec, &err, {shared, i})) << err;
  }
  auto shard_loop = [&](unsigned i) {
    agg::TxList local(64);
    for (uint64_t s = i; s < total; s += 2) {
      // The senders' window: message s / ppm only once message (s / ppm) - W went out.
      while (s / j.ppm >= shared->ticket() / j.ppm + j.spec.window) {
        es[i]->release_turns(1, local);
        std::this_thread::yield();  // the other shard may share this CPU (tests run in parallel)
      }
      for (unsigned r = 0; r < 4; ++r) {
        std::vector<uint8_t>& f = frames[s * 4 + r];
        es[i]->process({&f, f.data(), static_cast<uint16_t>(f.size())}, 1, local);
      }
      local.clear();
    }
    while (shared->ticket() < total) {
      es[i]->release_turns(1, local);
      std::this_thread::yield();
    }
  };
  std::thread t0(shard_loop, 0), t1(shard_loop, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(path.size(), total * 4);
  for (uint64_t s = 0; s < total; ++s) {
    const auto sum = j.expected_sum(s);
    for (unsigned r = 0; r < 4; ++r) {
      const PacketRef& p = path[s * 4 + r];
      ASSERT_EQ(p.data, frames[s * 4 + r].data()) << "sequence " << s << " rank " << r << " out of order";
      Out o;
      o.frame.assign(p.data, p.data + p.len);
      ASSERT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
      ASSERT_EQ(o.payload(), sum) << "sequence " << s << " rank " << r;
      ASSERT_TRUE(o.icrc_ok());
    }
  }
  for (unsigned i = 0; i < 2; ++i) {
    agg::JobInfo ji{};
    ASSERT_TRUE(es[i]->job_info(1, &ji));
    EXPECT_EQ(ji.state, agg::JobState::active) << ji.error;
    EXPECT_EQ(ji.released_slots, total / 2);
    std::string err;
    ASSERT_TRUE(es[i]->remove_job(1, &err)) << err;
  }
  EXPECT_EQ(refs.load() + static_cast<int64_t>(total * 4) - static_cast<int64_t>(path.size()), 0)
      << "references taken and dropped do not balance";
}

}  // namespace

namespace {

// A replay capture looping over two shards on two threads, each thread starting its next loop as soon
// as the last one is all released (no lock step between them): a shard may start the next generation
// while the other is still reading the last one's state. Every loop must start a generation on both
// shards and release every sequence once; a wrong reading stalls the job (the ticket stops moving),
// which the deadline turns into a failure.
TEST(ShardedThreads, AReplayCaptureLoopsOnTwoThreadsWithoutStalling) {
  JobFixture j(1, 2, Dtype::int32, 2 * 64, 64, 1);  // W = 1, 2 packets per message: 4 sequences a loop
  j.spec.replay = true;
  const uint64_t seqs = 4, loops = 5000;
  std::atomic<uint64_t> sent{0};
  agg::OrderedTx otx;
  otx.ctx = &sent;
  otx.send = [](void* ctx, const PacketRef*, unsigned n) {
    static_cast<std::atomic<uint64_t>*>(ctx)->fetch_add(n);
    return true;
  };
  auto shared = std::make_shared<agg::JobShards>(2, otx);
  std::vector<std::vector<uint8_t>> frames(seqs * 2);
  for (uint64_t s = 0; s < seqs; ++s)
    for (unsigned r = 0; r < 2; ++r) frames[s * 2 + r] = j.data_frame(r, s);
  agg::BufferOps ops;
  ops.free = [](void*, void*) {};
  ops.ref = [](void*, void*) {};
  ops.alloc = [](void*, uint16_t) { return PacketRef{}; };
  agg::EngineConfig cfg;
  std::vector<std::unique_ptr<agg::Engine>> es;
  for (unsigned i = 0; i < 2; ++i) {
    es.push_back(std::make_unique<agg::Engine>(cfg, ops));
    std::string err;
    ASSERT_TRUE(es.back()->add_job(j.spec, &err, {shared, i})) << err;
  }
  std::atomic<bool> stalled{false};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto shard_loop = [&](unsigned i) {
    agg::TxList tx(64);
    auto wait_ticket = [&](uint64_t at_least) {
      while (shared->ticket() < at_least) {
        es[i]->release_turns(1, tx);
        std::this_thread::yield();  // the other shard may share this CPU (tests run in parallel)
        if (stalled.load() || std::chrono::steady_clock::now() > deadline) {
          stalled.store(true);
          return false;
        }
      }
      return true;
    };
    for (uint64_t loop = 0; loop < loops; ++loop) {
      for (uint64_t s = i; s < seqs; s += 2) {
        // The window: message m only once message m - W went out (the job's ticket is past it).
        const uint64_t m = s / j.ppm, w = j.spec.window;
        if (!wait_ticket(loop * seqs + (m >= w ? (m - w + 1) * j.ppm : 0))) return;
        for (unsigned r = 0; r < 2; ++r) {
          std::vector<uint8_t>& f = frames[s * 2 + r];
          es[i]->process({&f, f.data(), static_cast<uint16_t>(f.size())}, 1, tx);
        }
        tx.clear();
      }
      if (!wait_ticket((loop + 1) * seqs)) return;  // the capture starts over once all of it went out
    }
  };
  std::thread t0(shard_loop, 0), t1(shard_loop, 1);
  t0.join();
  t1.join();
  ASSERT_FALSE(stalled.load()) << "the job stalled at ticket " << shared->ticket() << " of " << loops * seqs;
  EXPECT_EQ(shared->ticket(), loops * seqs);
  EXPECT_EQ(sent.load(), loops * seqs * 2);
  for (unsigned i = 0; i < 2; ++i) {
    agg::JobInfo ji{};
    ASSERT_TRUE(es[i]->job_info(1, &ji));
    EXPECT_EQ(ji.state, agg::JobState::active) << ji.error;
    EXPECT_EQ(ji.counters.generations, i == 0 ? loops - 1 : 0) << "shard " << i << " (shard 0 counts them)";
    EXPECT_EQ(ji.counters.stale, 0u) << "shard " << i;
    EXPECT_EQ(ji.counters.retransmits_answered, 0u) << "shard " << i << ": a new loop taken for the old one";
  }
}

}  // namespace

namespace {

// A replayed capture has no senders' windows: a shard whose part of the loop is all in (complete)
// but not all out asks its lcore to take no more packets in (the next one would be the next loop's)
// while the ticket moves, and stops asking once its part went out, or when the ticket stands still.
TEST_F(ShardedTest, AReplayShardWithItsLoopInPausesItsLcoreUntilItsLoopWentOut) {
  JobFixture j(1, 2, Dtype::fp32, 2 * 128, 128, 4);  // the window covers the capture, as gen-pcap's does
  j.spec.replay = true;
  make(2, j);
  const uint64_t len = 8;
  for (uint64_t seq = 0; seq < len; ++seq) {  // the first loop: the length is not known yet
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
    for (auto& e : engines) e->release_turns(now, tx);
  }
  take_ordered();
  EXPECT_FALSE(engines[0]->replay_paused());
  // The second loop: shard 0 takes in all of its part first (0, 2, 4, 6), shard 1 none yet.
  for (uint64_t seq = 0; seq < len; seq += 2)
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
  engines[0]->release_turns(now, tx);
  EXPECT_EQ(info(0).counters.generations, 1u);  // its first packet started the second loop
  EXPECT_TRUE(engines[0]->replay_paused()) << "its part is in, sequence 2 waits for shard 1's 1";
  EXPECT_FALSE(engines[1]->replay_paused());
  // Shard 1's part comes; the ticket moves; shard 0 still has 6 to send until 5 went out.
  for (uint64_t seq = 1; seq < 5; seq += 2) {
    for (unsigned r = 0; r < 2; ++r) send_data(j, r, seq);
    engines[0]->release_turns(now, tx);
  }
  now += 10'000;
  EXPECT_TRUE(engines[0]->replay_paused());
  // The ticket stands still (sequence 5 does not come): after 200 us shard 0 takes packets again.
  now += 300'000;
  engines[0]->poll(now, tx);
  EXPECT_FALSE(engines[0]->replay_paused()) << "the ticket stood still 300 us";
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 5);
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 7);
  for (int i = 0; i < 2; ++i)
    for (auto& e : engines) e->release_turns(now, tx);
  EXPECT_EQ(shared->ticket(), 2 * len);
  EXPECT_FALSE(engines[0]->replay_paused());
  EXPECT_FALSE(engines[1]->replay_paused());
  drain(pool, tx);
}

}  // namespace

namespace {

// A data packet given to the engine of another shard (a dataplane routing fault) is dropped and
// counted, never held in a slot of the wrong class (which no release would reach) nor forwarded.
TEST_F(ShardedTest, AnotherShardsSequenceIsDroppedAndCounted) {
  JobFixture j(1, 2, Dtype::fp32, 128, 128, 2);
  make(2, j);
  engines[1]->process(pool.wrap(j.data_frame(0, 0)), now, tx);  // sequence 0 is shard 0's
  EXPECT_TRUE(drain(pool, tx).empty());
  EXPECT_EQ(info(1).counters.drop_wrong_shard, 1u);
  EXPECT_EQ(info(1).held_packets, 0u);
  EXPECT_EQ(info(1).state, agg::JobState::active);
  // The job goes on: sequence 0 through its own shard.
  for (unsigned r = 0; r < 2; ++r) send_data(j, r, 0);
  expect_in_order(j, {0}, take_ordered());
}

}  // namespace

// A spread job reloaded after a restart (JobStart::resume): shard 0 finds the message it resumes
// at, the other shards drop their packets until then and count from it after; every sum exact, in
// PSN order, nothing of the message before out.
TEST_F(ShardedTest, AResumedSpreadJobResumesWhereShardZeroFindsAMessageBeginning) {
  JobFixture j(1, 3, Dtype::fp32, 4 * 256, 256, 2);
  make(2, j, agg::JobStart::resume);
  const uint64_t at = 4 * 3000;  // the ranks are at message 3000
  // Shard 1's sequences before shard 0 found anything: dropped.
  for (unsigned r = 0; r < 3; ++r) EXPECT_TRUE(send_data(j, r, at - 1).empty());
  EXPECT_EQ(info(1).counters.drop_resuming, 3u);
  for (uint64_t seq = at; seq < at + 8; ++seq)
    for (unsigned r = 0; r < 3; ++r) EXPECT_TRUE(send_data(j, r, seq).empty());
  for (unsigned i = 0; i < 2; ++i) engines[i]->release_turns(now, tx);
  engines[0]->release_turns(now, tx);
  std::vector<uint64_t> seqs;
  for (uint64_t seq = at; seq < at + 8; ++seq) seqs.push_back(seq);
  expect_in_order(j, seqs, take_ordered());
  EXPECT_EQ(info(0).counters.drop_resuming + info(1).counters.drop_resuming, 3u);
}
