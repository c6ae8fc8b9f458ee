// client::Rank over a Transport of the test's own: n ranks in threads of one process, their
// writes copied in memory. For ring mode the copy goes straight to the successor; for ina mode it
// passes a stand-in for the appliance that sums a message once all n ranks wrote it, in rank
// order, and hands every rank the sum (or, once it forgot the job, switches it unsummed). The sums
// must equal the --check reference, which shows the algorithms need nothing of a transport but the
// Transport interface. Then real software ranks on loopback, and the options' checks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "inagg/agg/kernels.hpp"
#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/wire/xagg_mac.hpp"
#include "reference.hpp"

using namespace inagg::client;
using inagg::apps::fill_input;
using inagg::apps::Reference;
using inagg::util::Dtype;

namespace {

// Every rank here meets with the job's secret, handed over as a launcher does (the environment).
const bool kSecretGiven = ::setenv(kExchangeSecretEnv, "the job's secret, 0123456789", 1) == 0;

class MemoryRack;

class MemoryTransport final : public Transport {
 public:
  MemoryTransport(MemoryRack& rack, unsigned rank, const TransportRequest& r)
      : send_(r.send_bytes), recv_(r.receive_bytes), rack_(rack), rank_(rank) {}
  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  bool open_receive(std::string*) override { return true; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override { std::this_thread::sleep_for(std::chrono::microseconds(wait_ms ? 50 : 0)); }
  bool writes_done() const override { return true; }
  uint64_t messages_received() const override { return received_; }
  uint64_t last_arrival_ns() const override { return now_ns(); }
  const std::string& error() const override { return error_; }
  void finish(uint64_t) override {}
  TransportCounters counters() const override { return {}; }
  bool barrier(const std::string& what, std::string* error) override;

  std::vector<uint8_t> send_, recv_;
  std::atomic<uint64_t> received_{0};

 private:
  MemoryRack& rack_;
  unsigned rank_;
  std::string error_;
};

// The ranks' transports, and for ina the appliance: per destination offset, the n ranks' messages.
// sums_before_restart: after that many sums the stand-in forgets the job, as an appliance that
// restarted: the messages it held and every later one go to the successor unsummed. A job of a
// rotated collective (rotate()) is summed or filled by shard instead, as docs/protocol.md section
// 20 says, written out here from the schedule, at message granularity.
class MemoryRack {
 public:
  MemoryRack(unsigned n, bool aggregate, Dtype dtype, uint64_t sums_before_restart = UINT64_MAX)
      : n_(n), aggregate_(aggregate), dtype_(dtype), t_(n), sums_left_(sums_before_restart) {}

  void rotate(inagg::control::Collective c, uint32_t chunk, uint32_t message) {
    rotated_ = c;
    chunk_ = chunk;
    message_ = message;
  }

  TransportFactory factory() {
    return [this](const TransportRequest& r, std::string*) -> std::unique_ptr<Transport> {
      auto t = std::make_unique<MemoryTransport>(*this, r.rack.rank, r);
      std::lock_guard<std::mutex> g(m_);
      t_[r.rack.rank] = t.get();
      return t;
    };
  }

  void write(unsigned from, const uint8_t* src, uint32_t len, uint64_t dst, uint64_t src_offset) {
    std::lock_guard<std::mutex> g(m_);
    if (rotated_ != inagg::control::Collective::allreduce) return rotated_write(from, src, len, dst, src_offset);
    if (aggregate_ && sums_left_ == 0) {
      aggregate_ = false;
      for (auto& [at, slot] : slots_)
        for (unsigned r = 0; r < n_; ++r)
          if (!slot.in[r].empty()) forward(r, slot.in[r].data(), static_cast<uint32_t>(slot.in[r].size()), at);
      slots_.clear();
    }
    if (!aggregate_) return forward(from, src, len, dst);
    Slot& s = slots_[dst];
    s.in.resize(n_);
    s.in[from].assign(src, src + len);
    if (++s.count < n_) return;
    std::vector<const uint8_t*> srcs;
    for (unsigned r = 0; r < n_; ++r) srcs.push_back(s.in[r].data());
    std::vector<uint8_t> sum(len);
    inagg::agg::scalar::sum_ranked(dtype_, sum.data(), srcs.data(), n_, len);
    for (MemoryTransport* to : t_) {
      std::memcpy(to->recv_.data() + dst, sum.data(), len);
      ++to->received_;
    }
    slots_.erase(dst);
    --sums_left_;
  }

  // Every rank's thread meets here; a rank naming another barrier than the first comer's fails.
  bool barrier(const std::string& what, std::string* error) {
    std::unique_lock<std::mutex> g(m_);
    if (arrived_ == 0) barrier_name_ = what;
    if (what != barrier_name_) {
      *error = "barrier '" + what + "' while the others are at '" + barrier_name_ + "'";
      return false;
    }
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      met_.notify_all();
      return true;
    }
    met_.wait(g, [&] { return generation_ != generation; });
    return true;
  }

