#include "inagg/client/transport/udp_transport.hpp"

#include <poll.h>

#include <algorithm>

#include "inagg/client/clock.hpp"
#include "inagg/wire/parse.hpp"

namespace inagg::client {
namespace {

TransportCounters counters_of(const RcRequester& req, const RcResponder& rsp) {
  const RcCounters& s = req.counters();
  const RcCounters& r = rsp.counters();
  TransportCounters c{s.packets_sent, s.retransmitted, s.timeouts, s.naks_received,
                      r.accepted,     r.duplicates,    r.bad_icrc};
  c.messages_received = rsp.messages();
  return c;
}

}  // namespace

// A further QP pair on the transport's socket (add_lane): its own requester, responder and regions;
// the socket, the clock of arrivals, barriers and finish are the transport's.
class UdpRcTransport::Lane final : public Transport {
 public:
  Lane(UdpRcTransport& t, const RcConfig& send, const RcConfig& receive, uint64_t send_bytes, uint64_t receive_bytes)
      : t_(t), send_cfg_(send), recv_cfg_(receive), send_(send_bytes, 0), recv_(receive_bytes, 0) {
    req_ = std::make_unique<RcRequester>(t.sock_, send);
    rsp_ = std::make_unique<RcResponder>(t.sock_, receive, recv_.data(), recv_.size(), kRegionVa, kRegionRkey);
  }
  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override {
    req_->post_write(send_.data() + src_offset, len, t_.remote_va_ + dst_offset, t_.remote_rkey_, imm);
  }
  void poll(int wait_ms) override { t_.poll(wait_ms); }
  bool writes_done() const override { return req_->idle(); }
  uint64_t messages_received() const override { return rsp_->messages(); }
  uint64_t last_arrival_ns() const override { return t_.last_arrival_ns_; }
  const std::string& error() const override {
    if (req_->failed()) return req_->error();
    if (!rsp_->error().empty()) return rsp_->error();
    return t_.error();
  }
  bool barrier(const std::string& what, std::string* error) override { return t_.barrier(what, error); }
  void finish(uint64_t deadline_ns) override { t_.finish(deadline_ns); }
  TransportCounters counters() const override { return counters_of(*req_, *rsp_); }

  UdpRcTransport& t_;
  RcConfig send_cfg_, recv_cfg_;
  std::vector<uint8_t> send_, recv_;
  std::unique_ptr<RcRequester> req_;
  std::unique_ptr<RcResponder> rsp_;
};

UdpRcTransport::UdpRcTransport() = default;
UdpRcTransport::~UdpRcTransport() = default;

Transport& UdpRcTransport::add_lane(const RcConfig& send, const RcConfig& receive, uint64_t send_bytes,
                                    uint64_t receive_bytes) {
  lanes_.push_back(std::make_unique<Lane>(*this, send, receive, send_bytes, receive_bytes));
  return *lanes_.back();
}

bool UdpRcTransport::open(const UdpRcConfig& cfg, std::string* error) {
  cfg_ = cfg;
  if (!sock_.open(cfg.local, cfg.tos, error)) return false;
  sock_.set_batching(true);
  send_.assign(cfg.send_bytes, 0);
  recv_.assign(cfg.receive_bytes, 0);
  req_ = std::make_unique<RcRequester>(sock_, cfg.send);
  rsp_ = std::make_unique<RcResponder>(sock_, cfg.receive, recv_.data(), recv_.size(), kRegionVa, kRegionRkey);
  last_arrival_ns_ = now_ns();
  return true;
}

void UdpRcTransport::post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) {
  req_->post_write(send_.data() + src_offset, len, remote_va_ + dst_offset, remote_rkey_, imm);
}

RankEndpoint UdpRcTransport::local(unsigned rank) const {
  RankEndpoint e;
  e.rank = rank;
  e.gid = cfg_.local;
  if (cfg_.local.version == util::IpVersion::v4) {  // its RoCEv2 GID, as a NIC's is written
    e.gid = util::IpAddr::v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, cfg_.local.bytes[0], cfg_.local.bytes[1],
                              cfg_.local.bytes[2], cfg_.local.bytes[3]});
  }
  e.send_qpn = cfg_.send.local_qpn;
  e.recv_qpn = cfg_.receive.local_qpn;
  e.start_psn = cfg_.send.send_start_psn;
  e.recv_addr = kRegionVa;
  e.recv_rkey = kRegionRkey;
  e.payload = cfg_.send.mtu_payload;
  return e;
}

