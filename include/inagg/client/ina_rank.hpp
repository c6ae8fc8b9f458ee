// One rank of an ina job (the appliance sums, docs/protocol.md §1) whose ranks found each other
// through a channel the caller owns, such as PyTorch's c10d store (src/torchdist/), instead of the
// rack plan's fixed addresses. Each rank takes its own address (from its own interface), tells
// the others its endpoint, and connects the software RoCEv2 transport to the endpoints of its
// successor and predecessor; rank 0 registers job_text() with the appliance. The QPNs and first
// PSNs are the rack plan's for the rank (RackPlan::send_qpn ...), so that only the addresses and
// each rank's region key (drawn at random by configure(), transport.hpp's RegionKey) travel.
//
//   InaRank r;
//   r.configure(options)                     // checks; the payload from the link's MTU; the key
//   publish(format_endpoint(r.endpoint()))   // then read every rank's endpoint: `all`
//   r.open(all, &error)                      // binds UDP 4791 at the address, connects the ring
//   rank 0: register r.job_text(id); every rank waits until the job is active, then
//   r.open_receive(&error)                   // takes the predecessor's WRITEs from here on
//   every rank: a barrier (each has opened), then
//   r.allreduce(data, bytes, &error) ...     // r.poll(1) between allreduces, as a NIC would
//   r.finish(deadline_ns)
//
// Single-threaded, like the transport it drives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/algorithms.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/client/rendezvous.hpp"
#include "inagg/client/transport/udp_transport.hpp"

namespace inagg::client {

struct InaRankOptions {
  unsigned rank = 0, workers = 0;
  util::IpAddr address;  // this rank's own IPv4 address, on the interface toward the appliance
  std::string dtype = "fp32";
  uint32_t message = 65536, payload = 0;  // payload 0: from the MTU of the address's interface
  unsigned window = 2;
  double ack_timeout_ms = 250;  // (retry + 1) x ack_timeout_ms: the skew the ranks may have
  unsigned retry = 15;
  uint64_t chunk_bytes = 8u << 20;  // the registered regions; a larger buffer goes in pieces
  double stall_s = 60;              // an allreduce fails when nothing arrives for this long
  // Also a reduce-scatter's and an all-gather's QP pairs (docs/protocol.md section 20), each the
  // QPs of a job of its own (job_text(id, collective)): the allreduce's QPNs + kLaneQpnStep x 1, 2.
  bool collectives = false;
};

class InaRank {
 public:
  // Checks the options and fills in the plan (payload auto). "" or why, naming the options'
  // fields (message, payload, dtype, workers ...).
  std::string configure(const InaRankOptions& o);

  const InaRankOptions& options() const { return o_; }
  util::Dtype dtype() const { return plan_.dtype; }
  size_t element() const { return geometry_.element(); }
  uint32_t payload() const { return plan_.payload; }

  // What this rank tells the others (rendezvous.hpp's endpoint line).
  RankEndpoint endpoint() const;
  // Every rank's endpoint, indexed by rank: checks that they agree with this rank (payload, rank
  // count, one address each, IPv4), binds the transport and connects it to the successor and the
  // predecessor. False with *error.
  bool open(const std::vector<RankEndpoint>& all, std::string* error);
  // Once the job is active on the appliance: the predecessor's WRITEs are taken from here on
  // (until then they are dropped and counted: nothing written while the appliance did not know
  // the job can be taken for a sum). False with *error.
  bool open_receive(std::string* error);
  // The appliance's job file for the ring open() connected (every rank's connection); with
  // options().collectives, the reduce-scatter's or all-gather's job on their QPs.
  std::string job_text(uint32_t id, control::Collective c = control::Collective::allreduce) const;
  static constexpr uint32_t kLaneQpnStep = 0x1000;

  // Sums `bytes` (whole elements) at `data` over every rank, in place, chunk by chunk. After a
  // failure every later allreduce fails with the same reason.
  bool allreduce(uint8_t* data, uint64_t bytes, std::string* error);
  // With options().collectives, through the jobs of those collectives: `shard_bytes` (whole
  // elements) per rank. reduce_scatter: `in` holds the n shards, `out` gets this rank's shard of
  // the sum (the other ranks' in rank order, then its own). all_gather: `in` is this rank's shard,
  // `out` gets the n shards. Long buffers go in pieces of the same range of every shard. After a
  // failure every later call fails with the same reason.
  bool reduce_scatter(const uint8_t* in, uint8_t* out, uint64_t shard_bytes, std::string* error);
  bool all_gather(const uint8_t* in, uint8_t* out, uint64_t shard_bytes, std::string* error);
  // Between allreduces: acknowledges the predecessor's retransmissions and the appliance's
  // resends, sends our own retransmissions; waits up to wait_ms for something to arrive.
  void poll(int wait_ms);
  // After the last allreduce: keeps answering until the predecessor has been quiet for a few ACK
  // timeouts, or until deadline_ns.
  void finish(uint64_t deadline_ns);

  const std::string& error() const { return error_; }
  // Every QP pair of the rank's socket: the allreduce's and the reduce-scatter's and all-gather's.
  TransportCounters transport_counters() const { return transport_.counters_with_lanes(); }
  uint64_t allreduces() const { return allreduces_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t messages() const { return messages_; }

 private:
  InaRankOptions o_;
  RegionKey key_;  // this rank's receive regions, drawn by configure()
  RackPlan plan_;
  Geometry geometry_;
  uint64_t chunk_ = 0;
  UdpRcTransport transport_;
  std::unique_ptr<RingExchange> exchange_;
  struct Lane {
    Geometry g;
    std::unique_ptr<RingExchange> x;
  };
  Lane lanes_[2];       // reduce-scatter, all-gather (options().collectives)
  uint64_t piece_ = 0;  // their pieces: bytes of each shard at a time
  bool rotated(control::Collective c, const uint8_t* in, uint8_t* out, uint64_t shard_bytes, std::string* error);
  std::string error_;
  uint64_t allreduces_ = 0, bytes_ = 0, messages_ = 0;
};

// The first IPv4 address of interface `name`; nullopt with *error when it has none.
std::optional<util::IpAddr> interface_address(const std::string& name, std::string* error);
// The address this host sends from toward `host` (a name or an IPv4 address): its route's
// source. nullopt with *error when `host` does not resolve or has no route.
std::optional<util::IpAddr> source_address_toward(const std::string& host, std::string* error);

}  // namespace inagg::client
