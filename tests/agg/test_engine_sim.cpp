// Randomised property test: n go-back-N RC senders and receivers (as RDMA NICs behave) with lossy
// FIFO links on both sides of the engine, thousands of seeded runs. Invariants checked on every
// packet: a registered receiver only ever gets the full rank-ordered sum for the PSN it carries,
// with a valid ICRC; the first release of each PSN per connection is in order; every sender
// finishes; every buffer and byte of job memory returns when the job is removed.
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "engine_harness.hpp"
#include "rc_peers.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;

namespace {

constexpr uint64_t kStepNs = 1000;                   // one simulated microsecond per step
constexpr uint64_t kSenderAckTimeoutNs = 2'000'000;  // the NICs' RC retransmission timer

struct RunParams {
  unsigned n;
  unsigned messages;
  uint32_t ppm;
  unsigned window;
  double loss;  // per packet, on every link in both directions
  Dtype dtype;
  uint32_t seed;
  bool fast_recovery = true;
  // Drops a packet by design (besides `loss`): (rank, link, frame) -> drop it. Links as in Sim.
  std::function<bool(unsigned, int, const std::vector<uint8_t>&)> drop;
};

struct RunResult {
  bool finished = false;
  uint64_t steps = 0;
  uint64_t sender_timeouts = 0;
  uint64_t delivered = 0;
  uint64_t last_timeout_step = 0;
  uint64_t released_slots = 0;
  agg::EngineCounters counters;
};

class Sim {
 public:
  explicit Sim(const RunParams& p)
      : p_(p), job_(1, p.n, p.dtype, p.ppm * 32, 32, p.window, 0xffffff - p.seed % 50), rng_(p.seed) {
    job_.seed = p.seed;
    cfg_.resend_timeout_ns = 300'000;
    cfg_.abort_timeout_ns = 1'000'000'000'000ull;
    cfg_.fast_recovery = p.fast_recovery;
    engine_ = std::make_unique<agg::Engine>(cfg_, pool_.ops);
    std::string err;
    EXPECT_TRUE(engine_->add_job(job_.spec, &err)) << err;
    senders_.resize(p.n);
    receivers_.resize(p.n);
    links_.resize(4 * p.n);
    total_ = static_cast<uint64_t>(p.messages) * p.ppm;
    for (uint64_t s = 0; s < total_; ++s) sums_.push_back(job_.expected_sum(s));
  }

  RunResult run() {
    RunResult res;
    for (res.steps = 0; res.steps < 400'000 && !done(); ++res.steps) {
      now_ += kStepNs;
      const int actions = 1 + static_cast<int>(rng_() % 4);
      for (int a = 0; a < actions; ++a) step_once();
      for (unsigned r = 0; r < p_.n; ++r) sender_timer(r);
      engine_->poll(now_, tx_);
      route();
      if (::testing::Test::HasFatalFailure()) return res;
    }
    res.finished = done();
    for (auto& s : senders_) res.sender_timeouts += s.timeouts;
    res.last_timeout_step = last_timeout_step_;
    res.delivered = delivered_;
    agg::JobInfo info{};
    EXPECT_TRUE(engine_->job_info(1, &info));
    res.counters = info.counters;
    res.released_slots = info.released_slots;
    EXPECT_EQ(info.slot_completion.count(), info.counters.slots_completed) << "each slot's wait once";
    EXPECT_EQ(info.state, agg::JobState::active) << info.error;
    std::string err;
    EXPECT_TRUE(engine_->remove_job(1, &err)) << err;
    EXPECT_EQ(engine_->memory_in_use(), 0u);
    EXPECT_EQ(engine_->mbufs_reserved(), 0u);
    EXPECT_EQ(pool_.live(), 0u) << "buffers leaked";
    return res;
  }

 private:
  using Sender = RcSender;
  using Receiver = RcReceiver;
  // Link indices: per rank r, 4r = sender->appliance data, 4r+1 = appliance->receiver data,
  // 4r+2 = receiver->appliance ACK, 4r+3 = appliance->sender ACK.
  std::deque<std::vector<uint8_t>>& link(unsigned r, int k) { return links_[4 * r + k]; }