bool UdpRcTransport::exchange(const RendezvousConfig& cfg, std::vector<RankEndpoint>* all, std::string* error) {
  if (!sock_.receive_ip_headers(error)) {
    *error = "a software rank among RDMA NICs: " + *error;
    return false;
  }
  rendezvous_ = std::make_unique<Rendezvous>();
  return rendezvous_->exchange(cfg, local(cfg.rank), all, error);
}

bool UdpRcTransport::connect(const RankEndpoint& successor, const RankEndpoint& predecessor, std::string* error) {
  if (!rendezvous_) {
    *error = "connect() before exchange()";
    return false;
  }
  RcConfig& s = cfg_.send;
  RcConfig& r = cfg_.receive;
  s.remote_qpn = successor.recv_qpn;
  s.remote_ip = util::gid_address(successor.gid);
  r.remote_qpn = predecessor.send_qpn;
  r.remote_ip = util::gid_address(predecessor.gid);
  r.recv_start_psn = predecessor.start_psn;
  if (s.remote_ip.version != cfg_.local.version || r.remote_ip.version != cfg_.local.version) {
    *error = "rank " + std::to_string(successor.rank) + " or " + std::to_string(predecessor.rank) + " (" +
             util::ip_text(successor.gid) + ", " + util::ip_text(predecessor.gid) +
             ") is not of this rank's IP version (" + util::ip_text(cfg_.local) +
             "): RoCEv2 over IPv4 needs IPv4-mapped GIDs";
    return false;
  }
  remote_va_ = successor.recv_addr;
  remote_rkey_ = successor.recv_rkey;
  req_ = std::make_unique<RcRequester>(sock_, s);
  rsp_ = std::make_unique<RcResponder>(sock_, r, recv_.data(), recv_.size(), kRegionVa, kRegionRkey);
  // From here on the RC halves answer while this rank waits for the others (ACKs a NIC resends
  // for, retransmissions it asks for).
  rendezvous_->set_idle([this](int wait_ms) { poll(wait_ms); });
  std::string why;
  if (!rendezvous_->barrier("connected", &why)) {
    *error = "after connecting the QPs: " + why;
    return false;
  }
  connected_ = true;
  last_arrival_ns_ = now_ns();
  return true;
}

bool UdpRcTransport::meet(const RendezvousConfig& cfg, std::string* error) {
  rendezvous_ = std::make_unique<Rendezvous>();
  rendezvous_->set_idle([this](int wait_ms) { poll(wait_ms); });
  std::vector<RankEndpoint> all;
  if (!rendezvous_->exchange(cfg, local(cfg.rank), &all, error)) return false;
  // The plan this rank was opened with against what its peers say they are.
  const RankEndpoint& succ = all[(cfg.rank + 1) % cfg.workers];
  const RankEndpoint& pred = all[(cfg.rank + cfg.workers - 1) % cfg.workers];
  const auto mismatch = [&](const RankEndpoint& e, const char* as) {
    *error = "rank " + std::to_string(e.rank) + " (" + format_endpoint(e) + ") is not the " + as +
             " this rank's plan expects: are all ranks started with the same --workers and --ip-base?";
    return false;
  };
  if (succ.recv_qpn != cfg_.send.remote_qpn || util::gid_address(succ.gid) != cfg_.send.remote_ip)
    return mismatch(succ, "successor");
  if (pred.send_qpn != cfg_.receive.remote_qpn || pred.start_psn != cfg_.receive.recv_start_psn ||
      util::gid_address(pred.gid) != cfg_.receive.remote_ip)
    return mismatch(pred, "predecessor");
  return true;
}

bool UdpRcTransport::barrier(const std::string& what, std::string* error) {
  if (!rendezvous_) {
    *error = "a barrier before the ranks met (meet() or exchange())";
    return false;
  }
  if (!rendezvous_->barrier(what, error)) return false;
  last_arrival_ns_ = now_ns();  // the wait is not the predecessor's silence
  return true;
}

