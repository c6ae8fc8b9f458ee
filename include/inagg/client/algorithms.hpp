// The allreduce algorithms over a Transport (ina, ring, auto's appliance path) and over the XDP
// tier's client (xdp). Each takes the rank's buffer, whole elements of the job's dtype, and leaves
// the sum in it.
//   ina   each rank RDMA-WRITEs its buffer, message by message, to its successor through the
//         appliance, which sums the n streams: every rank receives the full sum in one pass
//         (docs/protocol.md section 1). The first and the last element of every message are the
//         tally: 1 from every rank, n once the appliance summed them; a message that arrives
//         with another tally fails the allreduce (an appliance that restarted and forgot the
//         job, or a path around it, forwards each rank its predecessor's data unsummed). The
//         tail of the last message is padded with zeros. docs/protocol.md, "The tally".
//   ring  the classic ring allreduce over the same transport (reduce-scatter, then all-gather;
//         the appliance only switches it). Chunk c is reduced in the order c, c+1, ..., c+n-1.
//   auto  ina, and every allreduce ends with one more message, the commit (zeros and the
//         tally); a wrong tally falls over to the XDP tier instead of failing.
//         docs/xdp-tier.md, "Fall-over".
//   xdp   fixed point in, int32 sums from the tier, back out; int32 travels as it is.
// And the rotated schedules of a job registered as a reduce_scatter or an all_gather
// (docs/protocol.md section 20): one pass, the ring's bytes each way, tallied as ina's messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inagg/client/fallover.hpp"
#include "inagg/client/transport/transport.hpp"
#include "inagg/client/transport/xagg_client.hpp"
#include "inagg/control/job.hpp"
#include "inagg/util/dtype.hpp"

namespace inagg::client {

enum class Mode : uint8_t { ina, ring, xdp, automatic };

// Buffer geometry of a job: how sizes map onto messages and ring chunks, and how large the
// transport's regions and the data buffer must be for allreduces up to max_bytes.
struct Geometry {
  util::Dtype dtype = util::Dtype::fp32;
  unsigned workers = 2;
  uint32_t message = 65536;
  Mode mode = Mode::ina;
  // ina: what the job's connections carry; a reduce-scatter or all-gather of `chunk` messages per
  // chunk takes regions for its rotated stream (Rotation) instead of an allreduce's.
  control::Collective collective = control::Collective::allreduce;
  uint32_t chunk = 1;
  bool rotated() const { return collective != control::Collective::allreduce; }

  size_t element() const { return util::dtype_size(dtype); }
  // Every message through the appliance carries the tally (ina, auto); auto ends each allreduce
  // with the commit message.
  bool tallied() const { return mode == Mode::ina || mode == Mode::automatic; }
  bool committed() const { return mode == Mode::automatic; }
  // Gradient bytes per message: ina and auto keep the first and the last element for the tally.
  uint64_t data_per_message() const { return tallied() ? message - 2 * element() : message; }
  uint64_t messages_of(uint64_t bytes) const;  // data messages for `bytes`, at least one
  uint64_t padded(uint64_t bytes) const;       // rounded up to whole messages, at least one
  uint64_t chunk_of(uint64_t bytes) const;     // ring: one rank's chunk, whole elements
  uint64_t send_bytes(uint64_t max_bytes) const;
  uint64_t receive_bytes(uint64_t max_bytes) const;
  uint64_t ring_stride(uint64_t max_bytes) const;  // ring: the distance between two step areas
  uint64_t data_bytes(uint64_t max_bytes) const;
};

// Why an exchange stopped, or "" when it completed.
struct Outcome {
  std::string error;
  FallOverCause cause = FallOverCause::retry_exceeded;
  bool ok() const { return error.empty(); }
};

// Message exchanges over a Transport: this rank's writes out, the predecessor's in.
class RingExchange {
 public:
  // stall_ns > 0: stop when nothing at all arrived for that long (auto: a predecessor that fell
  // over stops sending while our own writes may all be acknowledged, so only silence tells).
  RingExchange(Transport& t, uint32_t message, uint64_t deadline_ns, uint64_t stall_ns)
      : t_(t), message_(message), deadline_ns_(deadline_ns), stall_ns_(stall_ns) {}

  Transport& transport() { return t_; }

  // Writes `len` bytes (whole messages) from send_region()[src_offset] to the successor's region
  // at `dst_offset` and waits until `expect` more messages have arrived from the predecessor.
  // Counted from the start, not from now: in ring mode the predecessor may be a step ahead, its
  // message already in.
  Outcome exchange(uint64_t src_offset, uint64_t len, uint64_t dst_offset, uint64_t expect);
  // ina: 0, 1, 0, 1, ... for consecutive allreduces (which half of the receive region they use).
  unsigned next_parity() { return static_cast<unsigned>(calls_++ & 1); }