 private:
  // Message `src_offset / message` of `from`'s stream is at position t of its round: shard
  // Rotation::shard_at. reduce_scatter: contributions before the last position pass unchanged and
  // go into their shard's slot; the last (into the shard's owner) is held until the slot has all
  // n - 1, then carries their sum in rank order. all_gather: the owner's message passes unchanged
  // and fills the slot; a placeholder is held until its slot is filled, then carries it. Each
  // connection delivers in the order its sender wrote: what follows a held message waits with it.
  void rotated_write(unsigned from, const uint8_t* src, uint32_t len, uint64_t dst, uint64_t src_offset) {
    const uint64_t seq = src_offset / message_;
    const unsigned t = static_cast<unsigned>((seq / chunk_) % (n_ - 1));
    const uint64_t round = seq / (uint64_t{chunk_} * (n_ - 1)), j = seq % chunk_;
    const bool rs = rotated_ == inagg::control::Collective::reduce_scatter;
    const unsigned shard = Rotation{n_, chunk_}.shard_at(rs, from, t);
    const uint64_t base = dst - seq * message_;  // which half of the receive region
    const auto key = std::make_tuple(base, round, j, shard);
    RotatedSlot& slot = rotated_slots_[key];
    slot.in.resize(n_);
    auto out = std::make_shared<Pending>();
    out->dst = dst;
    queues_.resize(n_);
    queues_[from].push_back(out);
    if (rs) {
      slot.in[from].assign(src, src + len);
      if (t + 2 < n_) {
        out->data.assign(src, src + len);
        out->ready = true;
      } else {
        slot.held.push_back(out);
      }
      if (++slot.count == n_ - 1) {
        std::vector<const uint8_t*> srcs;
        for (unsigned r = 0; r < n_; ++r)
          if (r != shard) srcs.push_back(slot.in[r].data());
        std::vector<uint8_t> sum(len);
        inagg::agg::scalar::sum_ranked(dtype_, sum.data(), srcs.data(), n_ - 1, len);
        for (const std::shared_ptr<Pending>& h : slot.held) {
          h->data = sum;
          h->ready = true;
        }
        rotated_slots_.erase(key);  // the next collective of this parity starts a fresh one
      }
    } else {
      if (t == 0) {
        slot.in[0].assign(src, src + len);
        slot.filled = true;
        out->data.assign(src, src + len);
        out->ready = true;
      } else {
        slot.held.push_back(out);
      }
      if (slot.filled) {
        for (const std::shared_ptr<Pending>& h : slot.held) {
          h->data = slot.in[0];
          h->ready = true;
        }
        slot.held.clear();
      }
      if (++slot.count == n_ - 1) rotated_slots_.erase(key);
    }
    for (unsigned r = 0; r < n_; ++r)
      while (!queues_[r].empty() && queues_[r].front()->ready) {
        const Pending& p = *queues_[r].front();
        forward(r, p.data.data(), static_cast<uint32_t>(p.data.size()), p.dst);
        queues_[r].pop_front();
      }
  }

  void forward(unsigned from, const uint8_t* src, uint32_t len, uint64_t dst) {
    MemoryTransport* to = t_[(from + 1) % n_];
    std::memcpy(to->recv_.data() + dst, src, len);
    ++to->received_;
  }

  struct Slot {
    std::vector<std::vector<uint8_t>> in;
    unsigned count = 0;
  };
  struct Pending {  // a message on its way, waiting for its turn (and, if held, its data)
    uint64_t dst = 0;
    std::vector<uint8_t> data;
    bool ready = false;
  };
  struct RotatedSlot {
    std::vector<std::vector<uint8_t>> in;
    unsigned count = 0;
    bool filled = false;
    std::vector<std::shared_ptr<Pending>> held;
  };
  std::vector<std::deque<std::shared_ptr<Pending>>> queues_;  // per sender: its connection's order
  inagg::control::Collective rotated_ = inagg::control::Collective::allreduce;
  uint32_t chunk_ = 1, message_ = 0;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, unsigned>, RotatedSlot> rotated_slots_;
  unsigned n_;
  bool aggregate_;
  Dtype dtype_;
  std::vector<MemoryTransport*> t_;
  std::map<uint64_t, Slot> slots_;
  uint64_t sums_left_;
  std::mutex m_;
  std::condition_variable met_;
  std::string barrier_name_;
  unsigned arrived_ = 0;
  uint64_t generation_ = 0;
};

bool MemoryTransport::barrier(const std::string& what, std::string* error) { return rack_.barrier(what, error); }

void MemoryTransport::post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t) {
  rack_.write(rank_, send_.data() + src_offset, len, dst_offset, src_offset);
}