bool UdpRcTransport::drain(uint64_t t) {
  bool any = false;
  while (sock_.receive(&dg_)) {
    any = true;
    if (!dg_.roce) continue;
    const uint32_t qpn = wire::bth_of(dg_.frame.data(), dg_.layout).dest_qp();
    if (qpn == cfg_.send.local_qpn) {
      req_->on_ack(dg_, t);
    } else if (qpn == cfg_.receive.local_qpn) {
      rsp_->on_data(dg_, t);
    } else {
      for (auto& lane : lanes_) {
        if (qpn == lane->send_cfg_.local_qpn) lane->req_->on_ack(dg_, t);
        if (qpn == lane->recv_cfg_.local_qpn) lane->rsp_->on_data(dg_, t);
      }
    }
  }
  return any;
}

void UdpRcTransport::progress(uint64_t t) {
  req_->progress(t);
  rsp_->progress(t);
  for (auto& lane : lanes_) {
    lane->req_->progress(t);
    lane->rsp_->progress(t);
  }
}

uint64_t UdpRcTransport::next_deadline_ns() const {
  uint64_t d = std::min(req_->next_deadline_ns(), rsp_->next_deadline_ns());
  for (auto& lane : lanes_) d = std::min({d, lane->req_->next_deadline_ns(), lane->rsp_->next_deadline_ns()});
  return d;
}

// One round: the timers and the window, then what arrived (waiting for it, up to wait_ms or the
// next timer, whichever comes first, to the microsecond), then the timers and the window again, so
// that an ACK opens the window and a NAK goes back N within the same call. Every datagram queued
// in the round leaves in one sendmmsg() before the wait and one after.
void UdpRcTransport::poll(int wait_ms) {
  uint64_t t = now_ns();
  progress(t);
  sock_.flush();
  bool any = drain(t);
  if (!any) {
    const uint64_t deadline = std::min(next_deadline_ns(), t + uint64_t(std::max(wait_ms, 0)) * 1'000'000);
    if (deadline > t) {
      const uint64_t wait = deadline - t;
      const timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
      pollfd pfd{sock_.fd(), POLLIN, 0};
      ::ppoll(&pfd, 1, &ts, nullptr);
    }
    t = now_ns();
    any = drain(t);
  }
  if (any) last_arrival_ns_ = t;
  progress(t);
  sock_.flush();
}

std::string UdpRcTransport::description() const {
  if (!connected_) return "";
  return "software RoCE " + util::ip_text(cfg_.local) + ", endpoints exchanged, IP headers from a raw socket";
}

const std::string& UdpRcTransport::error() const {
  if (!error_.empty()) return error_;
  if (req_->failed()) return req_->error();
  if (!rsp_->error().empty()) return rsp_->error();
  return no_error_;
}

void UdpRcTransport::finish(uint64_t deadline_ns) {
  if (connected_) {
    // Among NICs: our writes acknowledged, then the ranks' final barrier as theirs
    // (VerbsTransport::finish), our RC answering in it. Once every rank is in, every write of the
    // job is acknowledged: nobody needs anything more from us.
    while (error().empty() && !writes_done() && now_ns() < deadline_ns) poll(1);
    std::string why;
    if (error().empty() && !rendezvous_->barrier("done", &why)) error_ = "the final barrier: " + why;
    return;
  }
  // Our predecessor may have lost our last ACK and be retransmitting: keep answering until it has
  // been quiet for a few of its ACK timeouts.
  const uint64_t quiet_ns = 4 * cfg_.send.ack_timeout_ns;
  for (uint64_t quiet_since = now_ns(); now_ns() - quiet_since < quiet_ns && now_ns() < deadline_ns;) {
    poll(1);
    quiet_since = std::max(quiet_since, last_arrival_ns_);
  }
}

TransportCounters UdpRcTransport::counters() const { return counters_of(*req_, *rsp_); }

TransportCounters UdpRcTransport::counters_with_lanes() const {
  TransportCounters t = counters();
  for (const auto& lane : lanes_) t += lane->counters();
  return t;
}

}  // namespace inagg::client
