// How a rank's allreduce moves bytes: RDMA WRITE WITH IMMEDIATE over the two reliable connections
// a rank has on the ring, one to its successor (this rank's requester) and one from its
// predecessor (its responder), into registered memory. The algorithms (algorithms.hpp) see only
// this interface, so a transport is a matter of setup:
//
//   - UdpRcTransport (udp_transport.hpp): RoCEv2 RC in software over a kernel UDP socket, the
//     first implementation: send_region()/receive_region() are plain buffers, post_write() queues
//     to RcRequester, poll() runs RcRequester/RcResponder over the socket.
//   - VerbsTransport (verbs_transport.hpp): rdma-core's verbs on a RoCE NIC or Soft-RoCE. Its RC
//     QPs and registered regions are the device's, so their QPNs, addresses and rkeys are
//     exchanged out of band (rendezvous.hpp) and supplied to the job's registration
//     (job_connections()); post_write() is ibv_post_send of IBV_WR_RDMA_WRITE_WITH_IMM, poll()
//     polls the CQs, error() reports a completion with an error status (e.g. retry exceeded).
//
// Single-threaded: one caller drives a transport. Writes complete in order; the successor sees a
// message once all its bytes are in its receive region.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inagg/util/ip_addr.hpp"

namespace inagg::client {

// One rank's connection as the appliance registers it (a job file's conn line, protocol.md §3):
// the rank's address, its QP to the successor, its QP for the predecessor's writes, and the first
// PSN of its writes.
struct RankConnection {
  util::IpAddr ip;
  uint32_t send_qpn = 0, recv_qpn = 0, start_psn = 0;
};

// Where a rank's receive region lies for its predecessor's WRITEs: the base VA and the rkey.
struct RegionKey {
  uint64_t va = 0;
  uint32_t rkey = 0;
  bool operator==(const RegionKey&) const = default;
};
// A key no one else can predict, as an RDMA NIC's rkey should be: an rkey of 32 random bits (never
// 0) and a page-aligned base VA of 34 random bits in the user half of a 47-bit address space, from
// getrandom(2). nullopt with *error when the OS has no randomness to give.
std::optional<RegionKey> random_region_key(std::string* error);

// What inagg-worker prints per rank. A transport that cannot count one of these leaves it 0.
struct TransportCounters {
  // Our writes to the successor.
  uint64_t packets_sent = 0;   // data packets sent, retransmissions included
  uint64_t retransmitted = 0;  // data packets sent again
  uint64_t timeouts = 0;       // ACK timer expirations
  uint64_t naks_received = 0;  // NAKs (PSN sequence error) received
  // The predecessor's writes to us.
  uint64_t accepted = 0;    // data packets accepted in order
  uint64_t duplicates = 0;  // data packets seen again (re-acknowledged)
  uint64_t bad_icrc = 0;    // packets with a bad ICRC, dropped
  // Refused, dropped unanswered and never written (a forger's, or a peer that is not this job's):
  uint64_t rx_refused_source = 0;  // from an address other than the peer's
  uint64_t rx_refused_rkey = 0;    // WRITEs with another rkey, outside the region or outside a message
  uint64_t rx_refused_qpn = 0;     // RoCE to a QPN this rank does not have, or a WRITE to its send QP
  uint64_t rx_refused_early = 0;   // WRITEs before the receive side opened (open_receive)
  // Whole messages: our writes acknowledged, the predecessor's complete in the receive region.
  uint64_t messages_written = 0;
  uint64_t messages_received = 0;

