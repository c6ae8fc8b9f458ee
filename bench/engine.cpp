// Engine-only throughput on pre-built packets in memory (no ports): Gbps of input payload per core
// for fp32 jobs with n = 4 and 8, P = 1 KiB and 4 KiB, against single-core memcpy of the same
// bytes through a buffer as large as the engine's working set, in the same run. Input ICRC
// verification, the rank-ordered sum, ICRC regeneration and the n payload writes are all part of
// the measured work. The job is a `replay` job, so the same packets loop like a capture would.
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"
#include "rate_reporter.hpp"

using namespace inagg;

namespace {

struct Setup {
  unsigned n;
  uint32_t P;
  uint32_t ppm;
  unsigned window;
  uint64_t seqs;                        // one full cycle of the job's 2 W ppm slots
  std::vector<std::span<uint8_t>> pkt;  // [seq * n + rank], in `arena`
  control::JobSpec spec;
  size_t working_set = 0;
  // The frames, each as an mbuf holds one: at a 64-byte aligned offset after 128 bytes of headroom,
  // so that no two share a cache line (two threads writing neighbouring frames would otherwise
  // contend for the line between them, which mbufs from a mempool never do).
  std::unique_ptr<uint8_t[], void (*)(void*)> arena{nullptr, std::free};
};

// `channel` of `channels`: that channel's part of a job of channels (its own QPs, control::channel_spec).
Setup make_setup(unsigned n, uint32_t P, unsigned channel = 0, unsigned channels = 1) {
  Setup s{n, P, 65536 / P, 2, 0, {}, {}, 0, {nullptr, std::free}};
  s.spec.channels = static_cast<uint16_t>(channels);
  s.spec.channel = static_cast<uint16_t>(channel);
  s.seqs = 2ull * s.window * s.ppm;
  s.spec.id = 1;
  s.spec.dtype = agg::Dtype::fp32;
  s.spec.workers = n;
  s.spec.message_bytes = 65536;
  s.spec.payload_bytes = P;
  s.spec.window = s.window;
  s.spec.replay = true;
  for (unsigned r = 0; r < n; ++r) {
    control::ConnectionSpec c;
    c.rank = r;
    c.src_ip = util::IpAddr::v4(0x0a000001 + r);
    c.dst_ip = util::IpAddr::v4(0x0a000001 + (r + 1) % n);
    c.src_qpn = 0x100 + r + 0x1000 * channel;
    c.dst_qpn = 0x200 + (r + 1) % n + 0x1000 * channel;
    c.channel = static_cast<uint16_t>(channel);
    c.start_psn = 1000 * r;
    s.spec.conns.push_back(c);
  }
  std::mt19937 rng(1);
  std::vector<uint8_t> payload(P);
  std::vector<std::vector<uint8_t>> frames;
  for (uint64_t seq = 0; seq < s.seqs; ++seq) {
    for (unsigned r = 0; r < n; ++r) {
      for (size_t i = 0; i < P; i += 4) {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(&payload[i], &f, 4);
      }
      wire::RoceFrameSpec f;
      f.src_ip = s.spec.conns[r].src_ip;
      f.dst_ip = s.spec.conns[r].dst_ip;
      f.dest_qp = s.spec.conns[r].dst_qpn;
      f.psn = (s.spec.conns[r].start_psn + seq) & 0xffffff;
      const uint32_t k = static_cast<uint32_t>(seq % s.ppm);
      using namespace wire::op;
      f.opcode = k == 0 ? kWriteFirst : k == s.ppm - 1 ? kWriteLast : kWriteMiddle;
      std::vector<uint8_t> frame(wire::roce_frame_size(f, P));
      wire::build_roce_frame(frame, f, payload);
      s.working_set += frame.size();
      frames.push_back(std::move(frame));
    }
  }
  constexpr size_t kHeadroom = 128;
  auto stride = [&](size_t len) { return (kHeadroom + len + 63) / 64 * 64; };
  size_t total = 0;
  for (const auto& f : frames) total += stride(f.size());
  s.arena.reset(static_cast<uint8_t*>(std::aligned_alloc(64, total)));
  size_t off = 0;
  for (const auto& f : frames) {
    uint8_t* at = s.arena.get() + off + kHeadroom;
    std::memcpy(at, f.data(), f.size());
    s.pkt.emplace_back(at, f.size());
    off += stride(f.size());
  }
  s.working_set += s.seqs * (P + 64 + n * 96);  // retained sums + slot and held-packet state
  return s;
}

// Buffers are the pre-built frames themselves: references are not counted, nothing is freed.
agg::BufferOps static_ops() {
  agg::BufferOps ops;
  ops.free = [](void*, void*) {};
  ops.ref = [](void*, void*) {};
  ops.alloc = [](void*, uint16_t) { return agg::PacketRef{}; };
  return ops;
}

// The setup's job on `engine`; on refusal the benchmark is skipped with the reason.
bool add_job(agg::Engine& engine, const Setup& s, benchmark::State& state) {
  std::string err;
  if (engine.add_job(s.spec, &err)) return true;
  state.SkipWithError(err.c_str());
  return false;
}

// After the timed loop: the packets were aggregated (no bad ICRC, no job error, slots released).
bool aggregated(agg::Engine& engine, benchmark::State& state, uint16_t channel = 0) {
  agg::JobInfo info{};
  engine.job_info(1, &info, channel);
  if (!info.counters.bad_icrc && !info.counters.job_errors && info.counters.slots_released != 0) return true;
  state.SkipWithError("the engine did not aggregate the packets: check the setup");
  return false;
}

void BM_engine(benchmark::State& state) {
  Setup s = make_setup(static_cast<unsigned>(state.range(0)), static_cast<uint32_t>(state.range(1)));
  agg::Engine engine(agg::EngineConfig{}, static_ops());
  if (!add_job(engine, s, state)) return;
  agg::TxList tx(4096);
  uint64_t now = 0;
  for (auto _ : state) {
    for (uint64_t seq = 0; seq < s.seqs; ++seq) {
      for (unsigned r = 0; r < s.n; ++r) {
        std::span<uint8_t>& f = s.pkt[seq * s.n + r];
        engine.process({&f, f.data(), static_cast<uint16_t>(f.size())}, now, tx);
      }
      tx.clear();
    }
    ++now;
  }
  if (!aggregated(engine, state)) return;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.seqs * s.n * s.P));
  state.counters["Gbps"] = benchmark::Counter(static_cast<double>(state.iterations() * s.seqs * s.n * s.P) * 8,
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["working_set_KiB"] = static_cast<double>(s.working_set >> 10);
  state.SetLabel(std::string("kernels=") + std::string(agg::kernels_tier_name()) +
                 " crc=" + std::string(wire::crc32_impl_name()));
}

