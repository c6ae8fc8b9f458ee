// Recovery (docs/protocol.md section 12): NAKs, NAKs sent again,
// resends of released packets, each on an exponential backoff within a budget; no-progress aborts.
#include "inagg/agg/engine.hpp"

#include <algorithm>
#include <cstring>

#include "engine_internal.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

// A NAK (PSN sequence error) to rank's sender at its receiver's acknowledged PSN, never at the
// missing one: a NAK acknowledges everything below its PSN. Built from the sender's own headers.
bool Engine::send_nak(Job& job, unsigned rank, uint64_t now_ns, TxList& tx, NakReason why) {
  Job::Conn& conn = job.conns[rank];
  if (!conn.nak_template_ok) return false;
  // The NAK is owed from now on, sent or not: poll() sends it again on the backoff schedule.
  if (why == NakReason::again) {
    conn.nak_interval_ns = std::min(2 * conn.nak_interval_ns, cfg_.resend_max_ns);
    ++conn.nak_rounds;
  } else {
    conn.nak_interval_ns = cfg_.resend_timeout_ns;
    conn.nak_rounds = 1;
  }
  conn.nak_pending = true;
  conn.nak_seq = conn.acked;
  conn.nak_ns = now_ns;
  wire::RoceFrameSpec& s = conn.nak;
  if (s.l2_tags_len > s.l2_tags.size()) {  // more tags than a NAK can carry: leave it to the RC timeout
    BUMP(job, nak_alloc_failed);
    return false;
  }
  s.psn = wire::psn_add(conn.spec.start_psn, static_cast<uint32_t>(conn.acked & wire::kPsnMask));
  s.aeth_msn = conn.msn;
  const size_t len = wire::roce_frame_size(s, 0);
  PacketRef nak = ops_.alloc(ops_.ctx, static_cast<uint16_t>(len));
  if (nak.handle == nullptr) {
    BUMP(job, nak_alloc_failed);
    return false;
  }
  nak.len = static_cast<uint16_t>(wire::build_roce_frame({nak.data, len}, s, {}));
  if (s.src_ip.version == util::IpVersion::v6) {  // IPv6 UDP needs a checksum (kernel stacks drop 0)
    Layout nl;
    if (wire::parse_frame({nak.data, nak.len}, nl) == wire::ParseStatus::roce)
      wire::store_be16(nak.data + nl.l4 + 6, udp6_checksum(nak.data, nl));
  }
  if (why == NakReason::again)
    BUMP(job, naks_resent);
  else if (why == NakReason::gap)
    BUMP(job, naks_sent);
  else
    BUMP(job, tail_naks);
  emit(nak, tx, &job);
  return true;
}

// Per connection, once the job's timers say so: a NAK the sender did not act on goes again; a
// message whose tail never came is NAKed; released packets the receiver did not acknowledge go
// again (loss after the appliance at the tail of a burst: nothing later makes the receiver NAK).
// Each on an exponential backoff and within a budget of rounds, so a dead peer costs a handful of
// packets until the job's timeout ends it, not a flood.
void Engine::recover(Job& job, uint64_t now_ns, TxList& tx) {
  for (unsigned r = 0; r < job.spec.workers && job.state == JobState::active; ++r) {
    Job::Conn& c = job.conns[r];
    if (tx.capacity() - tx.size() < 2) return;  // the next poll goes on from here
    if (c.nak_pending) {
      if (c.nak_rounds < cfg_.resend_budget && elapsed(now_ns, c.nak_ns) > c.nak_interval_ns)
        send_nak(job, r, now_ns, tx, NakReason::again);
    } else if (!job.rotated() && c.data_seen && c.filled % job.ppm != 0 && c.filled == job.cursor &&
               job.slot(c.filled).seq == c.filled && job.slot(c.filled).state == SlotState::collecting &&
               ((job.slot(c.filled).arrived | 1ull << r) & job.awaited(job.slot(c.filled))) ==
                   job.awaited(job.slot(c.filled)) &&
               elapsed(now_ns, c.last_data_ns) > 4 * cfg_.resend_timeout_ns) {
      // The whole job waits for this one packet: its sender started the message (its first
      // packets are here), every other rank sent this packet, and the sender has sent nothing
      // since: the message's tail was lost before the appliance.
      send_nak(job, r, now_ns, tx, NakReason::tail);
      c.nak_target = (c.filled / job.ppm + 1) * job.ppm;
    }
    if (tx.capacity() - tx.size() < 2) return;

    // Released and not acknowledged: from the receiver's acked sequence up to the last released.
    const uint64_t cursor = job.released_for(r);
    if (c.acked >= cursor) continue;
    if (elapsed(now_ns, std::max({c.last_ack_ns, job.last_release_ns, c.resend_ns})) <= c.resend_interval_ns) continue;
    if (c.resend_rounds >= cfg_.resend_budget) continue;
    // The oldest unacknowledged released packet (in case that is what it lost) and the newest one
    // (if anything between was lost too, the newest is beyond its expected PSN and it NAKs the
    // sender, whose go-back-N retransmissions are answered from the retained sums).
    const uint64_t newest = cursor - 1;
    const uint64_t oldest = std::max(c.acked, cursor > job.span() ? cursor - job.span() : 0);
    for (uint64_t s : {oldest, newest}) {
      Job::Held* h = job.retained(r, s);
      if (!h) continue;
      ops_.ref(ops_.ctx, h->p.handle);
      emit(h->p, tx, &job);
      BUMP(job, resends);
      if (newest == oldest) break;
    }
    c.resend_ns = now_ns;
    c.resend_interval_ns = std::min(2 * c.resend_interval_ns, cfg_.resend_max_ns);
    if (++c.resend_rounds == cfg_.resend_budget) BUMP(job, resend_budget_spent);
  }
}

void Engine::poll(uint64_t now_ns, TxList& tx) {
  if (now_ns > now_ns_) now_ns_ = now_ns;
  // Releases and aborts first, for every job, so a full TX list never starves them.
  for (auto& jp : jobs_) {
    Job& job = *jp;
    if (job.state != JobState::active) continue;
    release_ready(job, now_ns, tx);  // continue a release that TX space cut short
    const bool pending = job.held_count > 0 || (!job.spec.replay && job.retained_count > 0 &&
                                                std::any_of(job.conns.begin(), job.conns.end(), [&](auto& c) {
                                                  return c.acked < job.released_for(c.spec.rank);
                                                }));
    if (!pending) {
      job.last_progress_ns = now_ns;
      continue;
    }
    if (elapsed(now_ns, job.last_progress_ns) > cfg_.abort_timeout_ns)
      abort_job(job, timeout_reason(job), &EngineCounters::timeouts);
  }
  if (!cfg_.fast_recovery) return;
  for (auto& jp : jobs_) {
    if (jp->state != JobState::active || jp->spec.replay) continue;  // a replayed capture has no receivers
    recover(*jp, now_ns, tx);
  }
}

}  // namespace inagg::agg
