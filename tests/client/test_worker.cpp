// client::Worker over a Transport of the test's own: n ranks in threads of one process, their
// writes copied in memory. For ring mode the copy goes straight to the successor; for ina mode it
// passes a stand-in for the appliance that sums a message once all n ranks wrote it, in rank
// order, and hands every rank the sum (or, once it forgot the job, switches it unsummed). The sums must equal the
// --check reference, which shows the algorithms need nothing of a transport but the Transport interface.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "inagg/agg/kernels.hpp"
#include "inagg/client/clock.hpp"
#include "inagg/client/reference.hpp"
#include "inagg/client/worker.hpp"
#include "inagg/wire/xagg_mac.hpp"

using namespace inagg::client;
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
// restarted: the messages it held and every later one go to the successor unsummed.
class MemoryRack {
 public:
  MemoryRack(unsigned n, bool aggregate, Dtype dtype, uint64_t sums_before_restart = UINT64_MAX)
      : n_(n), aggregate_(aggregate), dtype_(dtype), t_(n), sums_left_(sums_before_restart) {}

  TransportFactory factory() {
    return [this](const TransportRequest& r, std::string*) -> std::unique_ptr<Transport> {
      auto t = std::make_unique<MemoryTransport>(*this, r.rack.rank, r);
      std::lock_guard<std::mutex> g(m_);
      t_[r.rack.rank] = t.get();
      return t;
    };
  }

  void write(unsigned from, const uint8_t* src, uint32_t len, uint64_t dst) {
    std::lock_guard<std::mutex> g(m_);
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
  void forward(unsigned from, const uint8_t* src, uint32_t len, uint64_t dst) {
    MemoryTransport* to = t_[(from + 1) % n_];
    std::memcpy(to->recv_.data() + dst, src, len);
    ++to->received_;
  }

  struct Slot {
    std::vector<std::vector<uint8_t>> in;
    unsigned count = 0;
  };
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
  rack_.write(rank_, send_.data() + src_offset, len, dst_offset);
}

// Rank r of n, `mode`, 4 KiB messages of 1 KiB payloads, sizes 4 B to max_bytes by factors of 7.
WorkerOptions sweep_options(const char* mode, unsigned n, unsigned r, uint64_t max_bytes) {
  WorkerOptions o;
  o.workers = n;
  o.rank = r;
  o.rank_given = true;
  o.mode_name = mode;
  o.message = 4096;
  o.payload = 1024;
  o.min_bytes = 4;
  o.max_bytes = max_bytes;
  o.factor = 7;
  o.timeout_s = 30;
  return o;
}

struct JobResult {
  uint64_t wrong = 0;      // wrong elements in the results the allreduces returned, over all ranks
  unsigned unsummed = 0;   // ranks whose allreduce failed because a message arrived unsummed
  unsigned timed_out = 0;  // ranks whose allreduce timed out
  unsigned finished = 0;   // ranks that ran every size
};

// Runs n Workers of `mode` over a MemoryRack through sizes up to max_bytes, checking each result
// against the reference. appliance false: the stand-in switches ina's writes instead of summing
// them; sums_before_restart: it forgets the job after that many sums. A rank stops at an
// allreduce that fails (which must say a message arrived unsummed, or that it timed out).
JobResult run_job(const char* mode, Dtype dtype, unsigned n, uint64_t max_bytes, bool appliance = true,
                  uint64_t sums_before_restart = UINT64_MAX, double timeout_s = 30) {
  MemoryRack rack(n, appliance && std::string(mode) == "ina", dtype, sums_before_restart);
  std::vector<WorkerOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    WorkerOptions& o = opts[r] = sweep_options(mode, n, r, max_bytes);
    o.dtype_name = std::string(inagg::util::dtype_name(dtype));
    o.timeout_s = timeout_s;
    EXPECT_EQ(check_job_options(o), "");
    EXPECT_EQ(check_run_options(o), "");
  }
  std::atomic<uint64_t> wrong{0};
  std::atomic<unsigned> unsummed{0}, timed_out{0}, finished{0};
  std::latch opened(n);  // every rank's memory exists before anyone writes into it
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Worker w(opts[r], rack.factory());
      std::string err;
      const bool ok = w.open(&err);
      opened.arrive_and_wait();
      ASSERT_TRUE(ok) << err;
      const size_t es = inagg::util::dtype_size(dtype);
      for (uint64_t size = 4; size <= max_bytes; size *= 7) {
        const uint64_t bytes = size / es * es;
        if (bytes == 0) continue;
        Reference ref({dtype, n, 1, std::string(mode) == "ring", 1.0}, bytes);
        for (int it = 0; it < 2; ++it) {
          fill_input(dtype, 1, r, w.data(), bytes);
          if (!w.allreduce(bytes)) {
            // The tally; or, after a restart, a predecessor that stopped on it sends nothing more.
            if (w.error().find("tally 1, want " + std::to_string(n) + ")") != std::string::npos)
              ++unsummed;
            else if (w.error() == "timed out")
              ++timed_out;
            else
              ADD_FAILURE() << "rank " << r << ": " << w.error();
            return;
          }
          const std::vector<uint8_t>& want = ref.sum(w.last_tier());
          uint64_t bad = 0;
          for (size_t i = 0; i < bytes; i += es) bad += std::memcmp(want.data() + i, w.data() + i, es) != 0;
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

}  // namespace

// Writes are delivered the moment they are posted, so a predecessor already in the next size
// writes into this rank's region while it still reads the last steps of the current one (each
// step's area at a stride fixed for the run keeps them apart; the stride of the current size did
// not, with every dtype and n = 2..5).
TEST(Worker, RingOverAnotherTransport) {
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16})
    for (unsigned n : {2u, 3u, 4u, 5u})
      EXPECT_EQ(run_job("ring", d, n, 100000).wrong, 0u) << inagg::util::dtype_name(d) << ", " << n << " ranks";
}

