// A worker's side of the XDP aggregation tier (ALEPH; include/inagg/wire/xagg.h has the wire
// format): int32 vectors in chunks of `values`, each sent as DATA to the worker's head, at most
// `window` chunks without a result; a chunk whose RESULT did not come within `timeout_ns` is sent
// again (the head answers a repeat from its retained result, or asks its parent again), so a loss
// anywhere costs one timeout and nothing else. Results arrive multicast to the group the client
// joined, or unicast when it asked again; either way only from the head's address and the tier's
// port, and only with a valid MAC under the job's key (inagg/wire/xagg.h); anything else is
// dropped and counted. Every DATA carries its MAC. Chunk numbers run on across calls: every rank of
// a job must make the same calls with the same sizes.
//
// eBPF has no floating point, so floating-point tensors travel as fixed point: to_fixed() scales
// and rounds, clipping at +-limit so that the sum of total_weight values cannot overflow int32,
// and counts what it clipped (saturation); from_fixed() divides back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inagg/agg/dtype.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/xagg_mac.hpp"

namespace inagg::client {

struct XaggConfig {
  util::IpAddr local;  // this worker's IPv4 address (the interface that joins the group)
  util::IpAddr head;   // its head
  util::IpAddr group;  // multicast group the head sends results to
  uint16_t port = 4792;
  unsigned job = 0;           // 0..255, as in the heads' job files
  unsigned rank = 0;          // this worker's rank in its head's group
  unsigned values = 256;      // per packet; a multiple of 4 (the heads' `values`)
  unsigned window = 8;        // chunks without a result (the heads' `window`)
  uint32_t total_weight = 0;  // workers in the job: every result must say so
  uint64_t timeout_ns = 20'000'000;
  wire::XaggKey key;  // the job's MAC key, the heads' key_file
};

#define INAGG_XAGG_CLIENT_COUNTERS(X)                                                           \
  X(chunks, "chunks completed")                                                                 \
  X(sent, "DATA packets sent (first sends and repeats)")                                        \
  X(repeats, "DATA sent again after a timeout")                                                 \
  X(results, "RESULT packets taken")                                                            \
  X(results_ignored, "RESULT packets for chunks not outstanding (late duplicates, other jobs)") \
  X(malformed, "packets on the tier's port that were not a valid RESULT")                       \
  X(wrong_source, "packets from another address or port than the head's (dropped)")             \
  X(bad_mac, "RESULT packets whose MAC does not verify under the job's key (dropped)")

struct XaggCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_XAGG_CLIENT_COUNTERS(X)
#undef X
};

class XaggClient {
 public:
  XaggClient() = default;
  ~XaggClient();
  XaggClient(const XaggClient&) = delete;
  XaggClient& operator=(const XaggClient&) = delete;

  // Binds the port on all addresses (results come to the group address too) and joins the group
  // on the interface of cfg.local.
  bool open(const XaggConfig& cfg, std::string* error);

  // Sums `v` (n values) over the job's workers in place. False with *error on a deadline or a
  // result that contradicts the job (another total weight).
  bool allreduce(int32_t* v, size_t n, uint64_t deadline_ns, std::string* error);

  const XaggCounters& counters() const { return c_; }
  uint32_t next_seq() const { return seq_; }

 private:
  bool send_chunk(const int32_t* v, size_t n, uint32_t seq);
  XaggConfig cfg_;
  int fd_ = -1;
  uint32_t seq_ = 0;
  XaggCounters c_;
  std::vector<uint8_t> buf_;
};

// Fixed point for floating-point dtypes: value * scale, rounded to nearest, clipped to +-limit
// with limit = INT32_MAX / total_weight. The element type is `dtype` (fp32, fp16, bf16), read
// little-endian from `src`; returns the number of clipped values.
size_t to_fixed(agg::Dtype dtype, const uint8_t* src, size_t count, double scale, uint32_t total_weight, int32_t* out);
// And back: sum / scale, rounded to the dtype.
void from_fixed(agg::Dtype dtype, const int32_t* in, size_t count, double scale, uint8_t* dst);

}  // namespace inagg::client
