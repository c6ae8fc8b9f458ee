// A job whose ranks sit in several racks (docs/protocol.md section 21): one leaf engine per rack and
// a spine engine, each given its part of one ring by control::split_across_racks, the ranks'
// go-back-N RC senders and receivers (as RDMA NICs behave) at the ends, every link between them
// lossy in both directions. Checked on every packet a receiver takes: the total of every rank's
// gradient (each rack's partial summed by a plain loop in rank order, rounded to the dtype as the
// wire carries it, then the partials in rack order), a valid ICRC; on every engine's output: each
// connection's first release of every PSN in order; at the end: every sender finished, every
// buffer and byte of job memory back. Plus the leaf's steps one by one, and what it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "engine_harness.hpp"
#include "inagg/control/racks.hpp"
#include "rc_peers.hpp"

using namespace inagg;
using namespace inagg::enginetest;
using agg::Dtype;

namespace {

constexpr uint64_t kStepNs = 1000;
constexpr uint64_t kSenderAckTimeoutNs = 2'000'000;

struct RackRun {
  std::vector<unsigned> rack_of;  // per rank
  unsigned messages = 6;
  uint32_t ppm = 2;
  unsigned window = 2;
  double loss = 0;
  Dtype dtype = Dtype::fp32;
  uint32_t seed = 1;
  // Racks of one rank hang off the spine directly, with no leaf: the spine has ranks of its own.
  bool singles_at_spine = false;
};

struct RackResult {
  bool finished = false;
  uint64_t steps = 0, delivered = 0, sender_timeouts = 0;
  agg::EngineCounters leaves, spine;
};

class RackSim {
 public:
  explicit RackSim(const RackRun& p)
      : p_(p),
        n_(static_cast<unsigned>(p.rack_of.size())),
        job_(1, n_, p.dtype, p.ppm * 32, 32, p.window, 0xffffff - p.seed % 50),
        rng_(p.seed) {
    job_.seed = p.seed;
    cfg_.resend_timeout_ns = 300'000;
    cfg_.abort_timeout_ns = 1'000'000'000'000ull;
    std::string err;
    const auto parts = control::split_across_racks(job_.spec, p.rack_of, &err);
    EXPECT_TRUE(parts) << err;
    if (!parts) return;
    // Rack i is the i-th block of consecutive ranks; its leaf the engine leaf_engine[i], or none (a
    // rank of its own at the spine, whose part of the job is the rack's uplink there).
    std::vector<unsigned> leaf_of(n_);
    for (unsigned r = 0, i = 0; r < n_; ++r) {
      if (r > 0 && p.rack_of[r] != p.rack_of[r - 1]) ++i;
      leaf_of[r] = i;
    }
    constexpr unsigned kNoLeaf = ~0u;
    std::vector<unsigned> leaf_engine;
    for (size_t i = 0; i < parts->leaves.size(); ++i) {
      const bool single = std::count(leaf_of.begin(), leaf_of.end(), i) == 1;
      if (p.singles_at_spine && single && parts->spine) {
        leaf_engine.push_back(kNoLeaf);
        continue;
      }
      leaf_engine.push_back(static_cast<unsigned>(engines_.size()));
      add_engine(parts->leaves[i]);
    }
    const unsigned spine = static_cast<unsigned>(engines_.size());
    if (parts->spine) {
      spine_ = spine;
      add_engine(*parts->spine);
    }
    for (unsigned c = 0; c < n_; ++c) {
      const unsigned from = leaf_of[c], to = leaf_of[(c + 1) % n_];
      std::vector<unsigned> path;
      if (from == to) {
        path = {leaf_engine[from]};
      } else {
        if (leaf_engine[from] != kNoLeaf) path.push_back(leaf_engine[from]);
        path.push_back(spine);
        if (leaf_engine[to] != kNoLeaf) path.push_back(leaf_engine[to]);
      }
      path_.push_back(path);
      data_.emplace_back(path_[c].size() + 1);
      ack_.emplace_back(path_[c].size() + 1);
    }
    // The total every receiver must get: each rack's partial, then the partials in rack order.
    total_ = static_cast<uint64_t>(p.messages) * p.ppm;
    for (uint64_t s = 0; s < total_; ++s) {
      std::vector<std::vector<uint8_t>> partials, rack;
      for (unsigned r = 0; r < n_; ++r) {
        rack.push_back(job_.payload(r, s));
        if (r + 1 == n_ || leaf_of[r + 1] != leaf_of[r]) {
          partials.push_back(plain_sum(p.dtype, rack));
          rack.clear();
        }
      }
      sums_.push_back(plain_sum(p.dtype, partials));
    }
    senders_.resize(n_);
    receivers_.resize(n_);
    released_.resize(engines_.size(), std::vector<uint64_t>(n_, 0));
  }

