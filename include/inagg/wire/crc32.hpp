// CRC-32 as zlib computes it (reflected polynomial 0xEDB88320, initial and final value ~0): the CRC
// that RoCEv2's ICRC uses. The fastest implementation the CPU supports is chosen once at start-up:
// VPCLMULQDQ folding (AVX-512), PCLMULQDQ folding, or slice-by-8 tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace inagg::wire {

// zlib-compatible: crc32(data) == zlib's crc32(0, data, len), and
// crc32(b, crc32(a)) == crc32(a || b).
uint32_t crc32(std::span<const uint8_t> data, uint32_t crc = 0);

// crc32(a || b) from crc32(a), crc32(b) and len(b): zlib's crc32_combine (named apart because zlib.h
// #defines crc32_combine to crc32_combine64).
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, size_t len_b);

// The combine operator for one fixed len(b), computed once (a multiplication by x^(8 len_b) modulo
// the CRC polynomial); applying it costs ~32 shift/xor steps, independent of len_b.
class Crc32Shift {
 public:
  explicit Crc32Shift(size_t len_b = 0);
  size_t length() const { return len_; }
  uint32_t combine(uint32_t crc_a, uint32_t crc_b) const;

 private:
  size_t len_;
  uint32_t op_;  // x^(8 len_b) mod P, reflected
};

// The implementation in use: "vpclmulqdq", "pclmulqdq" or "slice-by-8".
std::string_view crc32_impl_name();

namespace detail {
// Raw CRC state updates (state is ~crc, no final inversion), one per implementation, so tests and
// benchmarks can exercise each. The clmul ones are nullptr when this CPU or build lacks them.
using Crc32Update = uint32_t (*)(uint32_t state, const uint8_t* p, size_t len);
uint32_t crc32_update_slice8(uint32_t state, const uint8_t* p, size_t len);
Crc32Update crc32_update_pclmul();
Crc32Update crc32_update_vpclmul();
}  // namespace detail

}  // namespace inagg::wire
