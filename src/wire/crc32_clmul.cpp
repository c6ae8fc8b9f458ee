// CRC-32 by carry-less multiplication folding (Intel, "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction", 2009), for the reflected zlib polynomial. Compiled once per SIMD
// tier (src/wire/meson.build): the avx2 tier builds the 128-bit PCLMULQDQ path, the avx512 tier
// adds a 512-bit VPCLMULQDQ path that folds 256 bytes per iteration.
#include <cstddef>
#include <cstdint>

// GCC 12 warns that the unspecified upper lanes of _mm512_undefined_*() inside its own
// broadcast/extract intrinsics "may be used uninitialized": a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <simde/x86/avx512.h>
#include <simde/x86/clmul.h>

#include "inagg/wire/crc32.hpp"

// SIMDe 0.7.4 never defines SIMDE_X86_PCLMUL_NATIVE, so its simde_mm_clmulepi64_si128 is always
// the portable bit loop (~100x slower): call the instruction directly when the tier has it.
#if defined(__PCLMUL__)
#include <wmmintrin.h>
#define INAGG_CLMUL128(a, b, imm) _mm_clmulepi64_si128((a), (b), (imm))
#else
#define INAGG_CLMUL128(a, b, imm) simde_mm_clmulepi64_si128((a), (b), (imm))
#endif

#ifndef INAGG_TIER
#error "compile with -DINAGG_TIER=<tier>"
#endif

namespace inagg::wire::detail::INAGG_TIER {
namespace {

// Folding constants: folding a 128-bit lane forward by D bits multiplies its low 64 bits by
// fold_k(D + 32) and its high 64 bits by fold_k(D - 32), where fold_k(d) = reflect(x^d mod P) << 1.
constexpr uint64_t kPoly = 0x104C11DB7ull;
constexpr uint32_t xpow_mod(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (1ull << 32)) r ^= kPoly;
  }
  return static_cast<uint32_t>(r);
}
constexpr uint32_t reflect32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i)
    if (v & (1u << i)) r |= 1u << (31 - i);
  return r;
}
// constexpr, not consteval: clang 14 (the fuzz build) rejects consteval calls in k128<D>.
constexpr uint64_t fold_k(unsigned d) { return static_cast<uint64_t>(reflect32(xpow_mod(d))) << 1; }
// The published constants (Linux crc32-pclmul, zlib-ng) as a check on the derivation.
static_assert(fold_k(4 * 128 + 32) == 0x154442bd4 && fold_k(4 * 128 - 32) == 0x1c6e41596);
static_assert(fold_k(128 + 32) == 0x1751997d0 && fold_k(128 - 32) == 0x0ccaa009e);
static_assert(fold_k(64) == 0x163cd6124);
constexpr uint64_t kMu = 0x1F7011641;     // reflect(floor(x^64 / P)), for Barrett reduction
constexpr uint64_t kPolyR = 0x1DB710641;  // reflect(P)

// The pair for folding forward by D bits; template so the constants are computed at compile time.
template <unsigned D>
inline simde__m128i k128() {
  constexpr uint64_t lo = fold_k(D + 32), hi = fold_k(D - 32);
  return simde_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo));
}

inline simde__m128i fold128(simde__m128i x, simde__m128i k) {
  return simde_mm_xor_si128(INAGG_CLMUL128(x, k, 0x00), INAGG_CLMUL128(x, k, 0x11));
}

inline simde__m128i load128(const uint8_t* p) { return simde_mm_loadu_si128(reinterpret_cast<const simde__m128i*>(p)); }

// Reduces one 128-bit remainder to the 32-bit CRC state.
inline uint32_t reduce128(simde__m128i x) {
  const simde__m128i mask32 = simde_mm_set_epi32(0, 0, 0, -1);
  // 128 -> 64 bits.
  constexpr uint64_t k96 = fold_k(96), k64 = fold_k(64);
  simde__m128i t = INAGG_CLMUL128(x, simde_mm_set_epi64x(0, static_cast<int64_t>(k96)), 0x00);
  x = simde_mm_xor_si128(t, simde_mm_srli_si128(x, 8));
  // 64 -> 32 bits.
  t = INAGG_CLMUL128(simde_mm_and_si128(x, mask32), simde_mm_set_epi64x(0, static_cast<int64_t>(k64)), 0x00);
  x = simde_mm_xor_si128(simde_mm_srli_si128(x, 4), t);
  // Barrett reduction.
  const simde__m128i mu_p = simde_mm_set_epi64x(static_cast<int64_t>(kMu), static_cast<int64_t>(kPolyR));
  t = INAGG_CLMUL128(simde_mm_and_si128(x, mask32), mu_p, 0x10);
  t = INAGG_CLMUL128(simde_mm_and_si128(t, mask32), mu_p, 0x00);
  x = simde_mm_xor_si128(x, t);
  return static_cast<uint32_t>(simde_mm_extract_epi32(x, 1));
}

