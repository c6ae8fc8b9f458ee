// The reduction kernels, written once with SIMDe and compiled once per SIMD tier
// (src/agg/meson.build). The tier's -m flags pick the vector width: 512-bit for avx512, 256-bit for
// avx2, 128-bit for sse2 and for `native` (where SIMDe maps 128-bit onto NEON and the like).
//
// Everything lives in a namespace named after the tier, and this file calls no inline function
// defined outside it (only SIMDe's, which are static): an inline function emitted here would be
// compiled with this tier's flags, and the linker could hand that copy to a baseline caller.
// Only kernel_ops_<tier> is exported; kernels.cpp picks one.
//
// Results must equal scalar::add_into / scalar::sum_ranked bit for bit; see kernels.hpp for the
// arithmetic and tests/agg/test_kernels.cpp for the proof.
#include <cstddef>
#include <cstdint>
#include <cstring>

// GCC 12 warns that _mm512_undefined_epi32()'s self-initialised placeholder (used by the
// unmasked 512-bit shifts) "may be used uninitialized" once inlined (GCC bug 105593, fixed in
// 13); it is intentional in GCC's own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#pragma GCC diagnostic pop

#include "inagg/agg/kernels.hpp"

#ifndef INAGG_TIER
#error "compile with -DINAGG_TIER=<tier>"
#endif

#define INAGG_PASTE_(a, b) a##b
#define INAGG_PASTE(a, b) INAGG_PASTE_(a, b)