// Rank r of n, `mode`, 4 KiB messages of 1 KiB payloads, regions for max_bytes.
RankOptions rank_options(const char* mode, unsigned n, unsigned r, uint64_t max_bytes) {
  RankOptions o;
  o.geometry.ranks = n;
  o.geometry.rank = r;
  o.geometry.message = 4096;
  o.geometry.payload = 1024;
  o.geometry.chunk_bytes = max_bytes;
  o.mode = mode;
  o.timeout_s = 30;
  return o;
}

struct JobResult {
  uint64_t wrong = 0;      // wrong elements in the results the allreduces returned, over all ranks
  unsigned unsummed = 0;   // ranks whose allreduce failed because a message arrived unsummed
  unsigned timed_out = 0;  // ranks whose allreduce timed out
  unsigned finished = 0;   // ranks that ran every size
};

// Runs n Ranks of `mode` over a MemoryRack through sizes 4 B to max_bytes by factors of 7,
// checking each result against the reference. appliance false: the stand-in switches ina's writes
// instead of summing them; sums_before_restart: it forgets the job after that many sums. A rank
// stops at an allreduce that fails (which must say a message arrived unsummed, or that it timed out).
JobResult run_job(const char* mode, Dtype dtype, unsigned n, uint64_t max_bytes, bool appliance = true,
                  uint64_t sums_before_restart = UINT64_MAX, double timeout_s = 30) {
  MemoryRack rack(n, appliance && std::string(mode) == "ina", dtype, sums_before_restart);
  std::vector<RankOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    RankOptions& o = opts[r] = rank_options(mode, n, r, max_bytes);
    o.geometry.dtype = std::string(inagg::util::dtype_name(dtype));
    o.timeout_s = timeout_s;
    EXPECT_EQ(o.validate(), "");
  }
  std::atomic<uint64_t> wrong{0};
  std::atomic<unsigned> unsummed{0}, timed_out{0}, finished{0};
  std::latch opened(n);  // every rank's memory exists before anyone writes into it
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank w(opts[r], rack.factory());
      const int rc = w.start();
      opened.arrive_and_wait();
      ASSERT_EQ(rc, 0) << w.error();
      std::vector<uint8_t> data(max_bytes);
      const size_t es = inagg::util::dtype_size(dtype);
      for (uint64_t size = 4; size <= max_bytes; size *= 7) {
        const uint64_t bytes = size / es * es;
        if (bytes == 0) continue;
        Reference ref({dtype, n, 1, std::string(mode) == "ring", 1.0}, bytes);
        for (int it = 0; it < 2; ++it) {
          fill_input(dtype, 1, r, data.data(), bytes);
          if (!w.allreduce(data.data(), data.data(), bytes)) {
            // The tally; or, after a restart, a predecessor that stopped on it sends nothing more.
            if (w.error().find("tally 1, want " + std::to_string(n) + ")") != std::string::npos)
              ++unsummed;
            else if (w.error().find("): timed out [") != std::string::npos)
              ++timed_out;
            else
              ADD_FAILURE() << "rank " << r << ": " << w.error();
            return;
          }
          const std::vector<uint8_t>& want = ref.sum(w.last_tier());
          uint64_t bad = 0;
          for (size_t i = 0; i < bytes; i += es) bad += std::memcmp(want.data() + i, data.data() + i, es) != 0;
          EXPECT_EQ(bad, 0u) << "rank " << r << ", " << bytes << " bytes, iteration " << it;
          wrong += bad;
        }
      }
      EXPECT_TRUE(w.finish()) << w.error();
      ++finished;
    });
  }
  for (std::thread& t : threads) t.join();
  return {wrong.load(), unsummed.load(), timed_out.load(), finished.load()};
}

// Rank r's input of a plain-loop test: small integers, so that every order of summing them gives
// the same sum in every dtype (fp16 and bf16 hold integers up to 256 exactly).
double input_of(unsigned r, uint64_t i) { return static_cast<double>((r * 7 + i * 3) % 17) - 8; }

void put(Dtype d, uint8_t* at, double v) {
  switch (d) {
    case Dtype::fp32: {
      const float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
      return;
    }
    case Dtype::int32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(at, &x, 4);
      return;
    }
    case Dtype::fp16:
    case Dtype::bf16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t h = static_cast<uint16_t>(bits >> 16);  // bf16: small integers are exact
      if (d == Dtype::fp16) {
        // Small integers: sign, a biased exponent of 15 + e, the top 10 bits of the mantissa.
        const uint32_t sign = bits >> 31, exp = (bits >> 23) & 0xff, mant = (bits >> 13) & 0x3ff;
        h = f == 0 ? static_cast<uint16_t>(sign << 15)
                   : static_cast<uint16_t>((sign << 15) | ((exp - 127 + 15) << 10) | mant);
      }
      std::memcpy(at, &h, 2);
      return;
    }
  }
}

}  // namespace

