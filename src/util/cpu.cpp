#include "inagg/util/cpu.hpp"

#include <cstdlib>
#include <string_view>

namespace inagg::util {

std::string_view tier_name(SimdTier tier) {
  switch (tier) {
    case SimdTier::sse2: return "sse2";
    case SimdTier::avx2: return "avx2";
    case SimdTier::avx512: return "avx512";
    case SimdTier::native: return "native";
  }
  return "unknown";
}

bool cpu_supports(SimdTier tier) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (tier) {
    case SimdTier::sse2: return true;
    case SimdTier::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("pclmul") &&
             __builtin_cpu_supports("sse4.2");
    case SimdTier::avx512:
      return cpu_supports(SimdTier::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case SimdTier::native: return false;
  }
  return false;
#else
  return tier == SimdTier::native;
#endif
}

bool cpu_has_vpclmulqdq() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("vpclmulqdq");
#else
  return false;
#endif
}

SimdTier best_simd_tier() {
#if defined(__x86_64__)
  SimdTier cap = SimdTier::avx512;
  if (const char* env = std::getenv("INAGG_SIMD")) {
    std::string_view v(env);
    if (v == "sse2") cap = SimdTier::sse2;
    else if (v == "avx2") cap = SimdTier::avx2;
  }
  for (SimdTier t : {SimdTier::avx512, SimdTier::avx2}) {
    if (static_cast<int>(t) <= static_cast<int>(cap) && cpu_supports(t)) return t;
  }
  return SimdTier::sse2;
#else
  return SimdTier::native;
#endif
}

}  // namespace inagg::util