// A counter on a cache line of its own (two threads hand work over through it).
struct alignas(64) PaddedCounter {
  std::atomic<uint64_t> v{0};
};

// Two CPUs for a two-thread benchmark: the one this thread runs on, and another of its affinity set
// (-1 when the set has one CPU). Pins this thread to the first while it lives; a second thread
// calls pin(other()). Restores this thread's affinity set at the end.
class CpuPair {
 public:
  CpuPair() {
    CPU_ZERO(&mine_);
    pthread_getaffinity_np(pthread_self(), sizeof mine_, &mine_);
    main_ = sched_getcpu();
    for (int c = 0; c < CPU_SETSIZE && other_ < 0; ++c)
      if (CPU_ISSET(c, &mine_) && c != main_) other_ = c;
    pin(main_);
  }
  ~CpuPair() { pthread_setaffinity_np(pthread_self(), sizeof mine_, &mine_); }
  int main() const { return main_; }
  int other() const { return other_; }
  static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
  }

 private:
  cpu_set_t mine_;
  int main_ = -1, other_ = -1;
};

// Two threads in lock step on two CPUs: body(0) on this thread, body(1) on a second one pinned to
// a CPU of this thread's set that this thread is not on; each benchmark iteration starts both and
// ends when both are done. Returns a label saying where they ran.
class TwoThreads {
 public:
  explicit TwoThreads(std::function<void(unsigned)> body) : body_(std::move(body)) {
    helper_ = std::thread([this] {
      CpuPair::pin(cpus_.other());
      for (uint64_t done = 0;; ++done) {
        uint64_t g;
        while ((g = go_.v.load(std::memory_order_acquire)) == done) {}
        if (g == kStop) return;
        body_(1);
        done_.v.store(done + 1, std::memory_order_release);
      }
    });
  }
  ~TwoThreads() {
    go_.v.store(kStop, std::memory_order_release);
    helper_.join();
  }
  void iteration() {
    const uint64_t i = ++n_;
    go_.v.store(i, std::memory_order_release);
    body_(0);
    while (done_.v.load(std::memory_order_acquire) != i) {}
  }
  std::string label() const {
    return cpus_.other() >= 0
               ? "threads on CPUs " + std::to_string(cpus_.main()) + " and " + std::to_string(cpus_.other())
               : std::string("one CPU only: the second thread unpinned");
  }

