#include "inagg/client/udp_transport.hpp"

#include <poll.h>

#include <algorithm>

#include "inagg/client/clock.hpp"
#include "inagg/wire/parse.hpp"

namespace inagg::client {

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
  req_->post_write(send_.data() + src_offset, len, kRegionVa + dst_offset, kRegionRkey, imm);
}

bool UdpRcTransport::drain(uint64_t t) {
  bool any = false;
  while (sock_.receive(&dg_)) {
    any = true;
    if (!dg_.roce) continue;
    const uint32_t qpn = wire::bth_of(dg_.frame.data(), dg_.layout).dest_qp();
    if (qpn == cfg_.send.local_qpn)
      req_->on_ack(dg_, t);
    else if (qpn == cfg_.receive.local_qpn)
      rsp_->on_data(dg_, t);
  }
  return any;
}

// One round: the timers and the window, then what arrived (waiting for it, up to wait_ms or the
// next timer, whichever comes first, to the microsecond), then the timers and the window again, so
// that an ACK opens the window and a NAK goes back N within the same call. Every datagram queued
// in the round leaves in one sendmmsg() before the wait and one after.
void UdpRcTransport::poll(int wait_ms) {
  uint64_t t = now_ns();
  req_->progress(t);
  rsp_->progress(t);
  sock_.flush();
  bool any = drain(t);
  if (!any) {
    const uint64_t deadline =
        std::min({req_->next_deadline_ns(), rsp_->next_deadline_ns(), t + uint64_t(std::max(wait_ms, 0)) * 1'000'000});
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
  req_->progress(t);
  rsp_->progress(t);
  sock_.flush();
}

const std::string& UdpRcTransport::error() const {
  if (req_->failed()) return req_->error();
  if (!rsp_->error().empty()) return rsp_->error();
  return no_error_;
}

void UdpRcTransport::finish(uint64_t deadline_ns) {
  // Our predecessor may have lost our last ACK and be retransmitting: keep answering until it has
  // been quiet for a few of its ACK timeouts.
  const uint64_t quiet_ns = 4 * cfg_.send.ack_timeout_ns;
  for (uint64_t quiet_since = now_ns(); now_ns() - quiet_since < quiet_ns && now_ns() < deadline_ns;) {
    poll(1);
    quiet_since = std::max(quiet_since, last_arrival_ns_);
  }
}

TransportCounters UdpRcTransport::counters() const {
  const RcCounters& s = req_->counters();
  const RcCounters& r = rsp_->counters();
  TransportCounters c{s.packets_sent, s.retransmitted, s.timeouts, s.naks_received,
                      r.accepted,     r.duplicates,    r.bad_icrc};
  c.messages_received = rsp_->messages();
  return c;
}

}  // namespace inagg::client