// The collectives against sums computed by a plain loop: every dtype, an allreduce (in place and
// out of place) and, for a job of that collective, a reduce-scatter and an all-gather through the
// stand-in, pieces and all (the regions hold less than the buffer).
TEST(Rank, EveryCollectiveAgainstAPlainLoop) {
  using inagg::control::Collective;
  const unsigned n = 4;
  for (const Collective c : {Collective::allreduce, Collective::reduce_scatter, Collective::all_gather})
    for (const Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16}) {
      const std::string what =
          std::string(inagg::control::collective_name(c)) + ", " + std::string(inagg::util::dtype_name(d));
      const size_t es = inagg::util::dtype_size(d);
      const uint64_t count = 9001 * n, bytes = count * es, shard = bytes / n;
      MemoryRack rack(n, true, d);
      if (c != Collective::allreduce) rack.rotate(c, 2, 4096);
      // Plain loops: the sum of every rank's element i; rank r's shard is elements r x count / n ...
      std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(bytes));
      std::vector<uint8_t> sum(bytes), gathered(bytes);
      for (uint64_t i = 0; i < count; ++i) {
        double total = 0;
        for (unsigned r = 0; r < n; ++r) {
          put(d, in[r].data() + i * es, input_of(r, i));
          total += input_of(r, i);
        }
        put(d, sum.data() + i * es, total);
        put(d, gathered.data() + i * es, input_of(static_cast<unsigned>(i / (count / n)), i));
      }
      std::latch opened(n);
      std::vector<std::thread> threads;
      for (unsigned r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          RankOptions o = rank_options("ina", n, r, 20000);  // pieces: the buffer is larger
          o.geometry.dtype = std::string(inagg::util::dtype_name(d));
          o.geometry.collective = inagg::control::collective_name(c);
          o.geometry.chunk = 2;
          ASSERT_EQ(o.validate(), "");
          Rank w(o, rack.factory());
          const int rc = w.start();
          opened.arrive_and_wait();
          ASSERT_EQ(rc, 0) << w.error();
          std::vector<uint8_t> out(bytes, 0xee);
          if (c == Collective::allreduce) {
            ASSERT_TRUE(w.allreduce(in[r].data(), out.data(), bytes)) << what << ": " << w.error();
            EXPECT_EQ(out, sum) << what << ", out of place, rank " << r;
            std::vector<uint8_t> place = in[r];
            ASSERT_TRUE(w.allreduce(place.data(), place.data(), bytes)) << what << ": " << w.error();
            EXPECT_EQ(place, sum) << what << ", in place, rank " << r;
            EXPECT_EQ(w.collectives(), 2u);
          } else if (c == Collective::reduce_scatter) {
            for (int it = 0; it < 2; ++it) {  // both halves of the receive region
              ASSERT_TRUE(w.reduce_scatter(in[r].data(), out.data(), shard)) << what << ": " << w.error();
              EXPECT_EQ(0, std::memcmp(out.data(), sum.data() + r * shard, shard)) << what << ", rank " << r;
            }
          } else {
            for (int it = 0; it < 2; ++it) {
              ASSERT_TRUE(w.all_gather(in[r].data() + r * shard, out.data(), shard)) << what << ": " << w.error();
              EXPECT_EQ(out, gathered) << what << ", rank " << r;
            }
          }
          EXPECT_TRUE(w.finish()) << w.error();
        });
      for (std::thread& t : threads) t.join();
    }
}

// Writes are delivered the moment they are posted, so a predecessor already in the next size
// writes into this rank's region while it still reads the last steps of the current one (each
// step's area at a stride fixed for the run keeps them apart; the stride of the current size did
// not, with every dtype and n = 2..5).
TEST(Rank, RingOverAnotherTransport) {
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16})
    for (unsigned n : {2u, 3u, 4u, 5u})
      EXPECT_EQ(run_job("ring", d, n, 100000).wrong, 0u) << inagg::util::dtype_name(d) << ", " << n << " ranks";
}

TEST(Rank, InaOverAnotherTransportAndAnApplianceStandIn) {
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16}) {
    const JobResult r = run_job("ina", d, 4, 200000);
    EXPECT_EQ(r.wrong, 0u) << inagg::util::dtype_name(d);
    EXPECT_EQ(r.finished, 4u) << inagg::util::dtype_name(d);
  }
  const JobResult r = run_job("ina", Dtype::fp16, 5, 100000);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_EQ(r.finished, 5u);
}