 private:
  static constexpr uint64_t kStop = ~0ull;
  const CpuPair cpus_;  // constructed (this thread pinned) before the helper starts
  std::function<void(unsigned)> body_;
  uint64_t n_ = 0;
  PaddedCounter go_, done_;
  std::thread helper_;
};

// Two engines on two threads and CPUs, engine i with s[i]'s job and packets, nothing shared; bytes
// are both threads' together.
void run_two_engines(benchmark::State& state, Setup (&s)[2]) {
  agg::Engine e0(agg::EngineConfig{}, static_ops()), e1(agg::EngineConfig{}, static_ops());
  agg::Engine* es[2] = {&e0, &e1};
  for (unsigned i = 0; i < 2; ++i)
    if (!add_job(*es[i], s[i], state)) return;
  uint64_t now[2] = {0, 0};
  TwoThreads threads([&](unsigned i) {
    agg::TxList tx(4096);
    for (uint64_t seq = 0; seq < s[i].seqs; ++seq) {
      for (unsigned r = 0; r < s[i].n; ++r) {
        std::span<uint8_t>& f = s[i].pkt[seq * s[i].n + r];
        es[i]->process({&f, f.data(), static_cast<uint16_t>(f.size())}, now[i], tx);
      }
      tx.clear();
    }
    ++now[i];
  });
  for (auto _ : state) threads.iteration();
  for (unsigned i = 0; i < 2; ++i)
    if (!aggregated(*es[i], state, s[i].spec.channel)) return;
  state.SetBytesProcessed(static_cast<int64_t>(2 * state.iterations() * s[0].seqs * s[0].n * s[0].P));
  state.SetLabel(threads.label());
}

// The ceiling of any two-thread figure here: two engines, each with a job and packets of its own,
// nothing shared, on the same two CPUs as BM_engine_channels.
void BM_engine_two_jobs(benchmark::State& state) {
  const auto n = static_cast<unsigned>(state.range(0));
  const auto P = static_cast<uint32_t>(state.range(1));
  Setup s[2] = {make_setup(n, P), make_setup(n, P)};
  run_two_engines(state, s);
}

// One job of two channels (control::JobSpec::channels), each channel on an engine of its own on its
// own thread and CPU, as an appliance places them on two lcores: a channel's packets are only its
// own connections', so nothing is shared. Against BM_engine (a job of one channel on one engine) it
// is `channels2_vs_1`.
void BM_engine_channels(benchmark::State& state) {
  const auto n = static_cast<unsigned>(state.range(0));
  const auto P = static_cast<uint32_t>(state.range(1));
  Setup s[2] = {make_setup(n, P, 0, 2), make_setup(n, P, 1, 2)};
  run_two_engines(state, s);
}

