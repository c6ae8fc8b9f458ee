// The Transport on rdma-core's verbs (libibverbs): what a rank runs on a RoCE NIC (a ConnectX, or
// the kernel's Soft-RoCE in the lab), with the same job contract and algorithms as the software
// transport (udp_transport.hpp). Two RC QPs: one to the successor (its WRITEs are the job's data
// QP), one for the predecessor's WRITEs into the receive region. Both regions are registered MRs;
// a message is one IBV_WR_RDMA_WRITE_WITH_IMM (the NIC splits it into packets of the path MTU),
// and its immediate completes a receive WR on the successor. At most `window` writes are posted at
// a time (the appliance's window, docs/protocol.md §2); the rest wait in a queue.
//
//   open()          device, port, GID, PD, CQs, the two QPs (INIT) and the MRs: local() is this
//                   rank's endpoint for the out-of-band exchange (rendezvous.hpp)
//   exchange()      the ranks' endpoints, out of band (rendezvous.hpp)
//   set_peers()     the successor's and the predecessor's endpoints from the exchange
//   open_receive()  connect(): the QPs to RTR/RTS with those endpoints, then a barrier of the
//                   ranks; called once the job is active on the appliance (rank.hpp)
//
// What guards the receive region is the NIC's: a QP in INIT (before open_receive) drops every
// packet; in RTR it takes WRITEs to its QPN at its expected PSN, with the region's rkey (the
// device's: Soft-RoCE draws only 8 of its bits at random) and inside the region, which is
// addressed at a random VA (ibv_reg_mr_iova) the predecessor learns in the exchange. Whether a
// WRITE comes from the predecessor's address is the device's to check (Soft-RoCE does), not this
// class's, and none of it is counted here: the device's counters (rdma statistic) say what it
// dropped.
//
// open_verbs_transport() (rank.hpp) runs the steps for inagg-worker. Built only when meson
// finds libibverbs (INAGG_HAVE_VERBS); verbs_supported() says whether this build has it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inagg/client/rendezvous.hpp"
#include "inagg/client/transport/transport.hpp"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;
struct ibv_comp_channel;

namespace inagg::client {

// rdma-core's habits: ibv_devinfo's device names, ports from 1, GID indices as show_gids prints.
struct VerbsDeviceOptions {
  std::string device;  // "" = the first device
  unsigned port = 1;
  int gid_index = -1;        // -1 = the port's first RoCEv2 GID that is an IPv4-mapped address
  unsigned qp_timeout = 18;  // local ACK timeout 4.096 us x 2^t (protocol.md §2: >= 18)
};

struct VerbsConfig {
  VerbsDeviceOptions dev;
  unsigned rank = 0;
  uint32_t start_psn = 0;   // of our writes to the successor
  uint32_t payload = 1024;  // path MTU payload P: 256, 512, 1024, 2048 or 4096
  unsigned window = 2;
  unsigned retry = 7;
  uint64_t send_bytes = 0, receive_bytes = 0;
};

// True when this build links libibverbs.
bool verbs_supported();

class VerbsTransport final : public Transport {
 public:
  VerbsTransport();
  ~VerbsTransport() override;
  VerbsTransport(const VerbsTransport&) = delete;
  VerbsTransport& operator=(const VerbsTransport&) = delete;

  // False with *error: no device, no such port or GID, a verbs call that failed (named).
  bool open(const VerbsConfig& cfg, std::string* error);
  const RankEndpoint& local() const { return local_; }
  // The out-of-band exchange of local() with the other ranks (kept for finish()'s barrier).
  bool exchange(const RendezvousConfig& cfg, std::vector<RankEndpoint>* all, std::string* error) {
    return rendezvous_.exchange(cfg, local_, all, error);
  }
  // Both QPs to RTR and RTS, then the ranks' barrier "connected": when it returns, every rank's
  // receive QP is ready, so the first WRITE is not dropped by a peer still in INIT.
  bool connect(const RankEndpoint& successor, const RankEndpoint& predecessor, std::string* error);
  void set_peers(const RankEndpoint& successor, const RankEndpoint& predecessor) {
    successor_ = successor;
    predecessor_ = predecessor;
  }
  // connect() to the set_peers() endpoints (Transport::open_receive).
  bool open_receive(std::string* error) override { return connected_ || connect(successor_, predecessor_, error); }
  // Which device, port and GID index open() chose ("rxe0 port 1 GID 1 ::ffff:10.77.0.101").
  std::string description() const override { return description_; }

  std::span<uint8_t> send_region() override { return {send_buf_, cfg_.send_bytes}; }
  std::span<const uint8_t> receive_region() const override { return {recv_buf_, cfg_.receive_bytes}; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override;
  bool writes_done() const override { return queued_.empty() && in_flight_ == 0; }
  uint64_t messages_received() const override { return received_; }
  uint64_t last_arrival_ns() const override { return last_arrival_ns_; }
  const std::string& error() const override { return error_; }
  // Our writes acknowledged, then the ranks' barrier (rendezvous.hpp): the QPs stay up, and the
  // NIC answers the predecessor's retransmissions, until every rank is done. A failed barrier is
  // error().
  void finish(uint64_t deadline_ns) override;
  TransportCounters counters() const override;
  // The ranks' barrier over the exchange's connection to rank 0 (the NIC answers its peers meanwhile).
  bool barrier(const std::string& what, std::string* error) override { return rendezvous_.barrier(what, error); }
  bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
              std::string* error) override {
    return rendezvous_.gather(what, mine, all, error);
  }
  const std::vector<RankConnection>* job_connections() const override {
    return connections_.empty() ? nullptr : &connections_;
  }
  void set_job_connections(std::vector<RankConnection> c) { connections_ = std::move(c); }

 private:
  struct Write {
    uint64_t src_offset;
    uint32_t len;
    uint64_t dst_offset;
    uint32_t imm;
  };
  bool post_queued();    // posts what the window allows; false (error_ set) when a post fails
  bool post_receives();  // keeps the receive QP's WRs topped up
  bool drain_cqs();      // true when a completion was polled
  void fail(std::string why);
  void close();

  VerbsConfig cfg_;
  RankEndpoint local_, successor_, predecessor_;
  std::string description_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* send_qp_ = nullptr;
  ibv_qp* recv_qp_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  uint8_t* send_buf_ = nullptr;
  uint8_t* recv_buf_ = nullptr;
  uint8_t gid_[16] = {};
  int gid_index_ = 0;
  unsigned recv_depth_ = 0, recv_posted_ = 0;
  std::deque<Write> queued_;
  unsigned in_flight_ = 0;
  uint64_t received_ = 0, writes_completed_ = 0, last_arrival_ns_ = 0;
  bool connected_ = false;
  Rendezvous rendezvous_;
  std::vector<RankConnection> connections_;
  std::string error_;
};

}  // namespace inagg::client
