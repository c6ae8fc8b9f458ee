#include "inagg/client/transport/rc.hpp"

#include <algorithm>
#include <cstring>

#include "inagg/wire/icrc.hpp"

namespace inagg::client {
namespace {

int64_t sext24(uint32_t d) {
  d &= wire::kPsnMask;
  return d & 0x800000 ? static_cast<int64_t>(d) - 0x1000000 : static_cast<int64_t>(d);
}

uint32_t psn_at(uint32_t start, uint64_t seq) { return static_cast<uint32_t>((start + seq) & wire::kPsnMask); }

// How soon a requester paused by a full local queue looks again: 64 KiB drain in 0.5 ms at 1 Gbit/s.
constexpr uint64_t kQueueRecheckNs = 100'000;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Requester.

RcRequester::RcRequester(RoceSocket& sock, const RcConfig& cfg) : sock_(sock), cfg_(cfg) {
  buf_.resize(cfg.mtu_payload + 256);
  rto_ns_ = cfg.ack_timeout_ns;  // RFC 6298 (2.1): before the first sample
  congestion_control_ = cfg.cwnd_min_bytes > 0;
  cwnd_min_ = std::max<double>(1, static_cast<double>((cfg.cwnd_min_bytes + cfg.mtu_payload - 1) / cfg.mtu_payload));
}

void RcRequester::post_write(const uint8_t* src, uint32_t len, uint64_t va, uint32_t rkey,
                             std::optional<uint32_t> imm) {
  const uint32_t packets = std::max<uint32_t>(1, (len + cfg_.mtu_payload - 1) / cfg_.mtu_payload);
  messages_.push_back({src, len, va, rkey, imm, posted_seq_, packets});
  posted_seq_ += packets;
  // The congestion window starts open (as large as the message window, the most that can be in
  // flight) and never grows past it.
  const double most = static_cast<double>(cfg_.window) * packets;
  if (most > cwnd_max_) {
    if (cwnd_ >= cwnd_max_) cwnd_ = most;
    if (ssthresh_ >= cwnd_max_) ssthresh_ = most;
    cwnd_max_ = most;
  }
}

uint64_t RcRequester::seq_of(uint32_t psn, uint64_t reference) const {
  const int64_t s = static_cast<int64_t>(reference) + sext24(psn - psn_at(cfg_.send_start_psn, reference));
  return s < 0 ? 0 : static_cast<uint64_t>(s);
}

void RcRequester::send_packet(uint64_t seq, uint64_t now_ns) {
  const Message* m = nullptr;
  for (const Message& x : messages_)
    if (seq >= x.first_seq && seq < x.first_seq + x.packets) {
      m = &x;
      break;
    }
  if (m == nullptr) return;
  const uint32_t k = static_cast<uint32_t>(seq - m->first_seq);
  const uint32_t off = k * cfg_.mtu_payload;
  const uint32_t len = std::min(cfg_.mtu_payload, m->len - off);
  using namespace wire::op;
  const bool first = k == 0, last = k + 1 == m->packets;
  uint8_t opcode = first && last ? (m->imm ? kWriteOnlyImm : kWriteOnly)
                   : first       ? kWriteFirst
                   : last        ? (m->imm ? kWriteLastImm : kWriteLast)
                                 : kWriteMiddle;
  wire::RoceFrameSpec s;
  sock_.fill_spec(s, cfg_.remote_ip, cfg_.src_port);
  s.opcode = kRc | opcode;
  s.dest_qp = cfg_.remote_qpn;
  s.psn = psn_at(cfg_.send_start_psn, seq);
  s.ack_req = last;
  s.reth_va = m->va;
  s.reth_rkey = m->rkey;
  s.reth_dma_len = m->len;
  s.immdt = m->imm.value_or(0);
  const size_t n = wire::build_roce_frame(buf_, s, {m->src + off, len});
  if (n == 0) return;
  sock_.send_frame({buf_.data(), n});
  ++c_.packets_sent;
  if (seq < sent_max_) {
    ++c_.retransmitted;
  } else if (!timing_) {  // Karn: only a first transmission is timed
    timing_ = true;
    timed_seq_ = seq;
    timed_at_ns_ = now_ns;
  }
}

uint64_t RcRequester::send_limit() const {
  // Window: messages [front, front + window) may be in flight, and of those, cwnd packets.
  const uint64_t limit = messages_.size() > cfg_.window ? messages_[cfg_.window].first_seq : posted_seq_;
  if (!congestion_control_) return limit;
  return std::min(limit, una_ + std::max<uint64_t>(1, static_cast<uint64_t>(cwnd_)));
}

// RFC 5681 (3.1), per loss event rather than per NAK: the appliance NAKs a loss before it, the
// receiver one after it, and either may repeat; every NAK until what was in flight at the first
// one is acknowledged belongs to the same event (NewReno's recovery point, RFC 6582).
void RcRequester::cut_window(bool timeout) {
  if (!congestion_control_) return;
  if (!timeout && una_ < recover_) return;
  const double flight = static_cast<double>(sent_max_ - una_);
  ssthresh_ = std::max(cwnd_min_, std::min(cwnd_, flight) / 2);
  cwnd_ = timeout ? cwnd_min_ : ssthresh_;
  recover_ = sent_max_;
  ++c_.window_cuts;
}

void RcRequester::open_window(uint64_t acked) {
  if (!congestion_control_ || una_ < recover_) return;  // no growth while the lost data is resent
  const double a = static_cast<double>(acked);
  if (cwnd_ < ssthresh_)
    cwnd_ = std::min(ssthresh_, cwnd_ + a);  // slow start: one per packet acknowledged
  else
    cwnd_ += a / cwnd_;  // congestion avoidance: one per window
  cwnd_ = std::min(cwnd_, cwnd_max_);
}

void RcRequester::go_back(uint64_t seq) {
  next_ = seq;
  if (timing_ && timed_seq_ >= seq) timing_ = false;  // Karn: it will be sent again, its ACK is ambiguous
}

void RcRequester::take_rtt_sample(uint64_t r) {
  ++c_.rtt_samples;
  if (srtt_ns_ == 0) {  // (2.2)
    srtt_ns_ = std::max<uint64_t>(r, 1);
    rttvar_ns_ = r / 2;
  } else {  // (2.3): RTTVAR first, with the old SRTT
    const uint64_t diff = srtt_ns_ > r ? srtt_ns_ - r : r - srtt_ns_;
    rttvar_ns_ = (3 * rttvar_ns_ + diff) / 4;
    srtt_ns_ = (7 * srtt_ns_ + r) / 8;
  }
  // (2.3), (2.4), (2.5) with a datacenter floor instead of 1 s, the ACK timeout as the ceiling.
  rto_ns_ = std::clamp(srtt_ns_ + std::max<uint64_t>(4 * rttvar_ns_, 1000),
                       std::min(cfg_.rto_min_ns, cfg_.ack_timeout_ns), cfg_.ack_timeout_ns);
}

uint64_t RcRequester::next_deadline_ns() const {
  if (failed()) return UINT64_MAX;
  if (next_ < send_limit()) return paused_until_ns_;
  if (una_ < sent_max_) return last_progress_ns_ + rto_ns_;
  return UINT64_MAX;
}

void RcRequester::progress(uint64_t now_ns) {
  if (failed()) return;
  if (una_ < sent_max_ && now_ns - last_progress_ns_ >= rto_ns_) {
    ++c_.timeouts;
    // The failure budget counts timeouts at the full ACK timeout, as a NIC's retry count does:
    // a shorter RTO doubles up to it first (RFC 6298 (5.5)).
    if (rto_ns_ >= cfg_.ack_timeout_ns && ++retries_ > cfg_.retry_count) {
      error_ = "retry count (" + std::to_string(cfg_.retry_count) + ") exceeded: the peer did not acknowledge PSN " +
               std::to_string(psn_at(cfg_.send_start_psn, una_));
      return;
    }
    rto_ns_ = std::min(2 * rto_ns_, cfg_.ack_timeout_ns);
    cut_window(/*timeout=*/true);
    go_back(una_);
    last_progress_ns_ = now_ns;
  }
  if (messages_.empty()) return;
  const uint64_t limit = send_limit();
  // Bounded burst per call so the caller keeps receiving ACKs.
  for (int burst = 0; burst < 64 && next_ < limit; ++burst) {
    if (cfg_.max_queued_bytes && burst % 16 == 0 && sock_.queued_bytes() >= cfg_.max_queued_bytes) {
      ++c_.queue_full;
      paused_until_ns_ = now_ns + kQueueRecheckNs;
      break;
    }
    paused_until_ns_ = 0;
    if (next_ == una_ && una_ == sent_max_) last_progress_ns_ = now_ns;  // the timer starts now
    send_packet(next_, now_ns);
    ++next_;
    sent_max_ = std::max(sent_max_, next_);
  }
}

bool RcRequester::on_ack(const Datagram& d, uint64_t now_ns) {
  if (!d.roce || d.layout.aeth == 0) return false;
  if (d.src != cfg_.remote_ip) {  // only the successor acknowledges our writes
    ++c_.refused_source;
    return false;
  }
  if (!wire::icrc_verify(d.frame.data(), d.layout)) {
    ++c_.bad_icrc;
    return false;
  }
  const wire::AethView aeth = wire::aeth_of(d.frame.data(), d.layout);
  const uint64_t seq = seq_of(wire::bth_of(d.frame.data(), d.layout).psn(), una_);
  uint64_t new_una = una_;
  if (aeth.is_ack()) {
    if (seq < sent_max_) new_una = std::max(una_, seq + 1);
  } else if (aeth.is_nak() && aeth.nak_code() == 0) {
    ++c_.naks_received;
    if (seq >= una_ && seq <= sent_max_) {  // everything below is acknowledged; resend from there
      new_una = seq;
      // The same NAK again before what we resent can have arrived (the appliance repeats its NAKs
      // on a timer): going back again would only send duplicates.
      const uint64_t rtt = srtt_ns_ ? srtt_ns_ : rto_ns_;
      if (seq == nak_seq_ && now_ns - nak_at_ns_ < rtt && next_ > seq) {
        ++c_.naks_ignored;
      } else {
        cut_window(/*timeout=*/false);
        go_back(seq);  // at once: the transport calls progress() right after its receive burst
        nak_seq_ = seq;
        nak_at_ns_ = now_ns;
      }
      last_progress_ns_ = now_ns;
    }
  } else if (aeth.is_nak()) {
    error_ = "the peer answered NAK code " + std::to_string(aeth.nak_code()) + " (remote access or operational error)";
    return true;
  }
  if (new_una > una_) {
    if (timing_ && new_una > timed_seq_) {
      timing_ = false;
      take_rtt_sample(now_ns - timed_at_ns_);
    }  // (Karn: a backed-off RTO stays until the next sample, from a packet sent once)
    const uint64_t acked = new_una - una_;
    una_ = new_una;
    open_window(acked);
    if (next_ < una_) next_ = una_;
    retries_ = 0;
    last_progress_ns_ = now_ns;
    while (!messages_.empty() && messages_.front().first_seq + messages_.front().packets <= una_) {
      messages_.pop_front();
      ++c_.messages_completed;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Responder.

RcResponder::RcResponder(RoceSocket& sock, const RcConfig& cfg, uint8_t* mr, size_t mr_len, uint64_t mr_va,
                         uint32_t rkey)
    : sock_(sock), cfg_(cfg), mr_(mr), mr_len_(mr_len), mr_va_(mr_va), rkey_(rkey) {
  buf_.resize(256);
}

void RcResponder::send_ack(uint64_t seq_acked, uint8_t syndrome) {
  wire::RoceFrameSpec s;
  sock_.fill_spec(s, cfg_.remote_ip, cfg_.src_port);
  s.opcode = wire::op::kRc | wire::op::kAcknowledge;
  s.dest_qp = cfg_.remote_qpn;
  s.psn = psn_at(cfg_.recv_start_psn, seq_acked);
  s.aeth_syndrome = syndrome;
  s.aeth_msn = msn_;
  const size_t n = wire::build_roce_frame(buf_, s, {});
  if (n) sock_.send_frame({buf_.data(), n});
}

bool RcResponder::in_region(const wire::RethView& reth) const {
  return reth.rkey() == rkey_ && reth.va() >= mr_va_ && reth.va() - mr_va_ <= mr_len_ &&
         reth.dma_len() <= mr_len_ - (reth.va() - mr_va_);
}

bool RcResponder::on_data(const Datagram& d, uint64_t now_ns) {
  if (!d.roce) return false;
  const uint8_t* f = d.frame.data();
  const wire::Layout& l = d.layout;
  // The checks that need no state come first, so that a refused packet changes nothing: no ACK,
  // no NAK, no PSN, nothing in the region.
  if (d.src != cfg_.remote_ip) {
    ++c_.refused_source;
    return false;
  }
  if (!wire::icrc_verify(f, l)) {
    ++c_.bad_icrc;  // as a NIC: dropped; the sender recovers it as a loss
    return false;
  }
  if (!wire::is_rdma_write(l.opcode)) return false;
  const wire::OpPosition pos = l.info->position;
  const bool starts = pos == wire::OpPosition::first || pos == wire::OpPosition::only;
  if (starts && !in_region(wire::reth_of(f, l))) {
    ++c_.refused_key;
    return false;
  }
  last_rx_ns_ = now_ns;
  const wire::BthView bth = wire::bth_of(f, l);
  const int64_t s = static_cast<int64_t>(expected_) + sext24(bth.psn() - psn_at(cfg_.recv_start_psn, expected_));
  if (s < static_cast<int64_t>(expected_)) {
    ++c_.duplicates;
    if (expected_ > 0) {
      send_ack(expected_ - 1, wire::aeth::kAckUnlimitedCredits);
      ++c_.acks_sent;
    }
    return true;
  }
  if (s > static_cast<int64_t>(expected_)) {
    ++c_.out_of_order;
    if (!nak_sent_) {
      send_ack(expected_, wire::aeth::kNakPsnSequenceError);
      ++c_.naks_sent;
      nak_sent_ = true;
    }
    return true;
  }
  if (starts) {
    const wire::RethView reth = wire::reth_of(f, l);
    write_off_ = reth.va() - mr_va_;
    write_left_ = reth.dma_len();
  }
  // A packet past its message's end (or, MIDDLE or LAST, with no message begun): a forger's, or
  // a sender that lost count; either way nothing of it is written, and the real sender's packet
  // of this PSN is still taken when it comes.
  if (l.payload_len > write_left_) {
    if (starts) write_left_ = 0;
    ++c_.refused_key;
    return false;
  }
  std::memcpy(mr_ + write_off_, f + l.payload, l.payload_len);
  write_off_ += l.payload_len;
  write_left_ -= l.payload_len;
  ++expected_;
  ++c_.accepted;
  nak_sent_ = false;
  if (pos == wire::OpPosition::last || pos == wire::OpPosition::only) {
    ++msn_;
    ++c_.messages_completed;
    if (l.immdt) imms_.push_back(wire::immdt_of(f, l));
  }
  if (bth.ack_req() || ++unacked_ >= cfg_.ack_every) {
    send_ack(expected_ - 1, wire::aeth::kAckUnlimitedCredits);
    ++c_.acks_sent;
    unacked_ = 0;
  }
  return true;
}

uint64_t RcResponder::next_deadline_ns() const { return unacked_ > 0 ? last_rx_ns_ + cfg_.ack_delay_ns : UINT64_MAX; }

void RcResponder::progress(uint64_t now_ns) {
  if (unacked_ > 0 && now_ns - last_rx_ns_ > cfg_.ack_delay_ns) {
    send_ack(expected_ - 1, wire::aeth::kAckUnlimitedCredits);
    ++c_.acks_sent;
    unacked_ = 0;
  }
}

}  // namespace inagg::client
