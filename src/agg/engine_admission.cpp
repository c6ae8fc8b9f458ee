// Adding, removing and ending jobs (docs/protocol.md section 2, "The job contract"): checks, budgets, memory.
#include "inagg/agg/engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/util/log.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

void EngineCounters::add(const EngineCounters& o) {
#define X(name, text) name += o.name;
  INAGG_ENGINE_COUNTERS(X)
#undef X
}

Engine::Engine(const EngineConfig& cfg, const BufferOps& ops)
    : cfg_(cfg), ops_(ops), conns_(std::make_unique<ConnTable>()) {}

Engine::~Engine() {
  for (auto& j : jobs_) free_job_memory(*j);
}

Engine::Job* Engine::find_job(uint32_t id, uint16_t channel) {
  for (auto& j : jobs_)
    if (j->spec.id == id && j->spec.channel == channel) return j.get();
  return nullptr;
}

Engine::Sizing Engine::sizing(const control::JobSpec& s) {
  Sizing z;
  if (s.payload_bytes == 0 || s.workers == 0) return z;
  const uint64_t ppm = s.message_bytes / s.payload_bytes;
  const bool rotated = s.collective != control::Collective::allreduce;
  const bool leaf = s.tier == control::Tier::leaf;
  z.nslots = rotated ? 0 : 2 * uint64_t{s.window} * ppm;
  // A rotated collective: n rounds of slots per shard (section 20), and one more for each (n - 1)
  // chunks of window a sender may run ahead of its connection's oldest packet still held; each
  // connection's queue holds W + 1 messages.
  const uint64_t chunk = std::max<uint32_t>(s.chunk, 1), n_1 = s.workers > 1 ? s.workers - 1 : 1;
  z.rot_L = chunk * ppm;
  const uint64_t rot_rounds = s.workers + (s.window + chunk * n_1 - 1) / (chunk * n_1);
  z.rot_nslots = rotated ? rot_rounds * s.workers * z.rot_L : 0;
  z.rot_ring = rotated ? (s.window + 1) * ppm : 0;
  z.memory_bytes = static_cast<size_t>(z.nslots) *
                       (sizeof(Job::Slot) + s.workers * sizeof(Job::Held) + (leaf ? 2 : 1) * size_t{s.payload_bytes}) +
                   static_cast<size_t>(z.rot_nslots) *
                       (sizeof(Job::RotSlot) + s.workers * (sizeof(Job::RotSrc) + 8) + size_t{s.payload_bytes}) +
                   static_cast<size_t>(z.rot_ring) * s.workers * sizeof(Job::RotEntry);
  z.mbufs =
      static_cast<size_t>(z.nslots) * s.workers +
      (s.collective == control::Collective::reduce_scatter ? static_cast<size_t>(z.rot_nslots) : 0) * (s.workers - 1) +
      static_cast<size_t>(z.rot_ring) * s.workers;
  return z;
}

Engine::Footprint Engine::footprint(const control::JobSpec& spec) {
  if (spec.window < 1 || spec.payload_bytes == 0 || spec.message_bytes % spec.payload_bytes != 0 ||
      uint64_t{spec.message_bytes / spec.payload_bytes} * spec.window >= (1u << 22))
    return {};
  const Sizing z = sizing(spec);
  if (z.rot_nslots > (1u << 24)) return {};
  const size_t parts = std::max<uint16_t>(spec.channels, 1);  // each its own slots
  return {z.memory_bytes * parts, z.mbufs * parts};
}

