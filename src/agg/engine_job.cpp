// A job's slots (design.md §1 "Per packet"): data packets held per slot, summed when all n ranks
// are in, released in PSN order with regenerated ICRCs; ACKs observed; contract breaks.
#include "inagg/agg/engine.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

namespace engine_detail {

wire::OpPosition expected_position(uint32_t k, uint32_t ppm) {
  if (ppm == 1) return wire::OpPosition::only;
  if (k == 0) return wire::OpPosition::first;
  if (k == ppm - 1) return wire::OpPosition::last;
  return wire::OpPosition::middle;
}

uint8_t ecn_of(const uint8_t* f, const Layout& l) {
  const uint8_t* ip = f + l.l3;
  return l.ip == wire::IpVersion::v4 ? (ip[1] & 3) : static_cast<uint8_t>((wire::load_be16(ip) >> 4) & 3);
}

void set_ce(uint8_t* f, const Layout& l) {
  uint8_t* ip = f + l.l3;
  if (l.ip == wire::IpVersion::v4) {
    ip[1] |= wire::kEcnCe;
    ip[10] = ip[11] = 0;
    wire::store_be16(ip + 10, wire::ipv4_header_checksum(ip, static_cast<size_t>(ip[0] & 0x0f) * 4));
  } else {
    ip[1] |= wire::kEcnCe << 4;
  }
}

// The UDP checksum over IPv6 (mandatory there unless zero-checksum is in use).
uint16_t udp6_checksum(const uint8_t* f, const Layout& l) {
  const uint8_t* ip = f + l.l3;
  const uint8_t* udp = f + l.l4;
  const uint32_t len = wire::load_be16(udp + 4);
  uint64_t sum = 0;
  for (int i = 8; i < 40; i += 2) sum += wire::load_be16(ip + i);
  sum += len + wire::kIpProtoUdp;
  for (uint32_t i = 0; i + 1 < len; i += 2)
    if (i != 6) sum += wire::load_be16(udp + i);
  if (len & 1) sum += static_cast<uint32_t>(udp[len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t c = static_cast<uint16_t>(~sum);
  return c == 0 ? 0xffff : c;
}

std::string qp_str(const wire::IpAddr& a, uint32_t qpn) {
  char buf[80], ip[64];
  inet_ntop(a.version == wire::IpVersion::v4 ? AF_INET : AF_INET6, a.bytes.data(), ip, sizeof ip);
  std::snprintf(buf, sizeof buf, "%s qpn 0x%x", ip, qpn);
  return buf;
}

// "job contract, rule 'window': ..." (design.md §1 "The job contract").
std::string contract(const char* rule, const std::string& what) {
  return std::string("job contract, rule '") + rule + "': " + what;
}

}  // namespace engine_detail

void Engine::break_contract(Job& job, const PacketRef& pkt, const std::string& why, uint64_t EngineCounters::*kind) {
  ops_.free(ops_.ctx, pkt.handle);
  abort_job(job, why, kind);
}

void Engine::handle_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
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
  const wire::BthView bth = wire::bth_of(pkt.data, l);
  const uint32_t psn = bth.psn();
  auto who = [&] { return "rank " + std::to_string(rank); };  // error paths only: no string per packet
  if (!wire::is_rdma_write(l.opcode)) {
    // A SEND or READ takes PSNs the job's WRITEs need: the sums could never line up again.
    return break_contract(
        job, pkt,
        contract("writes only", who() + " sent " + std::string(l.info->name) + " (PSN " + std::to_string(psn) +
                                    ") on the job's data QP " + qp_str(conn.spec.dst_ip, conn.spec.dst_qpn) +
                                    "; a job's QPs carry only its RDMA WRITEs"),
        &EngineCounters::err_not_write);
  }
  if ((l.opcode & 0xe0) != wire::op::kRc) {
    // UC has no ACKs: the engine could neither know what a receiver has nor recover a loss.
    return break_contract(
        job, pkt,
        contract("RC only", who() + " sent " + std::string(l.info->name) +
                                ": the job's QPs must be RC (UC writes cannot be aggregated transparently)"),
        &EngineCounters::err_not_rc);
  }
  if (conn.data_port == kUnknownPort) conn.data_port = pkt.port;
  const wire::OpPosition pos = l.info->position;

  // A replayed capture starting over: a FIRST/ONLY at the start PSN once everything is released.
  if (job.spec.replay && job.shards) {
    replay_turn(job, rank, psn, pos);
  } else if (job.spec.replay && psn == conn.spec.start_psn && job.cursor > 0 && job.cursor == job.highest &&
             (pos == wire::OpPosition::first || pos == wire::OpPosition::only)) {
    start_generation(job, 0);
    BUMP(job, generations);
  }

  const int64_t sseq = static_cast<int64_t>(conn.expected) + sext24(psn - (conn.spec.start_psn + conn.expected));
  if (sseq < 0) {  // before the job's start PSN
    ++conn.before_start;
    conn.before_start_psn = psn;
    return drop(&job, pkt, &EngineCounters::stale);
  }
  const uint64_t seq = static_cast<uint64_t>(sseq);
  if (job.shards && (seq & (job.nshards - 1)) != job.shard) {
    // Another shard's sequence (only a dataplane that routed it wrong gives one): taking it would
    // claim a slot of the wrong class, which no release would ever reach.
    return drop(&job, pkt, &EngineCounters::drop_wrong_shard);
  }
  const uint64_t msg = seq / job.ppm;
  const uint32_t k = static_cast<uint32_t>(seq % job.ppm);
  // The job's first incomplete message, whichever shard holds it (a shard reads the shared state
  // again only when what it last saw would refuse the packet). A spread job's slot counts from the
  // moment a shard hands it to the ordered path: it may be out and acknowledged before the ticket moves.
  uint64_t released = job.shards ? job.released_seen : job.cursor;
  if (job.shards && msg >= released / job.ppm + job.spec.window) released = job.refresh_released();
  const uint64_t first_incomplete_msg = released / job.ppm;
  if (msg >= first_incomplete_msg + job.spec.window) {
    return break_contract(
        job, pkt,
        contract("window", who() + " sent PSN " + std::to_string(psn) + " (message " + std::to_string(msg) +
                               ") while message " + std::to_string(first_incomplete_msg) +
                               " is incomplete: ahead of the window of " + std::to_string(job.spec.window) +
                               " (every rank must honour the same window)"),
        &EngineCounters::err_ahead_of_window);
  }
  if (pos != expected_position(k, job.ppm) || l.payload_len != job.spec.payload_bytes || l.pad != 0) {
    return break_contract(
        job, pkt,
        contract("message size",
                 who() + " PSN " + std::to_string(psn) + ": " + std::string(l.info->name) + " with " +
                     std::to_string(l.payload_len) + " payload bytes does not fit packet " + std::to_string(k) +
                     " of a " + std::to_string(job.spec.message_bytes) + "-byte message of " +
                     std::to_string(job.spec.payload_bytes) +
                     "-byte packets (every message must be exactly message_bytes, on the same path MTU)"),
        &EngineCounters::err_length_or_opcode);
  }
  if (!conn.nak_template_ok) {  // what a NAK to this sender looks like, from its first good packet
    wire::RoceFrameSpec& s = conn.nak;
    std::memcpy(s.dst_mac.data(), pkt.data + 6, 6);  // back to the sender
    std::memcpy(s.src_mac.data(), pkt.data, 6);
    s.l2_tags_len = static_cast<uint8_t>(l.l3 - 14);  // the frame's own tags, TPIDs and all
    if (s.l2_tags_len <= s.l2_tags.size()) std::memcpy(s.l2_tags.data(), pkt.data + 12, s.l2_tags_len);
    s.src_ip = conn.spec.dst_ip;
    s.dst_ip = conn.spec.src_ip;
    s.tos = static_cast<uint8_t>(
        (l.ip == wire::IpVersion::v4 ? pkt.data[l.l3 + 1] : wire::load_be16(pkt.data + l.l3) >> 4) & 0xfc);
    s.src_port = wire::load_be16(pkt.data + l.l4);
    s.opcode = wire::op::kRc | wire::op::kAcknowledge;
    s.migreq = false;
    s.pkey = bth.pkey();
    s.dest_qp = conn.spec.src_qpn;
    s.aeth_syndrome = wire::aeth::kNakPsnSequenceError;
    conn.nak_template_ok = true;
  }

  // Loss before the appliance: a sender's packets arrive in PSN order within each go-back-N pass,
  // so a step forward over a sequence not yet here means one was lost. NAK the sender from what
  // its receiver has (again, with backoff, from poll() while it does not go back). A shard sees
  // every K-th sequence: its steps are K.
  const bool jumped = conn.data_seen ? seq > conn.last_seq + job.nshards && seq > conn.filled : seq > job.shard;
  // The sender went back (a shard sees the first of its own sequences at or after the NAK's).
  if (conn.nak_pending && seq < conn.nak_seq + job.nshards) conn.nak_pending = false;
  if (cfg_.fast_recovery && !job.spec.replay && jumped && !conn.nak_pending) {
    send_nak(job, rank, now_ns, tx, NakReason::gap);
    conn.nak_target = seq;
  }
  conn.data_seen = true;
  conn.last_seq = seq;
  conn.last_data_ns = now_ns;
  if (seq + 1 > conn.expected) conn.expected = seq + 1;

  Job::Slot& slot = job.slot(seq);
  if (slot.state == SlotState::empty || slot.seq < seq) {
    // First packet of a new epoch for this slot. The window check above guarantees the old epoch
    // was released (its sequence is below the cursor); its retained sum and packets go now.
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
  } else if (slot.seq > seq) {
    return drop(&job, pkt, &EngineCounters::stale);  // older than the slot's epoch: a duplicate the network made
  }
  if (seq + 1 > job.highest) {
    job.highest = seq + 1;
    if (job.shards && job.spec.replay) job.shards->highest_[job.shard].v.store(job.highest, std::memory_order_release);
  }

  switch (slot.state) {
    case SlotState::collecting: {
      Job::Held& h = job.held_at(seq, rank);
      if (bit(slot.arrived, rank)) {
        ops_.free(ops_.ctx, h.p.handle);  // a retransmission replaces the held copy, never added twice
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
      if (ecn_of(pkt.data, l) == wire::kEcnCe || bth.fecn()) slot.ecn = true;
      note_arrival(job, rank, seq);
      const bool completed = slot.arrived == full_mask(job.spec.workers);
      if (completed) {
        slot.state = SlotState::complete;
        BUMP(job, slots_completed);
        job.last_progress_ns = now_ns;
        if (job.shards) sum_slot(job, seq);  // now, on this core: only the hand-over waits for the turn
      }
      // One engine releases when the cursor's slot completes. A shard's complete slot may be waiting
      // for its turn, which another shard gives: it looks at every packet (a load of the ticket).
      if (job.shards || (completed && seq == job.cursor)) release_ready(job, now_ns, tx);
      return;
    }
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
      emit_data(job, pkt, tx);
      return;
    }
    case SlotState::empty:
      break;
  }
}

// Moves the sender's `filled` mark over what has arrived (a shard: over its own sequences); a gap
// that filled needs no more NAKs.
void Engine::note_arrival(Job& job, unsigned rank, uint64_t seq) {
  Job::Conn& c = job.conns[rank];
  const unsigned k = job.nshards;
  if (seq == c.filled) c.filled += k;  // in order: no slot to look at (this is the per-packet case)
  while (c.filled < c.expected && job.arrived(c.filled, rank)) c.filled += k;
  if (c.nak_pending && c.filled >= c.nak_target) c.nak_pending = false;
}

// A replay job starts over; `base` is where the generation starts in a spread job's ticket.
void Engine::start_generation(Job& job, uint64_t base) {
  for (Job::Held& h : job.held) {
    if (h.p.handle) ops_.free(ops_.ctx, h.p.handle);
    h.clear();
  }
  std::fill(job.slots.begin(), job.slots.end(), Job::Slot{});
  for (Job::Conn& c : job.conns) {
    c.start_generation(cfg_.resend_timeout_ns);
    c.filled = job.shard;
  }
  job.cursor = job.shard;
  job.highest = 0;
  job.held_count = job.retained_count = 0;
  job.base = base;
  job.released_seen = 0;
  if (job.shards) job.shards->highest_[job.shard].v.store(0, std::memory_order_release);
}

// A spread replay job (a capture looping over K shards): starts a new generation where this packet
// is one. The capture's length in sequences is agreed once, at the end of its first loop, when
// every shard released all of it (the ticket reached one past the highest sequence any shard
// claimed): the first shard there publishes it. From then on each shard starts its next generation
// on its own, at its first sequence (the start PSN + its index) once everything it holds went out,
// L sequences further on in the ticket's numbering; the ticket keeps the shards' releases in order
// across generations, so a shard whose queue loops faster than another's waits for it there.
void Engine::replay_turn(Job& job, unsigned rank, uint32_t psn, wire::OpPosition pos) {
  JobShards& sh = *job.shards;
  const Job::Conn& conn = job.conns[rank];
  const bool first = psn == wire::psn_add(conn.spec.start_psn, job.shard) &&
                     pos == expected_position(static_cast<uint32_t>(job.shard % job.ppm), job.ppm);
  if (!first || job.highest == 0 || job.cursor < job.highest) return;
  uint64_t length = sh.gen_length_.load(std::memory_order_acquire);
  if (length == 0) {
    // Only before anyone published it: every highest read here is of the first loop (a shard starts
    // its second only after publishing the length).
    uint64_t claimed = 0;
    for (unsigned i = 0; i < job.nshards; ++i)
      claimed = std::max(claimed, sh.highest_[i].v.load(std::memory_order_acquire));
    if (sh.ticket_.load(std::memory_order_acquire) != claimed) return;  // not all of it released yet
    // A loop is whole messages. What the shards claimed may fall short of the loop's end: its last
    // sequences may still be on their way to another shard (its handover ring, its queue). Then it
    // ends inside a message: wait (this packet is the last loop's, as with one lcore). This shard's
    // own part of the loop is all in (this rank's packets reach it in order), so the claim is at
    // most K - 1 short, and with K <= ppm only the loop's end is a message boundary that near.
    // (With ppm < K a whole message can still be in flight: not caught here.)
    if (claimed % job.ppm != 0) return;
    if (sh.gen_length_.compare_exchange_strong(length, claimed, std::memory_order_acq_rel)) length = claimed;
  }
  start_generation(job, job.base + length);
  if (job.shard == 0) BUMP(job, generations);  // once per loop for the job, not per shard
}

// Writes a slot's sum into one of its packets: payload, ECN, UDP checksum, ICRC. Returns whether
// the packet was CE-marked.
bool Engine::write_sum(Job& job, uint64_t seq, uint8_t* f, const Layout& l, uint32_t header_crc) {
  std::memcpy(f + l.payload, job.sum_at(seq), job.spec.payload_bytes);
  return finish_sum(job, seq, f, l, header_crc);
}

// write_sum for a packet whose payload already holds the sum: ECN, ICRC, UDP checksum.
bool Engine::finish_sum(Job& job, uint64_t seq, uint8_t* f, const Layout& l, uint32_t header_crc) {
  const Job::Slot& slot = job.slot(seq);
  const bool mark = slot.ecn && ecn_of(f, l) != wire::kEcnNotEct;  // only ECN-capable packets
  if (mark) set_ce(f, l);
  // The header part of the ICRC masks TOS, checksums and FECN: the input's header CRC still holds.
  wire::icrc_store(f, l, wire::icrc_combine(header_crc, slot.payload_crc, job.shift));
  uint8_t* udp = f + l.l4;
  if (l.ip == wire::IpVersion::v4) {
    udp[6] = udp[7] = 0;
  } else if (udp[6] | udp[7]) {
    wire::store_be16(udp + 6, udp6_checksum(f, l));  // covers the new ICRC too
  }
  return mark;
}

// The appliance's own congestion: an ECN-capable sum going out towards a port whose TX queue is
// past the threshold is CE-marked, as a DCQCN switch marks its queues, so the senders slow down
// before that queue drops. The receiver of rank r is rank r+1's host (a job is a ring), so its
// port is where rank r+1's WRITEs come from, or else where its ACKs do. The ICRC masks TOS.
bool Engine::mark_if_queue_full(Job& job, unsigned rank, uint8_t* f, const Layout& l) {
  if (cfg_.ecn_threshold_packets == 0 || ops_.tx_queue_above == nullptr) return false;
  const uint16_t succ_port = job.conns[rank + 1 == job.spec.workers ? 0 : rank + 1].data_port;
  const uint16_t port = succ_port != kUnknownPort ? succ_port : job.conns[rank].ack_port;
  if (port == kUnknownPort) return false;
  const uint8_t ecn = ecn_of(f, l);
  if (ecn == wire::kEcnNotEct || ecn == wire::kEcnCe) return false;
  if (!ops_.tx_queue_above(ops_.queue_ctx, port, cfg_.ecn_threshold_packets)) return false;
  set_ce(f, l);
  return true;
}

// Sums a complete slot into its n packets and its retained copy, and finishes each packet (ICRC,
// ECN, UDP checksum): everything of a release but the hand-over.
void Engine::sum_slot(Job& job, uint64_t seq) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  const uint8_t* srcs[64] = {};
  uint8_t* dsts[65] = {};
  Job::Slot& slot = job.slot(seq);
  Job::Held* held = &job.held_at(seq, 0);
  // The sum goes straight into the n packets (each over its own payload, chunk by chunk) and the
  // retained copy, in one pass: no copy of it afterwards.
  uint8_t* sum = job.sum_at(seq);
  dsts[0] = sum;
  for (unsigned r = 0; r < n; ++r) srcs[r] = dsts[r + 1] = held[r].p.data + held[r].l.payload;
  sum_ranked_broadcast(job.spec.dtype, dsts, n + 1, srcs, n, P);
  slot.payload_crc = wire::crc32({sum, P});  // once per slot; P is a multiple of 4: no pad
  for (unsigned r = 0; r < n; ++r) {
    Job::Held& h = held[r];
    if (finish_sum(job, seq, h.p.data, h.l, h.header_crc)) BUMP(job, ecn_marked);
    if (mark_if_queue_full(job, r, h.p.data, h.l)) BUMP(job, ecn_marked_queue);
  }
  slot.summed = true;
}