// The stand-in switches instead of summing: every rank gets its predecessor's input, and the
// first allreduce fails on every rank before it returns it.
TEST(Rank, InaWithoutTheApplianceFailsOnTheTally) {
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16}) {
    const JobResult r = run_job("ina", d, 4, 20000, false);
    EXPECT_EQ(r.unsummed, 4u) << inagg::util::dtype_name(d);
    EXPECT_EQ(r.wrong, 0u) << inagg::util::dtype_name(d);
  }
}

// The stand-in forgets the job mid-run, at different points of a multi-message allreduce (4 KiB
// messages; the sweep's 9604-byte size is 3 of them, 67228 bytes 17): no rank returns a result that
// was not summed, and no rank finishes. The stand-in places writes the moment they are posted, as
// a NIC does: a rank whose last message was summed may go on and have its next allreduce switched
// into its successor's region while that one still checks and copies (the first tally sees it).
// Whoever waits for a rank that stopped on the tally times out (2 s here).
TEST(Rank, InaWhoseApplianceForgetsTheJobMidRunFailsOnEveryRank) {
  for (uint64_t sums : {0u, 3u, 5u, 6u, 8u, 9u, 14u, 20u}) {
    const JobResult r = run_job("ina", Dtype::fp32, 4, 100000, true, sums, 2);
    EXPECT_EQ(r.wrong, 0u) << "restart after " << sums << " sums";
    EXPECT_EQ(r.finished, 0u) << "restart after " << sums << " sums";
    EXPECT_GE(r.unsummed, 1u) << "restart after " << sums << " sums";
    EXPECT_EQ(r.unsummed + r.timed_out, 4u) << "restart after " << sums << " sums";
  }
}

// The software transport in exchange mode (--transport udp --exchange, what joins verbs ranks):
// three real UdpRcTransports on loopback (127.0.1.1..3) learn each other's endpoints in the TCP
// exchange, receive through their raw sockets, run ring allreduces and meet in the final barrier.
// Root only (the raw sockets); the rxe lab (tests/rxe, rxe_interop) runs the same against rxe.
TEST(Rank, SoftwareRanksThatExchangeTheirEndpoints) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (raw sockets)";
  const unsigned n = 3;
  const uint64_t max_bytes = 50000;
  std::vector<RankOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    RankOptions& o = opts[r] = rank_options("ring", n, r, max_bytes);
    o.ip_base = "127.0.1.0";
    o.exchange = true;
    o.exchange_port = 30000 + (::getpid() * 13) % 20000;
    EXPECT_EQ(o.validate(), "");
  }
  std::vector<std::thread> threads;
  std::vector<std::vector<RankConnection>> registered(n);
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Rank w(opts[r]);
      ASSERT_EQ(w.start(), 0) << "rank " << r << ": " << w.error();
      registered[r] = w.plan().connections;
      std::vector<uint8_t> data(max_bytes);
      for (uint64_t bytes = 4; bytes <= max_bytes; bytes *= 7) {
        Reference ref({Dtype::fp32, n, 1, true, 1.0}, bytes);
        fill_input(Dtype::fp32, 1, r, data.data(), bytes);
        ASSERT_TRUE(w.allreduce(data.data(), data.data(), bytes)) << "rank " << r << ": " << w.error();
        EXPECT_EQ(std::memcmp(ref.sum(w.last_tier()).data(), data.data(), bytes), 0) << "rank " << r << ", " << bytes;
      }
      EXPECT_TRUE(w.finish()) << "rank " << r << ": " << w.error();
      const std::optional<TransportCounters> c = w.transport_counters();
      ASSERT_TRUE(c);
      EXPECT_EQ(c->bad_icrc, 0u) << "rank " << r;
      EXPECT_GT(c->accepted, 0u) << "rank " << r;
    });
  for (std::thread& t : threads) t.join();
  // Every rank knows the job's connections as they were exchanged: each rank's ring QPs, its
  // address as an IPv4-mapped GID.
  for (unsigned r = 0; r < n; ++r) {
    ASSERT_EQ(registered[r].size(), n) << "rank " << r;
    for (unsigned p = 0; p < n; ++p) {
      EXPECT_EQ(registered[r][p].send_qpn, RackPlan::ring_send_qpn(p));
      EXPECT_EQ(registered[r][p].recv_qpn, RackPlan::ring_recv_qpn(p));
      EXPECT_EQ(registered[r][p].start_psn, RackPlan::start_psn(p));
      EXPECT_EQ(registered[r][p].ip, *inagg::util::parse_ip("::ffff:127.0.1." + std::to_string(p + 1)));
    }
  }
}