bool Engine::add_job(const control::JobSpec& spec_in, std::string* error, JobStart start) {
  control::JobSpec s = spec_in;
  for (control::ConnectionSpec& c : s.conns) {  // a GID given as ::ffff:a.b.c.d is the IPv4 address
    c.src_ip = util::gid_address(c.src_ip);
    c.dst_ip = util::gid_address(c.dst_ip);
  }
  auto fail = [&](const std::string& msg) {
    *error =
        "job " + std::to_string(s.id) + (s.channels > 1 ? " channel " + std::to_string(s.channel) : "") + ": " + msg;
    return false;
  };
  if (s.workers < 1 || s.workers > 64)
    return fail("workers must be between 1 and 64 (got " + std::to_string(s.workers) + ")");
  if (s.channels < 1 || s.channels > control::kMaxChannels || s.channel >= s.channels)
    return fail("channel " + std::to_string(s.channel) + " of " + std::to_string(s.channels) + ": a job has 1.." +
                std::to_string(control::kMaxChannels) + " channels and this must be one of them");
  for (const control::ConnectionSpec& c : s.conns)
    if (c.channel != s.channel)
      return fail("a conn line of channel " + std::to_string(c.channel) + " in channel " + std::to_string(s.channel) +
                  "'s spec: an engine takes one channel at a time (control::channel_spec)");
  if (s.conns.size() != s.workers)
    return fail("needs one connection per worker: " + std::to_string(s.workers) + " workers but " +
                std::to_string(s.conns.size()) + " conn lines");
  const size_t esize = dtype_size(s.dtype);
  if (s.payload_bytes == 0 || s.payload_bytes % 4 != 0 || s.payload_bytes % esize != 0 || s.payload_bytes > 8192)
    return fail(
        "payload_bytes must be a positive multiple of 4 and at most 8192 (the path MTU payload, e.g. 1024 or 4096); "
        "got " +
        std::to_string(s.payload_bytes));
  if (s.message_bytes == 0 || s.message_bytes % s.payload_bytes != 0)
    return fail("message_bytes (" + std::to_string(s.message_bytes) +
                ") must be a positive multiple of payload_bytes (" + std::to_string(s.payload_bytes) + ")");
  if (s.window < 1) return fail("window must be at least 1 message");
  if (s.tier != control::Tier::flat && s.channels > 1)
    return fail("a leaf or spine job has one channel (channels across racks are not built yet)");
  const uint64_t ppm = s.message_bytes / s.payload_bytes;
  if (ppm * s.window >= (1u << 22))
    return fail(
        "window x packets per message must stay below 2^22 so 24-bit PSNs extend unambiguously; lower window or "
        "message_bytes");
  uint64_t ranks_seen = 0;
  for (const control::ConnectionSpec& c : s.conns) {
    if (c.rank >= s.workers)
      return fail("conn rank " + std::to_string(c.rank) + " is not below workers (" + std::to_string(s.workers) + ")");
    if (bit(ranks_seen, c.rank)) return fail("rank " + std::to_string(c.rank) + " has two conn lines");
    ranks_seen |= 1ull << c.rank;
    if (c.src_ip.version == util::IpVersion::none || c.src_ip.version != c.dst_ip.version)
      return fail("rank " + std::to_string(c.rank) + ": source and destination must both be IPv4 or both IPv6");
    if (c.src_qpn > 0xffffff || c.dst_qpn > 0xffffff)
      return fail("rank " + std::to_string(c.rank) + ": QPNs are 24-bit");
    if (c.start_psn > 0xffffff) return fail("rank " + std::to_string(c.rank) + ": start PSN is 24-bit");
  }
  std::sort(s.conns.begin(), s.conns.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  // A leaf's part of a job across racks: its rack's connections in ring order, from the downlink
  // to the uplink (docs/protocol.md section 21), a chain rather than a ring; live.
  if (s.tier == control::Tier::leaf) {
    if (s.workers < 2)
      return fail("a leaf needs at least 2 connections: the downlink (rank 0) and the uplink (the last rank)");
    if (s.replay) return fail("a leaf cannot be a replay job (a capture has no spine to answer its partials)");
    for (unsigned r = 0; r + 1 < s.workers; ++r)
      if (!(s.conns[r].dst_ip == s.conns[r + 1].src_ip))
        return fail("not a rack's chain: rank " + std::to_string(r) + " writes to " + util::ip_text(s.conns[r].dst_ip) +
                    " but rank " + std::to_string(r + 1) + " sends from " + util::ip_text(s.conns[r + 1].src_ip) +
                    " (a leaf's conn lines run from the downlink, the previous rack's last rank writing to this "
                    "rack's first, to the uplink, this rack's last rank writing to the next rack's first)");
  }
  // A rotated collective (docs/protocol.md section 20): a whole ring on one engine, live.
  const bool rotated = s.collective != control::Collective::allreduce;
  if (rotated) {
    const std::string what = s.collective == control::Collective::reduce_scatter ? "a reduce-scatter" : "an all-gather";
    if (s.workers < 2) return fail(what + " needs at least 2 workers");
    if (s.tier != control::Tier::flat) return fail(what + " runs on a flat job (not across racks yet)");
    if (s.replay) return fail(what + " cannot be a replay job");
    if (s.chunk < 1) return fail("chunk must be at least 1 message");
  }
  if (std::string why; start == JobStart::resume && !s.replay && !control::resumable(s, &why))
    return fail(why + ": remove it from the state directory and register it again");
  // The ring: rank r writes to rank r+1, so its destination is where r+1 sends from. A job that is
  // not a ring cannot be summed (some receiver's traffic would never match), so refuse it now. (A
  // spine's ranks are the racks' uplinks: no ring.)
  for (unsigned r = 0; r < s.workers && s.tier == control::Tier::flat; ++r) {
    const control::ConnectionSpec& c = s.conns[r];
    const control::ConnectionSpec& succ = s.conns[(r + 1) % s.workers];
    if (!(c.dst_ip == succ.src_ip) && s.workers == 1)
      return fail("not a ring: its one rank writes to " + util::ip_text(c.dst_ip) + " but sends from " +
                  util::ip_text(c.src_ip) + " (a job of one rank writes to itself: give the same address twice)");
    if (!(c.dst_ip == succ.src_ip))
      return fail("not a ring: rank " + std::to_string(r) + " writes to " + util::ip_text(c.dst_ip) + " but rank " +
                  std::to_string(succ.rank) + ", its successor, sends from " + util::ip_text(succ.src_ip) +
                  " (each rank's destination must be its successor's source; check the conn lines' addresses)");
  }

  Job* old = find_job(s.id, s.channel);
  if (old && old->state == JobState::active) return fail("already exists and is active; remove it first");
  // Keys must not collide with another job's (a failed job being replaced does not count) or
  // with each other. Closed connections (holds, tombstones) give way to the job.
  std::vector<std::pair<util::IpAddr, uint32_t>> keys;
  for (const control::ConnectionSpec& c : s.conns) {
    keys.push_back({c.dst_ip, c.dst_qpn});
    keys.push_back({c.src_ip, c.src_qpn});
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t k = i + 1; k < keys.size(); ++k)
      if (keys[i] == keys[k]) return fail("QP " + qp_str(keys[i].first, keys[i].second) + " appears twice in the job");
    const ConnEntry* e = conns_->find(keys[i].first.version, keys[i].first.bytes.data(), keys[i].second);
    if (e && e->job && e->job != old)
      return fail("QP " + qp_str(keys[i].first, keys[i].second) + " already belongs to job " +
                  std::to_string(e->job->spec.id));
  }
  size_t total_conns = 0;
  for (auto& j : jobs_)
    if (j.get() != old) total_conns += 2 * j->spec.workers;
  if (total_conns + 2 * s.workers > cfg_.max_connections)
    return fail("would exceed the engine's " + std::to_string(cfg_.max_connections) + " connections");
  if (!old && jobs_.size() >= cfg_.max_jobs)
    return fail("the engine already has its maximum of " + std::to_string(cfg_.max_jobs) + " jobs");

  const Sizing z = sizing(s);
  const uint32_t nslots = static_cast<uint32_t>(z.nslots);
  const bool leaf = s.tier == control::Tier::leaf;
  const uint64_t rot_L = z.rot_L, rot_nslots = z.rot_nslots, rot_ring = z.rot_ring;
  if (rot_nslots > (1u << 24))
    return fail("a rotated collective of " + std::to_string(s.workers) + " workers, chunk " + std::to_string(s.chunk) +
                " and window " + std::to_string(s.window) + " needs " + std::to_string(rot_nslots) +
                " slots; lower chunk or message_bytes");
  const size_t mem = z.memory_bytes, mbufs = z.mbufs;
  if (memory_used_ + mem > cfg_.memory_budget_bytes)
    return fail("needs " + std::to_string(mem >> 10) + " KiB of slot memory but only " +
                std::to_string((cfg_.memory_budget_bytes - memory_used_) >> 10) +
                " KiB of the budget is free; lower window or message_bytes, or raise the memory budget");
  if (mbufs_reserved_ + mbufs > cfg_.mbuf_budget)
    return fail("needs up to " + std::to_string(mbufs) +
                " held packet buffers (2 x window x packets per message x workers) but only " +
                std::to_string(cfg_.mbuf_budget - mbufs_reserved_) + " of the mbuf budget are free");

  auto job = std::make_unique<Job>();
  job->spec = s;
  job->ppm = static_cast<uint32_t>(ppm);
  job->nslots = nslots;
  job->slots.resize(nslots);
  job->held.resize(static_cast<size_t>(nslots) * s.workers);
  job->sums = static_cast<uint8_t*>(
      std::aligned_alloc(64, (static_cast<size_t>(nslots + rot_nslots) * s.payload_bytes + 63) / 64 * 64));
  if (job->sums == nullptr) return fail("out of memory for the retained sums");
  if (leaf) {
    job->partials =
        static_cast<uint8_t*>(std::aligned_alloc(64, (static_cast<size_t>(nslots) * s.payload_bytes + 63) / 64 * 64));
    if (job->partials == nullptr) {
      std::free(job->sums);
      return fail("out of memory for the retained partials");
    }
    job->uplink = s.workers - 1;
    job->local_mask = full_mask(s.workers) & ~1ull;
  }
  if (rotated) {
    job->rot_L = static_cast<uint32_t>(rot_L);
    job->rot_nslots = static_cast<uint32_t>(rot_nslots);
    job->rot_ring = static_cast<uint32_t>(rot_ring);
    job->rot_slots.resize(rot_nslots);
    job->rot_srcs.resize(rot_nslots * s.workers);
    job->rot_wait_seq.resize(rot_nslots * s.workers);
    job->rot_entries.resize(rot_ring * s.workers);
    job->rot_rel.assign(s.workers, 0);
  }
  job->conns.resize(s.workers);
  for (unsigned r = 0; r < s.workers; ++r) {
    job->conns[r].spec = job->spec.conns[r];
    job->conns[r].resend_interval_ns = cfg_.resend_timeout_ns;
    static_assert(control::kAnyPort == kUnknownPort, "a port the registration does not name is not pinned");
    // Ports the registration names are pinned from the start: the rank's data comes from its own,
    // its receiver's ACKs from its successor's.
    job->conns[r].data_port = s.conns[r].port;
    job->conns[r].ack_port = s.conns[(r + 1) % s.workers].port;
  }
  job->shift = wire::Crc32Shift(s.payload_bytes);
  choose_path(*job);
  if (start == JobStart::resume && !s.replay) {  // until it finds where its ranks are (engine_resume.cpp)
    job->resume.resize(s.workers);
    job->on_data = &Engine::resume_data;
    job->on_ack = &Engine::resume_ack;
  }
  job->memory = mem;
  job->mbufs = mbufs;
  job->last_progress_ns = now_ns_;
  // Only now, with everything allocated, does the new job replace a failed one of the same id.
  if (old) jobs_.erase(std::find_if(jobs_.begin(), jobs_.end(), [&](auto& j) { return j.get() == old; }));
  memory_used_ += mem;
  mbufs_reserved_ += mbufs;
  std::erase_if(closed_, [&](const ClosedKey& k) {
    return std::find(keys.begin(), keys.end(), std::pair{k.addr, k.qpn}) != keys.end();
  });
  jobs_.push_back(std::move(job));
  rebuild_conn_table();
  return true;
}

