// Reduction kernels: every SIMD tier this CPU can run (and the dispatched entry points) must give
// the scalar reference's bits, and the scalar reference is checked against independent references
// (GCC's _Float16, nearest-value searches in double, plain loops).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <simde/x86/f16c.h>

#include "inagg/agg/dtype.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/util/cpu.hpp"

namespace inagg::agg {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr Dtype kAllDtypes[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16, Dtype::int32};

// ---------------------------------------------------------------------------------------------
// Element access and comparison.

uint32_t element_bits(Dtype dtype, const uint8_t* p, size_t i) {
  if (dtype_size(dtype) == 2) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

void set_element_bits(Dtype dtype, uint8_t* p, size_t i, uint32_t bits) {
  if (dtype_size(dtype) == 2) {
    const auto v = static_cast<uint16_t>(bits);
    std::memcpy(p + 2 * i, &v, 2);
  } else {
    std::memcpy(p + 4 * i, &bits, 4);
  }
}

bool is_nan_bits(Dtype dtype, uint32_t bits) {
  switch (dtype) {
    case Dtype::fp32:
      return (bits & 0x7FFFFFFFu) > 0x7F800000u;
    case Dtype::fp16:
      return (bits & 0x7FFFu) > 0x7C00u;
    case Dtype::bf16:
      return (bits & 0x7FFFu) > 0x7F80u;
    case Dtype::int32:
      return false;
  }
  return false;
}

// A half type's result is rounded from fp32, and rounding makes NaNs quiet (kernels.hpp).
bool is_quiet_half_nan(Dtype dtype, uint32_t bits) {
  if (dtype == Dtype::fp16) return (bits & 0x7E00u) == 0x7E00u;
  if (dtype == Dtype::bf16) return (bits & 0x7FC0u) == 0x7FC0u;
  return false;
}

// Equal bits, except that any NaN equals any NaN (payloads follow the hardware's NaN propagation),
// as long as a half type's NaN is quiet.
::testing::AssertionResult same_elements(Dtype dtype, const uint8_t* expected, const uint8_t* actual, size_t bytes) {
  const bool half = dtype == Dtype::fp16 || dtype == Dtype::bf16;
  for (size_t i = 0; i < bytes / dtype_size(dtype); ++i) {
    const uint32_t e = element_bits(dtype, expected, i), a = element_bits(dtype, actual, i);
    if (e == a || (is_nan_bits(dtype, e) && is_nan_bits(dtype, a) && (!half || is_quiet_half_nan(dtype, a)))) continue;
    char msg[128];
    std::snprintf(msg, sizeof msg, "%s element %zu of %zu: expected 0x%08x, got 0x%08x",
                  std::string(dtype_name(dtype)).c_str(), i, bytes / dtype_size(dtype), e, a);
    return ::testing::AssertionFailure() << msg;
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Random payloads: ordinary values (of mixed but nearby magnitudes, so sums round and cancel), any
// bit pattern, and the special values: NaNs (quiet, signalling, with payloads, negative), Inf,
// +-0, subnormals, the largest finite values; INT32_MIN/MAX and neighbours for int32.

uint32_t random_element(Dtype dtype, std::mt19937& rng, bool allow_nan = true) {
  static constexpr uint32_t fp32_special[] = {
      0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA12345,  // NaNs
      0x7F800000, 0xFF800000, 0x00000000, 0x80000000,  // Inf, zeros
      0x00000001, 0x007FFFFF, 0x80000001, 0x00800000,  // subnormals, smallest normal
      0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x4B800000,  // max, 1.0, 2^24
  };
  static constexpr uint32_t fp16_special[] = {
      0x7E00, 0xFE00, 0x7C01, 0x7D55,  // NaNs
      0x7C00, 0xFC00, 0x0000, 0x8000,  // Inf, zeros
      0x0001, 0x03FF, 0x8001, 0x0400,  // subnormals, smallest normal
      0x7BFF, 0xFBFF, 0x3C00, 0x7800,  // max, 1.0, 32768
  };
  static constexpr uint32_t bf16_special[] = {
      0x7FC0, 0xFFC0, 0x7F81, 0x7FA1,  // NaNs
      0x7F80, 0xFF80, 0x0000, 0x8000,  // Inf, zeros
      0x0001, 0x007F, 0x8001, 0x0080,  // subnormals, smallest normal
      0x7F7F, 0xFF7F, 0x3F80, 0x4B80,  // max, 1.0, 2^24
  };
  static constexpr uint32_t int32_special[] = {
      0x80000000, 0x7FFFFFFF, 0xFFFFFFFF, 0x00000000, 0x00000001, 0x80000001, 0x7FFFFFFE,
  };
  for (;;) {
    const uint32_t kind = static_cast<uint32_t>(rng() % 16);
    const uint32_t r = static_cast<uint32_t>(rng());
    uint32_t bits = 0;
    switch (dtype) {
      case Dtype::fp32:
        if (kind < 3)
          bits = fp32_special[r % std::size(fp32_special)];
        else if (kind < 5)
          bits = r;
        else
          bits = (r & 0x807FFFFFu) | ((120u + (r >> 23) % 16) << 23);  // |x| in [2^-7, 2^9)
        break;
      case Dtype::fp16:
        if (kind < 3)
          bits = fp16_special[r % std::size(fp16_special)];
        else if (kind < 5)
          bits = r & 0xFFFF;
        else
          bits = (r & 0x83FFu) | ((8u + (r >> 10) % 16) << 10);  // |x| in [2^-7, 2^9)
        break;
      case Dtype::bf16:
        if (kind < 3)
          bits = bf16_special[r % std::size(bf16_special)];
        else if (kind < 5)
          bits = r & 0xFFFF;
        else
          bits = (r & 0x807Fu) | ((120u + (r >> 7) % 16) << 7);  // |x| in [2^-7, 2^9)
        break;
      case Dtype::int32:
        bits = kind < 4 ? int32_special[r % std::size(int32_special)] : r;
        break;
    }
    if (allow_nan || !is_nan_bits(dtype, bits)) return bits;
  }
}

Bytes random_payload(Dtype dtype, size_t elements, std::mt19937& rng, bool allow_nan = true) {
  Bytes b(elements * dtype_size(dtype));
  for (size_t i = 0; i < elements; ++i) set_element_bits(dtype, b.data(), i, random_element(dtype, rng, allow_nan));
  return b;
}

// A payload at `offset` bytes into an allocation that ends exactly where the payload does, so
// AddressSanitizer catches any read or write past the end.
struct Placed {
  Bytes storage;
  size_t offset;
  uint8_t* data() { return storage.data() + offset; }
};
Placed place(const Bytes& payload, size_t offset, std::mt19937& rng) {
  Placed p{Bytes(offset + payload.size()), offset};
  for (size_t i = 0; i < offset; ++i) p.storage[i] = static_cast<uint8_t>(rng());
  std::copy(payload.begin(), payload.end(), p.storage.begin() + static_cast<ptrdiff_t>(offset));
  return p;
}

// ---------------------------------------------------------------------------------------------
// The implementations under test: the dispatched entry points and every tier's table.

struct Implementation {
  const char* name;
  bool dispatched;
  util::SimdTier tier;
};
// The tiers this architecture builds (x86-64: three; elsewhere: native). A tier this CPU cannot
// run is skipped, and says so.
constexpr Implementation kImplementations[] = {
    {"dispatched", true, util::SimdTier::sse2},
#if defined(__x86_64__)
    {"sse2", false, util::SimdTier::sse2},
    {"avx2", false, util::SimdTier::avx2},
    {"avx512", false, util::SimdTier::avx512},
#else
    {"native", false, util::SimdTier::native},
#endif
};
const detail::KernelOps kDispatchedOps = {&add_into, &sum_ranked, &sum_ranked_broadcast};

// Lengths in elements: every length up to a 256-byte chunk (4 AVX-512 vectors) plus a vector plus
// a tail, then packet-sized payloads.
std::vector<size_t> test_lengths(Dtype dtype) {
  std::vector<size_t> lengths;
  for (size_t e = 0; e <= 336 / dtype_size(dtype); ++e) lengths.push_back(e);
  for (size_t bytes : {1024, 4096, 4096 + 12}) lengths.push_back(bytes / dtype_size(dtype));
  return lengths;
}

void PrintTo(const Implementation& impl, std::ostream* os) { *os << impl.name; }

// Holds the table under test; skips the test if this CPU cannot run the implementation.
template <class Param>
class KernelOpsTest : public ::testing::TestWithParam<Param> {
 protected:
  void set_up_ops(const Implementation& impl) {
    ops_ = impl.dispatched ? &kDispatchedOps : detail::kernel_ops_for(impl.tier);
    if (ops_ != nullptr) return;
    ASSERT_FALSE(util::cpu_supports(impl.tier)) << impl.name << " is supported by this CPU but not built";
    GTEST_SKIP() << impl.name << " is not supported by this CPU";
  }
  const detail::KernelOps* ops_ = nullptr;
};

// One implementation and one dtype.
class KernelsTest : public KernelOpsTest<std::tuple<Implementation, Dtype>> {
 protected:
  void SetUp() override {
    dtype_ = std::get<1>(GetParam());
    set_up_ops(std::get<0>(GetParam()));
  }

  // Runs sum_ranked on random data of n ranks, each source and dst at its own misalignment, and
  // compares against the scalar reference. Checks that bytes before dst are untouched.
  void check_sum_ranked(size_t n, size_t elements, size_t pattern, std::mt19937& rng) {
    const size_t bytes = elements * dtype_size(dtype_);
    std::vector<Placed> srcs;
    std::vector<const uint8_t*> src_ptrs;
    for (size_t r = 0; r < n; ++r) {
      srcs.push_back(place(random_payload(dtype_, elements, rng), (pattern + r + 1) % 4, rng));
      src_ptrs.push_back(srcs.back().data());
    }
    Bytes expected(bytes);
    scalar::sum_ranked(dtype_, expected.data(), src_ptrs.data(), n, bytes);
    Placed dst = place(random_payload(dtype_, elements, rng), pattern % 4, rng);
    const Bytes prefix(dst.storage.begin(), dst.storage.begin() + static_cast<ptrdiff_t>(dst.offset));
    ops_->sum_ranked(dtype_, dst.data(), src_ptrs.data(), n, bytes);
    ASSERT_TRUE(same_elements(dtype_, expected.data(), dst.data(), bytes))
        << "n=" << n << " elements=" << elements << " dst offset=" << dst.offset;
    ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), dst.storage.begin())) << "wrote before dst";
  }

  Dtype dtype_{};
};

TEST_P(KernelsTest, AddIntoMatchesReference) {
  std::mt19937 rng(1234 + static_cast<unsigned>(dtype_));
  for (size_t elements : test_lengths(dtype_)) {
    for (size_t pattern = 0; pattern < 4; ++pattern) {
      const Bytes a = random_payload(dtype_, elements, rng), b = random_payload(dtype_, elements, rng);
      const size_t bytes = a.size();
      Bytes expected = a;
      scalar::add_into(dtype_, expected.data(), b.data(), bytes);
      Placed dst = place(a, pattern, rng), src = place(b, (pattern * 3 + 1) % 4, rng);
      const Bytes prefix(dst.storage.begin(), dst.storage.begin() + static_cast<ptrdiff_t>(dst.offset));
      ops_->add_into(dtype_, dst.data(), src.data(), bytes);
      ASSERT_TRUE(same_elements(dtype_, expected.data(), dst.data(), bytes))
          << "elements=" << elements << " dst offset=" << dst.offset << " src offset=" << src.offset;
      ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), dst.storage.begin())) << "wrote before dst";
      ASSERT_TRUE(std::equal(b.begin(), b.end(), src.data())) << "modified src";
    }
  }
}