// Software ranks on the rack plan, on loopback (127.0.2.x), started 0.3 s apart (the last rank
// first) with an RC budget of 3 x 10 ms: they meet at rank 0 before anyone sends
// (UdpRcTransport::meet), so no write reaches a successor that is not there yet, and they meet
// again in barrier() after unequal local work (one rank computes 0.2 s longer). Every sum, out of
// place and in place, equals a plain loop's (small integers: exact in any order). A rank whose
// plan differs (another number of ranks) is refused by the meeting with a reason.
TEST(Rank, SoftwareRanksOnLoopbackMeetBeforeTheySend) {
  const unsigned n = 3;
  const uint64_t count = 75000, bytes = count * 4;
  const uint16_t port = static_cast<uint16_t>(30000 + (::getpid() * 17) % 20000);
  std::vector<RankOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    RankOptions& o = opts[r] = rank_options("ring", n, r, bytes);
    o.ip_base = "127.0.2.0";
    o.exchange_port = port;
    o.ack_timeout_ms = 10;
    o.retry = 2;
    o.rto_min_ms = 1;
    EXPECT_EQ(o.validate(), "");
  }
  std::vector<uint8_t> sum(bytes);
  for (uint64_t i = 0; i < count; ++i) {
    double total = 0;
    for (unsigned r = 0; r < n; ++r) total += input_of(r, i);
    put(Dtype::fp32, sum.data() + i * 4, total);
  }
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * (n - 1 - r)));
      Rank w(opts[r]);
      ASSERT_EQ(w.start(), 0) << "rank " << r << ": " << w.error();
      std::vector<uint8_t> in(bytes), out(bytes);
      for (int round = 0; round < 2; ++round) {
        for (uint64_t i = 0; i < count; ++i) put(Dtype::fp32, in.data() + i * 4, input_of(r, i));
        if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ASSERT_TRUE(w.barrier("round " + std::to_string(round))) << "rank " << r << ": " << w.error();
        ASSERT_TRUE(w.allreduce(in.data(), out.data(), bytes))
            << "rank " << r << ", round " << round << ": " << w.error();
        EXPECT_EQ(out, sum) << "rank " << r << ", out of place";
        ASSERT_TRUE(w.allreduce(in.data(), in.data(), bytes))
            << "rank " << r << ", round " << round << ": " << w.error();
        EXPECT_EQ(in, sum) << "rank " << r << ", in place";
      }
      EXPECT_TRUE(w.finish()) << "rank " << r << ": " << w.error();
    });
  for (std::thread& t : threads) t.join();

  // Rank 1 started with 4 ranks among ranks of 2: the meeting refuses it and rank 0 says why.
  std::vector<std::string> errors(2);
  std::vector<std::thread> two;
  for (unsigned r : {0u, 1u})
    two.emplace_back([&, r] {
      RankOptions o = rank_options("ring", r == 1 ? 4 : 2, r, 4096);
      o.ip_base = "127.0.2.0";
      o.exchange_port = port;
      o.timeout_s = 3;
      ASSERT_EQ(o.validate(), "");
      Rank w(o);
      EXPECT_NE(w.start(), 0) << "rank " << r << " of a mismatched job opened";
      errors[r] = w.error();
    });
  for (std::thread& t : two) t.join();
  EXPECT_NE(errors[1].find("rank"), std::string::npos) << errors[1];
  EXPECT_FALSE(errors[0].empty());
}

