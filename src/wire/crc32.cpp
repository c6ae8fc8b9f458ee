#include "inagg/wire/crc32.hpp"

#include <array>

#include "inagg/util/cpu.hpp"
#include "inagg/wire/bytes.hpp"

namespace inagg::wire {
namespace detail {

#if defined(__x86_64__)
namespace avx2 {
extern const Crc32Update crc32_update_pclmul_tier;
}
namespace avx512 {
extern const Crc32Update crc32_update_pclmul_tier;
extern const Crc32Update crc32_update_vpclmul_tier;
}  // namespace avx512
#else
namespace native {
extern const Crc32Update crc32_update_pclmul_tier;
}
#endif

namespace {

constexpr uint32_t kPolyReflected = 0xEDB88320u;

using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SliceTables make_slice_tables() {
  SliceTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}

constexpr SliceTables kSlice = make_slice_tables();

}  // namespace

uint32_t crc32_update_slice8(uint32_t state, const uint8_t* p, size_t len) {
  while (len >= 8) {
    const uint32_t lo = load_le32(p) ^ state;
    const uint32_t hi = load_le32(p + 4);
    state = kSlice[7][lo & 0xff] ^ kSlice[6][(lo >> 8) & 0xff] ^ kSlice[5][(lo >> 16) & 0xff] ^ kSlice[4][lo >> 24] ^
            kSlice[3][hi & 0xff] ^ kSlice[2][(hi >> 8) & 0xff] ^ kSlice[1][(hi >> 16) & 0xff] ^ kSlice[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) state = (state >> 8) ^ kSlice[0][(state ^ *p++) & 0xff];
  return state;
}

Crc32Update crc32_update_pclmul() {
#if defined(__x86_64__)
  return util::cpu_supports(util::SimdTier::avx2) ? avx2::crc32_update_pclmul_tier : nullptr;
#else
  return native::crc32_update_pclmul_tier;
#endif
}

Crc32Update crc32_update_vpclmul() {
#if defined(__x86_64__)
  if (util::cpu_supports(util::SimdTier::avx512) && util::cpu_has_vpclmulqdq())
    return avx512::crc32_update_vpclmul_tier;
#endif
  return nullptr;
}

}  // namespace detail

namespace {

struct Crc32Impl {
  detail::Crc32Update update;
  std::string_view name;
};

Crc32Impl choose_crc32() {
  const util::SimdTier cap = util::best_simd_tier();  // INAGG_SIMD also caps the CRC path
  if (cap == util::SimdTier::avx512)
    if (auto f = detail::crc32_update_vpclmul()) return {f, "vpclmulqdq"};
  if (cap != util::SimdTier::sse2)
    if (auto f = detail::crc32_update_pclmul()) return {f, "pclmulqdq"};
  return {detail::crc32_update_slice8, "slice-by-8"};
}

const Crc32Impl& crc32_impl() {
  static const Crc32Impl impl = choose_crc32();
  return impl;
}

// Polynomial arithmetic modulo P in the reflected representation (bit 31 is x^0), as zlib's
// crc32_combine does it.
uint32_t mult_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ 0xEDB88320u : b >> 1;
  }
  return product;
}

// x^(2^k) mod P for k = 0..63.
const std::array<uint32_t, 64>& x2n_table() {
  static const std::array<uint32_t, 64> table = [] {
    std::array<uint32_t, 64> t{};
    t[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < t.size(); ++k) t[k] = mult_mod_p(t[k - 1], t[k - 1]);
    return t;
  }();
  return table;
}

// x^(8 n) mod P: the operator that appends n zero bytes.
uint32_t x8n_mod_p(uint64_t n) {
  uint32_t p = 1u << 31;  // x^0
  for (unsigned k = 3; n != 0; n >>= 1, ++k)
    if (n & 1) p = mult_mod_p(x2n_table()[k & 63], p);
  return p;
}

}  // namespace

uint32_t crc32(std::span<const uint8_t> data, uint32_t crc) {
  return ~crc32_impl().update(~crc, data.data(), data.size());
}

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
  return mult_mod_p(x8n_mod_p(len_b), crc_a) ^ crc_b;
}

Crc32Shift::Crc32Shift(size_t len_b) : len_(len_b) {
  // The operator is linear over GF(2): op * a = XOR over the bytes of a of op * (byte << 8i).
  const uint32_t op = x8n_mod_p(len_b);
  for (unsigned i = 0; i < 4; ++i)
    for (uint32_t b = 0; b < 256; ++b) table_[i][b] = mult_mod_p(op, b << (8 * i));
}

std::string_view crc32_impl_name() { return crc32_impl().name; }

}  // namespace inagg::wire
