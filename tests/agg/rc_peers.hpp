// The two ends of a simulated RC connection, as RDMA NICs behave: a go-back-N requester with an ACK
// timer, and a responder that takes packets in PSN order, acknowledges them, NAKs the first gap once
// and re-ACKs duplicates. The engine simulations (test_engine_sim.cpp, test_engine_racks.cpp) put
// lossy links between them; what the packets carry is theirs to check.
#pragma once

#include <cstdint>
#include <optional>

#include "inagg/wire/parse.hpp"

namespace inagg::enginetest {

struct RcSender {
  uint64_t una = 0, next = 0, sent_max = 0, last_progress_ns = 0, timeouts = 0;

  // The next sequence to transmit, if the window allows (W messages of ppm packets).
  std::optional<uint64_t> transmit(uint64_t total, uint32_t ppm, unsigned window, uint64_t now_ns) {
    if (next >= total || next / ppm >= una / ppm + window) return std::nullopt;
    if (next == una) last_progress_ns = now_ns;  // the ACK timer starts with the first outstanding packet
    sent_max = std::max(sent_max, next + 1);
    return next++;
  }
  // The RC retransmission timer: go back N. True when it fired.
  bool timer(uint64_t total, uint64_t now_ns, uint64_t timeout_ns) {
    if (una >= total || next <= una || now_ns - last_progress_ns <= timeout_ns) return false;
    next = una;
    last_progress_ns = now_ns;
    ++timeouts;
    return true;
  }
  // An ACK or NAK for sequence `seq`. False for an ACK of a sequence never sent.
  bool acknowledge(uint64_t seq, const wire::AethView& aeth, uint64_t now_ns) {
    if (aeth.is_ack()) {
      if (seq >= sent_max) return false;
      if (seq + 1 > una) {
        una = seq + 1;
        next = std::max(next, una);
        last_progress_ns = now_ns;
      }
    } else if (aeth.is_nak() && aeth.nak_code() == 0 && seq >= una && seq <= sent_max) {
      una = seq;  // everything below is acknowledged; go back to it
      next = seq;
      last_progress_ns = now_ns;
    }
    return true;
  }
};

struct RcReceiver {
  uint64_t expected = 0;
  bool nak_sent = false;
  uint32_t msn = 0;

  struct Reply {
    uint64_t seq;
    uint8_t syndrome;
    uint32_t msn;
  };
  // A data packet of `seq` (the last of its message if `last`); what to answer, if anything.
  // `ack_now()` says whether an in-order packet is acknowledged now (its AckReq, or coalescing
  // decided so); it is asked only then.
  template <class AckNow>
  std::optional<Reply> receive(uint64_t seq, bool last, AckNow&& ack_now) {
    if (seq == expected) {
      ++expected;
      nak_sent = false;
      if (last) ++msn;
      if (ack_now()) return Reply{seq, wire::aeth::kAckUnlimitedCredits, msn};
    } else if (seq > expected) {
      if (!nak_sent) {
        nak_sent = true;
        return Reply{expected, wire::aeth::kNakPsnSequenceError, msn};
      }
    } else if (expected > 0) {
      return Reply{expected - 1, wire::aeth::kAckUnlimitedCredits, msn};  // duplicate: re-ACK
    }
    return std::nullopt;
  }
};

}  // namespace inagg::enginetest
