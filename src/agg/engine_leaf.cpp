// What only a leaf does, in a job whose ranks span racks (docs/protocol.md section 21): its rack's
// packets of a slot summed into the uplink connection's packet, which goes up to the spine at once
// (released in the uplink's PSN order, kept for its retransmissions); the total that comes back down
// on the downlink connection written into the held packets, which then go out as any slot's do.
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/agg/engine.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

// Every local packet of `seq` is in: their rank-ordered sum goes into the uplink's packet and the
// slot's partial (kept for the uplink's retransmissions), in one pass; the held local packets keep
// their own gradients for the total.
void Engine::send_partial(Job& job, uint64_t seq, uint64_t now_ns, TxList& tx) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  Job::Slot& slot = job.slot(seq);
  Job::Held* held = &job.held_at(seq, 0);
  const uint8_t* srcs[64] = {};
  unsigned m = 0;
  for (unsigned r = 0; r < n; ++r)
    if (bit(job.local_mask, r)) srcs[m++] = held[r].p.data + held[r].l.payload;
  Job::Held& up = held[job.uplink];
  uint8_t* dsts[2] = {job.partial_at(seq), up.p.data + up.l.payload};
  sum_ranked_broadcast(job.spec.dtype, dsts, 2, srcs, m, P);
  slot.partial_crc = wire::crc32({dsts[0], P});
  if (finish_payload(job, slot.ecn, up.p.data, up.l, up.header_crc, slot.partial_crc)) BUMP(job, ecn_marked);
  slot.partial_out = true;
  if (seq == job.up_cursor) release_uplink(job, now_ns, tx);
}

// The uplink's packets whose partials are ready, from its cursor on, in sequence order (its PSN
// order), while TX has room; poll() continues what a full TX list cut short.
void Engine::release_uplink(Job& job, uint64_t now_ns, TxList& tx) {
  while (job.state == JobState::active) {
    const Job::Slot& slot = job.slot(job.up_cursor);
    if (slot.state == SlotState::empty || slot.seq != job.up_cursor || !slot.partial_out) return;
    if (tx.size() == tx.capacity()) return;
    Job::Held& h = job.held_at(job.up_cursor, job.uplink);
    ops_.ref(ops_.ctx, h.p.handle);  // kept for a resend until acknowledged or the slot is reused
    tx.push(h.p);
    h.retained = true;
    --job.held_count;
    ++job.retained_count;
    ++job.c.released_packets;
    ++totals_.released_packets;
    ++job.up_cursor;
    job.last_progress_ns = now_ns;
  }
}

// The downlink's packet of `seq` arrived with the total (summed by the spine over every rack's
// partial): it goes into every held local packet and the retained sum. The uplink's packet went
// out with the partial and is not touched.
void Engine::fill_total(Job& job, uint64_t seq) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  Job::Slot& slot = job.slot(seq);
  Job::Held* held = &job.held_at(seq, 0);
  const uint8_t* total = held[0].p.data + held[0].l.payload;
  uint8_t* sum = job.sum_at(seq);
  std::memcpy(sum, total, P);
  slot.payload_crc = wire::crc32({sum, P});
  for (unsigned r = 0; r < n; ++r) {
    if (r == job.uplink) continue;
    Job::Held& h = held[r];
    if (r != 0) std::memcpy(h.p.data + h.l.payload, sum, P);
    if (finish_sum(job, seq, h.p.data, h.l, h.header_crc)) BUMP(job, ecn_marked);
    if (mark_if_queue_full(job, r, h.p.data, h.l)) BUMP(job, ecn_marked_queue);
  }
  slot.summed = true;
}

// A retransmission of an uplink packet whose partial went out: it carries the partial again, with a
// fresh ICRC (the spine answers it from its retained total, or takes it if it lost the first).
void Engine::answer_uplink(Job& job, uint64_t seq, const PacketRef& pkt, const Layout& l, uint32_t header_crc,
                           TxList& tx) {
  const Job::Slot& slot = job.slot(seq);
  std::memcpy(pkt.data + l.payload, job.partial_at(seq), job.spec.payload_bytes);
  if (finish_payload(job, slot.ecn, pkt.data, l, header_crc, slot.partial_crc)) BUMP(job, ecn_marked);
  BUMP(job, retransmits_answered);
  note_arrival(job, job.uplink, seq);
  emit(pkt, tx, &job);
}

}  // namespace inagg::agg