TEST_P(KernelsTest, AddIntoSameBufferDoubles) {
  std::mt19937 rng(99);
  const Bytes a = random_payload(dtype_, 1000, rng);
  Bytes expected = a, copy = a;
  scalar::add_into(dtype_, expected.data(), a.data(), a.size());
  ops_->add_into(dtype_, copy.data(), copy.data(), copy.size());
  EXPECT_TRUE(same_elements(dtype_, expected.data(), copy.data(), a.size()));
}

TEST_P(KernelsTest, SumRankedMatchesReference) {
  std::mt19937 rng(5678 + static_cast<unsigned>(dtype_));
  const std::vector<size_t> lengths = test_lengths(dtype_);
  for (size_t n : {1, 2, 3, 4, 8, 64}) {
    for (size_t i = 0; i < lengths.size(); ++i) {
      // Every misalignment pattern for the packet-sized payloads; one per length for the rest.
      const bool packet_sized = lengths[i] * dtype_size(dtype_) >= 1024;
      for (size_t pattern = packet_sized ? 0 : i % 4; pattern < (packet_sized ? 4 : i % 4 + 1); ++pattern) {
        check_sum_ranked(n, lengths[i], pattern, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(KernelsTest, SumRankedIntoFirstSource) {
  std::mt19937 rng(4321);
  for (size_t elements : {0, 1, 7, 129, 2048}) {
    std::vector<Bytes> srcs;
    std::vector<const uint8_t*> ptrs;
    for (int r = 0; r < 5; ++r) srcs.push_back(random_payload(dtype_, elements, rng));
    for (const Bytes& s : srcs) ptrs.push_back(s.data());
    Bytes expected(srcs[0].size());
    scalar::sum_ranked(dtype_, expected.data(), ptrs.data(), ptrs.size(), expected.size());
    ops_->sum_ranked(dtype_, srcs[0].data(), ptrs.data(), ptrs.size(), expected.size());
    EXPECT_TRUE(same_elements(dtype_, expected.data(), srcs[0].data(), expected.size())) << elements;
  }
}

// The engine's release: the sum written over every source (each dst its own source) and into a
// buffer of its own, in one pass; every dst must hold the scalar reference's sum.
TEST_P(KernelsTest, SumRankedBroadcastOverItsSourcesMatchesReference) {
  std::mt19937 rng(9876);
  for (size_t n : {1, 2, 3, 4, 8, 17}) {
    for (size_t elements : test_lengths(dtype_)) {
      const size_t bytes = elements * dtype_size(dtype_);
      std::vector<Placed> srcs;
      std::vector<const uint8_t*> src_ptrs;
      std::vector<uint8_t*> dst_ptrs;
      for (size_t r = 0; r < n; ++r) {
        srcs.push_back(place(random_payload(dtype_, elements, rng), (r + elements) % 4, rng));
        src_ptrs.push_back(srcs.back().data());
      }
      Bytes expected(bytes);
      scalar::sum_ranked(dtype_, expected.data(), src_ptrs.data(), n, bytes);
      Placed own = place(random_payload(dtype_, elements, rng), elements % 4, rng);
      const Bytes prefix(own.storage.begin(), own.storage.begin() + static_cast<ptrdiff_t>(own.offset));
      dst_ptrs.push_back(own.data());
      for (Placed& s : srcs) dst_ptrs.push_back(s.data());
      ops_->sum_ranked_broadcast(dtype_, dst_ptrs.data(), dst_ptrs.size(), src_ptrs.data(), n, bytes);
      for (size_t d = 0; d < dst_ptrs.size(); ++d)
        ASSERT_TRUE(same_elements(dtype_, expected.data(), dst_ptrs[d], bytes))
            << "n=" << n << " elements=" << elements << " dst " << d;
      ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), own.storage.begin())) << "wrote before dst";
    }
  }
}

TEST_P(KernelsTest, SumRankedOfOneRankIsThatRank) {
  std::mt19937 rng(777);
  for (size_t elements : {1, 3, 64, 100, 2048}) {
    const Bytes src = random_payload(dtype_, elements, rng, /*allow_nan=*/false);
    Bytes dst(src.size(), 0xAB);
    const uint8_t* ptrs[] = {src.data()};
    ops_->sum_ranked(dtype_, dst.data(), ptrs, 1, src.size());
    EXPECT_EQ(dst, src) << elements;
  }
}

// The sum must depend only on which buffer belongs to which rank, never on the order the buffers
// were filled (packet arrival order) or where they sit in memory.
TEST_P(KernelsTest, SumRankedIgnoresArrivalOrder) {
  constexpr size_t n = 8;
  const size_t elements = (1024 + 6) / dtype_size(dtype_);
  std::mt19937 rng(2024);
  std::vector<Bytes> rank_data;
  for (size_t r = 0; r < n; ++r) rank_data.push_back(random_payload(dtype_, elements, rng));
  const size_t bytes = rank_data[0].size();

  Bytes first_result;
  std::vector<size_t> arrival(n);
  for (size_t i = 0; i < n; ++i) arrival[i] = i;
  for (int trial = 0; trial < 6; ++trial) {
    std::shuffle(arrival.begin(), arrival.end(), rng);
    // Buffers are handed out in arrival order, as a slot pool would, at varying misalignments.
    std::vector<Placed> pool;
    std::vector<const uint8_t*> by_rank(n);
    for (size_t a = 0; a < n; ++a) {
      pool.push_back(place(rank_data[arrival[a]], (a + static_cast<size_t>(trial)) % 4, rng));
    }
    for (size_t a = 0; a < n; ++a) by_rank[arrival[a]] = pool[a].data();
    Bytes result(bytes);
    ops_->sum_ranked(dtype_, result.data(), by_rank.data(), n, bytes);
    if (trial == 0) {
      first_result = result;
      std::vector<const uint8_t*> ptrs;
      for (const Bytes& d : rank_data) ptrs.push_back(d.data());
      Bytes expected(bytes);
      scalar::sum_ranked(dtype_, expected.data(), ptrs.data(), n, bytes);
      ASSERT_TRUE(same_elements(dtype_, expected.data(), result.data(), bytes));
    } else {
      // Identical inputs in identical order: identical bits, NaN payloads included.
      ASSERT_EQ(result, first_result) << "trial " << trial;
    }
  }
}

// One implementation, for the tests that are about one dtype.
class TierTest : public KernelOpsTest<Implementation> {
 protected:
  void SetUp() override { set_up_ops(GetParam()); }
};

TEST_P(TierTest, NegativeZerosSumToNegativeZero) {
  for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    const uint32_t neg_zero = dtype == Dtype::fp32 ? 0x80000000u : 0x8000u;
    const size_t elements = 77;
    Bytes z(elements * dtype_size(dtype));
    for (size_t i = 0; i < elements; ++i) set_element_bits(dtype, z.data(), i, neg_zero);
    std::vector<const uint8_t*> ptrs(8, z.data());
    Bytes dst(z.size());
    ops_->sum_ranked(dtype, dst.data(), ptrs.data(), ptrs.size(), z.size());
    EXPECT_EQ(dst, z) << dtype_name(dtype);
    Bytes acc = z;
    ops_->add_into(dtype, acc.data(), z.data(), z.size());
    EXPECT_EQ(acc, z) << dtype_name(dtype);
  }
}

// Rank order is visible in floating point: (1e8 + 1) - 1e8 is 0 in fp32, (1e8 - 1e8) + 1 is 1.
// An implementation that summed in any other order would fail here.
TEST_P(TierTest, SumRankedAddsInRankOrder) {
  const Dtype dtype = Dtype::fp32;
  const size_t elements = 67;
  auto filled = [&](float v) {
    Bytes b(elements * 4);
    for (size_t i = 0; i < elements; ++i) std::memcpy(b.data() + 4 * i, &v, 4);
    return b;
  };
  const Bytes big = filled(1e8f), one = filled(1.0f), minus_big = filled(-1e8f);
  const Bytes zero = filled(0.0f);
  Bytes dst(big.size());
  const uint8_t* order_a[] = {big.data(), one.data(), minus_big.data()};
  ops_->sum_ranked(dtype, dst.data(), order_a, 3, dst.size());
  EXPECT_EQ(dst, zero);
  const uint8_t* order_b[] = {big.data(), minus_big.data(), one.data()};
  ops_->sum_ranked(dtype, dst.data(), order_b, 3, dst.size());
  EXPECT_EQ(dst, one);
}

// int32 wraps (two's complement), in every tier and in the tails.
TEST_P(TierTest, Int32Wraps) {
  const Dtype dtype = Dtype::int32;
  auto filled = [](size_t elements, int32_t v) {
    Bytes b(elements * 4);
    for (size_t i = 0; i < elements; ++i) std::memcpy(b.data() + 4 * i, &v, 4);
    return b;
  };
  constexpr int32_t max = std::numeric_limits<int32_t>::max(), min = std::numeric_limits<int32_t>::min();
  for (size_t elements : {1, 5, 16, 67}) {
    Bytes acc = filled(elements, max);
    ops_->add_into(dtype, acc.data(), filled(elements, 1).data(), acc.size());
    EXPECT_EQ(acc, filled(elements, min)) << "INT32_MAX + 1 == INT32_MIN";
    acc = filled(elements, min);
    ops_->add_into(dtype, acc.data(), filled(elements, -1).data(), acc.size());
    EXPECT_EQ(acc, filled(elements, max)) << "INT32_MIN + -1 == INT32_MAX";

    // 64 ranks of INT32_MAX: 64 * (2^31 - 1) mod 2^32 = -64.
    const Bytes maxes = filled(elements, max);
    std::vector<const uint8_t*> ptrs(64, maxes.data());
    Bytes dst(maxes.size());
    ops_->sum_ranked(dtype, dst.data(), ptrs.data(), ptrs.size(), dst.size());
    EXPECT_EQ(dst, filled(elements, -64));
    // Wrapping and coming back: MAX + 1 + (-1) == MAX.
    const Bytes one = filled(elements, 1), minus_one = filled(elements, -1);
    const uint8_t* there_and_back[] = {maxes.data(), one.data(), minus_one.data()};
    ops_->sum_ranked(dtype, dst.data(), there_and_back, 3, dst.size());
    EXPECT_EQ(dst, maxes);
  }
}

std::string implementation_test_name(const ::testing::TestParamInfo<KernelsTest::ParamType>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Tiers, KernelsTest,
                         ::testing::Combine(::testing::ValuesIn(kImplementations), ::testing::ValuesIn(kAllDtypes)),
                         implementation_test_name);
INSTANTIATE_TEST_SUITE_P(Tiers, TierTest, ::testing::ValuesIn(kImplementations),
                         [](const ::testing::TestParamInfo<Implementation>& info) {
                           return std::string(info.param.name);
                         });

TEST(KernelDispatch, EverySupportedTierIsBuiltAndTheBestIsUsed) {
  for (util::SimdTier tier :
       {util::SimdTier::sse2, util::SimdTier::avx2, util::SimdTier::avx512, util::SimdTier::native}) {
    EXPECT_EQ(detail::kernel_ops_for(tier) != nullptr, util::cpu_supports(tier)) << util::tier_name(tier);
  }
  EXPECT_EQ(kernels_tier_name(), util::tier_name(util::best_simd_tier()));
}

TEST(Dtype, NamesSizesAndParsing) {
  static_assert(dtype_size(Dtype::fp32) == 4 && dtype_size(Dtype::int32) == 4);
  static_assert(dtype_size(Dtype::fp16) == 2 && dtype_size(Dtype::bf16) == 2);
  for (Dtype d : kAllDtypes) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_EQ(dtype_name(Dtype::bf16), "bf16");
  EXPECT_FALSE(parse_dtype("fp64").has_value());
  EXPECT_FALSE(parse_dtype("FP32").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
}

// ---------------------------------------------------------------------------------------------
// The scalar reference against independent references.

uint16_t float16_bits(_Float16 h) { return std::bit_cast<uint16_t>(h); }
_Float16 float16_from_bits(uint16_t b) { return std::bit_cast<_Float16>(b); }
uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }

// The reference's NaN rule for float -> half: same sign, quiet, the top 9 payload bits kept.
uint16_t expected_half_nan(uint32_t float_nan) {
  return static_cast<uint16_t>(((float_nan >> 16) & 0x8000u) | 0x7E00u | ((float_nan >> 13) & 0x1FFu));
}

// Floats worth converting to half: all midpoints between consecutive halves (ties) and their fp32
// neighbours, the overflow and underflow thresholds, then ~1M random ones (half of them inside the
// half range).
std::vector<float> half_conversion_inputs() {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = static_cast<float>(float16_from_bits(static_cast<uint16_t>(h)));
    const float hi = h + 1 == 0x7C00 ? 65536.0f : static_cast<float>(float16_from_bits(static_cast<uint16_t>(h + 1)));
    const uint32_t mid = float_bits((lo + hi) / 2);  // exact: halves have 11-bit significands
    for (uint32_t bits : {mid - 1, mid, mid + 1}) {
      in.push_back(std::bit_cast<float>(bits));
      in.push_back(std::bit_cast<float>(bits | 0x80000000u));
    }
  }
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(), 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1p-26f,
                  0x1p-14f, 0x1.ffcp-15f, 0x1.ffep-15f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 0.0f, -0.0f}) {
    in.push_back(f);
    in.push_back(-f);
  }
  std::mt19937 rng(16);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2) bits = (bits & 0x807FFFFFu) | ((100u + (bits >> 23) % 45) << 23);
    in.push_back(std::bit_cast<float>(bits));
  }
  return in;
}