// 128-bit folding over len bytes (len >= 16), starting from x0 = the first 16 bytes already xored
// with the state: four lanes at a time from 64 bytes on, then one. Returns the state after
// consuming floor(len/16)*16 bytes; *done says how many.
inline uint32_t fold_from(simde__m128i x0, const uint8_t* p, size_t len, size_t* done) {
  size_t off = 16;
  const simde__m128i k1x = k128<128>();
  if (len >= 64) {
    simde__m128i x1 = load128(p + 16), x2 = load128(p + 32), x3 = load128(p + 48);
    off = 64;
    const simde__m128i k4x = k128<4 * 128>();
    for (; off + 64 <= len; off += 64) {
      x0 = simde_mm_xor_si128(fold128(x0, k4x), load128(p + off));
      x1 = simde_mm_xor_si128(fold128(x1, k4x), load128(p + off + 16));
      x2 = simde_mm_xor_si128(fold128(x2, k4x), load128(p + off + 32));
      x3 = simde_mm_xor_si128(fold128(x3, k4x), load128(p + off + 48));
    }
    x0 = simde_mm_xor_si128(fold128(x0, k1x), x1);
    x0 = simde_mm_xor_si128(fold128(x0, k1x), x2);
    x0 = simde_mm_xor_si128(fold128(x0, k1x), x3);
  }
  for (; off + 16 <= len; off += 16) x0 = simde_mm_xor_si128(fold128(x0, k1x), load128(p + off));
  *done = off;
  return reduce128(x0);
}

// From 16 bytes on folding beats the tables (a 56-byte ICRC header: ~12 ns -> ~5 ns here).
uint32_t update_pclmul(uint32_t state, const uint8_t* p, size_t len) {
  if (len < 16) return crc32_update_slice8(state, p, len);
  size_t done = 0;
  simde__m128i x0 = simde_mm_xor_si128(load128(p), simde_mm_cvtsi32_si128(static_cast<int32_t>(state)));
  state = fold_from(x0, p, len, &done);
  return crc32_update_slice8(state, p + done, len - done);
}

#if defined(__AVX512F__) && defined(__VPCLMULQDQ__)
template <unsigned D>
inline simde__m512i k512() {
  return simde_mm512_broadcast_i32x4(k128<D>());
}
inline simde__m512i fold512(simde__m512i x, simde__m512i k) {
  return simde_mm512_xor_si512(simde_mm512_clmulepi64_epi128(x, k, 0x00), simde_mm512_clmulepi64_epi128(x, k, 0x11));
}
inline simde__m512i load512(const uint8_t* p) { return simde_mm512_loadu_si512(p); }

// Measured on this project's CI machine (AVX-512, bench/run kernels): see bench/README.md.
uint32_t update_vpclmul(uint32_t state, const uint8_t* p, size_t len) {
  if (len < 256) return update_pclmul(state, p, len);
  simde__m512i z0 = simde_mm512_xor_si512(
      load512(p), simde_mm512_castsi128_si512(simde_mm_cvtsi32_si128(static_cast<int32_t>(state))));
  simde__m512i z1 = load512(p + 64), z2 = load512(p + 128), z3 = load512(p + 192);
  size_t off = 256;
  const simde__m512i k16 = k512<4 * 512>();
  for (; off + 256 <= len; off += 256) {
    z0 = simde_mm512_xor_si512(fold512(z0, k16), load512(p + off));
    z1 = simde_mm512_xor_si512(fold512(z1, k16), load512(p + off + 64));
    z2 = simde_mm512_xor_si512(fold512(z2, k16), load512(p + off + 128));
    z3 = simde_mm512_xor_si512(fold512(z3, k16), load512(p + off + 192));
  }
  const simde__m512i k4 = k512<512>();
  z0 = simde_mm512_xor_si512(fold512(z0, k4), z1);
  z0 = simde_mm512_xor_si512(fold512(z0, k4), z2);
  z0 = simde_mm512_xor_si512(fold512(z0, k4), z3);
  for (; off + 64 <= len; off += 64) z0 = simde_mm512_xor_si512(fold512(z0, k4), load512(p + off));
  // Four lanes -> one: lane i is folded forward over the 3 - i lanes after it.
  simde__m128i x = simde_mm512_extracti32x4_epi32(z0, 3);
  x = simde_mm_xor_si128(x, fold128(simde_mm512_extracti32x4_epi32(z0, 2), k128<128>()));
  x = simde_mm_xor_si128(x, fold128(simde_mm512_extracti32x4_epi32(z0, 1), k128<256>()));
  x = simde_mm_xor_si128(x, fold128(simde_mm512_castsi512_si128(z0), k128<384>()));
  const simde__m128i k1x = k128<128>();
  for (; off + 16 <= len; off += 16) x = simde_mm_xor_si128(fold128(x, k1x), load128(p + off));
  state = reduce128(x);
  return crc32_update_slice8(state, p + off, len - off);
}
#endif

}  // namespace

// Exported per tier; crc32.cpp picks one.
extern const Crc32Update crc32_update_pclmul_tier = update_pclmul;
#if defined(__AVX512F__) && defined(__VPCLMULQDQ__)
extern const Crc32Update crc32_update_vpclmul_tier = update_vpclmul;
#else
extern const Crc32Update crc32_update_vpclmul_tier = nullptr;
#endif

}  // namespace inagg::wire::detail::INAGG_TIER
