// A job reloaded after the appliance restarted (JobStart::resume): its ranks went on past their
// start PSNs while the appliance was away, and what it knew of them (slots, retained sums, the
// release cursor) is gone. Until a rank's WRITE begins a message, nothing of the job can be placed,
// so its packets are dropped (never forwarded raw); that WRITE's message becomes the job's first,
// as if every rank's start PSN were its own PSN there, and the job takes its usual way from then on.
// Every rank sends the same messages at the same PSN offsets from its start PSN (the job contract),
// so the offset found on one rank names the same message on all of them. Messages older than it are
// stale: a rank that still needs one of them never gets its sum and fails, never a wrong one.
#include "inagg/agg/engine.hpp"

#include "engine_internal.hpp"
#include "inagg/util/log.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

// The job counts from `offset` past every rank's start PSN: a fresh job of those start PSNs.
void Engine::resume_at(Job& job, uint32_t offset) {
  for (Job::Conn& c : job.conns) c.spec.start_psn = wire::psn_add(c.spec.start_psn, offset);
  choose_path(job);
}

template <bool kSharded>
void Engine::resume_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if constexpr (kSharded) {
    if (job.shard != 0) {  // shard 0 finds the message; the others follow it
      const int64_t at = job.shards->resume_at_.load(std::memory_order_acquire);
      if (at < 0) return drop(&job, pkt, &EngineCounters::drop_resuming);
      resume_at(job, static_cast<uint32_t>(at));
      return (this->*job.on_data)(job, rank, pkt, l, now_ns, tx);
    }
  }
  const Job::Conn& conn = job.conns[rank];
  const wire::OpPosition pos = l.info->position;
  const bool begins = (pos == wire::OpPosition::first || pos == wire::OpPosition::only) &&
                      wire::is_rdma_write(l.opcode) && (l.opcode & 0xe0) == wire::op::kRc &&
                      l.payload_len == job.spec.payload_bytes && l.pad == 0;
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  const uint32_t offset = (psn - conn.spec.start_psn) & wire::kPsnMask;
  // A spread job's lcores route a data packet by its PSN's offset from the start PSN modulo the
  // shards: only an offset that is a multiple of them keeps every packet on its shard's lcore.
  if (!begins || (kSharded && (offset & (job.nshards - 1)) != 0) || !wire::icrc_verify(pkt.data, l))
    return drop(&job, pkt, &EngineCounters::drop_resuming);
  if constexpr (kSharded) job.shards->resume_at_.store(offset, std::memory_order_release);
  resume_at(job, offset);
  util::log(util::LogModule::engine, util::LogLevel::info,
            "job %u: resumed after a restart at rank %u's PSN %u (%u past its start PSN); %llu earlier packets dropped",
            job.spec.id, rank, psn, offset, static_cast<unsigned long long>(job.c.drop_resuming));
  (this->*job.on_data)(job, rank, pkt, l, now_ns, tx);
}

// ACKs before the job resumed acknowledge what the appliance released before it restarted (or
// nothing): what they would tell the senders cannot be checked, so they are dropped; the first
// sums released after it acknowledge everything before them.
// (A spread job's ACKs go to shard 0, which resumes the job itself.)
void Engine::resume_ack(Job& job, unsigned, const PacketRef& pkt, const Layout&, uint64_t, TxList&) {
  drop(&job, pkt, &EngineCounters::drop_resuming);
}

template void Engine::resume_data<false>(Job&, unsigned, const PacketRef&, const Layout&, uint64_t, TxList&);
template void Engine::resume_data<true>(Job&, unsigned, const PacketRef&, const Layout&, uint64_t, TxList&);

}  // namespace inagg::agg
