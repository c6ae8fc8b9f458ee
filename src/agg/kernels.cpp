// Runtime dispatch of the reduction kernels to the best SIMD tier (kernels_simd.cpp, built once per
// tier by src/agg/meson.build).
#include "inagg/agg/kernels.hpp"

#include <atomic>
#include <cassert>

namespace inagg::agg {
namespace detail {

#if defined(__x86_64__)
namespace sse2 {
extern const KernelOps kernel_ops_sse2;
}
namespace avx2 {
extern const KernelOps kernel_ops_avx2;
}
namespace avx512 {
extern const KernelOps kernel_ops_avx512;
}
#else
namespace native {
extern const KernelOps kernel_ops_native;
}
#endif

const KernelOps* kernel_ops_for(util::SimdTier tier) {
  if (!util::cpu_supports(tier)) return nullptr;
  switch (tier) {
#if defined(__x86_64__)
    case util::SimdTier::sse2:
      return &sse2::kernel_ops_sse2;
    case util::SimdTier::avx2:
      return &avx2::kernel_ops_avx2;
    case util::SimdTier::avx512:
      return &avx512::kernel_ops_avx512;
#else
    case util::SimdTier::native:
      return &native::kernel_ops_native;
#endif
    default:
      return nullptr;
  }
}

}  // namespace detail

namespace {

util::SimdTier active_tier() {
  static const util::SimdTier tier = util::best_simd_tier();
  return tier;
}

// The table in use starts as one whose entries choose the tier, install its table and forward the
// call; every later call goes straight to the tier. Doing it at first use (rather than in a static
// initializer) lets other static initializers call the kernels. Relaxed atomics suffice: the tables
// are constants, and two threads racing through the first call install the same one.
const detail::KernelOps* install_active_ops();

void add_into_first_call(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes) {
  install_active_ops()->add_into(dtype, dst, src, bytes);
}
void sum_ranked_first_call(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  install_active_ops()->sum_ranked(dtype, dst, srcs, n, bytes);
}

void sum_ranked_broadcast_first_call(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs,
                                     size_t n, size_t bytes) {
  install_active_ops()->sum_ranked_broadcast(dtype, dsts, ndst, srcs, n, bytes);
}

constexpr detail::KernelOps first_call_ops = {add_into_first_call, sum_ranked_first_call,
                                              sum_ranked_broadcast_first_call};
constinit std::atomic<const detail::KernelOps*> active_ops{&first_call_ops};

const detail::KernelOps* install_active_ops() {
  const detail::KernelOps* ops = detail::kernel_ops_for(active_tier());
  assert(ops != nullptr && "best_simd_tier() names a tier this build has");
  active_ops.store(ops, std::memory_order_relaxed);
  return ops;
}

}  // namespace

void add_into(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes) {
  active_ops.load(std::memory_order_relaxed)->add_into(dtype, dst, src, bytes);
}

void sum_ranked(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  assert(n >= 1);
  active_ops.load(std::memory_order_relaxed)->sum_ranked(dtype, dst, srcs, n, bytes);
}

void sum_ranked_broadcast(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n,
                          size_t bytes) {
  assert(n >= 1);
  active_ops.load(std::memory_order_relaxed)->sum_ranked_broadcast(dtype, dsts, ndst, srcs, n, bytes);
}

std::string_view kernels_tier_name() { return util::tier_name(active_tier()); }

}  // namespace inagg::agg