 private:
  Transport& t_;
  uint32_t message_;
  uint64_t deadline_ns_, stall_ns_;
  uint64_t expected_ = 0;
  uint64_t calls_ = 0;
};

// `in` and `out` may be the same buffer (in place); `out` gets the sum. When a message arrived
// without the appliance's sum (cause tally_wrong) the allreduce fails, and `out` may hold part of
// the sums.
Outcome ina_allreduce(RingExchange& x, const Geometry& g, const uint8_t* in, uint8_t* out, uint64_t bytes);
inline Outcome ina_allreduce(RingExchange& x, const Geometry& g, uint8_t* data, uint64_t bytes) {
  return ina_allreduce(x, g, data, data, bytes);
}
// `stride`: ring_stride(the run's largest size), the same for every size. The predecessor may be
// up to n-1 steps ahead (it sends step j once step j-1 arrived from its own predecessor, which
// round the ring needs this rank's step j-n+1), already in the next size; with a stride that grew
// with the size its writes would land on a step this rank has not read yet.
Outcome ring_allreduce(RingExchange& x, const Geometry& g, unsigned rank, uint8_t* data, uint64_t bytes,
                       uint64_t stride);

// auto's appliance path: the data messages with a tally, then the commit. ok() when both arrived
// summed; otherwise the cause (tally_wrong, or the transport's), and *have_data says whether every
// data message arrived summed, their sums then copied to held[] (at least `bytes` long): once our
// commit is out, a predecessor whose path no longer aggregates may already be writing its next
// allreduce's messages, unsummed, over the same offsets.
Outcome tallied_allreduce(RingExchange& x, const Geometry& g, const uint8_t* data, uint64_t bytes, uint8_t* held,
                          bool* have_data);

// The rotated schedules (docs/protocol.md section 20) through an appliance that has the job as a
// reduce_scatter or all_gather of `chunk` messages per chunk. A buffer of n shards of shard_bytes
// (whole elements) each; shard s is rank s's. Every message is ina's (the tally, the data, the
// tally). In each round a rank writes one chunk of messages per position:
//   reduce-scatter: shards r + 2, ..., r - 1, then r + 1 (its successor's) last. `in` is the
//     whole buffer (n shards), `out` gets shard r: the sum of the other ranks' shard r, added by
//     the appliance in rank order, plus this rank's own, added here. The summed chunks arrive with
//     the tally n - 1; the others pass unchanged and are not read.
//   all-gather: shard r, then placeholders (the tally 0) for r - 1, ..., r + 2. `in` is shard r,
//     `out` gets the whole buffer; every placeholder must arrive filled (the tally 1).
struct Rotation {
  unsigned workers = 2;
  uint32_t chunk = 1;
  // Messages per rank for a shard of this many messages: rounds x (n - 1) positions x chunk.
  uint64_t stream_messages(uint64_t shard_messages) const {
    const uint64_t rounds = (shard_messages + chunk - 1) / chunk;
    return rounds * (workers - 1) * chunk;
  }
  // The shard that rank `rank` writes at position t of a round.
  unsigned shard_at(bool reduce_scatter, unsigned rank, unsigned t) const {
    const unsigned n = workers;
    if (reduce_scatter) return t + 2 < n ? (rank + 2 + t) % n : (rank + 1) % n;
    return (rank + n - t) % n;
  }
};
// `stride`: the distance between two shards of the whole buffer (0: shard_bytes), so that a caller
// can run a long buffer in pieces (the same range of every shard at a time).
Outcome ina_reduce_scatter(RingExchange& x, const Geometry& g, const Rotation& rot, unsigned rank, const uint8_t* in,
                           uint8_t* out, uint64_t shard_bytes, uint64_t stride = 0);
Outcome ina_all_gather(RingExchange& x, const Geometry& g, const Rotation& rot, unsigned rank, const uint8_t* in,
                       uint8_t* out, uint64_t shard_bytes, uint64_t stride = 0);

// The XDP tier, with the job's fixed point.
class TierAllreduce {
 public:
  TierAllreduce(XaggClient& tier, util::Dtype dtype, unsigned workers, double scale, uint64_t max_bytes)
      : tier_(tier), dtype_(dtype), workers_(workers), scale_(scale), fixed_(max_bytes / util::dtype_size(dtype) + 4) {}

  bool run(uint8_t* data, uint64_t bytes, uint64_t deadline_ns, std::string* why);
  // An agreement of the fall-over: `v` summed over the ranks on the tier.
  bool agree(FallOver::Agreement* v, uint64_t deadline_ns, std::string* why) {
    return tier_.allreduce(v->data(), v->size(), deadline_ns, why);
  }
  uint64_t saturated() const { return saturated_; }  // values clipped by the fixed point

 private:
  XaggClient& tier_;
  util::Dtype dtype_;
  unsigned workers_;
  double scale_;
  std::vector<int32_t> fixed_;
  uint64_t saturated_ = 0;
};

}  // namespace inagg::client
