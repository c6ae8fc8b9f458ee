// The worker's --check work on large buffers (inagg-worker fills its input before every
// allreduce and computes each size's reference once), to decide whether TBB earns its keep there:
// the fill as it was (std::mt19937 and uniform_real_distribution: one sequence per rank, so one
// thread), the counter-based fill that replaced it (fill_input), that fill split over TBB's
// threads (parallel_for over fill_input_range), and the reference's rank-ordered scalar sum of 4
// inputs on one thread and split over TBB's threads. 64 MiB, as scripts/demo's largest size.
// Wall-clock time: threads only help as much as the machine has idle cores. After the run:
//   fill_vs_mt19937=X fill_threads_vs_one=Y sum_threads_vs_one=Z threads=N
#include <benchmark/benchmark.h>
#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "inagg/agg/kernels.hpp"
#include "inagg/util/dtype.hpp"
#include "rate_reporter.hpp"
#include "reference.hpp"

namespace {

using inagg::apps::fill_input;
using inagg::apps::fill_input_range;
using inagg::util::Dtype;

constexpr size_t kBytes = 64 << 20;
constexpr unsigned kWorkers = 4;

// The fill inagg-worker used before: a sequential generator per rank.
void fill_mt19937(uint32_t seed, unsigned rank, uint8_t* buf, size_t bytes) {
  std::mt19937 rng(seed * 7919u + rank);
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::memcpy(buf + i, &f, 4);
  }
}

void BM_fill_mt19937(benchmark::State& state) {
  std::vector<uint8_t> buf(kBytes);
  for (auto _ : state) {
    fill_mt19937(1, 0, buf.data(), buf.size());
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

void BM_fill(benchmark::State& state) {
  std::vector<uint8_t> buf(kBytes);
  for (auto _ : state) {
    fill_input(Dtype::fp32, 1, 0, buf.data(), buf.size());
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

constexpr size_t kGrain = 64 << 10;  // elements per task

void BM_fill_threads(benchmark::State& state) {
  std::vector<uint8_t> buf(kBytes);
  for (auto _ : state) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, kBytes / 4, kGrain), [&](const tbb::blocked_range<size_t>& r) {
      fill_input_range(Dtype::fp32, 1, 0, buf.data(), r.begin(), r.end());
    });
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

// The reference's sum: 4 inputs, rank order, the scalar kernel (bytes: the sum's).
struct SumInputs {
  std::vector<std::vector<uint8_t>> in;
  std::vector<uint8_t> out;
  SumInputs() : in(kWorkers, std::vector<uint8_t>(kBytes)), out(kBytes) {
    for (unsigned r = 0; r < kWorkers; ++r) fill_input(Dtype::fp32, 1, r, in[r].data(), kBytes);
  }
  void sum(size_t first, size_t last) {
    const uint8_t* srcs[kWorkers];
    for (unsigned r = 0; r < kWorkers; ++r) srcs[r] = in[r].data() + first * 4;
    inagg::agg::scalar::sum_ranked(Dtype::fp32, out.data() + first * 4, srcs, kWorkers, (last - first) * 4);
  }
};

void BM_sum(benchmark::State& state) {
  SumInputs s;
  for (auto _ : state) {
    s.sum(0, kBytes / 4);
    benchmark::DoNotOptimize(s.out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

void BM_sum_threads(benchmark::State& state) {
  SumInputs s;
  for (auto _ : state) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, kBytes / 4, kGrain),
                      [&](const tbb::blocked_range<size_t>& r) { s.sum(r.begin(), r.end()); });
    benchmark::DoNotOptimize(s.out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

BENCHMARK(BM_fill_mt19937)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_fill)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_fill_threads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum_threads)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  inagg::bench::RateReporter rep;
  if (!inagg::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::printf("fill_vs_mt19937=%.2f fill_threads_vs_one=%.2f sum_threads_vs_one=%.2f threads=%d\n",
              rep.ratio("BM_fill/real_time", "BM_fill_mt19937/real_time"),
              rep.ratio("BM_fill_threads/real_time", "BM_fill/real_time"),
              rep.ratio("BM_sum_threads/real_time", "BM_sum/real_time"), tbb::info::default_concurrency());
  return 0;
}