// The engine's data work alone, on the same packets in the same order, without its bookkeeping
// (bench/README.md's breakdown): level 0 parses each packet; 1 adds the payload's CRC; 2 the header
// part of the ICRC as the engine derives it (the full verify); 3 adds, per slot of n packets, the
// sum written over their payloads and into a retained copy, the sum's CRC and the n ICRCs stored.
void BM_parts(benchmark::State& state) {
  Setup s = make_setup(static_cast<unsigned>(state.range(0)), static_cast<uint32_t>(state.range(1)));
  const int level = static_cast<int>(state.range(2));
  std::vector<uint8_t> retained(s.P);
  std::vector<wire::Layout> lay(s.n);
  std::vector<uint32_t> hdr(s.n);
  std::vector<wire::IcrcHeaderCache> hdr_cache(s.n);  // one per sender, as the engine keeps them
  const uint8_t* srcs[64];
  uint8_t* dsts[65];
  const wire::Crc32Shift shift(s.P);
  uint32_t sink = 0;
  for (auto _ : state) {
    for (uint64_t seq = 0; seq < s.seqs; ++seq) {
      for (unsigned r = 0; r < s.n; ++r) {
        std::span<uint8_t>& f = s.pkt[seq * s.n + r];
        wire::Layout& l = lay[r];
        sink += static_cast<uint32_t>(wire::parse_frame(f, l));
        if (level >= 1) sink += wire::icrc_payload_crc(f.data(), l);
        if (level >= 2) sink += hdr[r] = hdr_cache[r].header_crc(f.data(), l);
      }
      if (level >= 3) {
        dsts[0] = retained.data();
        for (unsigned r = 0; r < s.n; ++r) {
          uint8_t* f = s.pkt[seq * s.n + r].data();
          srcs[r] = dsts[r + 1] = f + lay[r].payload;
        }
        agg::sum_ranked_broadcast(agg::Dtype::fp32, dsts, s.n + 1, srcs, s.n, s.P);
        const uint32_t sum_crc = wire::crc32(retained);
        for (unsigned r = 0; r < s.n; ++r)
          wire::icrc_store(s.pkt[seq * s.n + r].data(), lay[r], wire::icrc_combine(hdr[r], sum_crc, shift));
      }
    }
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.seqs * s.n * s.P));
}

