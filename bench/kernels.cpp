// Throughput of the reduction kernels on 4 KiB payloads (one RoCE packet at a 4096 path MTU, in
// L1), per dtype: the dispatched kernels, every tier this CPU can run, the scalar reference, and the
// baseline inagg replaces: a scalar per-element loop with byte-order conversion, as OmniReduce and
// DAIET-style software aggregators do it.
//
// Bytes/s count input bytes: both operands for add_into (dst and src), all n sources for
// sum_ranked. After the run one line compares the dispatched add_into with the byte-swap loop:
//   simd_vs_scalar_fp32=X simd_vs_scalar_int32=Y simd_vs_scalar_bf16=Z simd_vs_scalar_fp16=W
#include <arpa/inet.h>
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "inagg/agg/dtype.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/util/cpu.hpp"

namespace {

using inagg::agg::Dtype;
namespace agg = inagg::agg;
namespace util = inagg::util;

constexpr size_t kPayloadBytes = 4096;
constexpr Dtype kDtypes[] = {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16};

// ---------------------------------------------------------------------------------------------
// The baseline: one element at a time, network byte order to host and back, never vectorised
// (the attribute keeps GCC's vectoriser off these loops only). The byte swaps make it compute on
// big-endian values, which is the baseline's format, not inagg's; it is here for its cost.

#define INAGG_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))

INAGG_NO_VECTORIZE void bswap_loop_fp32(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 4) {
    uint32_t a, b;
    std::memcpy(&a, dst + off, 4);
    std::memcpy(&b, src + off, 4);
    const float sum = std::bit_cast<float>(ntohl(a)) + std::bit_cast<float>(ntohl(b));
    const uint32_t out = htonl(std::bit_cast<uint32_t>(sum));
    std::memcpy(dst + off, &out, 4);
  }
}

INAGG_NO_VECTORIZE void bswap_loop_int32(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 4) {
    uint32_t a, b;
    std::memcpy(&a, dst + off, 4);
    std::memcpy(&b, src + off, 4);
    const uint32_t out = htonl(ntohl(a) + ntohl(b));
    std::memcpy(dst + off, &out, 4);
  }
}

INAGG_NO_VECTORIZE void bswap_loop_bf16(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 2) {
    uint16_t a, b;
    std::memcpy(&a, dst + off, 2);
    std::memcpy(&b, src + off, 2);
    const float sum = std::bit_cast<float>(static_cast<uint32_t>(ntohs(a)) << 16) +
                      std::bit_cast<float>(static_cast<uint32_t>(ntohs(b)) << 16);
    const uint32_t bits = std::bit_cast<uint32_t>(sum);
    const uint32_t rounded =
        (bits & 0x7FFFFFFFu) > 0x7F800000u ? (bits >> 16) | 0x40u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const uint16_t out = htons(static_cast<uint16_t>(rounded));
    std::memcpy(dst + off, &out, 2);
  }
}

// Converts with the project's scalar reference (out-of-line calls: what a portable scalar
// aggregator without F16C pays).
INAGG_NO_VECTORIZE void bswap_loop_fp16(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 2) {
    uint16_t a, b;
    std::memcpy(&a, dst + off, 2);
    std::memcpy(&b, src + off, 2);
    const float sum = agg::scalar::fp16_to_fp32(ntohs(a)) + agg::scalar::fp16_to_fp32(ntohs(b));
    const uint16_t out = htons(agg::scalar::fp32_to_fp16(sum));
    std::memcpy(dst + off, &out, 2);
  }
}