bool Engine::remove_job(uint32_t id, std::string* error) {
  bool found = false;
  for (auto& job : jobs_) {
    if (job->spec.id != id) continue;
    found = true;
    // Tombstones: its senders may still be retrying; none of that may reach a receiver raw.
    for (const control::ConnectionSpec& c : job->spec.conns) {
      closed_.push_back({c.dst_ip, c.dst_qpn, id, now_ns_ + cfg_.closed_hold_ns});
      closed_.push_back({c.src_ip, c.src_qpn, id, now_ns_ + cfg_.closed_hold_ns});
    }
    free_job_memory(*job);
  }
  if (!found) {
    *error = "no job " + std::to_string(id) + " (list jobs to see which exist)";
    return false;
  }
  std::erase_if(jobs_, [&](auto& j) { return j->spec.id == id; });
  rebuild_conn_table();
  return true;
}

void Engine::free_job_memory(Job& job) {
  for (Job::Held& h : job.held) {
    if (h.p.handle) ops_.free(ops_.ctx, h.p.handle);
    h.clear();
  }
  for (Job::RotEntry& e : job.rot_entries)
    if (e.used && e.h.p.handle) ops_.free(ops_.ctx, e.h.p.handle);
  for (Job::RotSrc& src : job.rot_srcs)
    if (src.handle) ops_.free(ops_.ctx, src.handle);
  std::vector<Job::RotEntry>().swap(job.rot_entries);
  std::vector<Job::RotSrc>().swap(job.rot_srcs);
  std::vector<Job::RotSlot>().swap(job.rot_slots);
  job.held_count = job.retained_count = 0;
  std::vector<Job::Held>().swap(job.held);
  std::vector<Job::Slot>().swap(job.slots);
  std::free(job.sums);
  job.sums = nullptr;
  std::free(job.partials);
  job.partials = nullptr;
  memory_used_ -= job.memory;
  mbufs_reserved_ -= job.mbufs;
  job.memory = job.mbufs = 0;
}

