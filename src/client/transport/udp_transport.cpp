#include "inagg/client/transport/udp_transport.hpp"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "inagg/client/clock.hpp"
#include "inagg/wire/parse.hpp"

namespace inagg::client {
namespace {

TransportCounters counters_of(const RcRequester& req, const RcResponder& rsp) {
  const RcCounters& s = req.counters();
  const RcCounters& r = rsp.counters();
  TransportCounters c{s.packets_sent, s.retransmitted, s.timeouts, s.naks_received,
                      r.accepted,     r.duplicates,    r.bad_icrc};
  c.rx_refused_source = s.refused_source + r.refused_source;
  c.rx_refused_rkey = r.refused_key;
  c.messages_received = rsp.messages();
  return c;
}

// Lane `lane`'s part of a rank's registration (UdpRcTransport::kLaneVaStride); -1: the main region.
uint64_t region_va(const RegionKey& k, int lane) { return k.va + uint64_t(lane + 1) * UdpRcTransport::kLaneVaStride; }

}  // namespace

std::optional<RegionKey> random_region_key(std::string* error) {
  uint64_t r[2];
  for (size_t got = 0; got < sizeof r;) {
    const ssize_t n = ::getrandom(reinterpret_cast<uint8_t*>(r) + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error =
          std::string("cannot draw a random rkey for the receive region (getrandom: ") + std::strerror(errno) + ")";
      return std::nullopt;
    }
    got += static_cast<size_t>(n);
  }
  RegionKey k;
  // Base VAs from 0x100000000000 to 0x4ffffffff000: the lanes' parts (4 TiB above) and any region
  // stay below 2^47, where a user-space address of x86-64 or arm64 lies.
  k.va = 0x100000000000ull + ((r[0] & ((1ull << 34) - 1)) << 12);
  k.rkey = static_cast<uint32_t>(r[1]);
  if (k.rkey == 0) k.rkey = static_cast<uint32_t>(r[1] >> 32) | 1;
  return k;
}

// A further QP pair on the transport's socket (add_lane): its own requester, responder and regions;
// the socket, the clock of arrivals, barriers and finish are the transport's.
class UdpRcTransport::Lane final : public Transport {
 public:
  Lane(UdpRcTransport& t, int index, const RcConfig& send, const RcConfig& receive, uint64_t send_bytes,
       uint64_t receive_bytes)
      : t_(t), index_(index), send_cfg_(send), recv_cfg_(receive), send_(send_bytes, 0), recv_(receive_bytes, 0) {
    req_ = std::make_unique<RcRequester>(t.sock_, send);
    rsp_ = std::make_unique<RcResponder>(t.sock_, receive, recv_.data(), recv_.size(), region_va(t.key_, index),
                                         t.key_.rkey);
  }
  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  bool open_receive(std::string* error) override { return t_.open_receive(error); }
  void post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) override {
    req_->post_write(send_.data() + src_offset, len, region_va(t_.remote_, index_) + dst_offset, t_.remote_.rkey, imm);
  }
  void poll(int wait_ms) override { t_.poll(wait_ms); }
  bool writes_done() const override { return req_->idle(); }
  uint64_t messages_received() const override { return rsp_->messages(); }
  uint64_t last_arrival_ns() const override { return t_.last_arrival_ns_; }
  const std::string& error() const override {
    if (req_->failed()) return req_->error();
    return t_.error();
  }
  bool barrier(const std::string& what, std::string* error) override { return t_.barrier(what, error); }
  bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
              std::string* error) override {
    return t_.gather(what, mine, all, error);
  }
  void finish(uint64_t deadline_ns) override { t_.finish(deadline_ns); }
  TransportCounters counters() const override { return counters_of(*req_, *rsp_); }

  UdpRcTransport& t_;
  int index_;
  RcConfig send_cfg_, recv_cfg_;
  std::vector<uint8_t> send_, recv_;
  std::unique_ptr<RcRequester> req_;
  std::unique_ptr<RcResponder> rsp_;
};

UdpRcTransport::UdpRcTransport() = default;
UdpRcTransport::~UdpRcTransport() = default;

Transport& UdpRcTransport::add_lane(const RcConfig& send, const RcConfig& receive, uint64_t send_bytes,
                                    uint64_t receive_bytes) {
  lanes_.push_back(
      std::make_unique<Lane>(*this, static_cast<int>(lanes_.size()), send, receive, send_bytes, receive_bytes));
  return *lanes_.back();
}

bool UdpRcTransport::open(const UdpRcConfig& cfg, std::string* error) {
  cfg_ = cfg;
  if (cfg.receive_key) {
    key_ = *cfg.receive_key;
  } else if (const std::optional<RegionKey> k = random_region_key(error)) {
    key_ = *k;
  } else {
    return false;
  }
  if (!sock_.open(cfg.local, cfg.tos, error)) return false;
  sock_.set_batching(true);
  send_.assign(cfg.send_bytes, 0);
  recv_.assign(cfg.receive_bytes, 0);
  req_ = std::make_unique<RcRequester>(sock_, cfg.send);
  rsp_ = std::make_unique<RcResponder>(sock_, cfg.receive, recv_.data(), recv_.size(), region_va(key_, -1), key_.rkey);
  for (const auto& [send, receive] : cfg.channels) {
    if (!sock_.add_source_port(send.src_port, error) || !sock_.add_source_port(receive.src_port, error)) {
      *error = "a channel's UDP source port: " + *error;
      return false;
    }
    channels_.push_back(
        {std::make_unique<RcRequester>(sock_, send),
         std::make_unique<RcResponder>(sock_, receive, recv_.data(), recv_.size(), region_va(key_, -1), key_.rkey)});
  }
  last_arrival_ns_ = now_ns();
  return true;
}

