// A job's packets as they arrive (docs/protocol.md sections 6-8): data packets held per slot, summed
// when all n ranks are in, released in PSN order; ACKs observed; contract breaks. How a job is
// processed is chosen once, when it is added (choose_path): live or a replayed capture, a leaf, a
// rotated collective; each way is its own instantiation, so a live flat job runs code with no
// replay and no leaf branch.
#include "inagg/agg/engine.hpp"

#include <algorithm>
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/util/log.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

void Engine::choose_path(Job& job) {
  if (job.rotated()) {  // add_job keeps rotated collectives live and flat
    job.on_data = &Engine::handle_rotated;
    job.on_ack = &Engine::handle_ack<false>;
  } else if (job.spec.replay) {
    job.on_data = &Engine::handle_data<true>;
    job.on_ack = &Engine::handle_ack<true>;
  } else if (job.leaf()) {  // add_job keeps leaves live
    job.on_data = &Engine::handle_data<false, true>;
    job.on_ack = &Engine::handle_ack<false>;
  } else {
    job.on_data = &Engine::handle_data<false>;
    job.on_ack = &Engine::handle_ack<false>;
  }
}

template <class Why>
void Engine::refuse(Job& job, const PacketRef& pkt, Why&& why, uint64_t EngineCounters::*kind) {
  if (job.first_unfit.empty()) {
    job.first_unfit = why();
    util::log(util::LogModule::engine, util::LogLevel::warning, "job %u: dropped a packet: %s", job.spec.id,
              job.first_unfit.c_str());
  }
  ++(job.c.*kind);
  ++(totals_.*kind);
  drop(&job, pkt, &EngineCounters::drop_unfit);
}

// A data packet: checked against the job's contract, placed by its sequence, then held, summed and
// released (collect) or answered from the retained sum (answer_retransmit).
template <bool kReplay, bool kLeaf>
void Engine::handle_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if (job.state == JobState::failed) return drop(&job, pkt, &EngineCounters::failed_job_drops);
  Job::Conn& conn = job.conns[rank];
  // Header and payload CRCs are independent chains (the CPU overlaps them), joined by the job's
  // precomputed shift; the header part, derived from the sender's previous header (a few table
  // look-ups, not a CRC over ~48 bytes), is kept for the release.
  const uint32_t header_crc = conn.header_crc.header_crc(pkt.data, l);
  const uint32_t payload_crc = wire::icrc_payload_crc(pkt.data, l);
  const bool icrc_ok = l.padded_payload_len() == job.spec.payload_bytes
                           ? wire::icrc_combine(header_crc, payload_crc, job.shift) == wire::icrc_stored(pkt.data, l)
                           : wire::icrc_verify(pkt.data, l);  // a length error follows; verify it plainly
  if (!icrc_ok) return drop(&job, pkt, &EngineCounters::bad_icrc);
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  if (!refuse_unless_rc_write(job, rank, pkt, l, psn)) return;

  // A replayed capture starting over: a FIRST/ONLY at the start PSN once everything is released.
  if constexpr (kReplay) {
    const wire::OpPosition pos = l.info->position;
    if (psn == conn.spec.start_psn && job.cursor > 0 && job.cursor == job.highest &&
        (pos == wire::OpPosition::first || pos == wire::OpPosition::only)) {
      start_generation(job);
      BUMP(job, generations);
    }
  }

  uint64_t seq;
  if (!place_data<kLeaf>(job, rank, pkt, l, psn, &seq)) return;
  // The packet fits the connection's state (a WRITE of the right size, at or after the start PSN,
  // within the window): only such a packet pins the port the rank's data is taken from. A forged
  // packet that does not fit is dropped above, whatever port it came from.
  if (conn.data_port == kUnknownPort) conn.data_port = pkt.port;
  if (!conn.nak_template_ok) learn_nak_template(job, rank, pkt, l);
  watch_for_gap<kReplay>(job, rank, seq, now_ns, tx);
  conn.data_seen = true;
  conn.last_seq = seq;
  conn.last_data_ns = now_ns;
  if (seq + 1 > conn.expected) conn.expected = seq + 1;

  Job::Slot& slot = job.slot(seq);
  if (slot.state == SlotState::empty || slot.seq < seq) {
    open_epoch(job, seq);
    slot.first_ns = now_ns;
  } else if (slot.seq > seq) {
    return drop(&job, pkt, &EngineCounters::stale);  // older than the slot's epoch: a duplicate the network made
  }
  if (seq + 1 > job.highest) job.highest = seq + 1;

  // A leaf's uplink packet whose partial is made: a retransmission, answered with the partial once
  // that went out (whatever the slot waits for now), a duplicate while it waits for its turn.
  if constexpr (kLeaf) {
    if (rank == job.uplink && slot.partial_out) {
      if (seq < job.up_cursor) return answer_uplink(job, seq, pkt, l, header_crc, tx);
      note_arrival(job, rank, seq);
      return drop(&job, pkt, &EngineCounters::duplicates_dropped);
    }
  }

  switch (slot.state) {
    case SlotState::collecting:
      return collect<kLeaf>(job, rank, seq, pkt, l, header_crc, now_ns, tx);
    case SlotState::complete:
      note_arrival(job, rank, seq);
      return drop(&job, pkt, &EngineCounters::duplicates_dropped);
    case SlotState::released: {
      // A retransmission of a released slot: the receiver may need it (it writes any packet at or
      // above its expected PSN), so it carries the retained sum with a fresh ICRC.
      if (write_sum(job, seq, pkt.data, l, header_crc)) BUMP(job, ecn_marked);
      if (mark_if_queue_full(job, rank, pkt.data, l)) BUMP(job, ecn_marked_queue);
      BUMP(job, retransmits_answered);
      note_arrival(job, rank, seq);
      return emit(pkt, tx, &job);
    }
    case SlotState::empty:
      break;
  }
}