bool Engine::job_info(uint32_t id, JobInfo* out, uint16_t channel) const {
  for (auto& j : jobs_) {
    if (j->spec.id != id || j->spec.channel != channel) continue;
    // A rotated collective's release cursor: the least of its connections' (each goes at its own pace).
    const uint64_t released = j->rotated() ? *std::min_element(j->rot_rel.begin(), j->rot_rel.end()) : j->cursor;
    *out = JobInfo{j->spec.id,        j->spec.channel, j->state, j->error, released,          j->held_count,
                   j->retained_count, j->memory,       j->mbufs, j->c,     j->slot_completion};
    return true;
  }
  return false;
}

std::vector<JobInfo> Engine::job_infos() const {
  std::vector<JobInfo> all;
  for (auto& j : jobs_) job_info(j->spec.id, &all.emplace_back(), j->spec.channel);
  return all;
}

std::vector<uint32_t> Engine::job_ids() const {
  std::vector<uint32_t> ids;
  for (auto& j : jobs_)
    if (std::find(ids.begin(), ids.end(), j->spec.id) == ids.end()) ids.push_back(j->spec.id);
  return ids;
}

size_t Engine::held_packets() const {
  size_t n = 0;
  for (auto& j : jobs_) n += j->held_count + j->retained_count;
  return n;
}