TEST(ScalarReference, HalfToFloatMatchesFloat16Exhaustively) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float ours = scalar::fp16_to_fp32(static_cast<uint16_t>(h));
    const float theirs = static_cast<float>(float16_from_bits(static_cast<uint16_t>(h)));
    if (is_nan_bits(Dtype::fp16, h)) {
      ASSERT_TRUE(std::isnan(theirs));
      // Quiet, same sign, payload kept.
      ASSERT_EQ(float_bits(ours), ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13)) << std::hex << h;
    } else {
      ASSERT_EQ(float_bits(ours), float_bits(theirs)) << std::hex << h;
    }
  }
}

TEST(ScalarReference, FloatToHalfMatchesFloat16) {
  for (float f : half_conversion_inputs()) {
    const uint16_t ours = scalar::fp32_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_EQ(ours, expected_half_nan(float_bits(f))) << std::hex << float_bits(f);
    } else {
      ASSERT_EQ(ours, float16_bits(static_cast<_Float16>(f))) << std::hex << float_bits(f);
    }
  }
  // The NaN rule on a few payloads, signalling ones included.
  for (uint32_t nan : {0x7F800001u, 0x7FC00000u, 0xFFFFFFFFu, 0x7FA00000u, 0xFF802000u}) {
    ASSERT_EQ(scalar::fp32_to_fp16(std::bit_cast<float>(nan)), expected_half_nan(nan)) << std::hex << nan;
  }
}