  TransportCounters& operator+=(const TransportCounters& o) {
    packets_sent += o.packets_sent;
    retransmitted += o.retransmitted;
    timeouts += o.timeouts;
    naks_received += o.naks_received;
    accepted += o.accepted;
    duplicates += o.duplicates;
    bad_icrc += o.bad_icrc;
    rx_refused_source += o.rx_refused_source;
    rx_refused_rkey += o.rx_refused_rkey;
    rx_refused_qpn += o.rx_refused_qpn;
    rx_refused_early += o.rx_refused_early;
    messages_written += o.messages_written;
    messages_received += o.messages_received;
    return *this;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Registered memory, allocated when the transport was opened and valid until it is destroyed:
  // writes are posted from send_region(); the predecessor's writes land in receive_region().
  virtual std::span<uint8_t> send_region() = 0;
  virtual std::span<const uint8_t> receive_region() const = 0;

  // Opens the receive side: from here on the predecessor's WRITEs are taken (before, the transport
  // drops and counts them, rx_refused_early). A rank calls it once its job is active on the
  // appliance (or where there is no appliance to wait for), so that nothing written while the
  // appliance still switched the job's packets unaggregated can be taken for a sum. Every rank opens
  // its receive side before the first barrier. False with *error (a transport that connects its
  // QPs here: verbs, a software rank among them).
  virtual bool open_receive(std::string* error) = 0;

  // Queues an RDMA WRITE WITH IMMEDIATE of `len` bytes from send_region()[src_offset] to the
  // successor's receive region at `dst_offset`, carrying `imm`. The bytes must stay unchanged until
  // writes_done(). The caller keeps both ranges inside the regions.
  virtual void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) = 0;

  // Does the transport's work: sends what the window allows, takes in what arrived, runs the
  // timers. Waits up to `wait_ms` for something to arrive when there is nothing to do.
  virtual void poll(int wait_ms) = 0;

  // Every posted write acknowledged by the successor.
  virtual bool writes_done() const = 0;
  // Messages of the predecessor complete in the receive region since the transport was opened.
  virtual uint64_t messages_received() const = 0;
  // When anything last arrived from either peer (steady clock, ns), or when the transport was
  // opened: silence is how a rank notices a predecessor that stopped sending.
  virtual uint64_t last_arrival_ns() const = 0;
  // "" while both connections are healthy; otherwise why one broke ("retry count (7) exceeded:
  // ..."). A broken transport stays broken.
  virtual const std::string& error() const = 0;

  // Returns once every rank of the job has called it with the same `what`. Ranks whose local work
  // between allreduces differs in length (making a reference, filling a buffer, a straggler's
  // compute) meet here explicitly before they send: an allreduce through the appliance holds each
  // rank's packets until every rank's have arrived, and a rank that sent far ahead of the others
  // would see no ACK for that long and spend its RC retry budget. The rank keeps answering its
  // peers while it waits. False with *error (a rank that never came, the deadline).
  virtual bool barrier(const std::string& what, std::string* error) = 0;
  // A barrier that also carries one line of text (no newline, Rendezvous::kMaxGatherText bytes at
  // most) from every rank to rank 0: rank 0 gets every rank's `mine`, indexed by rank; the others
  // get nothing. For reports after the collectives (inagg-worker's table of every rank's figures).
  // A transport whose ranks do not meet at rank 0 cannot: false with *error.
  virtual bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
                      std::string* error) {
    (void)what, (void)mine, (void)all;
    *error = "this transport's ranks do not meet at rank 0";
    return false;
  }

  // After the last allreduce: keeps serving the peers until they need nothing more from this rank
  // (software RC: answers the predecessor's retransmissions until it has been quiet for a few ACK
  // timeouts, as an RDMA application's final barrier would), or until deadline_ns.
  virtual void finish(uint64_t deadline_ns) = 0;

  virtual TransportCounters counters() const = 0;

  // The job's connections as this transport made them (every rank's address, QPNs, start PSN,
  // learned in its exchange), for rank 0's registration; nullptr when the rack plan's own
  // (RackPlan::send_qpn ...) are the ones in use, as with the software transport.
  virtual const std::vector<RankConnection>* job_connections() const { return nullptr; }
  // One line about the hardware, for the worker's header ("rxe0 port 1 GID 1 ::ffff:10.77.0.101
  // MTU 1024"); "" for a software transport.
  virtual std::string description() const { return ""; }
};

}  // namespace inagg::client