void Engine::abort_job(Job& job, const std::string& why, uint64_t EngineCounters::*kind) {
  if (job.state == JobState::failed) return;
  job.state = JobState::failed;
  job.error = job.spec.channels > 1 ? "channel " + std::to_string(job.spec.channel) + ": " + why : why;
  ++(job.c.*kind);
  ++(totals_.*kind);
  if (kind != &EngineCounters::timeouts) {
    ++job.c.job_errors;
    ++totals_.job_errors;
  }
  util::log(util::LogModule::engine, util::LogLevel::warning, "job %u aborted: %s", job.spec.id, job.error.c_str());
  free_job_memory(job);  // held packets dropped: no receiver ever gets a partial sum
}

// What a no-progress timeout most likely means, in words: a registration that never matched says
// which field to check.
std::string Engine::timeout_reason(const Job& job) const {
  std::string why = "no progress for " + std::to_string(cfg_.abort_timeout_ns / 1000000) +
                    " ms (a worker stopped sending or its packets no longer reach the appliance)";
  for (const Job::Conn& c : job.conns) {
    const std::string rank = "rank " + std::to_string(c.spec.rank);
    if (!c.data_seen && c.before_start)
      why += "; " + rank + " sent only PSNs before its registered start PSN 0x" +
             [&] {
               char b[16];
               std::snprintf(b, sizeof b, "%06x", c.spec.start_psn);
               return std::string(b);
             }() +
             " (last 0x" +
             [&] {
               char b[16];
               std::snprintf(b, sizeof b, "%06x", c.before_start_psn);
               return std::string(b);
             }() +
             "): check its start PSN";
    else if (!c.data_seen)
      why += "; no WRITE of " + rank + " to " + qp_str(c.spec.dst_ip, c.spec.dst_qpn) +
             " was ever seen (check its destination address and QPN)";
    else if (!c.acks_seen && job.cursor > 0)
      why += "; no ACK to " + rank + "'s " + qp_str(c.spec.src_ip, c.spec.src_qpn) +
             " was ever seen (check its source address and QPN)";
  }
  if (!job.first_unfit.empty())
    why += "; " + std::to_string(job.c.drop_unfit) +
           " packet(s) broke the job contract and were dropped, the first: " + job.first_unfit;
  return why;
}

}  // namespace inagg::agg