// A SEND or READ takes PSNs the job's WRITEs need: a rank that sends one breaks its job, but a
// forger can send one too, so it is dropped, not trusted to end the job. UC has no ACKs: the
// engine could neither know what a receiver has nor recover a loss. False when refused.
[[gnu::always_inline]] inline bool Engine::refuse_unless_rc_write(Job& job, unsigned rank, const PacketRef& pkt,
                                                                  const Layout& l, uint32_t psn) {
  const Job::Conn& conn = job.conns[rank];
  auto who = [&] { return "rank " + std::to_string(rank); };  // error paths only: no string per packet
  if (!wire::is_rdma_write(l.opcode)) {
    refuse(
        job, pkt,
        [&] {
          return contract("writes only", who() + " sent " + std::string(l.info->name) + " (PSN " + std::to_string(psn) +
                                             ") on the job's data QP " + qp_str(conn.spec.dst_ip, conn.spec.dst_qpn) +
                                             "; a job's QPs carry only its RDMA WRITEs");
        },
        &EngineCounters::err_not_write);
    return false;
  }
  if ((l.opcode & 0xe0) != wire::op::kRc) {
    refuse(
        job, pkt,
        [&] {
          return contract("RC only", who() + " sent " + std::string(l.info->name) +
                                         ": the job's QPs must be RC (UC writes cannot be aggregated transparently)");
        },
        &EngineCounters::err_not_rc);
    return false;
  }
  return true;
}

