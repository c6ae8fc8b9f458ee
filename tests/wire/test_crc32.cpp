// The CRC-32 implementations against zlib, the reference the ICRC is defined by.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <vector>

#include "inagg/wire/crc32.hpp"

using namespace inagg::wire;

namespace {

struct Impl {
  const char* name;
  detail::Crc32Update update;
};

std::vector<Impl> implementations() {
  std::vector<Impl> v{{"slice-by-8", detail::crc32_update_slice8}};
  if (auto f = detail::crc32_update_pclmul()) v.push_back({"pclmulqdq", f});
  if (auto f = detail::crc32_update_vpclmul()) v.push_back({"vpclmulqdq", f});
  return v;
}

uint32_t zlib_crc(const uint8_t* p, size_t n, uint32_t crc = 0) {
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace

TEST(Crc32, CheckValue) {
  const uint8_t msg[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(crc32(msg), 0xCBF43926u);  // the CRC-32 catalogue's check value
  for (const Impl& impl : implementations()) EXPECT_EQ(~impl.update(~0u, msg, sizeof msg), 0xCBF43926u) << impl.name;
}

TEST(Crc32, EveryImplementationMatchesZlibOnEveryLengthAndAlignment) {
  const auto data = random_bytes(10000, 1);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n : {2047, 2048, 2049, 4095, 4096, 4100, 4352, 8191, 9000}) lengths.push_back(n);
  for (const Impl& impl : implementations()) {
    SCOPED_TRACE(impl.name);
    for (size_t n : lengths) {
      for (size_t align : {0, 1, 3, 7}) {
        const uint8_t* p = data.data() + align;
        const uint32_t start = static_cast<uint32_t>(n * 2654435761u);
        ASSERT_EQ(~impl.update(~start, p, n), zlib_crc(p, n, start)) << "len " << n << " align " << align;
      }
    }
  }
}

TEST(Crc32, EveryImplementationMatchesZlibOnAllOnesAndZeros) {
  for (uint8_t fill : {0x00, 0xff}) {
    std::vector<uint8_t> v(4096, fill);
    for (const Impl& impl : implementations())
      for (size_t n : {64, 256, 257, 4096})
        EXPECT_EQ(~impl.update(~0u, v.data(), n), zlib_crc(v.data(), n)) << impl.name;
  }
}

TEST(Crc32, DispatchedMatchesZlibAndNamesItsImplementation) {
  const auto data = random_bytes(4096, 2);
  EXPECT_EQ(crc32(data), zlib_crc(data.data(), data.size()));
  const auto name = crc32_impl_name();
  EXPECT_TRUE(name == "vpclmulqdq" || name == "pclmulqdq" || name == "slice-by-8") << name;
  std::printf("crc32 implementation in use: %.*s\n", static_cast<int>(name.size()), name.data());
}

TEST(Crc32, IncrementalEqualsWhole) {
  const auto data = random_bytes(5000, 3);
  for (size_t split : {0, 1, 63, 64, 100, 4096, 5000}) {
    const uint32_t a = crc32({data.data(), split});
    EXPECT_EQ(crc32({data.data() + split, data.size() - split}, a), crc32(data)) << split;
  }
}

TEST(Crc32, CombineMatchesZlib) {
  const auto data = random_bytes(9000, 4);
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    const size_t la = rng() % 200, lb = rng() % 8800;
    const uint32_t ca = crc32({data.data(), la}), cb = crc32({data.data() + la, lb});
    const uint32_t whole = zlib_crc(data.data(), la + lb);
    ASSERT_EQ(crc32_concat(ca, cb, lb), whole) << la << "+" << lb;
    ASSERT_EQ(static_cast<uint32_t>(::crc32_combine(ca, cb, static_cast<z_off_t>(lb))), whole);
    ASSERT_EQ(Crc32Shift(lb).combine(ca, cb), whole);
  }
}

TEST(Crc32, ShiftOfZeroLengthIsIdentityOnA) {
  EXPECT_EQ(Crc32Shift(0).combine(0x12345678u, 0), 0x12345678u);
  EXPECT_EQ(Crc32Shift(4096).length(), 4096u);
}
