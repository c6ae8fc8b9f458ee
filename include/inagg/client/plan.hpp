// The rack plan of a job: who each rank is on the wire. Rank r uses IPv4 address ip_base + r + 1
// and RDMA-WRITEs to its successor (r + 1) % n; its QPNs and first PSN follow from r, so every
// rank, and the appliance's job file (job_text()), agree without exchanging anything. The XDP
// tier's plan puts rank r in group r / group_size under that group's head.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/transport/udp_transport.hpp"
#include "inagg/client/transport/xagg_client.hpp"
#include "inagg/control/job.hpp"
#include "inagg/util/dtype.hpp"
#include "inagg/util/ip_addr.hpp"

namespace inagg::client {

struct RackPlan {
  unsigned workers = 0, rank = 0;
  util::IpAddr ip_base;
  uint32_t job_id = 1;
  util::Dtype dtype = util::Dtype::fp32;
  uint32_t message = 65536, payload = 1024;                         // RDMA WRITE message M, path MTU payload P
  unsigned window = 2;                                              // messages in flight per QP
  size_t max_queued_bytes = 64 * 1024;                              // the transport's local queue limit (RcConfig)
  double rto_min_ms = 2;                                            // the retransmission timeout's floor (RcConfig)
  size_t cwnd_min_bytes = 16 * 1024;                                // the congestion window's floor (RcConfig); 0: none
  control::Collective collective = control::Collective::allreduce;  // what the job's connections carry
  uint32_t chunk = 1;                                               // a rotated collective's messages per chunk
  // RC connections per rank to its successor (docs/protocol.md section 22): channel c's QPNs are
  // kChannelQpnStep x c above channel 0's, its first PSN as far above, its UDP source port
  // kChannelPortBase + c (channel 0's is 4791); message m of a collective goes on channel m mod C.
  unsigned channels = 1;
  static constexpr uint32_t kChannelQpnStep = 0x10000;
  static constexpr uint16_t kChannelPortBase = 49152;
  static uint16_t channel_port(unsigned c) {
    return c == 0 ? uint16_t{4791} : static_cast<uint16_t>(kChannelPortBase + c);
  }

  util::IpAddr ip_of(unsigned r) const { return util::IpAddr::v4(ip_base.v4_host_order() + r + 1); }
  unsigned successor() const { return (rank + 1) % workers; }
  unsigned predecessor() const { return (rank + workers - 1) % workers; }

  // ina mode's QPs are the ones the job registers; ring mode uses others, which the appliance
  // does not know and so switches untouched.
  static uint32_t send_qpn(unsigned r) { return 0x100 + r; }
  static uint32_t recv_qpn(unsigned r) { return 0x200 + r; }
  static uint32_t ring_send_qpn(unsigned r) { return 0x300 + r; }
  static uint32_t ring_recv_qpn(unsigned r) { return 0x400 + r; }
  static uint32_t start_psn(unsigned r) { return (0xfff000u + 101u * r) & 0xffffff; }
  static uint32_t send_qpn(unsigned r, unsigned c) { return send_qpn(r) + kChannelQpnStep * c; }
  static uint32_t recv_qpn(unsigned r, unsigned c) { return recv_qpn(r) + kChannelQpnStep * c; }
  static uint32_t start_psn(unsigned r, unsigned c) { return (start_psn(r) + kChannelQpnStep * c) & 0xffffff; }

  // The connections a transport made (Transport::job_connections(): the device's QPNs, the ranks'
  // GIDs), one per rank; empty: the plan's own addresses, QPNs and PSNs above.
  std::vector<RankConnection> connections;
  // This rank's own MAC (interface_mac of its address), which its conn lines report (`, any, MAC`:
  // the appliance refuses the job when the rank's frames come with another, docs/binding.md); none
  // where this host does not hold the address (--print-job elsewhere).
  std::optional<std::array<uint8_t, 6>> mac;

  // The appliance's job file for this job (what `inagg-worker --print-job` prints and rank 0 adds).
  std::string job_text() const;

  // The software transport's two connections (ring: the ring QPs), with regions of the given sizes;
  // ina's with every channel's beyond the first (UdpRcConfig::channels).
  UdpRcConfig rc_config(bool ring, double ack_timeout_ms, unsigned retry, uint64_t send_bytes,
                        uint64_t receive_bytes) const;
  // Channels 1..channels-1 of `c` from its channel 0 (c->send, c->receive, whatever addresses and
  // QPNs those have: the plan's or an exchange's): QPNs and first PSNs kChannelQpnStep x ch above
  // channel 0's, UDP source port channel_port(ch). Replaces c->channels.
  static void add_channels(UdpRcConfig* c, unsigned channels);
};

// RoCEv2 over IPv4 carries a payload P in P + 64 bytes of IP packet: IPv4 20, UDP 8, BTH 12,
// RETH 16, ImmDt 4, ICRC 4.
constexpr uint32_t kRoceV4Overhead = 64;
// What a RoCE NIC reserves for headers when it derives its active MTU from the netdev's (Linux's
// iboe_get_mtu: GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4), so that auto agrees with the
// verbs ranks of a mixed ring: MTU 4200 gives 4096, 1500 gives 1024.
constexpr uint32_t kRoceNicHeadroom = 96;
// The path MTU payload an RDMA NIC would choose on a link of this MTU: the largest of 4096, 2048,
// 1024, 512 and 256 no larger than MTU - kRoceNicHeadroom that divides `message`; 0 when none does.
uint32_t payload_for_mtu(uint32_t link_mtu, uint32_t message);
// The MAC of the interface here that holds address `ip` (IPv4, or IPv4-mapped); nullopt when none
// holds it or it has none (loopback).
std::optional<std::array<uint8_t, 6>> interface_mac(const util::IpAddr& ip);
// The MTU of the interface here that holds address `ip`; nullopt when none holds it.
std::optional<uint32_t> interface_mtu(const util::IpAddr& ip, std::string* name = nullptr);

struct XdpPlan {
  std::vector<util::IpAddr> heads;  // the head of group g is heads[g]
  unsigned group_size = 0;          // ranks per group (0: all in one)
  util::IpAddr mcast;               // group g's results go to this address + g
  unsigned values = 256, window = 8;
  uint16_t port = 4792;
  double timeout_ms = 20;
  wire::XaggKey key;  // the job's MAC key (the heads' key_file)

  unsigned size_of_groups(unsigned workers) const { return group_size ? group_size : workers; }
  unsigned group_of(unsigned rank, unsigned workers) const { return rank / size_of_groups(workers); }
  util::IpAddr group_address(unsigned group) const { return util::IpAddr::v4(mcast.v4_host_order() + group); }
  XaggConfig xagg_config(const RackPlan& rack) const;
};

}  // namespace inagg::client
