// A job reloaded after the appliance restarted (JobStart::resume): its ranks went on past their
// start PSNs while the appliance was away, and what it knew of them (slots, retained sums, the
// release cursor, what each receiver has) is gone. Until it knows where to resume, its packets are
// dropped, never forwarded raw. Every rank sends the same messages at the same PSN offsets from its
// start PSN (the job contract), so one offset names the same packet on every rank.
//
// The drops make every sender's RC retransmission go back to the first packet its
// receiver lacks (go-back-N), which shows as a step back in the rank's offsets. Once every rank
// went back, the job resumes at the furthest of those points: a slot can be summed only when every
// sender sends it, and each sends only from its own point on. Ranks caught with their receivers at
// the same point (the appliance released each slot to all of them at once) all go on; a receiver
// that lacked more than the others never gets those sums and its rank fails, never with a wrong one.
// Ranks between two allreduces lose nothing: their next message is where they all go back to.
// A reduce-scatter or all-gather resumes the same way, only at the start of a round (ranks between
// two calls are there); inside one it is aborted (resumed_mid_round), its ranks failing on their RC
// retries as above. It is reloaded only when its rounds divide the 2^24 PSNs (control::resumable):
// an offset from the start PSN then tells the place in a round even past a wrap.
#include "inagg/agg/engine.hpp"

#include "engine_internal.hpp"
#include "inagg/util/log.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

namespace {

// The packet fits the job (its size and position at this offset, a WRITE over RC, a good ICRC).
bool fits(const control::JobSpec& spec, uint32_t ppm, uint32_t offset, const PacketRef& pkt, const Layout& l) {
  return wire::is_rdma_write(l.opcode) && (l.opcode & 0xe0) == wire::op::kRc &&
         l.info->position == expected_position(offset % ppm, ppm) && l.payload_len == spec.payload_bytes &&
         l.pad == 0 && wire::icrc_verify(pkt.data, l);
}

}  // namespace

// Everything below `seq` went out before the restart, as far as it knows.
void Engine::resume_from(Job& job, uint64_t seq) {
  job.cursor = job.up_cursor = job.highest = job.floor = seq;
  for (Job::Conn& c : job.conns) {
    c.expected = c.filled = c.nak_seq = c.nak_target = c.acked = seq;
    if (seq > 0) {  // the next packet after `seq` - 1: a step over `seq` is a loss to NAK
      c.last_seq = seq - 1;
      c.data_seen = true;
    }
  }
  if (job.rotated()) job.rot_rel.assign(job.spec.workers, seq);
  std::vector<Job::ResumeTrack>().swap(job.resume);
  choose_path(job);
}

void Engine::resume_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if (job.state == JobState::failed) return drop(&job, pkt, &EngineCounters::failed_job_drops);
  const Job::Conn& conn = job.conns[rank];
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  const uint32_t offset = (psn - conn.spec.start_psn) & wire::kPsnMask;
  if (!fits(job.spec, job.ppm, offset, pkt, l)) return drop(&job, pkt, &EngineCounters::drop_resuming);
  Job::ResumeTrack& t = job.resume[rank];
  if (!t.seen || (!t.back && sext24(offset - t.highest) > 0)) {
    t.seen = true;
    t.highest = offset;
  } else if (!t.back) {
    t.back = true;
    t.point = offset;
    // A reduce-scatter or all-gather sums a round from packets at every position of it (each
    // connection carries the shards in its own order): inside a round, the contributions before
    // the restart are gone and the round could never finish. A point there is taken as lost
    // packets first (the one the sender went back to may not have arrived): the rank is watched
    // for its next go-back; the third such point aborts the job.
    if (job.rotated() && offset % job.rot_round() != 0) {
      if (++t.inside_round < 3) {
        t.back = false;
        t.highest = offset;
        return drop(&job, pkt, &EngineCounters::drop_resuming);
      }
      abort_job(job,
                "resumed after a restart inside a round (rank " + std::to_string(rank) + " went back to " +
                    std::to_string(offset) + " packets past its start PSN three times; rounds of " +
                    std::to_string(job.rot_round()) +
                    "): the call in flight at the restart lost its partial sums with it; register the job again",
                &EngineCounters::resumed_mid_round);
      return drop(&job, pkt, &EngineCounters::failed_job_drops);
    }
  }
  uint32_t furthest = job.resume[0].point;
  for (const Job::ResumeTrack& r : job.resume) {
    if (!r.back) return drop(&job, pkt, &EngineCounters::drop_resuming);
    if (sext24(r.point - furthest) > 0) furthest = r.point;
  }
  resume_from(job, furthest);
  const uint32_t at = static_cast<uint32_t>(job.floor);  // the start PSNs stay; the floor moved
  util::log(util::LogModule::engine, util::LogLevel::info,
            "job %u: resumed after a restart %u packets past the registered start PSNs (rank %u's PSN %u); %llu "
            "packets dropped until then",
            job.spec.id, at, rank, wire::psn_add(conn.spec.start_psn, at),
            static_cast<unsigned long long>(job.c.drop_resuming));
  (this->*job.on_data)(job, rank, pkt, l, now_ns, tx);
}

// ACKs before the job resumed acknowledge what the appliance released before it restarted (or
// nothing): what they would tell the senders cannot be checked, so they are dropped; the first
// sums released after it acknowledge everything before them.
void Engine::resume_ack(Job& job, unsigned, const PacketRef& pkt, const Layout&, uint64_t, TxList&) {
  drop(&job, pkt, job.state == JobState::failed ? &EngineCounters::failed_job_drops : &EngineCounters::drop_resuming);
}

}  // namespace inagg::agg
