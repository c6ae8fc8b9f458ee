// The per-element reference for the reduction kernels. Written for obviousness, not speed: every
// SIMD tier must reproduce these bits (tests/agg/test_kernels.cpp), and these are in turn checked
// against GCC's _Float16 and against nearest-value searches.
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inagg/agg/kernels.hpp"

namespace inagg::agg::scalar {

static_assert(std::endian::native == std::endian::little,
              "payloads are little-endian (docs/protocol.md); a big-endian host needs byte swaps here");

float fp16_to_fp32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    // Inf, or NaN: keep the payload, set the quiet bit (as F16C's vcvtph2ps does).
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24, exact in fp32 (a normal fp32 for any mantissa > 0).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(magnitude);
  } else {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u)  // NaN: quiet, top 10 payload bits kept
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x47800000u)  // >= 65536 (and Inf): beyond even the rounding range of 65504
    return static_cast<uint16_t>(sign | 0x7C00u);

  // Rounds `significand >> shift` to nearest, ties to even.
  auto round_shift = [](uint32_t significand, unsigned shift) {
    const uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    return kept + ((rest > half_way || (rest == half_way && (kept & 1))) ? 1u : 0u);
  };
  const unsigned exponent = magnitude >> 23;  // biased fp32 exponent
  if (exponent < 113) {
    // Result is a half subnormal (or zero, or rounds up to the smallest normal): count units of
    // 2^-24. value = significand x 2^(exponent - 150), so units = significand >> (126 - exponent).
    const unsigned shift = 126 - exponent;
    if (shift > 24) return sign;  // below half of 2^-24 (fp32 subnormals included): rounds to 0
    const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    return static_cast<uint16_t>(sign | round_shift(significand, shift));
  }
  // Normal: rebias the exponent and drop 13 mantissa bits; a carry out of the mantissa correctly
  // bumps the exponent, up to 0x7C00 (Inf) for values from 65520 up.
  const uint32_t rebiased = magnitude - ((127u - 15u) << 23);
  return static_cast<uint16_t>(sign | round_shift(rebiased, 13));
}

float bf16_to_fp32(uint16_t bf16) { return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16); }

uint16_t fp32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  // Round to nearest even; a carry into the exponent is right, up to Inf. Cannot wrap: the largest
  // non-NaN pattern is 0xFF800000.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

namespace {

// Elements are loaded and stored through memcpy: payloads have any alignment.
template <class T>
T load(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// One element type: how it widens to the accumulator, adds, and narrows back.
struct Fp32 {
  using Element = float;
  using Acc = float;
  static Acc widen(Element e) { return e; }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Element narrow(Acc a) { return a; }
};
struct Fp16 {
  using Element = uint16_t;
  using Acc = float;
  static Acc widen(Element e) { return fp16_to_fp32(e); }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Element narrow(Acc a) { return fp32_to_fp16(a); }
};
struct Bf16 {
  using Element = uint16_t;
  using Acc = float;
  static Acc widen(Element e) { return bf16_to_fp32(e); }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Element narrow(Acc a) { return fp32_to_bf16(a); }
};
struct Int32 {
  using Element = uint32_t;  // unsigned: wrapping is defined behaviour
  using Acc = uint32_t;
  static Acc widen(Element e) { return e; }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Element narrow(Acc a) { return a; }
};

template <class T>
void add_into_elements(uint8_t* dst, const uint8_t* src, size_t bytes) {
  using E = typename T::Element;
  for (size_t i = 0; i < bytes / sizeof(E); ++i)
    store(dst, i, T::narrow(T::add(T::widen(load<E>(dst, i)), T::widen(load<E>(src, i)))));
}

template <class T>
void sum_ranked_elements(uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  using E = typename T::Element;
  for (size_t i = 0; i < bytes / sizeof(E); ++i) {
    typename T::Acc acc = T::widen(load<E>(srcs[0], i));
    for (size_t r = 1; r < n; ++r) acc = T::add(acc, T::widen(load<E>(srcs[r], i)));
    store(dst, i, T::narrow(acc));
  }
}

}  // namespace

void add_into(Dtype dtype, uint8_t* dst, const uint8_t* src, size_t bytes) {
  switch (dtype) {
    case Dtype::fp32:
      return add_into_elements<Fp32>(dst, src, bytes);
    case Dtype::fp16:
      return add_into_elements<Fp16>(dst, src, bytes);
    case Dtype::bf16:
      return add_into_elements<Bf16>(dst, src, bytes);
    case Dtype::int32:
      return add_into_elements<Int32>(dst, src, bytes);
  }
}

void sum_ranked(Dtype dtype, uint8_t* dst, const uint8_t* const* srcs, size_t n, size_t bytes) {
  if (n == 0) return;
  switch (dtype) {
    case Dtype::fp32:
      return sum_ranked_elements<Fp32>(dst, srcs, n, bytes);
    case Dtype::fp16:
      return sum_ranked_elements<Fp16>(dst, srcs, n, bytes);
    case Dtype::bf16:
      return sum_ranked_elements<Bf16>(dst, srcs, n, bytes);
    case Dtype::int32:
      return sum_ranked_elements<Int32>(dst, srcs, n, bytes);
  }
}

// The plain way: the sum once (into a buffer of its own, as the dsts may be sources), then copies.
void sum_ranked_broadcast(Dtype dtype, uint8_t* const* dsts, size_t ndst, const uint8_t* const* srcs, size_t n,
                          size_t bytes) {
  if (n == 0) return;
  std::vector<uint8_t> sum(bytes);
  sum_ranked(dtype, sum.data(), srcs, n, bytes);
  for (size_t d = 0; d < ndst; ++d) std::memcpy(dsts[d], sum.data(), bytes);
}

}  // namespace inagg::agg::scalar