using AddFn = void (*)(uint8_t*, const uint8_t*, size_t);
AddFn bswap_loop_for(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32:
      return bswap_loop_fp32;
    case Dtype::int32:
      return bswap_loop_int32;
    case Dtype::bf16:
      return bswap_loop_bf16;
    case Dtype::fp16:
      return bswap_loop_fp16;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Inputs: ordinary finite values (no subnormals, which cost microcode assists on x86 and would
// measure the CPU, not the kernel).

std::vector<uint8_t> payload(Dtype dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<uint8_t> b(kPayloadBytes);
  for (size_t off = 0; off < kPayloadBytes; off += agg::dtype_size(dtype)) {
    const float v = value(rng);
    switch (dtype) {
      case Dtype::fp32:
        std::memcpy(&b[off], &v, 4);
        break;
      case Dtype::int32: {
        const auto i = static_cast<int32_t>(v * 1e6f);
        std::memcpy(&b[off], &i, 4);
        break;
      }
      case Dtype::bf16: {
        const uint16_t h = agg::scalar::fp32_to_bf16(v);
        std::memcpy(&b[off], &h, 2);
        break;
      }
      case Dtype::fp16: {
        const uint16_t h = agg::scalar::fp32_to_fp16(v);
        std::memcpy(&b[off], &h, 2);
        break;
      }
    }
  }
  return b;
}

void bench_add_into(benchmark::State& state, Dtype dtype, const agg::detail::KernelOps* ops) {
  std::vector<uint8_t> dst = payload(dtype, 1);
  const std::vector<uint8_t> src = payload(dtype, 2);
  for (auto _ : state) {
    ops->add_into(dtype, dst.data(), src.data(), kPayloadBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(kPayloadBytes));
}

void bench_sum_ranked(benchmark::State& state, Dtype dtype, const agg::detail::KernelOps* ops, size_t n) {
  std::vector<std::vector<uint8_t>> srcs;
  std::vector<const uint8_t*> ptrs;
  for (size_t r = 0; r < n; ++r) srcs.push_back(payload(dtype, 10 + static_cast<unsigned>(r)));
  for (const auto& s : srcs) ptrs.push_back(s.data());
  std::vector<uint8_t> dst(kPayloadBytes);
  for (auto _ : state) {
    ops->sum_ranked(dtype, dst.data(), ptrs.data(), n, kPayloadBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n * kPayloadBytes));
}

void bench_bswap_loop(benchmark::State& state, Dtype dtype) {
  const AddFn loop = bswap_loop_for(dtype);
  std::vector<uint8_t> dst = payload(dtype, 1);
  const std::vector<uint8_t> src = payload(dtype, 2);
  for (auto _ : state) {
    loop(dst.data(), src.data(), kPayloadBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(kPayloadBytes));
}

const agg::detail::KernelOps kDispatchedOps = {&agg::add_into, &agg::sum_ranked, &agg::sum_ranked_broadcast};
const agg::detail::KernelOps kScalarOps = {&agg::scalar::add_into, &agg::scalar::sum_ranked,
                                           &agg::scalar::sum_ranked_broadcast};

std::string add_into_name(Dtype dtype, std::string_view impl) {
  return "add_into/" + std::string(agg::dtype_name(dtype)) + "/" + std::string(impl);
}
std::string bswap_loop_name(Dtype dtype) { return "bswap_loop/" + std::string(agg::dtype_name(dtype)); }

void register_benchmarks() {
  struct Impl {
    std::string name;
    const agg::detail::KernelOps* ops;
  };
  std::vector<Impl> impls = {{"dispatched", &kDispatchedOps}};
  for (util::SimdTier tier :
       {util::SimdTier::avx512, util::SimdTier::avx2, util::SimdTier::sse2, util::SimdTier::native})
    if (const agg::detail::KernelOps* ops = agg::detail::kernel_ops_for(tier))
      impls.push_back({std::string(util::tier_name(tier)), ops});
  impls.push_back({"scalar_reference", &kScalarOps});

  for (Dtype dtype : kDtypes) {
    for (const Impl& impl : impls)
      benchmark::RegisterBenchmark(add_into_name(dtype, impl.name).c_str(), bench_add_into, dtype, impl.ops);
    benchmark::RegisterBenchmark(bswap_loop_name(dtype).c_str(), bench_bswap_loop, dtype);
    for (size_t n : {4, 8})
      for (const Impl& impl : impls)
        benchmark::RegisterBenchmark(
            ("sum_ranked/" + std::string(agg::dtype_name(dtype)) + "/n=" + std::to_string(n) + "/" + impl.name).c_str(),
            bench_sum_ranked, dtype, impl.ops, n);
  }
}

// Shows results as --benchmark_format asks, and keeps each benchmark's bytes/s for the summary.
class RateRecorder : public benchmark::BenchmarkReporter {
 public:
  RateRecorder() : display_(benchmark::CreateDefaultDisplayReporter()) {}

  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const auto it = run.counters.find("bytes_per_second");
      if (it == run.counters.end()) continue;
      Mean& m = rates_[run.benchmark_name()];
      m.sum += it->second.value;
      m.count += 1;
    }
    display_->ReportRuns(runs);
  }
  void Finalize() override { display_->Finalize(); }

  // Mean bytes/s over the repetitions of `name`, or 0 if it did not run.
  double rate(const std::string& name) const {
    const auto it = rates_.find(name);
    return it == rates_.end() || it->second.count == 0 ? 0.0 : it->second.sum / it->second.count;
  }

 private:
  struct Mean {
    double sum = 0;
    int count = 0;
  };
  std::unique_ptr<benchmark::BenchmarkReporter> display_;
  std::map<std::string, Mean> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("inagg_kernels_tier", std::string(agg::kernels_tier_name()));
  register_benchmarks();
  RateRecorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  std::fflush(stdout);

  std::string summary;
  for (Dtype dtype : kDtypes) {
    const double simd = recorder.rate(add_into_name(dtype, "dispatched"));
    const double scalar = recorder.rate(bswap_loop_name(dtype));
    char field[64];
    if (simd > 0 && scalar > 0) {
      std::snprintf(field, sizeof field, "simd_vs_scalar_%s=%.2f", std::string(agg::dtype_name(dtype)).c_str(),
                    simd / scalar);
    } else {
      std::snprintf(field, sizeof field, "simd_vs_scalar_%s=n/a", std::string(agg::dtype_name(dtype)).c_str());
    }
    if (!summary.empty()) summary += ' ';
    summary += field;
  }
  std::printf("%s\n", summary.c_str());
  benchmark::Shutdown();
  return 0;
}
