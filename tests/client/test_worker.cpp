// client::Worker over a Transport of the test's own: n ranks in threads of one process, their
// writes copied in memory. For ring mode the copy goes straight to the successor; for ina mode it
// passes a stand-in for the appliance that sums a message once all n ranks wrote it, in rank
// order, and hands every rank the sum. The sums must equal the --check reference, which shows the
// algorithms need nothing of a transport but the Transport interface.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

using namespace inagg::client;
using inagg::util::Dtype;

namespace {

class MemoryRack;

class MemoryTransport final : public Transport {
 public:
  MemoryTransport(MemoryRack& rack, unsigned rank, const TransportRequest& r)
      : send_(r.send_bytes), recv_(r.receive_bytes), rack_(rack), rank_(rank) {}
  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override { std::this_thread::sleep_for(std::chrono::microseconds(wait_ms ? 50 : 0)); }
  bool writes_done() const override { return true; }
  uint64_t messages_received() const override { return received_; }
  uint64_t last_arrival_ns() const override { return now_ns(); }
  const std::string& error() const override { return error_; }
  void finish(uint64_t) override {}
  TransportCounters counters() const override { return {}; }

  std::vector<uint8_t> send_, recv_;
  std::atomic<uint64_t> received_{0};

 private:
  MemoryRack& rack_;
  unsigned rank_;
  std::string error_;
};

// The ranks' transports, and for ina the appliance: per destination offset, the n ranks' messages.
class MemoryRack {
 public:
  MemoryRack(unsigned n, bool aggregate, Dtype dtype) : n_(n), aggregate_(aggregate), dtype_(dtype), t_(n) {}

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
    if (!aggregate_) {
      MemoryTransport* to = t_[(from + 1) % n_];
      std::memcpy(to->recv_.data() + dst, src, len);
      ++to->received_;
      return;
    }
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
  }

 private:
  struct Slot {
    std::vector<std::vector<uint8_t>> in;
    unsigned count = 0;
  };
  unsigned n_;
  bool aggregate_;
  Dtype dtype_;
  std::vector<MemoryTransport*> t_;
  std::map<uint64_t, Slot> slots_;
  std::mutex m_;
};

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

// Runs n Workers of `mode` over a MemoryRack through sizes up to max_bytes, checking each result
// against the reference; returns the number of wrong elements over all ranks and sizes.
// appliance false: the stand-in switches ina's writes instead of summing them.
uint64_t run_job(const char* mode, Dtype dtype, unsigned n, uint64_t max_bytes, bool appliance = true) {
  MemoryRack rack(n, appliance && std::string(mode) == "ina", dtype);
  std::vector<WorkerOptions> opts(n);
  for (unsigned r = 0; r < n; ++r) {
    WorkerOptions& o = opts[r] = sweep_options(mode, n, r, max_bytes);
    o.dtype_name = std::string(inagg::util::dtype_name(dtype));
    EXPECT_EQ(check_job_options(o), "");
    EXPECT_EQ(check_run_options(o), "");
  }
  std::atomic<uint64_t> wrong{0};
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
          ASSERT_TRUE(w.allreduce(bytes)) << "rank " << r << ": " << w.error();
          const std::vector<uint8_t>& want = ref.sum(w.last_tier());
          uint64_t bad = 0;
          for (size_t i = 0; i < bytes; i += es) bad += std::memcmp(want.data() + i, w.data() + i, es) != 0;
          if (appliance) {
            EXPECT_EQ(bad, 0u) << "rank " << r << ", " << bytes << " bytes, iteration " << it;
          }
          wrong += bad;
        }
      }
      EXPECT_TRUE(w.finish()) << w.error();
    });
  }
  for (std::thread& t : threads) t.join();
  return wrong;
}

}  // namespace

// Writes are delivered the moment they are posted, so a predecessor already in the next size
// writes into this rank's region while it still reads the last steps of the current one (each
// step's area at a stride fixed for the run keeps them apart; the stride of the current size did
// not, with every dtype and n = 2..5).
TEST(Worker, RingOverAnotherTransport) {
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16})
    for (unsigned n : {2u, 3u, 4u, 5u})
      EXPECT_EQ(run_job("ring", d, n, 100000), 0u) << inagg::util::dtype_name(d) << ", " << n << " ranks";
}

TEST(Worker, InaOverAnotherTransportAndAnApplianceStandIn) {
  EXPECT_EQ(run_job("ina", Dtype::fp32, 4, 200000), 0u);
  EXPECT_EQ(run_job("ina", Dtype::fp16, 5, 100000), 0u);
}

TEST(Worker, InaWithoutTheApplianceIsWrongAndTheCheckSeesIt) {
  // The stand-in switches instead of summing: every rank gets its predecessor's input.
  EXPECT_GT(run_job("ina", Dtype::fp32, 4, 20000, false), 0u);
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
    ::setenv("INAGG_EXCHANGE_SECRET", "the job's secret, 0123456789", 1);
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

// --transport and --register tcp:// are checked before anything opens.
TEST(Worker, TransportAndControlOptions) {
  WorkerOptions o;
  o.workers = 3;
  o.rank = 0;
  o.rank_given = true;
  ASSERT_EQ(check_job_options(o), "");
  o.transport_name = "roce";
  EXPECT_NE(check_run_options(o).find("--transport must be udp"), std::string::npos);
  o.transport_name = "verbs";
  o.mode_name = "auto";
  o.xdp_heads = "10.77.0.201";
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
}
