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

// The combine operator for one fixed len(b), computed once: a multiplication by x^(8 len_b) modulo
// the CRC polynomial, tabulated per byte of crc_a (4 KiB), so applying it is four table look-ups
// (~2 ns, against ~50 ns for the bit-serial multiplication crc32_concat does).
class Crc32Shift {
 public:
  explicit Crc32Shift(size_t len_b = 0);
  size_t length() const { return len_; }
  uint32_t combine(uint32_t crc_a, uint32_t crc_b) const {
    return table_[0][crc_a & 0xff] ^ table_[1][(crc_a >> 8) & 0xff] ^ table_[2][(crc_a >> 16) & 0xff] ^
           table_[3][crc_a >> 24] ^ crc_b;
  }

 private:
  size_t len_;
  uint32_t table_[4][256];
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