// The reference: copying the same number of payload bytes through buffers of the working-set size.
void BM_memcpy(benchmark::State& state) {
  const Setup s = make_setup(static_cast<unsigned>(state.range(0)), static_cast<uint32_t>(state.range(1)));
  const size_t total = s.seqs * s.n * s.P;
  std::vector<uint8_t> src(s.working_set, 1), dst(s.working_set);
  for (auto _ : state) {
    size_t off = 0;
    for (size_t done = 0; done < total; done += s.P) {
      if (off + s.P > s.working_set) off = 0;
      std::memcpy(dst.data() + off, src.data() + off, s.P);
      off += s.P + 64;  // stride like packets with headers
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * total));
  state.counters["Gbps"] = benchmark::Counter(static_cast<double>(state.iterations() * total) * 8,
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

#define CONFIGS ->Args({4, 1024})->Args({4, 4096})->Args({8, 1024})->Args({8, 4096})->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_engine) CONFIGS;
BENCHMARK(BM_engine_two_jobs) CONFIGS->UseRealTime();
BENCHMARK(BM_engine_channels) CONFIGS->UseRealTime();
BENCHMARK(BM_memcpy) CONFIGS;
BENCHMARK(BM_parts)->ArgsProduct({{4, 8}, {1024, 4096}, {0, 1, 2, 3}})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  inagg::bench::RateReporter rep;
  if (!inagg::bench::run_benchmarks(argc, argv, rep)) return 1;
  // Headline: the worst configuration's ratio, and its input rate.
  double worst = 0, worst_gbps = 0;
  std::string worst_cfg;
  for (const char* cfg : {"4/1024", "4/4096", "8/1024", "8/4096"}) {
    const std::string m = std::string("BM_memcpy/") + cfg;
    double er = 0, mr = 0;
    for (auto& [name, v] : rep.rate) {
      if (name.rfind(std::string("BM_engine/") + cfg, 0) == 0) er = v;
      if (name.rfind(m, 0) == 0) mr = v;
    }
    if (er == 0 || mr == 0) continue;
    std::printf("n/P=%s: engine %.1f Gbps, memcpy %.1f Gbps, ratio %.2f\n", cfg, er * 8 / 1e9, mr * 8 / 1e9, er / mr);
    if (worst_cfg.empty() || er / mr < worst) {
      worst = er / mr;
      worst_gbps = er * 8 / 1e9;
      worst_cfg = cfg;
    }
  }
  // The data work alone (BM_parts), as a fraction of memcpy: what bookkeeping leaves on top.
  for (const char* cfg : {"4/1024", "4/4096", "8/1024", "8/4096"}) {
    double mr = 0, pr[4] = {};
    for (auto& [name, v] : rep.rate) {
      if (name.rfind(std::string("BM_memcpy/") + cfg, 0) == 0) mr = v;
      for (int lv = 0; lv < 4; ++lv)
        if (name == std::string("BM_parts/") + cfg + "/" + std::to_string(lv)) pr[lv] = v;
    }
    if (mr == 0 || pr[3] == 0) continue;
    std::printf("n/P=%s parts vs memcpy: parse %.2f, +payload CRC %.2f, +header CRC %.2f, +sum into n and ICRCs %.2f\n",
                cfg, pr[0] / mr, pr[1] / mr, pr[2] / mr, pr[3] / mr);
  }
  // A job of two channels on two engines against a job of one on one (the target: 1.7x), and its
  // ceiling, two engines with two jobs that share nothing: the worst configuration's of each, and
  // the ceiling at 4 / 4 KiB.
  double worst_channels = 0, worst_two = 0, two_4k = 0;
  for (const char* cfg : {"4/1024", "4/4096", "8/1024", "8/4096"}) {
    double er = 0, cr = 0, tr = 0;
    for (auto& [name, v] : rep.rate) {
      if (name.rfind(std::string("BM_engine/") + cfg, 0) == 0) er = v;
      if (name.rfind(std::string("BM_engine_channels/") + cfg, 0) == 0) cr = v;
      if (name.rfind(std::string("BM_engine_two_jobs/") + cfg, 0) == 0) tr = v;
    }
    if (er == 0 || cr == 0 || tr == 0) continue;
    std::printf(
        "n/P=%s: a job of two channels on two engines %.1f Gbps (%.2fx one channel on one), two engines with "
        "nothing shared %.1f Gbps (%.2fx one)\n",
        cfg, cr * 8 / 1e9, cr / er, tr * 8 / 1e9, tr / er);
    if (worst_channels == 0 || cr / er < worst_channels) worst_channels = cr / er;
    if (worst_two == 0 || tr / er < worst_two) worst_two = tr / er;
    if (std::string(cfg) == "4/4096") two_4k = tr / er;
  }
  std::string channels;
  if (worst_channels > 0)
    channels = " channels2_vs_1=" + std::to_string(worst_channels).substr(0, 4) +
               " two_engines_vs_one=" + std::to_string(worst_two).substr(0, 4) +
               (two_4k > 0 ? " two_jobs_vs_one_4k=" + std::to_string(two_4k).substr(0, 4) : "");
  std::printf("engine_vs_memcpy=%.2f engine_gbps=%.1f worst_config=n/P=%s%s\n", worst, worst_gbps, worst_cfg.c_str(),
              channels.c_str());
  return 0;
}
