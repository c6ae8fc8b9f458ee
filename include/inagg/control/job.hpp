// The description of one aggregation job (docs/protocol.md section 2, "the job contract"): what a job file says,
// what the control socket's `add` carries and what the engine is given. Here, in control, so that
// every module that describes or registers jobs (the appliance, inagg-ctl, the workers) shares it
// without depending on the engine.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "inagg/util/dtype.hpp"
#include "inagg/util/ip_addr.hpp"

namespace inagg::control {

// ConnectionSpec::port when the registration names none.
inline constexpr uint16_t kAnyPort = 0xffff;

// One rank's connection: it RDMA-WRITEs from (src_ip, src_qpn) to (dst_ip, dst_qpn), its
// successor's receive QP, starting at start_psn. `port`, when named: the appliance port (DPDK port
// id) the rank's host is behind, so its packets from any other port are dropped from the first
// one on (IP source guard). `mac`, when named (not all zero): the Ethernet source its packets
// carry; others are dropped. The appliance binds every rank before its job's first packet (a
// registration that names neither is bound from the binding table or where the rank's address was
// seen: docs/binding.md); the engine alone, driven by tests and
// benchmarks, takes kAnyPort as pinned by the rank's first packet that fits.
struct ConnectionSpec {
  unsigned rank = 0;
  util::IpAddr src_ip, dst_ip;
  uint32_t src_qpn = 0, dst_qpn = 0;
  uint32_t start_psn = 0;
  uint16_t port = kAnyPort;
  std::array<uint8_t, 6> mac{};
  uint16_t channel = 0;  // which of the job's channels this connection carries (JobSpec::channels)
  bool has_mac() const { return (mac[0] | mac[1] | mac[2] | mac[3] | mac[4] | mac[5]) != 0; }
};

// Where an appliance sits in a job whose ranks span racks (docs/protocol.md section 21).
//   flat:  all the job's ranks hang off this appliance; its connections form a ring.
//   leaf:  this appliance's part of a job across racks: its rack's connections in ring order, the
//          first the downlink (from the previous rack's last rank to this rack's first), the last
//          the uplink (from this rack's last rank to the next rack's first). It sums its rack's
//          packets of a slot into the uplink's packet and sends that partial up at once; the total
//          comes back on the downlink and goes into the held packets.
//   spine: the racks' uplink connections (and those of ranks attached to it directly), one per
//          "rank", summed as a flat job but not a ring.
enum class Tier : uint8_t { flat, leaf, spine };

// What a job's connections carry (docs/protocol.md section 20).
//   allreduce:      every rank WRITEs the whole buffer; every packet comes back as the sum of all n.
//   reduce_scatter: the rotated shards: in each round a rank WRITEs a chunk of every shard but its
//                   own, its successor's last; that last one comes out as the sum of the n - 1
//                   ranks that are not the shard's owner, the others pass unchanged.
//   all_gather:     the rotated placeholders: in each round a rank WRITEs a chunk of its own shard,
//                   then placeholders for the n - 2 shards its successor lacks besides it, which
//                   the appliance fills with their owners' data.
enum class Collective : uint8_t { allreduce, reduce_scatter, all_gather };

// A job's channels at most (JobSpec::channels).
inline constexpr unsigned kMaxChannels = 16;

struct JobSpec {
  uint32_t id = 0;
  util::Dtype dtype = util::Dtype::fp32;
  unsigned workers = 0;        // n, 1..64
  uint32_t message_bytes = 0;  // M, a multiple of payload_bytes
  uint32_t payload_bytes = 0;  // P, the path MTU payload, a multiple of 4
  unsigned window = 0;         // W messages outstanding per QP
  bool replay = false;         // a FIRST/ONLY at start_psn after all is released restarts the job
  Tier tier = Tier::flat;
  Collective collective = Collective::allreduce;
  uint32_t chunk = 1;  // a rotated collective: messages per chunk (c, section 20)
  // Channels (docs/protocol.md section 22): every rank has `channels` RC connections to its
  // successor and stripes its messages over them; each channel is a job of its own on the
  // appliance (its own slots, PSNs, window and recovery, on one lcore), sharing nothing with the
  // others. A job's conns are its channels' in turn, `workers` lines each (ConnectionSpec::channel
  // says whose). An engine is given one channel's spec (channel_spec()): its `channel` says which.
  uint16_t channels = 1;
  uint16_t channel = 0;
  std::vector<ConnectionSpec> conns;  // one per rank and channel, channel by channel
};

// Channel `c` of `job`: the same job with channel c's connections only, as an engine takes it.
JobSpec channel_spec(const JobSpec& job, unsigned c);
// Whether `job`'s conns are its channels': workers x channels lines, ranks 0..workers-1 once in
// each channel; false with a sentence saying what to change.
bool check_channels(const JobSpec& job, std::string* error);

}  // namespace inagg::control
