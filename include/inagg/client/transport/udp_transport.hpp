// The first Transport: RoCEv2 RC in software over a kernel UDP socket (roce_socket.hpp), one
// RcRequester to the successor and one RcResponder for the predecessor (rc.hpp). The receive
// region is addressed as [kRegionVa, kRegionVa + size) with kRegionRkey on every rank, so among
// software ranks no addresses need exchanging: open()'s config (the rack plan's) is all.
//
// In a ring with RDMA NICs (VerbsTransport ranks: their QPNs, addresses and rkeys are the
// device's), the software rank joins their out-of-band exchange (rendezvous.hpp) instead:
//   open()      as always, with the plan's config for this rank's own QPNs, address, start PSN
//   exchange()  local() with the other ranks; from here on datagrams are received with their IP
//               headers (RoceSocket::receive_ip_headers: a NIC's ICRC covers its non-zero IP ID)
//   connect()   the requester and responder re-made for the successor's and the predecessor's
//               endpoints (QPNs, addresses, PSNs; writes go to the successor's region and rkey),
//               then the ranks' barrier "connected"; finish() ends in the barrier "done"
// While it waits in the exchange's barriers the rank keeps its RC running (it is its own NIC).
//
// Among software ranks on the rack plan, meet() joins the same exchange only to check that every
// rank's endpoint is the one the plan gives it (same QPNs, start PSNs, payload: every rank was
// started with the same --workers, --ip-base, --payload) and to keep its connection to rank 0 for
// barrier(): the ranks meet before their first send and wherever their local work differs in length.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inagg/client/rendezvous.hpp"
#include "inagg/client/transport/rc.hpp"
#include "inagg/client/transport/roce_socket.hpp"
#include "inagg/client/transport/transport.hpp"

namespace inagg::client {

struct UdpRcConfig {
  util::IpAddr local;
  uint8_t tos = 2;          // ECT(0)
  RcConfig send;            // the requester: our QP -> the successor's receive QP
  RcConfig receive;         // the responder: the predecessor's QP -> our receive QP
  uint64_t send_bytes = 0;  // sizes of the two regions
  uint64_t receive_bytes = 0;
};

class UdpRcTransport final : public Transport {
 public:
  static constexpr uint64_t kRegionVa = 0x7f0000000000ull;
  static constexpr uint32_t kRegionRkey = 0x1234;

  UdpRcTransport();
  ~UdpRcTransport() override;
  UdpRcTransport(const UdpRcTransport&) = delete;
  UdpRcTransport& operator=(const UdpRcTransport&) = delete;

  // Binds (local, 4791) and allocates the regions. False with *error ("cannot bind ...").
  bool open(const UdpRcConfig& cfg, std::string* error);

  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override;
  bool writes_done() const override { return req_->idle(); }
  uint64_t messages_received() const override { return rsp_->messages(); }
  uint64_t last_arrival_ns() const override { return last_arrival_ns_; }
  const std::string& error() const override;
  void finish(uint64_t deadline_ns) override;
  TransportCounters counters() const override;

  RoceSocket& socket() { return sock_; }  // loss injection (set_loss) for tests

  // Another QP pair on the same socket and address, with regions of its own (a rank in more than
  // one job: the torch backend's allreduce, reduce-scatter and all-gather jobs, each on QPs of
  // its own). The lane is a Transport over its pair; polling the lane or this transport runs every
  // pair. Its configs name its own QPNs; the regions are addressed as this transport's. Owned by
  // this transport, valid as long as it is.
  Transport& add_lane(const RcConfig& send, const RcConfig& receive, uint64_t send_bytes, uint64_t receive_bytes);
  // counters() of this transport's pair and of every lane's, summed: the whole socket's.
  TransportCounters counters_with_lanes() const;

  // The exchange with other ranks (see the top). local(): this rank's endpoint as open() made it.
  RankEndpoint local(unsigned rank) const;
  bool exchange(const RendezvousConfig& cfg, std::vector<RankEndpoint>* all, std::string* error);
  bool connect(const RankEndpoint& successor, const RankEndpoint& predecessor, std::string* error);
  // The plan's ranks meet (see the top). finish() stays as without: answering until quiet.
  bool meet(const RendezvousConfig& cfg, std::string* error);
  bool barrier(const std::string& what, std::string* error) override;
  const std::vector<RankConnection>* job_connections() const override {
    return connections_.empty() ? nullptr : &connections_;
  }
  void set_job_connections(std::vector<RankConnection> c) { connections_ = std::move(c); }
  // After connect(): "software RoCE 10.77.0.104, endpoints exchanged, IP headers from a raw socket".
  std::string description() const override;

 private:
  bool drain(uint64_t now_ns);     // dispatches every waiting datagram; true when there was any
  void progress(uint64_t now_ns);  // every pair's timers and window
  uint64_t next_deadline_ns() const;
  class Lane;
  friend class Lane;

  UdpRcConfig cfg_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  RoceSocket sock_;
  std::vector<uint8_t> send_, recv_;
  std::unique_ptr<RcRequester> req_;
  std::unique_ptr<RcResponder> rsp_;
  Datagram dg_;
  uint64_t last_arrival_ns_ = 0;
  // The successor's receive region: ours by default (every software rank's is the same).
  uint64_t remote_va_ = kRegionVa;
  uint32_t remote_rkey_ = kRegionRkey;
  std::unique_ptr<Rendezvous> rendezvous_;  // after exchange()
  bool connected_ = false;                  // connect() done: finish() ends in the barrier
  std::vector<RankConnection> connections_;
  std::string error_;  // the exchange's; the RC halves keep their own
  std::string no_error_;
};

}  // namespace inagg::client
