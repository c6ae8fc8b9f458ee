#include "reference.hpp"

#include <algorithm>
#include <cstring>

#include "inagg/agg/kernels.hpp"
#include "inagg/client/transport/xagg_client.hpp"

namespace inagg::apps {

using client::from_fixed;
using client::to_fixed;

namespace {

// splitmix64's finaliser: element i of rank r's input is a hash of (key(seed, r), i), so any range
// can be made on its own (fill_input_range), in any order, on any thread; and one thread makes
// them 3-4x faster than std::mt19937 with uniform_real_distribution did (bench/run client).
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill_range(util::Dtype dtype, uint64_t key, uint8_t* buf, size_t first, size_t last) {
  for (size_t e = first; e < last; ++e) {
    const uint64_t x = mix(key + e * 0x9e3779b97f4a7c15ull);
    // 24 random bits: k / 2^23 - 1 is exact in fp32 and uniform over [-1, 1).
    const float f = static_cast<float>(static_cast<uint32_t>(x >> 40)) * 0x1p-23f - 1.0f;
    switch (dtype) {
      case util::Dtype::fp32:
        std::memcpy(buf + e * 4, &f, 4);
        break;
      case util::Dtype::int32: {
        const uint32_t v = static_cast<uint32_t>(x);
        std::memcpy(buf + e * 4, &v, 4);
        break;
      }
      case util::Dtype::fp16:
      case util::Dtype::bf16: {
        const uint16_t h = dtype == util::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
        std::memcpy(buf + e * 2, &h, 2);
        break;
      }
    }
  }
}

uint64_t key_of(uint32_t seed, unsigned rank) {
  return mix((static_cast<uint64_t>(seed) << 32) ^ (0x632be59bd9b4e019ull * (rank + 1)));
}

}  // namespace

void fill_input(util::Dtype dtype, uint32_t seed, unsigned rank, uint8_t* buf, size_t bytes) {
  fill_range(dtype, key_of(seed, rank), buf, 0, bytes / util::dtype_size(dtype));
}

void fill_input_range(util::Dtype dtype, uint32_t seed, unsigned rank, uint8_t* buf, size_t first, size_t last) {
  fill_range(dtype, key_of(seed, rank), buf, first, last);
}

void Reference::make_inputs() {
  if (!inputs_.empty()) return;
  inputs_.assign(c_.workers, std::vector<uint8_t>(bytes_));
  for (unsigned r = 0; r < c_.workers; ++r) fill_input(c_.dtype, c_.seed, r, inputs_[r].data(), bytes_);
}

void Reference::make_collective() {
  const unsigned n = c_.workers;
  const size_t es = util::dtype_size(c_.dtype);
  const uint64_t shard = bytes_ / es / n * es;
  appliance_or_ring_.assign(bytes_, 0);
  uint8_t* want = appliance_or_ring_.data();
  if (c_.collective == control::Collective::all_gather) {
    for (unsigned r = 0; r < n; ++r) fill_input(c_.dtype, c_.seed, r, want + r * shard, shard);
    return;
  }
  make_inputs();
  std::vector<uint8_t> others(shard);
  for (unsigned s = 0; s < n; ++s) {
    std::vector<const uint8_t*> srcs;
    for (unsigned r = 0; r < n; ++r)
      if (r != s) srcs.push_back(inputs_[r].data() + s * shard);
    agg::scalar::sum_ranked(c_.dtype, others.data(), srcs.data(), srcs.size(), shard);
    const uint8_t* two[2] = {others.data(), inputs_[s].data() + s * shard};
    agg::scalar::sum_ranked(c_.dtype, want + s * shard, two, 2, shard);
  }
}

const std::vector<uint8_t>& Reference::sum(Tier tier) {
  if (c_.collective != control::Collective::allreduce) {
    if (appliance_or_ring_.empty()) make_collective();
    return appliance_or_ring_;
  }
  make_inputs();
  const unsigned n = c_.workers;
  const size_t es = util::dtype_size(c_.dtype);
  if (tier == Tier::xdp && !c_.ring) {
    if (tier_.empty()) {
      const size_t count = bytes_ / es;
      std::vector<int32_t> q(count), acc(count, 0);
      for (unsigned r = 0; r < n; ++r) {
        if (c_.dtype == util::Dtype::int32)
          std::memcpy(q.data(), inputs_[r].data(), bytes_);
        else
          to_fixed(c_.dtype, inputs_[r].data(), count, c_.xdp_scale, n, q.data());
        for (size_t i = 0; i < count; ++i)
          acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(q[i]));
      }
      tier_.resize(bytes_);
      if (c_.dtype == util::Dtype::int32)
        std::memcpy(tier_.data(), acc.data(), bytes_);
      else
        from_fixed(c_.dtype, acc.data(), count, c_.xdp_scale, tier_.data());
    }
    return tier_;
  }
  if (appliance_or_ring_.empty()) {
    appliance_or_ring_.resize(bytes_);
    uint8_t* want = appliance_or_ring_.data();
    const uint64_t chunk = ((bytes_ / es + n - 1) / n) * es;  // the ring's chunk (algorithms.cpp)
    for (uint64_t c0 = 0; c0 < bytes_; c0 += (c_.ring ? chunk : bytes_)) {
      const uint64_t len = std::min<uint64_t>(c_.ring ? chunk : bytes_, bytes_ - c0);
      const unsigned first = c_.ring ? static_cast<unsigned>(c0 / chunk) : 0;  // ring: chunk c starts at rank c
      if (c_.ring) {
        std::memcpy(want + c0, inputs_[first].data() + c0, len);
        for (unsigned j = 1; j < n; ++j)
          agg::scalar::add_into(c_.dtype, want + c0, inputs_[(first + j) % n].data() + c0, len);
      } else if (c_.rack_of.size() == n) {
        // Across racks: each rack's consecutive ranks into a partial, then the partials.
        std::vector<std::vector<uint8_t>> partials;
        std::vector<const uint8_t*> srcs;
        for (unsigned j = 0; j < n; ++j) {
          srcs.push_back(inputs_[j].data() + c0);
          if (j + 1 == n || c_.rack_of[j + 1] != c_.rack_of[j]) {
            partials.emplace_back(len);
            agg::scalar::sum_ranked(c_.dtype, partials.back().data(), srcs.data(), srcs.size(), len);
            srcs.clear();
          }
        }
        for (const auto& p : partials) srcs.push_back(p.data());
        agg::scalar::sum_ranked(c_.dtype, want + c0, srcs.data(), srcs.size(), len);
      } else {
        std::vector<const uint8_t*> srcs;
        for (unsigned j = 0; j < n; ++j) srcs.push_back(inputs_[j].data() + c0);
        agg::scalar::sum_ranked(c_.dtype, want + c0, srcs.data(), n, len);
      }
    }
  }
  return appliance_or_ring_;
}

}  // namespace inagg::apps