  RackResult run() {
    RackResult res;
    if (engines_.empty()) return res;
    for (res.steps = 0; res.steps < 600'000 && !done(); ++res.steps) {
      now_ += kStepNs;
      const int actions = 1 + static_cast<int>(rng_() % 6);
      for (int a = 0; a < actions; ++a) step_once();
      for (unsigned r = 0; r < n_; ++r) sender_timer(r);
      for (size_t e = 0; e < engines_.size(); ++e) {
        engines_[e]->poll(now_, tx_);
        route(static_cast<unsigned>(e));
      }
      if (::testing::Test::HasFatalFailure()) return res;
    }
    res.finished = done();
    res.delivered = delivered_;
    for (auto& s : senders_) res.sender_timeouts += s.timeouts;
    for (size_t e = 0; e < engines_.size(); ++e) {
      agg::JobInfo info{};
      EXPECT_TRUE(engines_[e]->job_info(1, &info));
      EXPECT_EQ(info.state, agg::JobState::active) << "engine " << e << ": " << info.error;
      EXPECT_EQ(info.slot_completion.count(), info.counters.slots_completed) << "engine " << e;
      (e == spine_ ? res.spine : res.leaves).add(info.counters);
      std::string err;
      EXPECT_TRUE(engines_[e]->remove_job(1, &err)) << err;
      EXPECT_EQ(engines_[e]->memory_in_use(), 0u);
      EXPECT_EQ(engines_[e]->mbufs_reserved(), 0u);
    }
    EXPECT_EQ(pool_.live(), 0u) << "buffers leaked";
    return res;
  }

 private:
  using Sender = RcSender;
  using Receiver = RcReceiver;
  using Link = std::deque<std::vector<uint8_t>>;

  void add_engine(const control::JobSpec& s) {
    engines_.push_back(std::make_unique<agg::Engine>(cfg_, pool_.ops));
    std::string err;
    EXPECT_TRUE(engines_.back()->add_job(s, &err)) << err;
  }

  void push(Link& q, std::vector<uint8_t> f) {
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < p_.loss) return;
    q.push_back(std::move(f));
  }

  bool done() const {
    for (unsigned r = 0; r < n_; ++r)
      if (senders_[r].una < total_ || receivers_[r].expected < total_) return false;
    return true;
  }

  // data_[c][i] delivers to path_[c][i] (i < L) or the receiver (i == L); ack_[c][i] delivers to
  // path_[c][L-1-i] (i < L) or the sender (i == L).
  void step_once() {
    const unsigned c = rng_() % n_;
    const size_t L = path_[c].size();
    if (rng_() % 3 == 0) {  // the sender transmits if its window allows
      if (const auto seq = senders_[c].transmit(total_, p_.ppm, p_.window, now_))
        push(data_[c][0], job_.data_frame(c, *seq));
      return;
    }
    const bool data = rng_() % 2;
    const size_t i = rng_() % (L + 1);
    Link& q = data ? data_[c][i] : ack_[c][i];
    if (q.empty()) return;
    std::vector<uint8_t> f = std::move(q.front());
    q.pop_front();
    if (i == L) return data ? receive_data(c, f) : receive_ack(c, f);
    const unsigned e = data ? path_[c][i] : path_[c][L - 1 - i];
    engines_[e]->process(pool_.wrap(f), now_, tx_);
    route(e);
  }

  void sender_timer(unsigned r) { senders_[r].timer(total_, now_, kSenderAckTimeoutNs); }

  // What engine e emitted goes one hop on along its connection's path, forward (data) or back (ACKs
  // and NAKs, the engine's own included).
  void route(unsigned e) {
    for (size_t k = 0; k < tx_.size(); ++k) {
      Out o;
      o.frame = pool_.take(tx_[k]);
      ASSERT_EQ(wire::parse_frame(o.frame, o.l), wire::ParseStatus::roce);
      const bool data = wire::is_rdma_write(o.opcode());
      bool routed = false;
      for (unsigned c = 0; c < n_ && !routed; ++c) {
        const auto& conn = job_.spec.conns[c];
        if (o.dest_qp() != (data ? conn.dst_qpn : conn.src_qpn)) continue;
        const auto& path = path_[c];
        const size_t j = std::find(path.begin(), path.end(), e) - path.begin();
        ASSERT_LT(j, path.size()) << "engine " << e << " emitted a packet of connection " << c << " not on its path";
        if (data) {
          check_release_order(e, c, o);
          push(data_[c][j + 1], std::move(o.frame));
        } else {
          push(ack_[c][path.size() - j], std::move(o.frame));
        }
        routed = true;
      }
      ASSERT_TRUE(routed) << "engine " << e << " emitted a packet for no connection";
    }
    tx_.clear();
  }

