// Reduce-scatter and all-gather in one pass (docs/protocol.md section 20): rotated shards and
// rotated placeholders. A connection's packets map to (round, shard, packet of a chunk) by their
// sequence alone; each connection's packets go out in its own PSN order, from a queue of their own.
//   reduce-scatter: every contribution is added to its shard's slot (a reference kept until the
//     slot is summed) and passes on unchanged, except the last of its round, on the connection into
//     the shard's owner, which waits for the slot's n - 1 contributions and goes out with their sum;
//   all-gather: the owner's data passes on unchanged and is copied into its slot; each placeholder
//     for it goes out with the copy, waiting for it if it came first.
// A packet that went out and comes again (the sender went back) passes on unchanged again, or
// carries the slot's sum or copy again; nothing is added twice (the arrival bitmap).
#include <algorithm>
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/agg/engine.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

namespace {

// The ranks whose packets a slot of `shard` waits for: reduce-scatter, every rank but the owner;
// all-gather, the placeholders of every rank but the owner and the owner's predecessor (whose
// successor is the owner, which lacks nothing of its own shard).
uint64_t rot_awaited(const Engine::Job& job, unsigned shard) {
  const unsigned n = job.spec.workers;
  uint64_t m = full_mask(n) & ~(1ull << shard);
  if (!job.reduce_scatter()) m &= ~(1ull << ((shard + n - 1) % n));
  return m;
}

}  // namespace

void Engine::handle_rotated(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns,
                            TxList& tx) {
  if (job.state == JobState::failed) return drop(&job, pkt, &EngineCounters::failed_job_drops);
  uint32_t header_crc = 0;
  uint64_t q = 0;
  if (!admit_rotated(job, rank, pkt, l, &header_crc, &q)) return;
  const unsigned n = job.spec.workers;
  const bool rs = job.reduce_scatter();
  const Job::RotPlace at = job.rot_place(rank, q);
  Job::RotSlot& slot = job.rot_slot(at.g);
  const bool passes = job.rot_passes(at);

  if (q < job.rot_rel[rank]) {  // it went out before: the sender went back
    note_data(job, rank, pkt, l, q, now_ns, tx);
    note_arrival(job, rank, q);
    if (!passes) {
      if (!slot.used || slot.g != at.g || !(rs ? slot.done : slot.copy))
        return drop(&job, pkt, &EngineCounters::stale);  // its round no longer holds the slot
      std::memcpy(pkt.data + l.payload, job.rot_buf(at.g), job.spec.payload_bytes);
      if (finish_payload(job, rs && slot.ecn, pkt.data, l, header_crc, slot.crc)) BUMP(job, ecn_marked);
    }
    BUMP(job, retransmits_answered);
    return emit(pkt, tx, &job);
  }
  Job::RotEntry& e = job.rot_entry(rank, q);
  if (e.used && e.seq == q) {  // waiting in its connection's queue already
    note_data(job, rank, pkt, l, q, now_ns, tx);
    note_arrival(job, rank, q);
    return drop(&job, pkt, &EngineCounters::duplicates_dropped);
  }
  if (e.used) {
    // The queue holds W + 1 messages per connection: a sender within its window never reaches a
    // packet its receiver has not acknowledged (and every acknowledgement crosses the engine).
    BUMP(job, err_ahead_of_window);
    return drop(&job, pkt, &EngineCounters::drop_unfit);
  }
  if (slot.used && slot.g > at.g) return drop(&job, pkt, &EngineCounters::stale);
  // The slot still holds an earlier round of the shard: dropped as if lost, before the connection
  // notes it, so that its next packet is a gap and the sender goes back to it.
  if (slot.used && slot.g < at.g && !slot.done) return drop(&job, pkt, &EngineCounters::drop_slot_busy);
  note_data(job, rank, pkt, l, q, now_ns, tx);
  if (!slot.used || slot.g < at.g) {
    slot = Job::RotSlot{};
    slot.g = at.g;
    slot.used = true;
    slot.first_ns = now_ns;
  }
  e.h.hold(pkt, l, header_crc);
  e.seq = q;
  e.used = true;
  e.ready = true;
  e.released = false;
  ++job.held_count;
  note_arrival(job, rank, q);
  job.last_progress_ns = now_ns;
  const size_t si = job.rot_index(at.g);

  if (rs) {
    if (!bit(slot.arrived, rank)) {
      slot.arrived |= 1ull << rank;
      ops_.ref(ops_.ctx, pkt.handle);  // the contribution, until the slot is summed
      job.rot_srcs[si * n + rank] = {pkt.handle, pkt.data + l.payload};
      if (ecn_of(pkt.data, l) == wire::kEcnCe || wire::bth_of(pkt.data, l).fecn()) slot.ecn = true;
      BUMP(job, aggregated_packets);
      job.c.aggregated_bytes += l.payload_len;
      totals_.aggregated_bytes += l.payload_len;
    }
    if (passes) {
      BUMP(job, forwarded_unchanged);
    } else {
      e.ready = false;  // the last of its round, into the owner: waits for the sum
      slot.held_seq = q;
    }
    if (!slot.done && slot.arrived == rot_awaited(job, at.shard)) {
      rot_sum(job, at.g, at.shard);
      job.slot_completion.observe(elapsed(now_ns, slot.first_ns));
      rot_release(job, (at.shard + n - 1) % n, now_ns, tx);
    }
  } else if (passes) {  // the owner's data: copied, and every placeholder waiting for it filled
    std::memcpy(job.rot_buf(at.g), pkt.data + l.payload, job.spec.payload_bytes);
    slot.crc = wire::crc32({job.rot_buf(at.g), job.spec.payload_bytes});
    slot.copy = true;
    BUMP(job, forwarded_unchanged);
    BUMP(job, aggregated_packets);
    job.c.aggregated_bytes += l.payload_len;
    totals_.aggregated_bytes += l.payload_len;
    for (unsigned r = 0; r < n; ++r) {
      if (!bit(slot.waiting, r)) continue;
      rot_fill(job, at.g, r, job.rot_wait_seq[si * n + r]);
      rot_release(job, r, now_ns, tx);
    }
    slot.waiting = 0;
  } else if (slot.copy) {
    rot_fill(job, at.g, rank, q);
  } else {
    e.ready = false;  // a placeholder before its owner's data: waits for the copy
    slot.waiting |= 1ull << rank;
    job.rot_wait_seq[si * n + rank] = q;
  }
  if (!rs) slot.done = slot.copy && slot.arrived == rot_awaited(job, at.shard);
  rot_release(job, rank, now_ns, tx);
}