TEST(Worker, InaOverAnotherTransportAndAnApplianceStandIn) {
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
TEST(Worker, InaWithoutTheApplianceFailsOnTheTally) {
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
TEST(Worker, InaWhoseApplianceForgetsTheJobMidRunFailsOnEveryRank) {
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
TEST(Worker, SoftwareRanksThatExchangeTheirEndpoints) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (raw sockets)";
  const unsigned n = 3;
  const uint64_t max_bytes = 50000;
  std::vector<WorkerOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    WorkerOptions& o = opts[r] = sweep_options("ring", n, r, max_bytes);
    o.ip_base = "127.0.1.0";
    o.exchange = true;
    o.exchange_port = 30000 + (::getpid() * 13) % 20000;
    EXPECT_EQ(check_job_options(o), "");
    EXPECT_EQ(check_run_options(o), "");
  }
  std::vector<std::thread> threads;
  std::vector<std::vector<RankConnection>> registered(n);
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Worker w(opts[r], open_udp_transport);
      std::string err;
      ASSERT_TRUE(w.open(&err)) << "rank " << r << ": " << err;
      registered[r] = w.options().rack.connections;
      for (uint64_t bytes = 4; bytes <= max_bytes; bytes *= 7) {
        Reference ref({Dtype::fp32, n, 1, true, 1.0}, bytes);
        fill_input(Dtype::fp32, 1, r, w.data(), bytes);
        ASSERT_TRUE(w.allreduce(bytes)) << "rank " << r << ": " << w.error();
        EXPECT_EQ(std::memcmp(ref.sum(w.last_tier()).data(), w.data(), bytes), 0) << "rank " << r << ", " << bytes;
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

// Software ranks on the rack plan, started 0.3 s apart (the last rank first) with an RC budget of
// 3 x 10 ms: they meet at rank 0 before anyone sends (UdpRcTransport::meet), so no write reaches a
// successor that is not there yet, and they meet again in barrier() after unequal local work (one
// rank computes 0.2 s longer). Every sum is exact. A rank whose plan differs (another --workers)
// is refused by the meeting with a reason.
TEST(Worker, SoftwareRanksStartedApartMeetBeforeTheySend) {
  const unsigned n = 3;
  const uint64_t bytes = 300000;
  const uint16_t port = static_cast<uint16_t>(30000 + (::getpid() * 17) % 20000);
  std::vector<WorkerOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    WorkerOptions& o = opts[r] = sweep_options("ring", n, r, bytes);
    o.ip_base = "127.0.2.0";
    o.exchange_port = port;
    o.ack_timeout_ms = 10;
    o.retry = 2;
    o.rto_min_ms = 1;
    EXPECT_EQ(check_job_options(o), "");
    EXPECT_EQ(check_run_options(o), "");
  }
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * (n - 1 - r)));
      Worker w(opts[r], open_udp_transport);
      std::string err;
      ASSERT_TRUE(w.open(&err)) << "rank " << r << ": " << err;
      Reference ref({Dtype::fp32, n, 1, true, 1.0}, bytes);
      for (int round = 0; round < 2; ++round) {
        fill_input(Dtype::fp32, 1, r, w.data(), bytes);
        if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ASSERT_TRUE(w.barrier("round " + std::to_string(round))) << "rank " << r << ": " << w.error();
        ASSERT_TRUE(w.allreduce(bytes)) << "rank " << r << ", round " << round << ": " << w.error();
        EXPECT_EQ(std::memcmp(ref.sum(w.last_tier()).data(), w.data(), bytes), 0) << "rank " << r;
      }
      EXPECT_TRUE(w.finish()) << "rank " << r << ": " << w.error();
    });
  for (std::thread& t : threads) t.join();

  // Rank 1 started with --workers 4 among ranks of 3: the meeting refuses it and rank 0 says why.
  std::vector<std::string> errors(2);
  std::vector<std::thread> two;
  for (unsigned r : {0u, 1u})
    two.emplace_back([&, r] {
      WorkerOptions o = sweep_options("ring", r == 1 ? 4 : 2, r, 4096);
      o.ip_base = "127.0.2.0";
      o.exchange_port = port;
      o.timeout_s = 3;
      ASSERT_EQ(check_job_options(o), "");
      ASSERT_EQ(check_run_options(o), "");
      Worker w(o, open_udp_transport);
      EXPECT_FALSE(w.open(&errors[r])) << "rank " << r << " of a mismatched job opened";
    });
  for (std::thread& t : two) t.join();
  EXPECT_NE(errors[1].find("rank"), std::string::npos) << errors[1];
  EXPECT_FALSE(errors[0].empty());
}