// The packet's sequence in the job (*seq), if it may take a slot: at or after the job's start (or
// where it resumed), within the window, and the size and position its place in the message needs.
// False when dropped or refused.
template <bool kLeaf, bool kRotated>
[[gnu::always_inline]] inline bool Engine::place_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l,
                                                      uint32_t psn, uint64_t* seq) {
  Job::Conn& conn = job.conns[rank];
  auto who = [&] { return "rank " + std::to_string(rank); };  // error paths only: no string per packet
  const int64_t sseq = static_cast<int64_t>(conn.expected) + sext24(psn - (conn.spec.start_psn + conn.expected));
  if (sseq < static_cast<int64_t>(job.floor)) {  // before the job's start PSN, or where it resumed
    ++conn.before_start;
    conn.before_start_psn = psn;
    drop(&job, pkt, &EngineCounters::stale);
    return false;
  }
  *seq = static_cast<uint64_t>(sseq);
  const uint64_t msg = *seq / job.ppm;
  const uint32_t k = static_cast<uint32_t>(*seq % job.ppm);
  // The job's first incomplete message. (A rotated collective's connections each go at their own
  // pace: its window is per connection.)
  const uint64_t released = kRotated ? job.rot_rel[rank] : job.cursor;
  const uint64_t first_incomplete_msg = released / job.ppm;
  // A leaf's uplink sender runs up to 2 W messages ahead of the leaf's cursor: its receiver, in the
  // next rack, has the total (and acknowledges it) before the total comes down to this leaf; the
  // rack's other senders are within W of it (protocol.md section 21). The slots hold 2 W messages.
  const unsigned window = kLeaf && rank == job.uplink ? 2 * job.spec.window : job.spec.window;
  if (msg >= first_incomplete_msg + window) {
    refuse(
        job, pkt,
        [&] {
          return contract("window", who() + " sent PSN " + std::to_string(psn) + " (message " + std::to_string(msg) +
                                        ") while message " + std::to_string(first_incomplete_msg) +
                                        " is incomplete: ahead of the window of " + std::to_string(window) +
                                        " (every rank must honour the same window)");
        },
        &EngineCounters::err_ahead_of_window);
    return false;
  }
  if (l.info->position != expected_position(k, job.ppm) || l.payload_len != job.spec.payload_bytes || l.pad != 0) {
    refuse(
        job, pkt,
        [&] {
          return contract("message size",
                          who() + " PSN " + std::to_string(psn) + ": " + std::string(l.info->name) + " with " +
                              std::to_string(l.payload_len) + " payload bytes does not fit packet " +
                              std::to_string(k) + " of a " + std::to_string(job.spec.message_bytes) +
                              "-byte message of " + std::to_string(job.spec.payload_bytes) +
                              "-byte packets (every message must be exactly message_bytes, on the same path MTU)");
        },
        &EngineCounters::err_length_or_opcode);
    return false;
  }
  return true;
}

// What a NAK to this sender looks like, from its first good packet.
void Engine::learn_nak_template(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l) {
  Job::Conn& conn = job.conns[rank];
  wire::RoceFrameSpec& s = conn.nak;
  std::memcpy(s.dst_mac.data(), pkt.data + 6, 6);  // back to the sender
  std::memcpy(s.src_mac.data(), pkt.data, 6);
  s.l2_tags_len = static_cast<uint8_t>(l.l3 - 14);  // the frame's own tags, TPIDs and all
  if (s.l2_tags_len <= s.l2_tags.size()) std::memcpy(s.l2_tags.data(), pkt.data + 12, s.l2_tags_len);
  s.src_ip = conn.spec.dst_ip;
  s.dst_ip = conn.spec.src_ip;
  s.tos = static_cast<uint8_t>(
      (l.ip == util::IpVersion::v4 ? pkt.data[l.l3 + 1] : wire::load_be16(pkt.data + l.l3) >> 4) & 0xfc);
  s.src_port = wire::load_be16(pkt.data + l.l4);
  s.opcode = wire::op::kRc | wire::op::kAcknowledge;
  s.migreq = false;
  s.pkey = wire::bth_of(pkt.data, l).pkey();
  s.dest_qp = conn.spec.src_qpn;
  s.aeth_syndrome = wire::aeth::kNakPsnSequenceError;
  conn.nak_template_ok = true;
}

// Loss before the appliance: a sender's packets arrive in PSN order within each go-back-N pass, so
// a step forward over a sequence not yet here means one was lost. NAK the sender from what its
// receiver has (again, with backoff, from poll() while it does not go back). A replayed capture
// has no senders to NAK.
template <bool kReplay>
[[gnu::always_inline]] inline void Engine::watch_for_gap(Job& job, unsigned rank, uint64_t seq, uint64_t now_ns,
                                                         TxList& tx) {
  Job::Conn& conn = job.conns[rank];
  const bool jumped = conn.data_seen ? seq > conn.last_seq + 1 && seq > conn.filled : seq > 0;
  if (conn.nak_pending && seq <= conn.nak_seq) conn.nak_pending = false;  // the sender went back
  if (!kReplay && cfg_.fast_recovery && jumped && !conn.nak_pending) {
    send_nak(job, rank, now_ns, tx, NakReason::gap);
    conn.nak_target = seq;
  }
}