void UdpRcTransport::post_write(uint64_t src_offset, uint32_t len, uint64_t dst_offset, uint32_t imm) {
  // Message m of the receive region on channel m mod C: every rank posts the same offsets.
  const uint64_t c = channels_.empty() || len == 0 ? 0 : dst_offset / len % (channels_.size() + 1);
  RcRequester& req = c == 0 ? *req_ : *channels_[c - 1].req;
  req.post_write(send_.data() + src_offset, len, region_va(remote_, -1) + dst_offset, remote_.rkey, imm);
}

bool UdpRcTransport::writes_done() const {
  return req_->idle() &&
         std::all_of(channels_.begin(), channels_.end(), [](const Channel& c) { return c.req->idle(); });
}

uint64_t UdpRcTransport::messages_received() const {
  uint64_t n = rsp_->messages();
  for (const Channel& c : channels_) n += c.rsp->messages();
  return n;
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
  e.recv_addr = key_.va;
  e.recv_rkey = key_.rkey;
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
  if (!channels_.empty()) {
    *error = "a job of channels among RDMA NICs (the exchange) is not built yet: one channel there";
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
  remote_ = {successor.recv_addr, successor.recv_rkey};
  req_ = std::make_unique<RcRequester>(sock_, s);
  rsp_ = std::make_unique<RcResponder>(sock_, r, recv_.data(), recv_.size(), region_va(key_, -1), key_.rkey);
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
  remote_ = {succ.recv_addr, succ.recv_rkey};
  return true;
}

bool UdpRcTransport::open_receive(std::string* error) {
  if (peers_ && !connected_ && !connect(peers_->first, peers_->second, error)) return false;
  receiving_ = true;
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

bool UdpRcTransport::gather(const std::string& what, const std::string& mine, std::vector<std::string>* all,
                            std::string* error) {
  if (!rendezvous_) {
    *error = "a gather before the ranks met (meet() or exchange())";
    return false;
  }
  if (!rendezvous_->gather(what, mine, all, error)) return false;
  last_arrival_ns_ = now_ns();  // the wait is not the predecessor's silence
  return true;
}

bool UdpRcTransport::drain(uint64_t t, bool* heard) {
  bool any = false;
  while (sock_.receive(&dg_)) {
    any = true;
    if (!dg_.roce) continue;
    const uint32_t qpn = wire::bth_of(dg_.frame.data(), dg_.layout).dest_qp();
    const bool ack = dg_.layout.aeth != 0;
    RcRequester* req = qpn == cfg_.send.local_qpn ? req_.get() : nullptr;
    RcResponder* rsp = qpn == cfg_.receive.local_qpn ? rsp_.get() : nullptr;
    for (size_t i = 0; i < channels_.size() && !req && !rsp; ++i) {
      if (qpn == cfg_.channels[i].first.local_qpn) req = channels_[i].req.get();
      if (qpn == cfg_.channels[i].second.local_qpn) rsp = channels_[i].rsp.get();
    }
    for (size_t i = 0; i < lanes_.size() && !req && !rsp; ++i) {
      if (qpn == lanes_[i]->send_cfg_.local_qpn) req = lanes_[i]->req_.get();
      if (qpn == lanes_[i]->recv_cfg_.local_qpn) rsp = lanes_[i]->rsp_.get();
    }
    if (req && ack) {
      *heard |= req->on_ack(dg_, t);
    } else if (rsp && !receiving_) {
      ++refused_early_;
    } else if (rsp) {
      *heard |= rsp->on_data(dg_, t);
    } else {
      ++refused_qpn_;
    }
  }
  return any;
}

void UdpRcTransport::progress(uint64_t t) {
  req_->progress(t);
  rsp_->progress(t);
  for (Channel& c : channels_) {
    c.req->progress(t);
    c.rsp->progress(t);
  }
  for (auto& lane : lanes_) {
    lane->req_->progress(t);
    lane->rsp_->progress(t);
  }
}

uint64_t UdpRcTransport::next_deadline_ns() const {
  uint64_t d = std::min(req_->next_deadline_ns(), rsp_->next_deadline_ns());
  for (const Channel& c : channels_) d = std::min({d, c.req->next_deadline_ns(), c.rsp->next_deadline_ns()});
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
  // Only what a peer sent is an arrival: a forger's refused packets must not keep a rank that
  // waits for quiet (finish) or watches its predecessor's silence (RingExchange) waiting.
  bool heard = false;
  bool any = drain(t, &heard);
  if (!any) {
    const uint64_t deadline = std::min(next_deadline_ns(), t + uint64_t(std::max(wait_ms, 0)) * 1'000'000);
    if (deadline > t) {
      const uint64_t wait = deadline - t;
      const timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
      pollfd pfd{sock_.fd(), POLLIN, 0};
      ::ppoll(&pfd, 1, &ts, nullptr);
    }
    t = now_ns();
    drain(t, &heard);
  }
  if (heard) last_arrival_ns_ = t;
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
  for (const Channel& c : channels_)  // a channel that fails fails the rank's collective
    if (c.req->failed()) return c.req->error();
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

TransportCounters UdpRcTransport::counters() const {
  TransportCounters c = counters_of(*req_, *rsp_);
  for (const Channel& ch : channels_) c += counters_of(*ch.req, *ch.rsp);
  c.rx_refused_qpn = refused_qpn_;  // the socket's, counted once
  c.rx_refused_early = refused_early_;
  return c;
}

TransportCounters UdpRcTransport::counters_with_lanes() const {
  TransportCounters t = counters();
  for (const auto& lane : lanes_) t += lane->counters();
  return t;
}

}  // namespace inagg::client