// validate() names the option to change as the front end spells it: each bad field, with a table
// of names none of which is a field's own, must name its entry.
TEST(Rank, ValidateNamesEachBadOption) {
  RankOptionNames names;
  names.ranks = "--x-ranks";
  names.rank = "--x-rank";
  names.dtype = "--x-dtype";
  names.message = "--x-message";
  names.payload = "--x-payload";
  names.window = "--x-window";
  names.chunk_bytes = "--x-chunk-bytes";
  names.collective = "--x-collective";
  names.chunk = "--x-chunk";
  names.mode = "--x-mode";
  names.transport = "--x-transport";
  names.ip_base = "--x-ip-base";
  names.address = "--x-address";
  names.ack_timeout_ms = "--x-ack-timeout";
  names.timeout_s = "--x-timeout";
  names.stall_s = "--x-stall";
  names.exchange_port = "--x-exchange-port";
  names.exchange_secret_file = "--x-exchange-secret-file";
  names.insecure_exchange = "--x-insecure";
  names.control = "--x-control";
  names.control_secret_file = "--x-control-secret-file";
  names.xdp_heads = "--x-xdp-heads";
  names.xdp_mcast = "--x-xdp-mcast";
  names.xdp_key_file = "--x-xdp-key-file";
  names.racks = "--x-racks";
  names.channels = "--x-channels";
  const struct {
    const char* want;  // the name the refusal must start with (or hold)
    std::function<void(RankOptions&)> spoil;
  } cases[] = {
      {"--x-dtype must be", [](RankOptions& o) { o.geometry.dtype = "fp64"; }},
      {"--x-ranks must be between 2 and 64", [](RankOptions& o) { o.geometry.ranks = 1; }},
      {"--x-ranks must be between 2 and 64", [](RankOptions& o) { o.geometry.ranks = 65; }},
      {"--x-rank must be below --x-ranks", [](RankOptions& o) { o.geometry.rank = 4; }},
      {"--x-rank must be given", [](RankOptions& o) { o.rank_given = false; }},
      {"--x-ip-base must be an IPv4 address", [](RankOptions& o) { o.ip_base = "::1"; }},
      {"--x-address must be an IPv4 address", [](RankOptions& o) { o.address = *inagg::util::parse_ip("fd00::1"); }},
      {"--x-message must be a multiple of --x-payload", [](RankOptions& o) { o.geometry.message = 1000; }},
      {"--x-payload auto: no path MTU payload",
       [](RankOptions& o) {
         o.geometry.payload = 0;
         o.geometry.message = 1000;
       }},
      {"--x-window must be at least 1", [](RankOptions& o) { o.geometry.window = 0; }},
      {"--x-collective must be allreduce", [](RankOptions& o) { o.geometry.collective = "broadcast"; }},
      {"--x-chunk must be at least 1", [](RankOptions& o) { o.geometry.chunk = 0; }},
      {"--x-mode must be ina", [](RankOptions& o) { o.mode = "sharp"; }},
      {"--x-collective reduce_scatter runs through the appliance only (--x-mode ina)",
       [](RankOptions& o) {
         o.geometry.collective = "reduce_scatter";
         o.mode = "ring";
       }},
      {"--x-collective all_gather runs on one appliance: it cannot be split across racks (--x-racks)",
       [](RankOptions& o) {
         o.geometry.collective = "all_gather";
         o.rack_of = {0, 0, 1, 1};
       }},
      {"--x-chunk-bytes must be positive", [](RankOptions& o) { o.geometry.chunk_bytes = 0; }},
      {"--x-channels must be 1..16", [](RankOptions& o) { o.geometry.channels = 0; }},
      {"--x-channels must be 1..16", [](RankOptions& o) { o.geometry.channels = 17; }},
      {"--x-channels 2: a reduce_scatter runs on one channel",
       [](RankOptions& o) {
         o.geometry.channels = 2;
         o.geometry.collective = "reduce_scatter";
       }},
      {"--x-channels 2 stripes a job over the appliance's lcores: it runs --x-mode ina or auto",
       [](RankOptions& o) {
         o.geometry.channels = 2;
         o.mode = "ring";
       }},
      {"--x-channels 4 runs on the software transport (--x-transport udp)",
       [](RankOptions& o) {
         o.geometry.channels = 4;
         o.exchange = true;
       }},
      {"--x-channels 2: a job across racks (--x-racks) has one channel yet",
       [](RankOptions& o) {
         o.geometry.channels = 2;
         o.rack_of = {0, 0, 1, 1};
       }},
      {"--x-ack-timeout must be positive", [](RankOptions& o) { o.ack_timeout_ms = 0; }},
      {"--x-timeout must be positive", [](RankOptions& o) { o.timeout_s = -1; }},
      {"--x-stall must be positive, or 0", [](RankOptions& o) { o.stall_s = -1; }},
      {"--x-xdp-heads must list",
       [](RankOptions& o) {
         o.mode = "xdp";
         o.xdp_heads = "head";
       }},
      {"--x-xdp-mcast must be an IPv4 multicast address",
       [](RankOptions& o) {
         o.mode = "xdp";
         o.xdp_heads = "10.77.0.201";
         o.xdp_mcast = "10.0.0.1";
       }},
      {"--x-mode auto needs the job's key for the XDP tier",
       [](RankOptions& o) {
         ::unsetenv(inagg::wire::kXaggKeyEnv);
         o.mode = "auto";
         o.xdp_heads = "10.77.0.201";
       }},
      {"--x-control tcp://10.0.2.2:7000 needs a tenant's credential: --x-control-secret-file",
       [](RankOptions& o) {
         ::unsetenv("INAGG_CONTROL_SECRET");
         o.control = "tcp://10.0.2.2:7000";
       }},
      {"--x-control-secret-file: ",
       [](RankOptions& o) {
         o.control = "tcp://10.0.2.2:7000";
         o.control_secret_file = "/nonexistent/secret";
       }},
      {"--x-transport must be udp", [](RankOptions& o) { o.transport = "roce"; }},
      {"--x-exchange-port must be a TCP port", [](RankOptions& o) { o.exchange_port = 70000; }},
      {"--x-address (the ranks' endpoints through the caller's channel) runs --x-mode ina",
       [](RankOptions& o) {
         o.address = *inagg::util::parse_ip("127.88.9.1");
         o.mode = "ring";
       }},
  };
  for (const auto& c : cases) {
    RankOptions o = rank_options("ina", 4, 1, 65536);
    o.insecure_exchange = true;
    ASSERT_EQ(o.validate(names), "");
    o = rank_options("ina", 4, 1, 65536);
    o.insecure_exchange = true;
    c.spoil(o);
    const std::string why = o.validate(names);
    EXPECT_NE(why.find(c.want), std::string::npos) << "want '" << c.want << "', got '" << why << "'";
  }
}