namespace inagg::agg::detail::INAGG_TIER {
namespace {

// One vector width: the handful of operations the element codecs below need.
#if defined(__AVX512F__) && defined(__AVX512BW__)
struct Vec {
  static constexpr size_t bytes = 64;
  using F = simde__m512;
  using I = simde__m512i;
  static F load_f(const uint8_t* p) { return simde_mm512_loadu_ps(p); }
  static void store_f(uint8_t* p, F v) { simde_mm512_storeu_ps(p, v); }
  static I load_i(const uint8_t* p) { return simde_mm512_loadu_si512(p); }
  static void store_i(uint8_t* p, I v) { simde_mm512_storeu_si512(p, v); }
  static F add_f(F a, F b) { return simde_mm512_add_ps(a, b); }
  static I add_i(I a, I b) { return simde_mm512_add_epi32(a, b); }
  static I and_i(I a, I b) { return simde_mm512_and_si512(a, b); }
  static I or_i(I a, I b) { return simde_mm512_or_si512(a, b); }
  static I shl16(I a) { return simde_mm512_slli_epi32(a, 16); }
  static I shr16(I a) { return simde_mm512_srli_epi32(a, 16); }
  static I set1(uint32_t v) { return simde_mm512_set1_epi32(static_cast<int32_t>(v)); }
  static F as_f(I a) { return simde_mm512_castsi512_ps(a); }
  static I as_i(F a) { return simde_mm512_castps_si512(a); }
  // Lanes whose fp32 bits are a NaN take if_nan, the others otherwise. (Signed compare: the
  // magnitude is below 2^31.)
  static I select_nan(I bits, I if_nan, I otherwise) {
    const simde__mmask16 nan = simde_mm512_cmpgt_epi32_mask(and_i(bits, set1(0x7FFFFFFF)), set1(0x7F800000));
    return simde_mm512_mask_blend_epi32(nan, otherwise, if_nan);
  }
};
#elif defined(__AVX2__)
struct Vec {
  static constexpr size_t bytes = 32;
  using F = simde__m256;
  using I = simde__m256i;
  static F load_f(const uint8_t* p) { return simde_mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static void store_f(uint8_t* p, F v) { simde_mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
  static I load_i(const uint8_t* p) { return simde_mm256_loadu_si256(p); }
  static void store_i(uint8_t* p, I v) { simde_mm256_storeu_si256(p, v); }
  static F add_f(F a, F b) { return simde_mm256_add_ps(a, b); }
  static I add_i(I a, I b) { return simde_mm256_add_epi32(a, b); }
  static I and_i(I a, I b) { return simde_mm256_and_si256(a, b); }
  static I or_i(I a, I b) { return simde_mm256_or_si256(a, b); }
  static I shl16(I a) { return simde_mm256_slli_epi32(a, 16); }
  static I shr16(I a) { return simde_mm256_srli_epi32(a, 16); }
  static I set1(uint32_t v) { return simde_mm256_set1_epi32(static_cast<int32_t>(v)); }
  static F as_f(I a) { return simde_mm256_castsi256_ps(a); }
  static I as_i(F a) { return simde_mm256_castps_si256(a); }
  static I select_nan(I bits, I if_nan, I otherwise) {
    const I nan = simde_mm256_cmpgt_epi32(and_i(bits, set1(0x7FFFFFFF)), set1(0x7F800000));
    return simde_mm256_blendv_epi8(otherwise, if_nan, nan);
  }
};
#else
struct Vec {
  static constexpr size_t bytes = 16;
  using F = simde__m128;
  using I = simde__m128i;
  static F load_f(const uint8_t* p) { return simde_mm_loadu_ps(reinterpret_cast<const float*>(p)); }
  static void store_f(uint8_t* p, F v) { simde_mm_storeu_ps(reinterpret_cast<float*>(p), v); }
  static I load_i(const uint8_t* p) { return simde_mm_loadu_si128(reinterpret_cast<const simde__m128i*>(p)); }
  static void store_i(uint8_t* p, I v) { simde_mm_storeu_si128(reinterpret_cast<simde__m128i*>(p), v); }
  static F add_f(F a, F b) { return simde_mm_add_ps(a, b); }
  static I add_i(I a, I b) { return simde_mm_add_epi32(a, b); }
  static I and_i(I a, I b) { return simde_mm_and_si128(a, b); }
  static I or_i(I a, I b) { return simde_mm_or_si128(a, b); }
  static I shl16(I a) { return simde_mm_slli_epi32(a, 16); }
  static I shr16(I a) { return simde_mm_srli_epi32(a, 16); }
  static I set1(uint32_t v) { return simde_mm_set1_epi32(static_cast<int32_t>(v)); }
  static F as_f(I a) { return simde_mm_castsi128_ps(a); }
  static I as_i(F a) { return simde_mm_castps_si128(a); }
  static I select_nan(I bits, I if_nan, I otherwise) {
    const I nan = simde_mm_cmpgt_epi32(and_i(bits, set1(0x7FFFFFFF)), set1(0x7F800000));
    return or_i(and_i(nan, if_nan), simde_mm_andnot_si128(nan, otherwise));
  }
};
#endif

// Element codecs: a unit of payload bytes, the accumulator it widens to, the add, and the narrowing
// store. chunk_units is how many units sum_ranked keeps in registers while it walks the n ranks.

struct Fp32 {
  static constexpr size_t unit_bytes = Vec::bytes;
  static constexpr size_t chunk_units = 4;
  using Acc = Vec::F;
  static Acc load(const uint8_t* p) { return Vec::load_f(p); }
  static Acc add(Acc a, Acc b) { return Vec::add_f(a, b); }
  static void store(uint8_t* p, Acc a) { Vec::store_f(p, a); }
};

// Vector adds wrap, which is the int32 contract (kernels.hpp).
struct Int32 {
  static constexpr size_t unit_bytes = Vec::bytes;
  static constexpr size_t chunk_units = 4;
  using Acc = Vec::I;
  static Acc load(const uint8_t* p) { return Vec::load_i(p); }
  static Acc add(Acc a, Acc b) { return Vec::add_i(a, b); }
  static void store(uint8_t* p, Acc a) { Vec::store_i(p, a); }
};

// bf16 pairs are handled in place in their 32-bit lanes, so there is no shuffling: the low half of
// each lane (even element) widens by a shift, the high half (odd element) by a mask. Narrowing is
// scalar::fp32_to_bf16 in integer ops: round to nearest even by adding 0x7FFF + lsb, NaN -> quiet.
// (Not AVX512_BF16's vcvtneps2bf16: it flushes subnormals to zero.)
struct Bf16 {
  static constexpr size_t unit_bytes = Vec::bytes;
  static constexpr size_t chunk_units = 4;
  struct Acc {
    Vec::F even, odd;
  };
  static Acc load(const uint8_t* p) {
    const Vec::I v = Vec::load_i(p);
    return {Vec::as_f(Vec::shl16(v)), Vec::as_f(Vec::and_i(v, Vec::set1(0xFFFF0000u)))};
  }
  static Acc add(Acc a, Acc b) { return {Vec::add_f(a.even, b.even), Vec::add_f(a.odd, b.odd)}; }
  // fp32 bits whose top half is the rounded bf16.
  static Vec::I round(Vec::F f) {
    const Vec::I bits = Vec::as_i(f);
    const Vec::I lsb = Vec::and_i(Vec::shr16(bits), Vec::set1(1));
    const Vec::I rounded = Vec::add_i(Vec::add_i(bits, Vec::set1(0x7FFF)), lsb);
    return Vec::select_nan(bits, Vec::or_i(bits, Vec::set1(0x00400000u)), rounded);
  }
  static void store(uint8_t* p, Acc a) {
    Vec::store_i(p, Vec::or_i(Vec::shr16(round(a.even)), Vec::and_i(round(a.odd), Vec::set1(0xFFFF0000u))));
  }
};

#if defined(__F16C__)
// F16C converts 8 halves <-> 8 floats, exactly (widening) and with round-to-nearest-even
// (narrowing; the immediate fixes the rounding, not MXCSR, and SIMDe 0.7.4 passes only RNE through
// anyway). The avx512 tier uses it too: SIMDe 0.7.4 has no 512-bit cvtph, and at 8 halves per
// conversion the conversions, not the adds, set the speed.
struct Fp16 {
  static constexpr size_t unit_bytes = 16;
  static constexpr size_t chunk_units = 8;
  using Acc = simde__m256;
  static Acc load(const uint8_t* p) {
    return simde_mm256_cvtph_ps(simde_mm_loadu_si128(reinterpret_cast<const simde__m128i*>(p)));
  }
  static Acc add(Acc a, Acc b) { return simde_mm256_add_ps(a, b); }
  static void store(uint8_t* p, Acc a) {
    simde_mm_storeu_si128(reinterpret_cast<simde__m128i*>(p),
                          simde_mm256_cvtps_ph(a, SIMDE_MM_FROUND_TO_NEAREST_INT | SIMDE_MM_FROUND_NO_EXC));
  }
};
#else
// No F16C (sse2 tier, or non-x86): SIMDe's own conversions, 4 halves at a time. On x86 these are
// its portable bit-twiddling (Giesen's), one element at a time (~3 ns per element, so this tier's
// fp16 runs at scalar speed). They match the reference bit for bit except in NaN payloads (SIMDe
// narrows every NaN to 0x7E00), which the kernels do not promise: tests/agg/test_kernels.cpp checks
// all 65536 halves and ~1.2M floats including every tie, and a one-off run over all 2^32 floats
// found no other difference. On Arm they are the hardware's IEEE conversions.
struct Fp16 {
  static constexpr size_t unit_bytes = 8;
  static constexpr size_t chunk_units = 4;
  using Acc = simde__m128;
  static Acc load(const uint8_t* p) {
    return simde_mm_cvtph_ps(simde_mm_loadl_epi64(reinterpret_cast<const simde__m128i*>(p)));
  }
  static Acc add(Acc a, Acc b) { return simde_mm_add_ps(a, b); }
  static void store(uint8_t* p, Acc a) {
    simde_mm_storel_epi64(reinterpret_cast<simde__m128i*>(p),
                          simde_mm_cvtps_ph(a, SIMDE_MM_FROUND_TO_NEAREST_INT | SIMDE_MM_FROUND_NO_EXC));
  }
};
#endif

// The last partial unit goes through a zero-padded buffer, so every load and store is a whole
// unit and the codecs need no scalar path. The padding is summed too, harmlessly, and never stored.
template <class C>
struct Tail {
  alignas(64) uint8_t bytes[C::unit_bytes] = {};
};

template <class C>
void add_into_units(uint8_t* dst, const uint8_t* src, size_t bytes) {
  constexpr size_t unit = C::unit_bytes;
  size_t off = 0;
#pragma GCC unroll 4
  for (; off + unit <= bytes; off += unit) C::store(dst + off, C::add(C::load(dst + off), C::load(src + off)));
  if (off < bytes) {
    const size_t rest = bytes - off;
    Tail<C> d, s;
    std::memcpy(d.bytes, dst + off, rest);
    std::memcpy(s.bytes, src + off, rest);
    C::store(d.bytes, C::add(C::load(d.bytes), C::load(s.bytes)));
    std::memcpy(dst + off, d.bytes, rest);
  }
}

// The rank-ordered sum (ranks added in order 0, 1, ..., n-1): a chunk of chunk_units units is held
// in registers across all n ranks, then stored into every dst, so each source byte is read once.
// All loads of a chunk come before its stores, so a dst may be a source at the same address.
template <class C>
void sum_ranked_broadcast_units(uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  constexpr size_t unit = C::unit_bytes;
  constexpr size_t chunk = C::chunk_units * unit;
  size_t off = 0;
  for (; off + chunk <= bytes; off += chunk) {
    typename C::Acc acc[C::chunk_units];
#pragma GCC unroll 8
    for (size_t k = 0; k < C::chunk_units; ++k) acc[k] = C::load(srcs[0] + off + k * unit);
    for (size_t r = 1; r < n; ++r) {
      const uint8_t* src = srcs[r] + off;
#pragma GCC unroll 8
      for (size_t k = 0; k < C::chunk_units; ++k) acc[k] = C::add(acc[k], C::load(src + k * unit));
    }
    for (size_t d = 0; d < ndst; ++d) {
      uint8_t* dst = dsts[d] + off;
#pragma GCC unroll 8
      for (size_t k = 0; k < C::chunk_units; ++k) C::store(dst + k * unit, acc[k]);
    }
  }
  for (; off + unit <= bytes; off += unit) {
    typename C::Acc acc = C::load(srcs[0] + off);
    for (size_t r = 1; r < n; ++r) acc = C::add(acc, C::load(srcs[r] + off));
    for (size_t d = 0; d < ndst; ++d) C::store(dsts[d] + off, acc);
  }
  if (off < bytes) {
    const size_t rest = bytes - off;
    Tail<C> t;
    std::memcpy(t.bytes, srcs[0] + off, rest);
    typename C::Acc acc = C::load(t.bytes);
    for (size_t r = 1; r < n; ++r) {
      std::memcpy(t.bytes, srcs[r] + off, rest);
      acc = C::add(acc, C::load(t.bytes));
    }
    C::store(t.bytes, acc);
    for (size_t d = 0; d < ndst; ++d) std::memcpy(dsts[d] + off, t.bytes, rest);
  }
}

// The rank-ordered sum into one dst.
template <class C>
void sum_ranked_units(uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  uint8_t* const dsts[1] = {dst};
  sum_ranked_broadcast_units<C>(dsts, 1, srcs, n, bytes);
}

void add_into(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes) {
  switch (dtype) {
    case Dtype::fp32:
      return add_into_units<Fp32>(dst, src, bytes);
    case Dtype::fp16:
      return add_into_units<Fp16>(dst, src, bytes);
    case Dtype::bf16:
      return add_into_units<Bf16>(dst, src, bytes);
    case Dtype::int32:
      return add_into_units<Int32>(dst, src, bytes);
  }
}

void sum_ranked(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  if (n == 0) return;
  switch (dtype) {
    case Dtype::fp32:
      return sum_ranked_units<Fp32>(dst, srcs, n, bytes);
    case Dtype::fp16:
      return sum_ranked_units<Fp16>(dst, srcs, n, bytes);
    case Dtype::bf16:
      return sum_ranked_units<Bf16>(dst, srcs, n, bytes);
    case Dtype::int32:
      return sum_ranked_units<Int32>(dst, srcs, n, bytes);
  }
}

void sum_ranked_broadcast(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n,
                          size_t bytes) {
  if (n == 0) return;
  switch (dtype) {
    case Dtype::fp32:
      return sum_ranked_broadcast_units<Fp32>(dsts, ndst, srcs, n, bytes);
    case Dtype::fp16:
      return sum_ranked_broadcast_units<Fp16>(dsts, ndst, srcs, n, bytes);
    case Dtype::bf16:
      return sum_ranked_broadcast_units<Bf16>(dsts, ndst, srcs, n, bytes);
    case Dtype::int32:
      return sum_ranked_broadcast_units<Int32>(dsts, ndst, srcs, n, bytes);
  }
}

}  // namespace

extern const KernelOps INAGG_PASTE(kernel_ops_, INAGG_TIER) = {add_into, sum_ranked, sum_ranked_broadcast};

}  // namespace inagg::agg::detail::INAGG_TIER
