// What only a shard of a job spread over several engines does (protocol.md section 4, "Slots
// sharded by index"): releases in ticket order onto the job's ordered path, the acknowledgements
// shard 0 publishes, and a looping capture's generations agreed between the shards.
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

// Releases this shard's complete slots from its cursor on while the ticket says it is its turn
// and the job's ordered path takes them.
void Engine::release_sharded(Job& job, uint64_t now_ns, TxList&) {
  const unsigned n = job.spec.workers;
  JobShards& sh = *job.shards;
  while (job.state == JobState::active) {
    Job::Slot& slot = job.slot(job.cursor);
    if (slot.state != SlotState::complete || slot.seq != job.cursor) return;
    Job::Held* held = &job.held_at(job.cursor, 0);
    const uint64_t turn = job.base + job.cursor;
    if (sh.ticket_.load(std::memory_order_acquire) != turn) return;  // an earlier slot is another shard's
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
    sh.handed_.store(turn + 1, std::memory_order_release);
    if (!sh.tx_.send(sh.tx_.ctx, out, n)) {
      for (unsigned r = 0; r < n; ++r) ops_.free(ops_.ctx, held[r].p.handle);
      sh.handed_.store(turn, std::memory_order_release);
      return;  // no room on the ordered path: release_turns()/poll() try again
    }
    // The next sequence's shard may go: our n packets are ahead of its on the ordered path.
    sh.ticket_.store(turn + 1, std::memory_order_release);
    mark_released(job, now_ns);
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

}  // namespace inagg::agg