// Decodes a bf16 magnitude from its fields, in double; the Inf pattern counts as 2^128, which is
// where IEEE rounding places it (values from max + half an ulp up round to it).
double bf16_magnitude(uint32_t m) {
  const int exponent = static_cast<int>(m >> 7);
  const double mantissa = static_cast<double>(m & 0x7F);
  if (exponent == 0) return std::ldexp(mantissa, -133);
  return std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
}

TEST(ScalarReference, BfloatToFloatDecodesFields) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = scalar::bf16_to_fp32(static_cast<uint16_t>(b));
    if (is_nan_bits(Dtype::bf16, b)) {
      ASSERT_TRUE(std::isnan(f));
      continue;
    }
    const double magnitude = (b & 0x7FFF) == 0x7F80 ? INFINITY : bf16_magnitude(b & 0x7FFF);
    ASSERT_EQ(static_cast<double>(f), (b & 0x8000) ? -magnitude : magnitude) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0);
  }
}

TEST(ScalarReference, FloatToBfloatIsNearestTiesToEven) {
  std::vector<float> in;
  std::mt19937 rng(17);
  for (int i = 0; i < 1'000'000; ++i) in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (int i = 0; i < 100'000; ++i) {
    const uint32_t tie = (static_cast<uint32_t>(rng()) & 0xFFFF0000u) | 0x8000u;  // exactly halfway between two bf16s
    for (uint32_t bits : {tie - 1, tie, tie + 1}) in.push_back(std::bit_cast<float>(bits));
  }
  for (float f : {std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 0.0f,
                  std::bit_cast<float>(0x7F7F8000u), std::bit_cast<float>(0x7F7F7FFFu),
                  std::bit_cast<float>(0x007FFFFFu), std::bit_cast<float>(0x00008000u)}) {
    in.push_back(f);
    in.push_back(-f);
  }
  for (float f : in) {
    const uint16_t r = scalar::fp32_to_bf16(f);
    const uint32_t bits = float_bits(f);
    if (std::isnan(f)) {
      ASSERT_EQ(r, static_cast<uint16_t>((bits >> 16) | 0x40u)) << std::hex << bits;
      continue;
    }
    ASSERT_EQ((r & 0x8000u) != 0, std::signbit(f)) << std::hex << bits;
    const uint32_t m = r & 0x7FFFu;
    if (std::isinf(f)) {
      ASSERT_EQ(m, 0x7F80u);
      continue;
    }
    ASSERT_LE(m, 0x7F80u) << std::hex << bits;
    const double v = std::fabs(static_cast<double>(f));
    const double d = std::fabs(bf16_magnitude(m) - v);
    for (uint32_t neighbour : {m - 1, m + 1}) {
      if (neighbour > 0x7F80u) continue;  // m - 1 wrapped below 0, or past Inf
      const double dn = std::fabs(bf16_magnitude(neighbour) - v);
      ASSERT_LE(d, dn) << "not nearest: " << std::hex << bits;
      if (d == dn) {
        ASSERT_EQ(m & 1u, 0u) << "tie not to even: " << std::hex << bits;
      }
    }
  }
}

