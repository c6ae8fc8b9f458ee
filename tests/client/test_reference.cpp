// The --check inputs and references: the same bytes however a buffer is split into ranges and
// whichever thread fills them, and references equal to a plain loop written here, in rank order
// (ina), in the ring's hop order (ring) and as a wrapping int32 sum (the XDP tier).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "reference.hpp"

using inagg::apps::fill_input;
using inagg::apps::fill_input_range;
using inagg::apps::Reference;
using inagg::client::Tier;
using inagg::util::Dtype;

namespace {

constexpr size_t kBytes = 3 << 20;

std::vector<uint8_t> input(Dtype d, unsigned rank, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  fill_input(d, 1, rank, v.data(), bytes);
  return v;
}

std::vector<float> floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

}  // namespace

TEST(Reference, InputsDoNotDependOnHowTheyAreSplit) {
  std::mt19937 rng(7);
  for (Dtype d : {Dtype::fp32, Dtype::int32, Dtype::bf16, Dtype::fp16}) {
    const size_t es = inagg::util::dtype_size(d), count = kBytes / es;
    const std::vector<uint8_t> whole = input(d, 2, kBytes);
    // Ranges of random lengths, filled last first, the two halves of them on two threads.
    std::vector<size_t> cuts{0, count};
    for (int i = 0; i < 20; ++i) cuts.push_back(rng() % count);
    std::sort(cuts.begin(), cuts.end());
    std::vector<uint8_t> split(kBytes, 0xee);
    auto fill = [&](size_t from, size_t to) {
      for (size_t k = to; k-- > from;) fill_input_range(d, 1, 2, split.data(), cuts[k], cuts[k + 1]);
    };
    std::thread t(fill, cuts.size() / 2, cuts.size() - 1);
    fill(0, cuts.size() / 2);
    t.join();
    EXPECT_EQ(split, whole);
    EXPECT_NE(input(d, 3, kBytes), whole);                  // another rank, another input
    const std::vector<uint8_t> prefix = input(d, 2, 4096);  // a shorter buffer is the start of a longer one
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), whole.begin()));
  }
  const std::vector<float> f = floats(input(Dtype::fp32, 0, kBytes));
  double mean = 0;
  for (float x : f) {
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
    mean += x;
  }
  EXPECT_NEAR(mean / static_cast<double>(f.size()), 0.0, 0.01);
}

TEST(Reference, InaSumIsTheRankOrderedSum) {
  const unsigned n = 3;
  Reference ref({Dtype::fp32, n, 1, false, 1.0}, kBytes);
  const std::vector<float> got = floats(ref.sum(Tier::appliance));
  std::vector<std::vector<float>> in;
  for (unsigned r = 0; r < n; ++r) in.push_back(floats(input(Dtype::fp32, r, kBytes)));
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = (in[0][i] + in[1][i]) + in[2][i];
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "element " << i;
  }
}

TEST(Reference, ReduceScatterAndAllGatherAreTheBuffersTheRanksHoldAfterwards) {
  const unsigned n = 3;
  const size_t shard = kBytes / 4 / n * 4, bytes = shard * n;
  Reference rs({Dtype::fp32, n, 1, false, 1.0, {}, inagg::control::Collective::reduce_scatter}, bytes);
  const std::vector<float> got = floats(rs.sum(Tier::appliance));
  std::vector<std::vector<float>> in;
  for (unsigned r = 0; r < n; ++r) in.push_back(floats(input(Dtype::fp32, r, bytes)));
  for (size_t i = 0; i < got.size(); ++i) {
    const unsigned s = static_cast<unsigned>(i / (shard / 4));  // the owner: the other two, then its own
    const unsigned a = (s == 0) ? 1 : 0, b = (s == 2) ? 1 : 2;
    const float want = (in[a][i] + in[b][i]) + in[s][i];
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "element " << i << " of shard " << s;
  }
  Reference ag({Dtype::int32, n, 1, false, 1.0, {}, inagg::control::Collective::all_gather}, bytes);
  const std::vector<uint8_t>& all = ag.sum(Tier::appliance);
  for (unsigned r = 0; r < n; ++r)
    EXPECT_EQ(std::memcmp(all.data() + r * shard, input(Dtype::int32, r, shard).data(), shard), 0) << "rank " << r;
}

TEST(Reference, RingSumFollowsTheChunksHops) {
  const unsigned n = 4;
  const size_t bytes = kBytes - 12;  // chunks of unequal length
  Reference ref({Dtype::fp32, n, 1, true, 1.0}, bytes);
  const std::vector<float> got = floats(ref.sum(Tier::appliance));
  std::vector<std::vector<float>> in;
  for (unsigned r = 0; r < n; ++r) in.push_back(floats(input(Dtype::fp32, r, bytes)));
  const size_t chunk = (bytes / 4 + n - 1) / n;  // elements
  for (size_t i = 0; i < got.size(); ++i) {
    const unsigned c = static_cast<unsigned>(i / chunk);
    float want = in[c][i];
    for (unsigned j = 1; j < n; ++j) want += in[(c + j) % n][i];
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "element " << i << " of chunk " << c;
  }
}

TEST(Reference, TierSumIsTheWrappingFixedPointSum) {
  const unsigned n = 4;
  Reference ref({Dtype::int32, n, 1, false, 1.0}, kBytes);
  const std::vector<uint8_t>& got = ref.sum(Tier::xdp);
  std::vector<std::vector<uint8_t>> in;
  for (unsigned r = 0; r < n; ++r) in.push_back(input(Dtype::int32, r, kBytes));
  for (size_t i = 0; i < kBytes; i += 4) {
    uint32_t want = 0, v;
    for (unsigned r = 0; r < n; ++r) {
      std::memcpy(&v, in[r].data() + i, 4);
      want += v;
    }
    std::memcpy(&v, got.data() + i, 4);
    ASSERT_EQ(v, want) << "element " << i / 4;
  }
}