// Every contribution to the slot is in: their sum in rank order goes into the held packet (the last
// of its round on the connection into the owner) and the slot's buffer (for its retransmissions);
// the contributions' references go.
void Engine::rot_sum(Job& job, uint64_t g, unsigned shard) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  Job::RotSlot& slot = job.rot_slot(g);
  Job::RotSrc* in = &job.rot_srcs[job.rot_index(g) * n];
  Job::RotEntry& held = job.rot_entry((shard + n - 1) % n, slot.held_seq);
  const uint8_t* srcs[64] = {};
  unsigned m = 0;
  for (unsigned r = 0; r < n; ++r)
    if (r != shard) srcs[m++] = in[r].payload;
  uint8_t* dsts[2] = {job.rot_buf(g), held.h.p.data + held.h.l.payload};  // the held payload is a source too
  sum_ranked_broadcast(job.spec.dtype, dsts, 2, srcs, m, P);
  slot.crc = wire::crc32({dsts[0], P});
  if (finish_payload(job, slot.ecn, held.h.p.data, held.h.l, held.h.header_crc, slot.crc)) BUMP(job, ecn_marked);
  for (unsigned r = 0; r < n; ++r) {
    if (in[r].handle) ops_.free(ops_.ctx, in[r].handle);
    in[r] = {};
  }
  held.ready = true;
  slot.done = true;
  BUMP(job, slots_completed);
}

// The owner's data into rank's placeholder at sequence q (waiting in its connection's queue), with
// a fresh ICRC.
void Engine::rot_fill(Job& job, uint64_t g, unsigned rank, uint64_t q) {
  Job::RotSlot& slot = job.rot_slot(g);
  Job::RotEntry& e = job.rot_entry(rank, q);
  std::memcpy(e.h.p.data + e.h.l.payload, job.rot_buf(g), job.spec.payload_bytes);
  finish_payload(job, false, e.h.p.data, e.h.l, e.h.header_crc, slot.crc);
  e.ready = true;
  slot.arrived |= 1ull << rank;
  BUMP(job, placeholders_filled);
}

// The connection's packets that may go, from its next sequence on, in order, while TX has room
// (poll() continues what a full TX list cut short). Each stays until its receiver acknowledges it.
void Engine::rot_release(Job& job, unsigned rank, uint64_t now_ns, TxList& tx) {
  while (job.state == JobState::active) {
    const uint64_t q = job.rot_rel[rank];
    Job::RotEntry& e = job.rot_entry(rank, q);
    if (!e.used || e.seq != q || !e.ready) return;
    if (tx.size() == tx.capacity()) return;
    ops_.ref(ops_.ctx, e.h.p.handle);
    tx.push(e.h.p);
    e.released = true;
    --job.held_count;
    ++job.retained_count;
    if (!job.rot_passes(job.rot_place(rank, q))) {  // a sum or a copy
      BUMP(job, released_packets);
      if (job.reduce_scatter()) BUMP(job, slots_released);
    }
    ++job.rot_rel[rank];
    job.last_progress_ns = job.last_release_ns = now_ns;
  }
}

void Engine::rot_free_acknowledged(Job& job, unsigned rank, uint64_t to) {
  const uint64_t from = std::max(job.conns[rank].acked, to > job.rot_ring ? to - job.rot_ring : 0);
  for (uint64_t q = from; q < to; ++q) {
    Job::RotEntry& e = job.rot_entry(rank, q);
    if (!e.used || e.seq != q || !e.released) continue;
    ops_.free(ops_.ctx, e.h.p.handle);
    e.h.clear();
    e.used = e.released = false;
    --job.retained_count;
  }
}

}  // namespace inagg::agg