  uint64_t seq_of(uint32_t psn, uint64_t reference, unsigned r) const {
    const int64_t s = static_cast<int64_t>(reference) + sext24(psn - job_.psn(r, reference));
    EXPECT_GE(s, 0);
    return static_cast<uint64_t>(s);
  }

  void check_release_order(unsigned e, unsigned c, const Out& o) {
    uint64_t& first_unseen = released_[e][c];
    const uint64_t seq = seq_of(o.psn(), first_unseen, c);
    ASSERT_LE(seq, first_unseen) << "engine " << e << ", connection " << c << ": a PSN released before the ones below";
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
    ASSERT_EQ(o.payload(), sums_[seq]) << "rank " << r << " seq " << seq << " seed " << p_.seed
                                       << ": not the total of every rack's partial";
    ++delivered_;
    const auto reply = rx.receive(seq, seq % p_.ppm == p_.ppm - 1,
                                  [&] { return wire::bth_of(o.frame.data(), o.l).ack_req() || rng_() % 2; });
    if (reply) push(ack_[r][0], job_.ack_frame(r, reply->seq, reply->syndrome, reply->msn));
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

  RackRun p_;
  unsigned n_;
  JobFixture job_;
  std::mt19937 rng_;
  agg::EngineConfig cfg_;
  Pool pool_;
  std::vector<std::unique_ptr<agg::Engine>> engines_;  // the leaves, then the spine
  size_t spine_ = ~size_t{0};                          // the spine's index in engines_, if any
  std::vector<std::vector<unsigned>> path_;            // per connection: the engines it crosses
  std::vector<std::vector<Link>> data_, ack_;
  std::vector<std::vector<uint64_t>> released_;  // per engine and connection
  agg::TxList tx_{1 << 12};
  std::vector<Sender> senders_;
  std::vector<Receiver> receivers_;
  std::vector<std::vector<uint8_t>> sums_;
  uint64_t total_ = 0, now_ = 1'000'000, delivered_ = 0;
};

// Racks of 1 to 4 ranks, 2 or 3 racks, every dtype, 0, 1 and 5% loss on every link; in a third of
// the runs a rack of one rank has no leaf and its rank hangs off the spine directly.
TEST(EngineRacks, LeavesAndASpineSumEveryRackExactlyUnderLoss) {
  const std::vector<std::vector<unsigned>> layouts = {
      {0, 0, 1, 1}, {0, 1}, {0, 0, 0, 1}, {0, 1, 1, 1, 2}, {0, 0, 1, 1, 2, 2, 2, 2}, {5, 5, 3, 3}};
  const Dtype dts[] = {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16};
  for (double loss : {0.0, 0.01, 0.05}) {
    const int runs = loss == 0 ? 60 : 200;
    uint64_t answered = 0, naks = 0, resends = 0, partials = 0, spine_slots = 0, timeouts = 0;
    for (int i = 0; i < runs; ++i) {
      RackRun p;
      p.seed = static_cast<uint32_t>(5000 + i * 13 + static_cast<int>(loss * 1000));
      std::mt19937 pick(p.seed);
      p.rack_of = layouts[pick() % layouts.size()];
      p.dtype = dts[i % 4];
      p.messages = 3 + pick() % 6;
      p.ppm = 1 + pick() % 4;
      p.window = 1 + pick() % 3;
      p.loss = loss;
      p.singles_at_spine = i % 3 == 1;
      const RackResult r = RackSim(p).run();
      ASSERT_FALSE(::testing::Test::HasFailure()) << "seed " << p.seed;
      ASSERT_TRUE(r.finished) << "seed " << p.seed << ": senders did not finish in " << r.steps << " steps";
      const uint64_t slots = uint64_t{p.messages} * p.ppm;
      EXPECT_EQ(r.spine.slots_released, slots) << "seed " << p.seed << ": the spine summed every slot once";
      EXPECT_EQ(r.leaves.job_errors + r.spine.job_errors, 0u);
      if (loss == 0) {
        // The spine sees one partial per rack and slot, never a rank's own packet.
        const size_t racks =
            1 + std::count_if(p.rack_of.begin() + 1, p.rack_of.end(), [&, k = size_t{0}](unsigned) mutable {
              ++k;
              return p.rack_of[k] != p.rack_of[k - 1];
            });
        EXPECT_EQ(r.spine.aggregated_packets, slots * racks) << "seed " << p.seed;
        EXPECT_EQ(r.sender_timeouts, 0u) << "seed " << p.seed;
      }
      answered += r.leaves.retransmits_answered + r.spine.retransmits_answered;
      naks += r.leaves.naks_sent + r.leaves.tail_naks + r.spine.naks_sent + r.spine.tail_naks;
      resends += r.leaves.resends + r.spine.resends;
      partials += r.leaves.aggregated_packets;
      spine_slots += r.spine.slots_released;
      timeouts += r.sender_timeouts;
    }
    std::printf(
        "loss %.0f%%: %d runs, spine slots %llu, leaf packets %llu, NAKs %llu, answered %llu, resends %llu, sender "
        "timeouts %llu\n",
        loss * 100, runs, (unsigned long long)spine_slots, (unsigned long long)partials, (unsigned long long)naks,
        (unsigned long long)answered, (unsigned long long)resends, (unsigned long long)timeouts);
    if (loss > 0) {
      EXPECT_GT(naks + answered + resends, 0u);
    }
  }
}

// The leaf's steps, one by one: ranks 1 and 2 of a 4-rank ring in racks {0,1} {2,3} seen from the
// second rack's leaf (downlink 1->2, local 2->3, uplink 3->0).
class LeafSteps : public EngineTest {
 protected:
  JobFixture ring{3, 4, Dtype::fp32, 64, 32, 2};
  control::JobSpec leaf, spine;