// A rank that meets the others needs the job's secret ($INAGG_EXCHANGE_SECRET, else
// the file, else one given), or insecure_exchange by name; the XDP tier alone meets nobody, and
// nor do ranks told not to meet.
TEST(Rank, TheMeetingNeedsTheJobsSecret) {
  ASSERT_TRUE(kSecretGiven);
  const std::string secret = std::getenv(kExchangeSecretEnv);
  ::unsetenv(kExchangeSecretEnv);
  RankOptions o = rank_options("ina", 3, 1, 4096);
  const std::string refusal = o.validate();
  EXPECT_NE(refusal.find("the ranks' meeting needs the job's secret"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("INAGG_EXCHANGE_SECRET"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("exchange_secret_file"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("insecure_exchange"), std::string::npos) << refusal;
  o.exchange_secret_file = "/nonexistent/secret";
  EXPECT_NE(o.validate().find("cannot read the secret file"), std::string::npos) << o.validate();
  o.insecure_exchange = true;  // a secret named but unreadable is still an error
  EXPECT_NE(o.validate().find("cannot read the secret file"), std::string::npos) << o.validate();
  o.exchange_secret_file.clear();
  EXPECT_EQ(o.validate(), "");
  EXPECT_EQ(o.exchange_secret, "");
  RankOptions given = rank_options("ina", 3, 1, 4096);
  given.exchange_secret = "from a store every rank shares";
  EXPECT_EQ(given.validate(), "");
  RankOptions unmet = rank_options("ina", 3, 1, 4096);
  unmet.meet = false;
  EXPECT_EQ(unmet.validate(), "");
  RankOptions x = rank_options("xdp", 3, 1, 4096);
  x.xdp_heads = "10.77.0.201";
  ::setenv(inagg::wire::kXaggKeyEnv, "000102030405060708090a0b0c0d0e0f", 1);  // the tier's key, not a meeting's
  EXPECT_EQ(x.validate(), "");
  ::unsetenv(inagg::wire::kXaggKeyEnv);
  ::setenv(kExchangeSecretEnv, secret.c_str(), 1);
  o.insecure_exchange = false;
  EXPECT_EQ(o.validate(), "");
  EXPECT_EQ(o.exchange_secret, secret);
}

// The transport and a tcp:// control socket are checked before anything opens.
TEST(Rank, TransportAndControlOptions) {
  RankOptions o = rank_options("ina", 3, 0, 65536);
  ASSERT_EQ(o.validate(), "");
  o.transport = "roce";
  EXPECT_NE(o.validate().find("transport must be udp"), std::string::npos);
  o.mode = "auto";
  o.xdp_heads = "10.77.0.201";
  ::unsetenv(inagg::wire::kXaggKeyEnv);
  EXPECT_NE(o.validate().find("needs the job's key for the XDP tier"), std::string::npos);
  ::setenv(inagg::wire::kXaggKeyEnv, "000102030405060708090a0b0c0d0e0f", 1);
  o.transport = "verbs";
  const std::string want_auto = verbs_supported() ? "auto's fall-over over verbs is not done yet" : "no verbs support";
  EXPECT_NE(o.validate().find(want_auto), std::string::npos) << o.validate();
  o.mode = "ring";
  if (verbs_supported()) {
    EXPECT_EQ(o.validate(), "");
    EXPECT_TRUE(o.resolved.use_verbs);
    o.verbs.qp_timeout = 0;
    EXPECT_NE(o.validate().find("qp_timeout"), std::string::npos);
    o.verbs.qp_timeout = 18;
  }
  o.transport = "udp";
  o.mode = "ina";
  o.control = "tcp://10.0.2.2:7000";
  EXPECT_NE(o.validate().find("needs a tenant's credential: control_secret_file"), std::string::npos);
  o.control_secret_file = "/nonexistent/secret";
  EXPECT_NE(o.validate().find("cannot read the secret file"), std::string::npos);
  ::unsetenv(inagg::wire::kXaggKeyEnv);
}