// Releases complete slots from the cursor on, in sequence order, while TX has room for a slot (a
// shard: while the ticket says it is its turn and the job's ordered path takes them).
void Engine::release_ready(Job& job, uint64_t now_ns, TxList& tx) {
  const unsigned n = job.spec.workers;
  while (job.state == JobState::active) {
    Job::Slot& slot = job.slot(job.cursor);
    if (slot.state != SlotState::complete || slot.seq != job.cursor) return;
    Job::Held* held = &job.held_at(job.cursor, 0);
    if (job.shards) {
      const uint64_t turn = job.base + job.cursor;
      if (job.shards->ticket_.load(std::memory_order_acquire) != turn) return;  // an earlier slot is another shard's
      if (!slot.summed) sum_slot(job, job.cursor);
      // Kept for a resend (until acknowledged or the slot is reused): the reference is taken before
      // the hand-over, as the lcore sending them may free theirs at once.
      PacketRef* out = release_out_.data();  // a member: 64 PacketRefs built per call cost more than the call
      for (unsigned r = 0; r < n; ++r) {
        ops_.ref(ops_.ctx, held[r].p.handle);
        out[r] = held[r].p;
      }
      // From here its packets may be out (and acknowledged, and the senders' windows moved on)
      // before the ticket moves: the checks allow for them (out_below()).
      job.shards->handed_.store(turn + 1, std::memory_order_release);
      if (!job.shards->tx_.send(job.shards->tx_.ctx, out, n)) {
        for (unsigned r = 0; r < n; ++r) ops_.free(ops_.ctx, held[r].p.handle);
        job.shards->handed_.store(turn, std::memory_order_release);
        return;  // no room on the ordered path: release_turns()/poll() try again
      }
      // The next sequence's shard may go: our n packets are ahead of its on the ordered path.
      job.shards->ticket_.store(turn + 1, std::memory_order_release);
    } else {
      if (tx.capacity() < n) {
        abort_job(job,
                  "the TX list holds " + std::to_string(tx.capacity()) + " packets, fewer than the job's " +
                      std::to_string(n) + " workers: a slot could never be released",
                  &EngineCounters::err_length_or_opcode);
        return;
      }
      if (tx.capacity() - tx.size() < n) return;  // poll() continues once the caller drained TX
      if (!slot.summed) sum_slot(job, job.cursor);
      for (unsigned r = 0; r < n; ++r) {
        ops_.ref(ops_.ctx, held[r].p.handle);  // kept for a resend until acknowledged or the slot is reused
        tx.push(held[r].p);
      }
    }
    for (unsigned r = 0; r < n; ++r) held[r].retained = true;
    job.c.released_packets += n;
    totals_.released_packets += n;
    job.held_count -= n;
    job.retained_count += n;
    slot.state = SlotState::released;
    BUMP(job, slots_released);
    job.cursor += job.nshards;
    job.last_progress_ns = job.last_release_ns = now_ns;
  }
}