TEST(ScalarReference, SumsArePlainRankOrderLoops) {
  constexpr size_t n = 5, elements = 4000;
  std::mt19937 rng(3);
  for (Dtype dtype : kAllDtypes) {
    std::vector<Bytes> srcs;
    std::vector<const uint8_t*> ptrs;
    for (size_t r = 0; r < n; ++r) srcs.push_back(random_payload(dtype, elements, rng));
    for (const Bytes& s : srcs) ptrs.push_back(s.data());
    Bytes ours(elements * dtype_size(dtype));
    scalar::sum_ranked(dtype, ours.data(), ptrs.data(), n, ours.size());
    Bytes pairwise = srcs[0];
    scalar::add_into(dtype, pairwise.data(), srcs[1].data(), pairwise.size());

    Bytes theirs(ours.size()), theirs_pair(ours.size());
    for (size_t i = 0; i < elements; ++i) {
      uint32_t sum_bits = 0, pair_bits = 0;
      switch (dtype) {
        case Dtype::fp32: {
          float acc = std::bit_cast<float>(element_bits(dtype, ptrs[0], i));
          for (size_t r = 1; r < n; ++r) {
            acc += std::bit_cast<float>(element_bits(dtype, ptrs[r], i));
            if (r == 1) pair_bits = float_bits(acc);
          }
          sum_bits = float_bits(acc);
          break;
        }
        case Dtype::fp16: {
          // fp32 accumulation, one rounding at the end, with GCC's _Float16 conversions.
          float acc = static_cast<float>(float16_from_bits(static_cast<uint16_t>(element_bits(dtype, ptrs[0], i))));
          for (size_t r = 1; r < n; ++r) {
            acc += static_cast<float>(float16_from_bits(static_cast<uint16_t>(element_bits(dtype, ptrs[r], i))));
            if (r == 1) pair_bits = float16_bits(static_cast<_Float16>(acc));
          }
          sum_bits = float16_bits(static_cast<_Float16>(acc));
          break;
        }
        case Dtype::bf16:
          continue;  // its rounding is FloatToBfloatIsNearestTiesToEven's subject
        case Dtype::int32: {
          // Sum in int64, reduce modulo 2^32.
          int64_t acc = 0;
          for (size_t r = 0; r < n; ++r) {
            acc += static_cast<int32_t>(element_bits(dtype, ptrs[r], i));
            if (r == 1) pair_bits = static_cast<uint32_t>(static_cast<uint64_t>(acc) & 0xFFFFFFFFu);
          }
          sum_bits = static_cast<uint32_t>(static_cast<uint64_t>(acc) & 0xFFFFFFFFu);
          break;
        }
      }
      set_element_bits(dtype, theirs.data(), i, sum_bits);
      set_element_bits(dtype, theirs_pair.data(), i, pair_bits);
    }
    if (dtype == Dtype::bf16) continue;
    EXPECT_TRUE(same_elements(dtype, theirs.data(), ours.data(), ours.size())) << dtype_name(dtype);
    EXPECT_TRUE(same_elements(dtype, theirs_pair.data(), pairwise.data(), ours.size())) << dtype_name(dtype);
  }
}

