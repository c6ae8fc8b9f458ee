#include "inagg/util/cpu.hpp"

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace inagg::util {

#if defined(__x86_64__)
namespace {
// CPUID feature bits that clang's __builtin_cpu_supports does not name (clang 14 knows neither
// "f16c", "pclmul" nor "vpclmulqdq"; the fuzzers are built with clang).
bool cpuid_bit(unsigned leaf, unsigned subleaf, bool ecx, unsigned bit) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(leaf, subleaf, &a, &b, &c, &d)) return false;
  return ((ecx ? c : b) >> bit) & 1;
}
bool has_f16c() { return cpuid_bit(1, 0, true, 29); }
bool has_pclmul() { return cpuid_bit(1, 0, true, 1); }
bool has_vpclmulqdq() { return cpuid_bit(7, 0, true, 10); }
}  // namespace
#endif

std::string_view tier_name(SimdTier tier) {
  switch (tier) {
    case SimdTier::sse2:
      return "sse2";
    case SimdTier::avx2:
      return "avx2";
    case SimdTier::avx512:
      return "avx512";
    case SimdTier::native:
      return "native";
  }
  return "unknown";
}

bool cpu_supports(SimdTier tier) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (tier) {
    case SimdTier::sse2:
      return true;
    case SimdTier::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() && has_pclmul() &&
             __builtin_cpu_supports("sse4.2");
    case SimdTier::avx512:
      return cpu_supports(SimdTier::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case SimdTier::native:
      return false;
  }
  return false;
#else
  return tier == SimdTier::native;
#endif
}

bool cpu_has_vpclmulqdq() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return has_vpclmulqdq();
#else
  return false;
#endif
}

SimdTier best_simd_tier() {
#if defined(__x86_64__)
  SimdTier cap = SimdTier::avx512;
  if (const char* env = std::getenv("INAGG_SIMD")) {
    std::string_view v(env);
    if (v == "sse2")
      cap = SimdTier::sse2;
    else if (v == "avx2")
      cap = SimdTier::avx2;
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
