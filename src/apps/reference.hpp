// A job's inputs and the sums to check them against (inagg-worker --check; beside inagg-worker,
// the client library has no use for them): rank r's input is
// deterministic from (seed, r), so every rank computes every rank's input and the reference sum
// by a plain scalar loop, independently of the transport, the appliance and the tier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "inagg/client/fallover.hpp"
#include "inagg/control/job.hpp"
#include "inagg/util/dtype.hpp"

namespace inagg::apps {

using client::Tier;

// Rank `rank`'s input of `bytes` (whole elements): uniform in [-1, 1) for the floating-point
// dtypes, any 32-bit value for int32.
void fill_input(util::Dtype dtype, uint32_t seed, unsigned rank, uint8_t* buf, size_t bytes);
// Elements [first, last) of the same input, written at their place in `buf`: any split of a
// buffer into ranges, filled in any order or on any thread, gives fill_input's bytes.
void fill_input_range(util::Dtype dtype, uint32_t seed, unsigned rank, uint8_t* buf, size_t first, size_t last);

// The reference sums of one size, each computed once, when first asked for.
class Reference {
 public:
  struct Config {
    util::Dtype dtype = util::Dtype::fp32;
    unsigned workers = 2;
    uint32_t seed = 1;
    bool ring = false;     // the sum in the ring's hop order instead of the appliance's
    double xdp_scale = 1;  // the tier's fixed point
    // The rack of every rank when leaves and a spine sum the job (docs/protocol.md section 21):
    // each rack's partial is summed first, in rank order and rounded to the dtype as the wire
    // carries it, then the partials in ring order. Empty: one appliance sums all ranks.
    std::vector<unsigned> rack_of;
    // A reduce-scatter or all-gather instead of an allreduce (through the appliance): sum() is then
    // the whole buffer as the ranks hold it afterwards, each rank checking its part of it.
    //   reduce_scatter: shard s is owner s's: the other ranks' shard s summed in rank order and
    //     rounded to the dtype (as the appliance's packet carries it), then the owner's own added;
    //   all_gather: every rank's input, of bytes / n each, in rank order.
    control::Collective collective = control::Collective::allreduce;
  };
  Reference(const Config& c, uint64_t bytes) : c_(c), bytes_(bytes) {}

  // What the tier that summed an allreduce must have produced:
  //   appliance (ina, auto): the rank-ordered sum, halves accumulated in fp32 and rounded once
  //     (across racks: per rack, then over the racks' partials);
  //   ring: chunk c summed from rank c on, rounded at every hop as the ring does;
  //   xdp: every input in fixed point (int32 as it is), added by a wrapping int32 loop, back.
  const std::vector<uint8_t>& sum(Tier tier);

 private:
  void make_inputs();
  Config c_;
  uint64_t bytes_;
  std::vector<std::vector<uint8_t>> inputs_;
  void make_collective();
  std::vector<uint8_t> appliance_or_ring_, tier_;
};

}  // namespace inagg::apps
