// A software RoCEv2 RC endpoint, the two halves of a queue pair as an RDMA NIC implements them
// (IBTA Vol 1 ch. 9): the requester sends RDMA WRITEs with PSNs, keeps at most `window` messages
// outstanding, goes back N on a NAK (PSN sequence error) or when its retransmission timer
// expires, and fails after `retry_count` timeouts in a row at the full ACK timeout; the responder
// accepts packets in PSN order into its memory region, ACKs (coalesced, at once when AckReq is
// set), NAKs once per sequence error and re-ACKs duplicates. Single-threaded: the caller feeds
// received datagrams and calls progress() by next_deadline_ns() at the latest.
//
// Both halves take packets only from their peer's address (RcConfig::remote_ip), and the responder
// writes only what carries its region's rkey, inside the region: anything else is dropped and
// counted (refused_source, refused_key), never answered, so a forged packet can neither land in
// the region nor make either end fail or NAK its real peer (an RDMA NIC checks the rkey and the
// bounds too, but answers a remote access error, which breaks the connection of the peer whose
// address the forger used). What no check here can tell: a MIDDLE or LAST packet at exactly the
// expected PSN inside a message, from the peer's address; such a packet carries no rkey.
//
// Unlike a NIC's fixed ACK timeout, the requester's retransmission timeout follows the measured
// round trip (RFC 6298): SRTT and RTTVAR from one timed packet at a time, never a retransmitted
// one (Karn), RTO = SRTT + 4 RTTVAR within [rto_min_ns, ack_timeout_ns], doubled per timeout. So
// a lost tail costs a few round trips, not the ACK timeout the failure budget is counted in.
//
// Go-back-N resends everything in flight after a loss, so the requester also keeps a congestion
// window (packets sent and not acknowledged) that responds to loss as TCP Reno does (RFC 5681):
// a NAK halves it, a timeout cuts it to its floor, at most once per window of data (a NAK from
// the appliance and the receiver's NAK for the same loss are one event), and it grows back by one
// packet per packet acknowledged below ssthresh, by one per window above. The wire is unchanged:
// a requester may always send less than its window allows.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/transport/roce_socket.hpp"

namespace inagg::client {

struct RcConfig {
  uint32_t local_qpn = 0, remote_qpn = 0;
  util::IpAddr remote_ip;
  uint32_t send_start_psn = 0;  // our first packet's PSN
  uint32_t recv_start_psn = 0;  // the peer's first packet's PSN
  // The UDP source port of this QP's packets, data and ACKs (a RoCEv2 NIC takes it from the QP's
  // flow label): 4791, or one the socket was given (RoceSocket::add_source_port), so that RSS on
  // the UDP source port spreads a rank's channels over an appliance's lcores.
  uint16_t src_port = wire::kRoceV2Port;
  uint32_t mtu_payload = 1024;          // path MTU payload
  unsigned window = 2;                  // RDMA WRITE messages in flight
  uint64_t ack_timeout_ns = 4'000'000;  // the RTO's first value and its ceiling
  uint64_t rto_min_ns = 2'000'000;      // the RTO's floor; >= ack_timeout_ns: fixed at ack_timeout_ns
  unsigned retry_count = 7;             // timeouts in a row at ack_timeout_ns before failing
  // The requester stops sending while this many bytes of its socket wait in the local qdisc
  // (RoceSocket::queued_bytes), as TCP Small Queues does: what waits there has to be sent again
  // after a go-back-N anyway. 0: no limit.
  size_t max_queued_bytes = 0;
  // The congestion window's floor, bytes (rounded up to whole packets, at least one); 0: no
  // congestion window, the message window alone limits what is in flight.
  size_t cwnd_min_bytes = 0;
  unsigned ack_every = 16;         // responder: ACK at least every N in-order packets
  uint64_t ack_delay_ns = 20'000;  // responder: flush a pending ACK after this
};

#define INAGG_RC_COUNTERS(X)                                                           \
  X(packets_sent, "data packets sent (first transmissions and retransmissions)")       \
  X(retransmitted, "data packets sent again")                                          \
  X(timeouts, "ACK timer expirations")                                                 \
  X(naks_received, "NAKs (PSN sequence error) received")                               \
  X(naks_ignored, "NAKs again for the PSN just gone back to, within an RTT")           \
  X(rtt_samples, "round-trip samples taken (RFC 6298, Karn's rule)")                   \
  X(queue_full, "sending paused: max_queued_bytes waited in the local qdisc")          \
  X(window_cuts, "congestion window cut (a NAK halved it or a timeout floored it)")    \
  X(acks_sent, "ACKs sent")                                                            \
  X(naks_sent, "NAKs sent")                                                            \
  X(accepted, "data packets accepted in order")                                        \
  X(duplicates, "data packets below the expected PSN (re-ACKed)")                      \
  X(out_of_order, "data packets above the expected PSN (dropped, NAKed once)")         \
  X(bad_icrc, "packets with a bad ICRC, dropped")                                      \
  X(refused_source, "packets from an address other than the peer's, dropped")          \
  X(refused_key, "WRITEs with another rkey, outside the region or a message, dropped") \
  X(messages_completed, "messages completed")

struct RcCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_RC_COUNTERS(X)
#undef X
};

class RcRequester {
 public:
  RcRequester(RoceSocket& sock, const RcConfig& cfg);