// A rank that meets the others needs the job's secret ($INAGG_EXCHANGE_SECRET, else
// --exchange-secret-file), or --insecure-exchange by name; the XDP tier alone meets nobody.
TEST(Worker, TheMeetingNeedsTheJobsSecret) {
  ASSERT_TRUE(kSecretGiven);
  const std::string secret = std::getenv(kExchangeSecretEnv);
  ::unsetenv(kExchangeSecretEnv);
  WorkerOptions o = sweep_options("ina", 3, 1, 4096);
  ASSERT_EQ(check_job_options(o), "");
  const std::string refusal = check_run_options(o);
  EXPECT_NE(refusal.find("the ranks' meeting needs the job's secret"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("INAGG_EXCHANGE_SECRET"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("--exchange-secret-file"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("--insecure-exchange"), std::string::npos) << refusal;
  o.exchange_secret_file = "/nonexistent/secret";
  EXPECT_NE(check_run_options(o).find("cannot read the secret file"), std::string::npos) << check_run_options(o);
  o.insecure_exchange = true;  // a secret named but unreadable is still an error
  EXPECT_NE(check_run_options(o).find("cannot read the secret file"), std::string::npos) << check_run_options(o);
  o.exchange_secret_file.clear();
  EXPECT_EQ(check_run_options(o), "");
  EXPECT_EQ(o.exchange_secret, "");
  WorkerOptions x = sweep_options("xdp", 3, 1, 4096);
  x.xdp_heads = "10.77.0.201";
  ASSERT_EQ(check_job_options(x), "");
  ::setenv(inagg::wire::kXaggKeyEnv, "000102030405060708090a0b0c0d0e0f", 1);  // the tier's key, not a meeting's
  EXPECT_EQ(check_run_options(x), "");
  ::unsetenv(inagg::wire::kXaggKeyEnv);
  ::setenv(kExchangeSecretEnv, secret.c_str(), 1);
  o.insecure_exchange = false;
  EXPECT_EQ(check_run_options(o), "");
  EXPECT_EQ(o.exchange_secret, secret);
}

// --transport and --register tcp:// are checked before anything opens.
TEST(Worker, TransportAndControlOptions) {
  WorkerOptions o;
  o.workers = 3;
  o.rank = 0;
  o.rank_given = true;
  ASSERT_EQ(check_job_options(o), "");
  o.transport_name = "roce";
  EXPECT_NE(check_run_options(o).find("--transport must be udp"), std::string::npos);
  o.mode_name = "auto";
  o.xdp_heads = "10.77.0.201";
  ::unsetenv(inagg::wire::kXaggKeyEnv);
  EXPECT_NE(check_run_options(o).find("needs the job's key for the XDP tier"), std::string::npos);
  ::setenv(inagg::wire::kXaggKeyEnv, "000102030405060708090a0b0c0d0e0f", 1);
  o.transport_name = "verbs";
  const std::string want_auto = verbs_supported() ? "auto's fall-over over verbs is not done yet" : "no verbs support";
  EXPECT_NE(check_run_options(o).find(want_auto), std::string::npos) << check_run_options(o);
  o.mode_name = "ring";
  if (verbs_supported()) {
    EXPECT_EQ(check_run_options(o), "");
    EXPECT_TRUE(o.use_verbs);
    o.verbs.qp_timeout = 0;
    EXPECT_NE(check_run_options(o).find("--qp-timeout"), std::string::npos);
    o.verbs.qp_timeout = 18;
  }
  o.transport_name = "udp";
  o.mode_name = "ina";
  o.register_socket = "tcp://10.0.2.2:7000";
  EXPECT_NE(check_run_options(o).find("needs --control-secret-file"), std::string::npos);
  o.control_secret_file = "/nonexistent/secret";
  EXPECT_NE(check_run_options(o).find("cannot read the secret file"), std::string::npos);
  ::unsetenv(inagg::wire::kXaggKeyEnv);
}