  void SetUp() override {
    EngineTest::SetUp();
    std::string err;
    const auto parts = control::split_across_racks(ring.spec, {0, 0, 1, 1}, &err);
    ASSERT_TRUE(parts) << err;
    ASSERT_EQ(parts->leaves.size(), 2u);
    ASSERT_TRUE(parts->spine);
    leaf = parts->leaves[1];
    spine = *parts->spine;
    ASSERT_TRUE(engine->add_job(leaf, &err)) << err;
  }
  std::vector<uint8_t> partial(uint64_t seq) const {
    return plain_sum(Dtype::fp32, {ring.payload(2, seq), ring.payload(3, seq)});
  }
  std::vector<uint8_t> total(uint64_t seq) const {
    return plain_sum(Dtype::fp32, {plain_sum(Dtype::fp32, {ring.payload(0, seq), ring.payload(1, seq)}), partial(seq)});
  }
  // Rank 1's packet as the spine releases it: the total in its payload.
  std::vector<uint8_t> downlink(uint64_t seq) const { return JobFixture::build(ring.frame_spec(1, seq), total(seq)); }
};

TEST_F(LeafSteps, PartialGoesUpAtOnceTotalComesDownIntoTheHeldPackets) {
  EXPECT_EQ(leaf.tier, control::Tier::leaf);
  EXPECT_EQ(spine.tier, control::Tier::spine);
  ASSERT_EQ(leaf.conns.size(), 3u);
  EXPECT_EQ(leaf.conns[0].src_ip, ring.spec.conns[1].src_ip);  // the downlink: 1 -> 2
  EXPECT_EQ(leaf.conns[2].dst_ip, ring.spec.conns[0].src_ip);  // the uplink: 3 -> 0
  ASSERT_EQ(spine.conns.size(), 2u);                           // the uplinks 1 -> 2 and 3 -> 0

  EXPECT_TRUE(send(ring.data_frame(2, 0)).empty());  // rank 2's packet is held
  auto up = send(ring.data_frame(3, 0));             // rank 3's completes the rack: the partial goes up
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].dest_qp(), ring.spec.conns[3].dst_qpn);
  EXPECT_EQ(up[0].psn(), ring.psn(3, 0));
  EXPECT_EQ(up[0].payload(), partial(0));
  EXPECT_TRUE(up[0].icrc_ok());
  // Rank 3 retransmits it (its ACK was lost): the partial again.
  auto again = send(ring.data_frame(3, 0));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].payload(), partial(0));
  EXPECT_TRUE(again[0].icrc_ok());
  EXPECT_EQ(info(3).counters.retransmits_answered, 1u);

  // The total comes down on 1 -> 2: it goes to rank 3 (on 2 -> 3) and on to rank 2, in PSN order.
  auto down = send(downlink(0));
  ASSERT_EQ(down.size(), 2u);
  for (const Out& o : down) {
    EXPECT_EQ(o.payload(), total(0));
    EXPECT_TRUE(o.icrc_ok());
  }
  EXPECT_EQ(down[0].dest_qp(), ring.spec.conns[1].dst_qpn);
  EXPECT_EQ(down[1].dest_qp(), ring.spec.conns[2].dst_qpn);
  const agg::JobInfo i = info(3);
  EXPECT_EQ(i.counters.released_packets, 3u);  // the partial (not its answer), then 2
  EXPECT_EQ(i.counters.slots_released, 1u);
  EXPECT_EQ(i.held_packets, 0u);
  EXPECT_EQ(i.retained_packets, 3u);

  // A retransmission of rank 2's packet after the release: the total; of rank 3's: still the partial.
  auto r2 = send(ring.data_frame(2, 0));
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].payload(), total(0));
  auto r3 = send(ring.data_frame(3, 0));
  ASSERT_EQ(r3.size(), 1u);
  EXPECT_EQ(r3[0].payload(), partial(0));
}

