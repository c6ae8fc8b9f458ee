// CPU feature detection for the runtime SIMD dispatch.
#pragma once

#include <string_view>

namespace inagg::util {

// One build of inagg runs on any x86-64: hot kernels are compiled once per tier and the best tier
// the CPU supports is picked at start-up. On other architectures SIMDe maps the one source onto
// the native ISA and there is a single tier, `native`.
enum class SimdTier {
  sse2,    // x86-64 baseline
  avx2,    // AVX2 + FMA + F16C + PCLMUL + SSE4.2 (x86-64-v3)
  avx512,  // AVX-512 F/BW/VL/DQ on top of avx2
  native,  // not x86-64
};

std::string_view tier_name(SimdTier tier);

// Whether this CPU can run code compiled for `tier`.
bool cpu_supports(SimdTier tier);

// Whether this CPU has VPCLMULQDQ (carry-less multiply on 512-bit vectors).
bool cpu_has_vpclmulqdq();

// The best tier this CPU supports. The environment variable INAGG_SIMD (sse2, avx2, avx512) caps it,
// so a benchmark or a bug report can pin a lower tier; a value the CPU cannot run is ignored.
SimdTier best_simd_tier();

}  // namespace inagg::util