  void push(unsigned r, int k, std::vector<uint8_t> f) {
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < p_.loss) return;
    if (p_.drop && p_.drop(r, k, f)) return;
    link(r, k).push_back(std::move(f));
  }

  bool done() const {
    for (unsigned r = 0; r < p_.n; ++r)
      if (senders_[r].una < total_ || receivers_[r].expected < total_) return false;
    return true;
  }

  void step_once() {
    const unsigned r = rng_() % p_.n;
    switch (rng_() % 3) {
      case 0: {  // a sender transmits if its window allows
        if (const auto seq = senders_[r].transmit(total_, p_.ppm, p_.window, now_))
          push(r, 0, job_.data_frame(r, *seq));
        break;
      }
      default: {  // a link delivers its oldest packet
        const int k = static_cast<int>(rng_() % 4);
        auto& q = link(r, k);
        if (q.empty()) break;
        std::vector<uint8_t> f = std::move(q.front());
        q.pop_front();
        if (k == 0 || k == 2) {
          engine_->process(pool_.wrap(f), now_, tx_);
          route();
        } else if (k == 1) {
          receive_data(r, f);
        } else {
          receive_ack(r, f);
        }
      }
    }
  }

  void sender_timer(unsigned r) {
    if (senders_[r].timer(total_, now_, kSenderAckTimeoutNs)) last_timeout_step_ = (now_ - 1'000'000) / kStepNs;
  }

  // Engine output goes to the receivers (data) or back to the senders (ACK/NAK).
  void route() {
    for (size_t i = 0; i < tx_.size(); ++i) route_one(tx_[i]);
    tx_.clear();
  }

  void route_one(const PacketRef& p) {
    {
      Out o;
      o.frame = pool_.take(p);
      ASSERT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
      bool routed = false;
      for (unsigned r = 0; r < p_.n && !routed; ++r) {
        const auto& c = job_.spec.conns[r];
        if (wire::is_rdma_write(o.opcode()) && o.dest_qp() == c.dst_qpn) {
          check_release_order(r, o);
          push(r, 1, std::move(o.frame));
          routed = true;
        } else if (o.opcode() == (wire::op::kRc | wire::op::kAcknowledge) && o.dest_qp() == c.src_qpn) {
          push(r, 3, std::move(o.frame));
          routed = true;
        }
      }
      ASSERT_TRUE(routed) << "engine emitted a packet for no connection";
    }
  }

  uint64_t seq_of(uint32_t psn, uint64_t reference, unsigned r) const {
    const int64_t s = static_cast<int64_t>(reference) + sext24(psn - job_.psn(r, reference));
    EXPECT_GE(s, 0);
    return static_cast<uint64_t>(s);
  }

  void check_release_order(unsigned r, const Out& o) {
    uint64_t& first_unseen = released_[r];
    const uint64_t seq = seq_of(o.psn(), first_unseen, r);
    ASSERT_LE(seq, first_unseen) << "rank " << r << ": a PSN released before the ones below it";
    if (seq == first_unseen) ++first_unseen;
  }

  void receive_data(unsigned r, const std::vector<uint8_t>& f) {
    Out o;
    o.frame = f;
    ASSERT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
    ASSERT_TRUE(o.icrc_ok()) << "receiver of rank " << r << " got a bad ICRC";
    Receiver& rx = receivers_[r];
    const uint64_t seq = seq_of(o.psn(), rx.expected, r);
    ASSERT_LT(seq, total_);
    // Never a raw or partial payload: whatever PSN it carries, it carries that slot's full sum.
    ASSERT_EQ(o.payload(), sums_[seq]) << "rank " << r << " seq " << seq << " seed " << p_.seed;
    ++delivered_;
    const auto reply = rx.receive(seq, seq % p_.ppm == p_.ppm - 1,
                                  [&] { return wire::bth_of(o.frame.data(), o.l).ack_req() || rng_() % 2; });
    if (reply) push(r, 2, job_.ack_frame(r, reply->seq, reply->syndrome, reply->msn));
  }

