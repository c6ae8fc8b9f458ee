// The first Transport: RoCEv2 RC in software over a kernel UDP socket (roce_socket.hpp), one
// RcRequester to the successor and one RcResponder for the predecessor (rc.hpp). Each rank
// addresses its receive region as an RDMA NIC's registered memory is addressed: a base VA and an
// rkey that open() draws from the OS's CSPRNG (RegionKey), which its predecessor learns in the
// ranks' meeting (the endpoint's recv_addr and recv_rkey) and nobody else can guess. The
// responder takes WRITEs only from the predecessor's address, with that rkey, inside the region;
// the requester ACKs only from the successor's (rc.hpp). Nothing is taken at all before
// open_receive(), which a rank calls once its job is active on the appliance (rank.hpp).
//
// In a ring with RDMA NICs (VerbsTransport ranks: their QPNs, addresses and rkeys are the
// device's), the software rank joins their out-of-band exchange (rendezvous.hpp) instead:
//   open()          as always, with the plan's config for this rank's own QPNs, address, start PSN
//   exchange()      local() with the other ranks; from here on datagrams are received with their IP
//                   headers (RoceSocket::receive_ip_headers: a NIC's ICRC covers its non-zero IP ID)
//   set_peers()     the successor's and the predecessor's endpoints from the exchange
//   open_receive()  connect(): the requester and responder re-made for those endpoints (QPNs,
//                   addresses, PSNs; writes go to the successor's region and rkey), then the
//                   ranks' barrier "connected"; finish() ends in the barrier "done"
// While it waits in the exchange's barriers the rank keeps its RC running (it is its own NIC).
//
// Among software ranks on the rack plan, meet() joins the same exchange to learn the successor's
// region key and to check that every rank's endpoint is the one the plan gives it (same QPNs,
// start PSNs, payload: every rank was started with the same --workers, --ip-base, --payload), and
// keeps its connection to rank 0 for barrier(): the ranks meet before their first send and
// wherever their local work differs in length.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // The job's channels beyond the first (docs/protocol.md section 22): for channel c = 1..C-1 its
  // QP pair, send then receive, each with its own QPNs and UDP source port (RcConfig::src_port).
  // They share the transport's regions and key: a write goes on channel (dst_offset / len) mod C,
  // the same on every rank, and lands where it would on one connection.
  std::vector<std::pair<RcConfig, RcConfig>> channels;
  // This rank's region key; nullopt: open() draws one (random_region_key). Given by a caller that
  // must publish it before it opens the transport (Rank::endpoint).
  std::optional<RegionKey> receive_key;
};

class UdpRcTransport final : public Transport {
 public:
  // The lanes' regions (add_lane) lie at the rank's base VA + (lane + 1) x kLaneVaStride, with the
  // same rkey, as parts of one registration: each lane's responder takes only its own part.
  static constexpr uint64_t kLaneVaStride = 1ull << 40;
  // The one key every rank uses where ranks never meet to exchange theirs (an inagg.Communicator
  // whose job someone else registers): predictable, so such a rank's region is guarded by its
  // peers' addresses alone.
  static constexpr RegionKey kUnmetKey{0x7f0000000000ull, 0x1234};

  UdpRcTransport();
  ~UdpRcTransport() override;
  UdpRcTransport(const UdpRcTransport&) = delete;
  UdpRcTransport& operator=(const UdpRcTransport&) = delete;

  // Binds (local, 4791), allocates the regions and draws the region key (unless cfg gives one).
  // The receive side stays closed until open_receive(). False with *error ("cannot bind ...").
  bool open(const UdpRcConfig& cfg, std::string* error);
  const RegionKey& receive_key() const { return key_; }
  // The successor's region key, where writes go: meet() and connect() set it from its endpoint.
  void set_successor_key(const RegionKey& k) { remote_ = k; }
  // Opens the receive side (Transport::open_receive); after set_peers(), connects first.
  bool open_receive(std::string* error) override;

  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override;
  void poll(int wait_ms) override;
  bool writes_done() const override;
  uint64_t messages_received() const override;
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
  // The endpoints open_receive() connects to (after the job is active).
  void set_peers(const RankEndpoint& successor, const RankEndpoint& predecessor) { peers_ = {successor, predecessor}; }
  // The plan's ranks meet (see the top). finish() stays as without: answering until quiet.
  bool meet(const RendezvousConfig& cfg, std::string* error);
  bool barrier(const std::string& what, std::string* error) override;
  bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
              std::string* error) override;
  const std::vector<RankConnection>* job_connections() const override {
    return connections_.empty() ? nullptr : &connections_;
  }
  void set_job_connections(std::vector<RankConnection> c) { connections_ = std::move(c); }
  // After connect(): "software RoCE 10.77.0.104, endpoints exchanged, IP headers from a raw socket".
  std::string description() const override;

 private:
  // Dispatches every waiting datagram; true when there was any, *heard set when one was a peer's.
  bool drain(uint64_t now_ns, bool* heard);
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
  struct Channel {  // channel 1.. (UdpRcConfig::channels); channel 0 is req_ and rsp_
    std::unique_ptr<RcRequester> req;
    std::unique_ptr<RcResponder> rsp;
  };
  std::vector<Channel> channels_;
  Datagram dg_;
  uint64_t last_arrival_ns_ = 0;
  RegionKey key_;           // our receive regions'
  RegionKey remote_;        // the successor's: meet(), connect() or set_successor_key()
  bool receiving_ = false;  // open_receive() done: WRITEs are taken
  uint64_t refused_qpn_ = 0, refused_early_ = 0;
  std::optional<std::pair<RankEndpoint, RankEndpoint>> peers_;  // set_peers(): successor, predecessor
  std::unique_ptr<Rendezvous> rendezvous_;                      // after exchange()
  bool connected_ = false;                                      // connect() done: finish() ends in the barrier
  std::vector<RankConnection> connections_;
  std::string error_;  // the exchange's; the RC halves keep their own
  std::string no_error_;
};

}  // namespace inagg::client