// The sse2 tier (no F16C) converts fp16 with SIMDe's portable code. It may only do so if that code
// gives the reference's bits, NaN payloads aside; this test compiles without F16C, so it runs the
// same portable code.
TEST(SimdePortableFp16, MatchesReference) {
#if defined(__F16C__) || !defined(__x86_64__)
  GTEST_SKIP() << "built with F16C or not on x86-64: SIMDe uses the hardware conversions here";
#else
  for (uint32_t h = 0; h <= 0xFFFF; h += 4) {
    const simde__m128i halves = simde_mm_set_epi16(0, 0, 0, 0, static_cast<int16_t>(h + 3), static_cast<int16_t>(h + 2),
                                                   static_cast<int16_t>(h + 1), static_cast<int16_t>(h));
    float out[4];
    simde_mm_storeu_ps(out, simde_mm_cvtph_ps(halves));
    for (uint32_t k = 0; k < 4; ++k) {
      const float ref = scalar::fp16_to_fp32(static_cast<uint16_t>(h + k));
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(out[k])) << std::hex << h + k;
      } else {
        ASSERT_EQ(float_bits(out[k]), float_bits(ref)) << std::hex << h + k;
      }
    }
  }
  const std::vector<float> in = half_conversion_inputs();
  for (size_t i = 0; i + 4 <= in.size(); i += 4) {
    uint16_t out[8];
    simde_mm_storeu_si128(reinterpret_cast<simde__m128i*>(out),
                          simde_mm_cvtps_ph(simde_mm_loadu_ps(&in[i]), SIMDE_MM_FROUND_TO_NEAREST_INT));
    for (size_t k = 0; k < 4; ++k) {
      const uint16_t ref = scalar::fp32_to_fp16(in[i + k]);
      if (is_nan_bits(Dtype::fp16, ref)) {
        ASSERT_TRUE(is_nan_bits(Dtype::fp16, out[k])) << std::hex << float_bits(in[i + k]);
      } else {
        ASSERT_EQ(out[k], ref) << std::hex << float_bits(in[i + k]);
      }
    }
  }
#endif
}

}  // namespace
}  // namespace inagg::agg