  void receive_ack(unsigned r, const std::vector<uint8_t>& f) {
    Out o;
    o.frame = f;
    ASSERT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
    ASSERT_TRUE(o.icrc_ok());
    Sender& s = senders_[r];
    const uint64_t seq = seq_of(o.psn(), s.una, r);
    ASSERT_TRUE(s.acknowledge(seq, wire::aeth_of(o.frame.data(), o.l), now_)) << "ACK for a PSN never sent";
  }

  RunParams p_;
  JobFixture job_;
  std::mt19937 rng_;
  agg::EngineConfig cfg_;
  Pool pool_;
  std::unique_ptr<agg::Engine> engine_;
  agg::TxList tx_{1 << 12};
  std::vector<Sender> senders_;
  std::vector<Receiver> receivers_;
  std::vector<std::deque<std::vector<uint8_t>>> links_;
  std::map<unsigned, uint64_t> released_;
  std::vector<std::vector<uint8_t>> sums_;
  uint64_t total_ = 0, now_ = 1'000'000, delivered_ = 0, last_timeout_step_ = 0;
};

RunParams random_params(uint32_t seed, double loss) {
  std::mt19937 rng(seed);
  const unsigned ns[] = {2, 3, 4, 8};
  const Dtype dts[] = {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16};
  RunParams p;
  p.n = ns[rng() % 4];
  p.messages = 4 + rng() % 8;
  p.ppm = 1 + rng() % 4;
  p.window = 1 + rng() % 3;
  p.loss = loss;
  p.dtype = dts[rng() % 4];
  p.seed = seed;
  return p;
}

}  // namespace

class EngineSim : public ::testing::TestWithParam<double> {};

