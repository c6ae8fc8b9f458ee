// How long a job's slots wait for their last rank: from the first rank's packet of a slot to the
// last rank's, the straggler signal. A histogram with fixed log-spaced buckets, so that one lcore's
// copy and another's add up and Prometheus can sum them over appliances. Times are the engine's
// clock, the now_ns its caller gives (the datapath reads the TSC once per burst): two packets of
// one burst are 0 ns apart.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace inagg::agg {

// Bucket i counts the waits of at most 2^(10 + i) ns: 1.024 us, 2.048 us, ..., 2^30 ns (1.07 s);
// the last bucket counts every longer wait. Counts are per bucket, not cumulative (the exporter
// accumulates them). One per job on each engine, written only by that engine's lcore; a job spread
// over lcores has one per shard, summed by whoever reads them (add()).
struct SlotCompletionHistogram {
  static constexpr unsigned kFirstShift = 10;        // the first bound: 2^10 ns
  static constexpr unsigned kBounds = 21;            // 2^10 ... 2^30 ns
  static constexpr unsigned kBuckets = kBounds + 1;  // and the overflow (Prometheus's le="+Inf")
  std::array<uint64_t, kBuckets> counts{};
  uint64_t sum_ns = 0;

  // The upper bound of bucket i < kBounds, in ns.
  static constexpr uint64_t upper_bound_ns(unsigned i) { return uint64_t{1} << (kFirstShift + i); }
  // The bucket of a wait, without a loop or a division: ns <= 2^k exactly when ns - 1 fits in k bits.
  static constexpr unsigned bucket_of(uint64_t ns) {
    const int width = std::bit_width(ns - (ns != 0));
    return static_cast<unsigned>(std::clamp(width - static_cast<int>(kFirstShift), 0, static_cast<int>(kBounds)));
  }
  // The fast path's part: once per slot and round, when its last rank's packet arrives.
  void observe(uint64_t ns) {
    ++counts[bucket_of(ns)];
    sum_ns += ns;
  }
  void add(const SlotCompletionHistogram& o) {
    for (unsigned i = 0; i < kBuckets; ++i) counts[i] += o.counts[i];
    sum_ns += o.sum_ns;
  }
  uint64_t count() const {
    uint64_t n = 0;
    for (const uint64_t c : counts) n += c;
    return n;
  }
};

}  // namespace inagg::agg