// The uplink's ACKs come from the other rack as soon as the partial is out (its receiver gets the
// total through the spine before this leaf does): they are not a bypass, and free its retained copy.
TEST_F(LeafSteps, UplinkAcksArriveBeforeTheSlotCompletes) {
  send(ring.data_frame(2, 0));
  ASSERT_EQ(send(ring.data_frame(3, 0)).size(), 1u);
  auto acks = send(ring.ack_frame(3, 0));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(info(3).counters.err_ack_bypass, 0u);
  EXPECT_EQ(info(3).retained_packets, 0u);
  // An ACK of the downlink before the leaf released anything to its receiver is one.
  EXPECT_TRUE(send(ring.ack_frame(1, 0)).empty());
  EXPECT_EQ(info(3).counters.err_ack_bypass, 1u);
  auto down = send(downlink(0));
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(info(3).retained_packets, 2u);
}

// A leaf with one rank of its own (a rack of one): its partial is that rank's own gradient.
TEST_F(EngineTest, ALeafOfOneRankSendsItsGradientUpAsThePartial) {
  JobFixture ring(4, 3, Dtype::int32, 32, 32, 2);
  std::string err;
  const auto parts = control::split_across_racks(ring.spec, {0, 0, 1}, &err);
  ASSERT_TRUE(parts) << err;
  ASSERT_TRUE(engine->add_job(parts->leaves[1], &err)) << err;
  auto up = send(ring.data_frame(2, 0));
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].payload(), ring.payload(2, 0));
  EXPECT_TRUE(up[0].icrc_ok());
}

TEST_F(EngineTest, LeafAndSpinePartsAreCheckedAndSplitsRefused) {
  JobFixture ring(5, 4, Dtype::fp32, 64, 32, 2);
  std::string err;
  EXPECT_FALSE(control::split_across_racks(ring.spec, {0, 1, 0, 1}, &err));
  EXPECT_NE(err.find("not next to it in the ring"), std::string::npos) << err;
  EXPECT_FALSE(control::split_across_racks(ring.spec, {0, 1}, &err));
  EXPECT_NE(err.find("4 ranks but 2 racks named"), std::string::npos) << err;
  const auto one = control::split_across_racks(ring.spec, {7, 7, 7, 7}, &err);
  ASSERT_TRUE(one) << err;
  EXPECT_FALSE(one->spine);
  EXPECT_EQ(one->leaves.at(0).tier, control::Tier::flat);

  auto parts = control::split_across_racks(ring.spec, {0, 0, 1, 1}, &err);
  ASSERT_TRUE(parts) << err;
  control::JobSpec bad = parts->leaves[0];
  std::swap(bad.conns[1].src_ip, bad.conns[2].src_ip);
  EXPECT_FALSE(engine->add_job(bad, &err));
  EXPECT_NE(err.find("not a rack's chain"), std::string::npos) << err;
  bad = parts->leaves[0];
  bad.replay = true;
  EXPECT_FALSE(engine->add_job(bad, &err));
  EXPECT_NE(err.find("cannot be a replay job"), std::string::npos) << err;
  bad = parts->leaves[0];
  bad.workers = 1;
  bad.conns.resize(1);
  EXPECT_FALSE(engine->add_job(bad, &err));
  EXPECT_NE(err.find("at least 2 connections"), std::string::npos) << err;
  // The spine's ranks are the uplinks, not a ring: accepted as a spine, refused as a flat job.
  EXPECT_TRUE(engine->add_job(*parts->spine, &err)) << err;
  ASSERT_TRUE(engine->remove_job(5, &err)) << err;
  control::JobSpec flat = *parts->spine;
  flat.tier = control::Tier::flat;
  EXPECT_FALSE(engine->add_job(flat, &err));
  EXPECT_NE(err.find("not a ring"), std::string::npos) << err;
}

}  // namespace