// A data-direction packet the engine sends outside a release (a retransmission answered, a resend):
// a spread job's go on its ordered path too, behind what was released before.
void Engine::emit_data(Job& job, const PacketRef& p, TxList& tx) {
  if (!job.shards) return emit(p, tx, &job);
  if (job.shards->tx_.send(job.shards->tx_.ctx, &p, 1)) return;
  ops_.free(ops_.ctx, p.handle);
  BUMP(job, tx_full);
}

// The receiver of `rank` holds every sequence below `to`: the retained copies of them go.
void Engine::free_acknowledged(Job& job, unsigned rank, uint64_t to) {
  Job::Conn& conn = job.conns[rank];
  const uint64_t from = std::max(conn.acked, to > job.span() ? to - job.span() : 0);
  for (uint64_t s = job.own_at_or_after(from); s < to; s += job.nshards) {
    Job::Held& h = job.held_at(s, rank);
    if (h.retained && job.slot(s).seq == s) {
      ops_.free(ops_.ctx, h.p.handle);
      h.clear();
      --job.retained_count;
    }
  }
}

// A spread job's shards other than 0 learn what the receivers acknowledged from shard 0, which
// takes every ACK: retained copies freed, the resend budget renewed, the MSN for their NAKs.
void Engine::sync_acks(Job& job, unsigned rank, uint64_t now_ns) {
  const JobShards::Acked& a = job.shards->acked_[rank];
  Job::Conn& c = job.conns[rank];
  const uint64_t to = a.acked.load(std::memory_order_acquire);
  c.msn = a.msn.load(std::memory_order_relaxed);
  if (a.seen.load(std::memory_order_relaxed)) c.acks_seen = true;
  if (to <= c.acked) return;
  free_acknowledged(job, rank, to);
  c.acked = to;
  c.last_ack_ns = a.ack_ns.load(std::memory_order_relaxed);
  c.resend_rounds = 0;
  c.resend_interval_ns = cfg_.resend_timeout_ns;
  job.last_progress_ns = now_ns;
}

