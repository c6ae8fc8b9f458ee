// Engine-only throughput on pre-built packets in memory (no ports): Gbps of input payload per core
// for fp32 jobs with n = 4 and 8, P = 1 KiB and 4 KiB, against single-core memcpy of the same
// bytes through a buffer as large as the engine's working set, in the same run. Input ICRC
// verification, the rank-ordered sum, ICRC regeneration and the n payload writes are all part of
// the measured work. The job is a `replay` job, so the same packets loop like a capture would.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
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
  uint64_t seqs;                          // one full cycle of the job's 2 W ppm slots
  std::vector<std::vector<uint8_t>> pkt;  // [seq * n + rank]
  agg::JobSpec spec;
  size_t working_set = 0;
};

Setup make_setup(unsigned n, uint32_t P) {
  Setup s{n, P, 65536 / P, 2, 0, {}, {}, 0};
  s.seqs = 2ull * s.window * s.ppm;
  s.spec.id = 1;
  s.spec.dtype = agg::Dtype::fp32;
  s.spec.workers = n;
  s.spec.message_bytes = 65536;
  s.spec.payload_bytes = P;
  s.spec.window = s.window;
  s.spec.replay = true;
  for (unsigned r = 0; r < n; ++r) {
    agg::ConnectionSpec c;
    c.rank = r;
    c.src_ip = wire::IpAddr::v4(0x0a000001 + r);
    c.dst_ip = wire::IpAddr::v4(0x0a000001 + (r + 1) % n);
    c.src_qpn = 0x100 + r;
    c.dst_qpn = 0x200 + (r + 1) % n;
    c.start_psn = 1000 * r;
    s.spec.conns.push_back(c);
  }
  std::mt19937 rng(1);
  std::vector<uint8_t> payload(P);
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
      s.pkt.push_back(std::move(frame));
    }
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

void BM_engine(benchmark::State& state) {
  Setup s = make_setup(static_cast<unsigned>(state.range(0)), static_cast<uint32_t>(state.range(1)));
  agg::EngineConfig cfg;
  agg::Engine engine(cfg, static_ops());
  std::string err;
  if (!engine.add_job(s.spec, &err)) {
    state.SkipWithError(err.c_str());
    return;
  }
  agg::TxList tx(4096);
  uint64_t now = 0;
  for (auto _ : state) {
    for (uint64_t seq = 0; seq < s.seqs; ++seq) {
      for (unsigned r = 0; r < s.n; ++r) {
        std::vector<uint8_t>& f = s.pkt[seq * s.n + r];
        engine.process({&f, f.data(), static_cast<uint16_t>(f.size())}, now, tx);
      }
      tx.clear();
    }
    ++now;
  }
  agg::JobInfo info{};
  engine.job_info(1, &info);
  if (info.counters.bad_icrc || info.counters.job_errors || info.counters.slots_released == 0) {
    state.SkipWithError("the engine did not aggregate the packets: check the setup");
    return;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * s.seqs * s.n * s.P));
  state.counters["Gbps"] = benchmark::Counter(static_cast<double>(state.iterations() * s.seqs * s.n * s.P) * 8,
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["working_set_KiB"] = static_cast<double>(s.working_set >> 10);
  state.SetLabel(std::string("kernels=") + std::string(agg::kernels_tier_name()) +
                 " crc=" + std::string(wire::crc32_impl_name()));
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
        std::vector<uint8_t>& f = s.pkt[seq * s.n + r];
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
  std::printf("engine_vs_memcpy=%.2f engine_gbps=%.1f worst_config=n/P=%s\n", worst, worst_gbps, worst_cfg.c_str());
  return 0;
}