// First packet of a new epoch for this slot. The window check guarantees the old epoch was
// released (its sequence is below the cursor); its retained sum and packets go now.
void Engine::open_epoch(Job& job, uint64_t seq) {
  Job::Slot& slot = job.slot(seq);
  for (unsigned r = 0; r < job.spec.workers; ++r) {
    Job::Held& h = job.held_at(seq, r);  // same slot index as slot.seq
    if (h.p.handle) {
      ops_.free(ops_.ctx, h.p.handle);
      --job.retained_count;
    }
    h.clear();
  }
  slot = Job::Slot{};
  slot.seq = seq;
  slot.state = SlotState::collecting;
}

// A packet for a slot still collecting: held (a retransmission replaces the held copy, never added
// twice); the last rank's completes the slot, which is released when it is the cursor's.
template <bool kLeaf>
[[gnu::always_inline]] inline void Engine::collect(Job& job, unsigned rank, uint64_t seq, const PacketRef& pkt,
                                                   const Layout& l, uint32_t header_crc, uint64_t now_ns, TxList& tx) {
  Job::Slot& slot = job.slot(seq);
  Job::Held& h = job.held_at(seq, rank);
  if (bit(slot.arrived, rank)) {
    ops_.free(ops_.ctx, h.p.handle);
    BUMP(job, duplicates_collecting);
  } else {
    slot.arrived |= 1ull << rank;
    ++job.held_count;
    BUMP(job, aggregated_packets);
    job.last_progress_ns = now_ns;
    job.c.aggregated_bytes += l.payload_len;
    totals_.aggregated_bytes += l.payload_len;
  }
  h.hold(pkt, l, header_crc);
  if (ecn_of(pkt.data, l) == wire::kEcnCe || wire::bth_of(pkt.data, l).fecn()) slot.ecn = true;
  note_arrival(job, rank, seq);
  // A leaf: its rack's packets are in, so their partial goes up at once.
  if constexpr (kLeaf)
    if (!slot.partial_out && (slot.arrived & job.local_mask) == job.local_mask) send_partial(job, seq, now_ns, tx);
  const bool completed = slot.arrived == full_mask(job.spec.workers);
  if (completed) {
    slot.state = SlotState::complete;
    BUMP(job, slots_completed);
    job.slot_completion.observe(elapsed(now_ns, slot.first_ns));
    job.last_progress_ns = now_ns;
    if constexpr (kLeaf) fill_total(job, seq);  // the total came down: no sum here
  }
  if (completed && seq == job.cursor) release_plain(job, now_ns, tx);
}

// Moves the sender's `filled` mark over what has arrived; a gap that filled needs no more NAKs.
void Engine::note_arrival(Job& job, unsigned rank, uint64_t seq) {
  Job::Conn& c = job.conns[rank];
  if (seq == c.filled) ++c.filled;  // in order: no slot to look at (this is the per-packet case)
  while (c.filled < c.expected && job.arrived(c.filled, rank)) ++c.filled;
  if (c.nak_pending && c.filled >= c.nak_target) c.nak_pending = false;
}

// A replay job starts over: its slots and sequence state go, what was learned of the peers stays.
void Engine::start_generation(Job& job) {
  for (Job::Held& h : job.held) {
    if (h.p.handle) ops_.free(ops_.ctx, h.p.handle);
    h.clear();
  }
  std::fill(job.slots.begin(), job.slots.end(), Job::Slot{});
  for (Job::Conn& c : job.conns) c.start_generation(cfg_.resend_timeout_ns);
  job.cursor = 0;
  job.highest = 0;
  job.held_count = job.retained_count = 0;
}

// The checks of a data packet that every kind of job makes, for engine_rotated.cpp.
bool Engine::admit_rotated(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint32_t* header_crc,
                           uint64_t* seq) {
  Job::Conn& conn = job.conns[rank];
  *header_crc = conn.header_crc.header_crc(pkt.data, l);
  const uint32_t payload_crc = wire::icrc_payload_crc(pkt.data, l);
  const bool icrc_ok = l.padded_payload_len() == job.spec.payload_bytes
                           ? wire::icrc_combine(*header_crc, payload_crc, job.shift) == wire::icrc_stored(pkt.data, l)
                           : wire::icrc_verify(pkt.data, l);
  if (!icrc_ok) {
    drop(&job, pkt, &EngineCounters::bad_icrc);
    return false;
  }
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  return refuse_unless_rc_write(job, rank, pkt, l, psn) && place_data<false, true>(job, rank, pkt, l, psn, seq);
}

