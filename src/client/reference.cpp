#include "inagg/client/reference.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "inagg/agg/kernels.hpp"
#include "inagg/client/xagg_client.hpp"

namespace inagg::client {

void fill_input(util::Dtype dtype, uint32_t seed, unsigned rank, uint8_t* buf, size_t bytes) {
  std::mt19937 rng(seed * 7919u + rank);
  const size_t es = util::dtype_size(dtype);
  for (size_t i = 0; i + es <= bytes; i += es) {
    switch (dtype) {
      case util::Dtype::fp32: {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(buf + i, &f, 4);
        break;
      }
      case util::Dtype::int32: {
        const uint32_t x = rng();
        std::memcpy(buf + i, &x, 4);
        break;
      }
      case util::Dtype::fp16:
      case util::Dtype::bf16: {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        const uint16_t h = dtype == util::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
        std::memcpy(buf + i, &h, 2);
        break;
      }
    }
  }
}

void Reference::make_inputs() {
  if (!inputs_.empty()) return;
  inputs_.assign(c_.workers, std::vector<uint8_t>(bytes_));
  for (unsigned r = 0; r < c_.workers; ++r) fill_input(c_.dtype, c_.seed, r, inputs_[r].data(), bytes_);
}

const std::vector<uint8_t>& Reference::sum(Tier tier) {
  make_inputs();
  const unsigned n = c_.workers;
  const size_t es = util::dtype_size(c_.dtype);
  if (tier == Tier::xdp && !c_.ring) {
    if (tier_.empty()) {
      const size_t count = bytes_ / es;
      std::vector<int32_t> q(count), acc(count, 0);
      for (unsigned r = 0; r < n; ++r) {
        if (c_.dtype == util::Dtype::int32) std::memcpy(q.data(), inputs_[r].data(), bytes_);
        else to_fixed(c_.dtype, inputs_[r].data(), count, c_.xdp_scale, n, q.data());
        for (size_t i = 0; i < count; ++i) acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(q[i]));
      }
      tier_.resize(bytes_);
      if (c_.dtype == util::Dtype::int32) std::memcpy(tier_.data(), acc.data(), bytes_);
      else from_fixed(c_.dtype, acc.data(), count, c_.xdp_scale, tier_.data());
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
        for (unsigned j = 1; j < n; ++j) agg::scalar::add_into(c_.dtype, want + c0, inputs_[(first + j) % n].data() + c0, len);
      } else {
        std::vector<const uint8_t*> srcs;
        for (unsigned j = 0; j < n; ++j) srcs.push_back(inputs_[(first + j) % n].data() + c0);
        agg::scalar::sum_ranked(c_.dtype, want + c0, srcs.data(), n, len);
      }
    }
  }
  return appliance_or_ring_;
}

}  // namespace inagg::client