  // Queues an RDMA WRITE of `len` bytes from `src` (valid until the write completes) to the peer's
  // (va, rkey); `imm` makes the last packet WRITE_LAST/ONLY_WITH_IMMEDIATE.
  void post_write(const uint8_t* src, uint32_t len, uint64_t va, uint32_t rkey, std::optional<uint32_t> imm);
  // An ACK/NAK to our QP. False when it was not the peer's (refused, a bad ICRC, not an ACK).
  bool on_ack(const Datagram& d, uint64_t now_ns);
  void progress(uint64_t now_ns);  // send what the window allows; the ACK timer
  // When progress() must run next: now when it has packets the window allows but left unsent,
  // the retransmission timer's expiry while packets are unacknowledged, otherwise UINT64_MAX.
  uint64_t next_deadline_ns() const;
  uint64_t rto_ns() const { return rto_ns_; }    // the retransmission timeout now in effect
  uint64_t srtt_ns() const { return srtt_ns_; }  // 0 until the first sample
  // The congestion window, packets (the message window's packets when cwnd_min_bytes is 0), and
  // the slow-start threshold.
  double cwnd() const { return cwnd_; }
  double ssthresh() const { return ssthresh_; }
  bool idle() const { return messages_.empty(); }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  const RcCounters& counters() const { return c_; }

 private:
  struct Message {
    const uint8_t* src;
    uint32_t len;
    uint64_t va;
    uint32_t rkey;
    std::optional<uint32_t> imm;
    uint64_t first_seq;
    uint32_t packets;
  };
  void send_packet(uint64_t seq, uint64_t now_ns);
  uint64_t seq_of(uint32_t psn, uint64_t reference) const;
  uint64_t send_limit() const;            // one past the last packet the window allows
  void go_back(uint64_t seq);             // resend from seq (a NAK or a timeout)
  void take_rtt_sample(uint64_t rtt_ns);  // RFC 6298 (2.2), (2.3)
  void cut_window(bool timeout);          // a loss: at most once per window of data
  void open_window(uint64_t acked);       // packets newly acknowledged

  RoceSocket& sock_;
  RcConfig cfg_;
  std::deque<Message> messages_;  // posted, not yet acknowledged
  uint64_t posted_seq_ = 0;       // one past the last packet of the last posted message
  uint64_t next_ = 0, una_ = 0, sent_max_ = 0;
  uint64_t last_progress_ns_ = 0;  // the retransmission timer runs from here
  unsigned retries_ = 0;
  // RFC 6298 state. One packet at a time is timed (timed_seq_, sent at timed_at_ns_), never a
  // retransmitted one.
  uint64_t rto_ns_ = 0, srtt_ns_ = 0, rttvar_ns_ = 0;
  bool timing_ = false;
  uint64_t timed_seq_ = 0, timed_at_ns_ = 0;
  // The last NAK acted on: the appliance NAKs again on its own timer, and a NAK for the PSN we
  // just went back to, arriving within an RTT, asks for what is already on its way.
  uint64_t nak_seq_ = UINT64_MAX, nak_at_ns_ = 0;
  uint64_t paused_until_ns_ = 0;  // the local queue was full: look again then
  // Congestion window (packets) and slow-start threshold; cwnd_max_ is the message window's
  // packets, which it never exceeds. A cut ends the episode when una_ passes recover_.
  double cwnd_ = 0, ssthresh_ = 0, cwnd_min_ = 0, cwnd_max_ = 0;
  uint64_t recover_ = 0;
  bool congestion_control_ = false;
  std::string error_;
  RcCounters c_;
  std::vector<uint8_t> buf_;
};

class RcResponder {
 public:
  // Writes land in [mr, mr + mr_len), addressed as [mr_va, mr_va + mr_len) with `rkey`, from
  // cfg.remote_ip only.
  RcResponder(RoceSocket& sock, const RcConfig& cfg, uint8_t* mr, size_t mr_len, uint64_t mr_va, uint32_t rkey);

  // An RDMA WRITE to our QP. False when it was not the peer's (refused, a bad ICRC, not a WRITE):
  // such a packet says nothing of whether the peer is still there.
  bool on_data(const Datagram& d, uint64_t now_ns);
  void progress(uint64_t now_ns);     // flushes a coalesced ACK
  uint64_t next_deadline_ns() const;  // when a coalesced ACK is due; UINT64_MAX: none
  uint64_t messages() const { return msn_; }
  const std::vector<uint32_t>& immediates() const { return imms_; }
  const RcCounters& counters() const { return c_; }

 private:
  void send_ack(uint64_t seq_acked, uint8_t syndrome);
  bool in_region(const wire::RethView& reth) const;  // its rkey, and all of its bytes inside the region

  RoceSocket& sock_;
  RcConfig cfg_;
  uint8_t* mr_;
  size_t mr_len_;
  uint64_t mr_va_;
  uint32_t rkey_;
  uint64_t expected_ = 0;
  bool nak_sent_ = false;
  unsigned unacked_ = 0;
  uint64_t last_rx_ns_ = 0;
  uint64_t write_off_ = 0, write_left_ = 0;  // the message being written
  uint32_t msn_ = 0;
  std::vector<uint32_t> imms_;
  RcCounters c_;
  std::vector<uint8_t> buf_;
};

}  // namespace inagg::client