void Engine::handle_ack(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if (!wire::icrc_verify(pkt.data, l)) return drop(&job, pkt, &EngineCounters::bad_icrc);
  Job::Conn& conn = job.conns[rank];
  if (l.opcode != (wire::op::kRc | wire::op::kAcknowledge)) {
    return break_contract(
        job, pkt,
        contract("writes only", "the receiver of rank " + std::to_string(rank) + " sent " + std::string(l.info->name) +
                                    " to " + qp_str(conn.spec.src_ip, conn.spec.src_qpn) +
                                    "; the reverse direction of a job's QP carries only ACKs and NAKs"),
        &EngineCounters::err_not_write);
  }
  if (conn.ack_port == kUnknownPort) conn.ack_port = pkt.port;
  conn.acks_seen = true;
  JobShards::Acked* shared = job.shards && job.shard == 0 ? &job.shards->acked_[rank] : nullptr;
  const wire::AethView aeth = wire::aeth_of(pkt.data, l);
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  const int64_t at = static_cast<int64_t>(conn.acked) + sext24(psn - (conn.spec.start_psn + conn.acked));
  // ACK p: the receiver has everything up to p. NAK / RNR NAK p: everything below p.
  const int64_t acked = aeth.is_ack() ? at + 1 : at;
  BUMP(job, acks_observed);
  if (acked >= static_cast<int64_t>(conn.acked)) conn.msn = aeth.msn();  // not from a stale, reordered ACK
  if (shared) {
    shared->msn.store(conn.msn, std::memory_order_relaxed);
    shared->seen.store(true, std::memory_order_relaxed);
  }
  if (acked > static_cast<int64_t>(job.out_below()) && !job.spec.replay) {
    emit(pkt, tx, &job);
    std::string why = "the receiver of rank " + std::to_string(rank) + " acknowledged PSN " + std::to_string(psn) +
                      ", which the appliance never released: some path bypasses the appliance (every packet of a "
                      "registered connection must cross it)";
    if (!conn.data_seen)
      why += ", or rank " + std::to_string(rank) + "'s destination " + qp_str(conn.spec.dst_ip, conn.spec.dst_qpn) +
             " is registered wrong (none of its WRITEs ever matched it)";
    abort_job(job, contract("every packet crosses the appliance", why), &EngineCounters::err_ack_bypass);
    return;
  }
  if (acked > static_cast<int64_t>(conn.acked)) {
    // Retained copies the receiver now has are no longer needed for resends.
    const uint64_t to = static_cast<uint64_t>(acked);
    free_acknowledged(job, rank, to);
    if (shared) {
      shared->ack_ns.store(now_ns, std::memory_order_relaxed);
      shared->acked.store(to, std::memory_order_release);
    }
    conn.acked = to;
    conn.last_ack_ns = now_ns;
    conn.resend_rounds = 0;  // the receiver moves: a fresh resend budget and backoff
    conn.resend_interval_ns = cfg_.resend_timeout_ns;
    job.last_progress_ns = now_ns;
  }
  emit(pkt, tx, &job);
}

}  // namespace inagg::agg