// What a data packet that fits tells of its connection (after it was taken): its port, the NAK
// template, a gap before it, where its sender is.
void Engine::note_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t seq, uint64_t now_ns,
                       TxList& tx) {
  Job::Conn& conn = job.conns[rank];
  if (conn.data_port == kUnknownPort) conn.data_port = pkt.port;
  if (!conn.nak_template_ok) learn_nak_template(job, rank, pkt, l);
  watch_for_gap<false>(job, rank, seq, now_ns, tx);
  conn.data_seen = true;
  conn.last_seq = seq;
  conn.last_data_ns = now_ns;
  if (seq + 1 > conn.expected) conn.expected = seq + 1;
}

template <bool kReplay>
void Engine::handle_ack(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if (job.state == JobState::failed) return drop(&job, pkt, &EngineCounters::failed_job_drops);
  if (!wire::icrc_verify(pkt.data, l)) return drop(&job, pkt, &EngineCounters::bad_icrc);
  Job::Conn& conn = job.conns[rank];
  if (l.opcode != (wire::op::kRc | wire::op::kAcknowledge)) {
    return refuse(
        job, pkt,
        [&] {
          return contract("writes only", "the receiver of rank " + std::to_string(rank) + " sent " +
                                             std::string(l.info->name) + " to " +
                                             qp_str(conn.spec.src_ip, conn.spec.src_qpn) +
                                             "; the reverse direction of a job's QP carries only ACKs and NAKs");
        },
        &EngineCounters::err_not_write);
  }
  const wire::AethView aeth = wire::aeth_of(pkt.data, l);
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  const int64_t at = static_cast<int64_t>(conn.acked) + sext24(psn - (conn.spec.start_psn + conn.acked));
  // ACK p: the receiver has everything up to p. NAK / RNR NAK p: everything below p.
  const int64_t acked = aeth.is_ack() ? at + 1 : at;
  // (A replayed capture's receivers are pcap files: nothing to check.)
  if (!kReplay && acked > static_cast<int64_t>(job.released_for(rank))) {
    // The receiver cannot have what was never released: either a path bypasses the appliance or the
    // ACK is forged. Dropped (a forged ACK must not reach the sender); a real bypass stalls the job
    // until its no-progress timeout, whose message gives this reason.
    return refuse(
        job, pkt,
        [&] {
          std::string why = "the receiver of rank " + std::to_string(rank) + " acknowledged PSN " +
                            std::to_string(psn) +
                            ", which the appliance never released: some path bypasses the appliance (every packet "
                            "of a registered connection must cross it)";
          if (!conn.data_seen)
            why += ", or rank " + std::to_string(rank) + "'s destination " +
                   qp_str(conn.spec.dst_ip, conn.spec.dst_qpn) +
                   " is registered wrong (none of its WRITEs ever matched it)";
          return contract("every packet crosses the appliance", why);
        },
        &EngineCounters::err_ack_bypass);
  }
  if (conn.ack_port == kUnknownPort) {
    // Only an ACK or NAK that acknowledges something released and not yet acknowledged pins the
    // port the rank's ACKs are taken from (one at start_psn - 1, sent before the job's traffic,
    // does not).
    if (!kReplay && acked <= static_cast<int64_t>(conn.acked))
      return drop(&job, pkt, &EngineCounters::drop_ack_unpinned);
    conn.ack_port = pkt.port;
  }
  conn.acks_seen = true;
  BUMP(job, acks_observed);
  if (acked >= static_cast<int64_t>(conn.acked)) conn.msn = aeth.msn();  // not from a stale, reordered ACK
  if (acked > static_cast<int64_t>(conn.acked)) {
    // Retained copies the receiver now has are no longer needed for resends.
    const uint64_t to = static_cast<uint64_t>(acked);
    free_acknowledged(job, rank, to);
    conn.acked = to;
    conn.last_ack_ns = now_ns;
    conn.resend_rounds = 0;  // the receiver moves: a fresh resend budget and backoff
    conn.resend_interval_ns = cfg_.resend_timeout_ns;
    job.last_progress_ns = now_ns;
  }
  emit(pkt, tx, &job);
}

}  // namespace inagg::agg
