// Reduction kernels: the element-wise sums the RC engine computes when a slot completes
// (docs/protocol.md section 7, "A data packet").
//
// Payloads are raw little-endian bytes straight from packets: any alignment, any length that is a
// multiple of the element size (0 included). Results are bit-identical across tiers and to the
// scalar reference, so the appliance's sums never depend on which CPU ran them. Two exceptions:
// NaN payloads (they follow the hardware's NaN propagation, and the sse2 tier's fp16 narrows every
// NaN to 0x7E00), and a non-default floating-point environment (all of this assumes MXCSR's
// defaults, round-to-nearest without FTZ/DAZ, which DPDK leaves alone).
//
// - fp32: IEEE round-to-nearest-even adds, in rank order.
// - fp16, bf16: each element widened to fp32 (exact), summed in fp32, rounded once to nearest-even;
//   a NaN becomes a quiet NaN.
// - int32: wrapping two's complement. Wrapping keeps the sum associative (any order gives the same
//   bits), matches what NCCL and MPI integer allreduces do, and costs one instruction. Detecting
//   saturation is the job of the fixed-point client that chose the scale: it knows n and the range.
//
// The implementation is chosen once, at the first call, for the best SIMD tier the CPU supports
// (util::best_simd_tier(), which INAGG_SIMD can cap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inagg/agg/dtype.hpp"
#include "inagg/util/cpu.hpp"

namespace inagg::agg {

// dst[i] += src[i]. dst and src are the same buffer or do not overlap.
void add_into(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes);

// dst[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ... + srcs[n-1][i], in rank order, n >= 1.
// The accumulator starts from srcs[0] itself (not from 0.0, which would turn -0.0 into +0.0).
// dst may be srcs[0]; otherwise it must not overlap any source.
void sum_ranked(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes);

// The same sum stored into each of dsts[0..ndst) in one pass (the engine writes a slot's sum straight
// into its n packets and its retained copy). A dst may be a source at the same address (a packet's
// own payload): every chunk is read from all sources before it is stored. Otherwise the dsts do not
// overlap the sources or each other. n >= 1.
void sum_ranked_broadcast(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n,
                          size_t bytes);

// The tier in use ("avx512", "avx2", "sse2", "native"), for logs.
std::string_view kernels_tier_name();

// The plain per-element reference the SIMD tiers are tested against.
namespace scalar {
void add_into(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes);
void sum_ranked(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes);
void sum_ranked_broadcast(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n,
                          size_t bytes);

// Element conversions, bit patterns in and out. Narrowing rounds to nearest-even, overflows to
// Inf, and maps NaN to a quiet NaN with the same sign and the top payload bits.
float fp16_to_fp32(uint16_t half);
uint16_t fp32_to_fp16(float value);
float bf16_to_fp32(uint16_t bf16);
uint16_t fp32_to_bf16(float value);
}  // namespace scalar

namespace detail {
// One table per SIMD tier, so tests and benchmarks can run every tier this CPU supports.
struct KernelOps {
  void (*add_into)(Dtype, uint8_t*, const uint8_t*, size_t);
  void (*sum_ranked)(Dtype, uint8_t*, const uint8_t* const*, size_t, size_t);
  void (*sum_ranked_broadcast)(Dtype, uint8_t* const*, size_t, const uint8_t* const*, size_t, size_t);
};

// nullptr if `tier` is not built for this architecture or this CPU cannot run it.
const KernelOps* kernel_ops_for(util::SimdTier tier);
}  // namespace detail

}  // namespace inagg::agg