TEST_P(EngineSim, RandomArrivalsLossesAndRetransmissionsKeepEverySumExact) {
  const double loss = GetParam();
  const int runs = loss == 0 ? 300 : 700;
  uint64_t timeouts = 0, naks = 0, resends = 0, answered = 0, stale = 0;
  for (int i = 0; i < runs; ++i) {
    const RunParams p = random_params(static_cast<uint32_t>(i * 7919 + static_cast<int>(loss * 1000)), loss);
    Sim sim(p);
    const RunResult r = sim.run();
    ASSERT_FALSE(::testing::Test::HasFailure()) << "seed " << p.seed;
    ASSERT_TRUE(r.finished) << "seed " << p.seed << ": senders did not finish in " << r.steps << " steps";
    EXPECT_EQ(r.released_slots, uint64_t{p.messages} * p.ppm) << "seed " << p.seed << ": every slot released once";
    timeouts += r.sender_timeouts;
    naks += r.counters.naks_sent;
    resends += r.counters.resends;
    answered += r.counters.retransmits_answered;
    stale += r.counters.stale;
  }
  std::printf(
      "loss %.0f%%: %d runs, sender timeouts %llu, NAKs sent %llu, resends %llu, retransmits answered %llu, stale "
      "%llu\n",
      loss * 100, runs, (unsigned long long)timeouts, (unsigned long long)naks, (unsigned long long)resends,
      (unsigned long long)answered, (unsigned long long)stale);
  if (loss > 0) {
    EXPECT_GT(naks, 0u);
    EXPECT_GT(resends + answered, 0u);
  } else {  // nothing lost: nothing to recover
    EXPECT_EQ(timeouts, 0u);
    EXPECT_EQ(naks, 0u);
    EXPECT_EQ(resends, 0u);
    EXPECT_EQ(answered, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Loss, EngineSim, ::testing::Values(0.0, 0.01, 0.05),
                         [](const auto& info) { return "loss" + std::to_string(static_cast<int>(info.param * 100)); });

// What the appliance's own loss recovery saves: the same seeded runs at 1% loss with it on and off.
TEST(EngineSimRecovery, FastRecoverySavesSenderTimeoutsAtOnePercentLoss) {
  uint64_t with = 0, without = 0, steps_with = 0, steps_without = 0;
  for (int i = 0; i < 300; ++i) {
    RunParams p = random_params(static_cast<uint32_t>(100000 + i), 0.01);
    p.fast_recovery = true;
    const RunResult a = Sim(p).run();
    p.fast_recovery = false;
    const RunResult b = Sim(p).run();
    ASSERT_TRUE(a.finished && b.finished) << "seed " << p.seed;
    with += a.sender_timeouts;
    without += b.sender_timeouts;
    steps_with += a.steps;
    steps_without += b.steps;
  }
  std::printf(
      "1%% loss, 300 runs: sender timeouts %llu with fast recovery, %llu without (%.0f%% saved); "
      "simulated time %.1f ms vs %.1f ms\n",
      (unsigned long long)with, (unsigned long long)without,
      without ? 100.0 * (double)(without - std::min(with, without)) / (double)without : 0.0, (double)steps_with / 1000,
      (double)steps_without / 1000);
  EXPECT_LT(with, without);
}

// One data packet lost before the appliance and then the NAK the appliance sends
// for it lost too. The NAK goes again from poll() on its backoff schedule, so no sender ever waits
// for its RC timeout: every run finishes without one, in every seed.
TEST(EngineSimRecovery, ALostNakIsSentAgainSoNoSenderTimesOut) {
  uint64_t runs = 0, resent = 0, steps = 0;
  for (int i = 0; i < 200; ++i) {
    RunParams p = random_params(static_cast<uint32_t>(200000 + i), 0.0);
    std::mt19937 pick(p.seed);
    const unsigned victim = pick() % p.n;
    p.ppm = std::max(p.ppm, 2u);
    // Not the last packet of its message: the message's next packet follows it (a WRITE is posted
    // whole) and shows the gap. (A message's last packet lost with nothing after it in the window
    // is the RC timeout's to recover: nothing tells anyone it was ever sent.)
    const uint64_t lost = (pick() % p.messages) * p.ppm + pick() % (p.ppm - 1);
    JobFixture shape(1, p.n, p.dtype, p.ppm * 32, 32, p.window, 0xffffff - p.seed % 50);
    const uint32_t lost_psn = shape.psn(victim, lost);
    bool data_dropped = false, nak_dropped = false;
    p.drop = [&](unsigned r, int link, const std::vector<uint8_t>& f) {
      if (r != victim) return false;
      wire::Layout l;
      if (wire::parse_frame(f, l) != wire::ParseStatus::roce) return false;
      if (link == 0 && !data_dropped && wire::bth_of(f.data(), l).psn() == lost_psn) return data_dropped = true;
      if (link == 3 && !nak_dropped && l.aeth && wire::aeth_of(f.data(), l).is_nak()) return nak_dropped = true;
      return false;
    };
    const RunResult r = Sim(p).run();
    ASSERT_FALSE(::testing::Test::HasFailure()) << "seed " << p.seed;
    ASSERT_TRUE(r.finished) << "seed " << p.seed;
    ASSERT_TRUE(data_dropped && nak_dropped) << "seed " << p.seed << ": the scenario did not happen";
    EXPECT_EQ(r.sender_timeouts, 0u) << "seed " << p.seed << ": a sender waited for its RC timeout (at step "
                                     << r.last_timeout_step << ")";
    ++runs;
    resent += r.counters.naks_resent;
    steps += r.steps;
  }
  std::printf("lost packet + lost NAK, %llu runs: NAKs sent again %llu, mean run %.0f us (sender RC timeout %llu us)\n",
              (unsigned long long)runs, (unsigned long long)resent, (double)steps / (double)runs,
              (unsigned long long)(kSenderAckTimeoutNs / 1000));
  EXPECT_GE(resent, runs);
}
