#include "inagg/agg/engine.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "inagg/agg/kernels.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;

void EngineCounters::add(const EngineCounters& o) {
#define X(name, text) name += o.name;
  INAGG_ENGINE_COUNTERS(X)
#undef X
}

namespace {

enum class SlotState : uint8_t { empty, collecting, complete, released };

// Sign-extends a 24-bit PSN difference.
inline int64_t sext24(uint32_t d) {
  d &= wire::kPsnMask;
  return d & 0x800000 ? static_cast<int64_t>(d) - 0x1000000 : static_cast<int64_t>(d);
}

// Time since `then`, 0 if the caller's clock is a little behind it (timestamps taken per burst).
inline uint64_t elapsed(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

inline bool bit(uint64_t mask, unsigned r) { return (mask >> r) & 1; }
inline uint64_t full_mask(unsigned n) { return n == 64 ? ~0ull : (1ull << n) - 1; }

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Job state.

struct Engine::Job {
  struct Conn {
    ConnectionSpec spec;
    // The sender (data direction).
    uint64_t expected = 0;       // one past the highest sequence seen from the sender
    uint64_t last_seq = 0;       // the sequence of its latest packet (its current go-back-N pass)
    uint64_t filled = 0;         // every sequence below this arrived (or was released)
    uint64_t last_data_ns = 0;
    bool data_seen = false;
    uint16_t data_port = kUnknownPort;  // the port the sender was first seen on
    uint64_t before_start = 0;          // packets before the registered start PSN (a timeout says so)
    uint32_t before_start_psn = 0;
    // Its receiver (ACK direction).
    uint64_t acked = 0;          // the receiver holds every sequence below this
    uint32_t msn = 0;            // the receiver's last reported MSN (for the NAKs we send)
    uint64_t last_ack_ns = 0;
    bool acks_seen = false;
    uint16_t ack_port = kUnknownPort;   // the port the receiver was first seen on (where its sums go)
    // NAKs the engine sends the sender, and their backoff.
    bool nak_pending = false;    // a NAK went out; the sender has neither gone back nor filled the gap
    uint64_t nak_seq = 0;        // the sequence it named (the receiver's acked then)
    uint64_t nak_target = 0;     // the gap is closed once `filled` reaches this
    uint64_t nak_ns = 0;
    uint64_t nak_interval_ns = 0;
    unsigned nak_rounds = 0;
    // Resends to the receiver, and their backoff.
    uint64_t resend_ns = 0;
    uint64_t resend_interval_ns = 0;
    unsigned resend_rounds = 0;
    // What a NAK to the sender looks like: its first valid packet's headers, reversed.
    bool nak_template_ok = false;
    wire::RoceFrameSpec nak;
  };
  struct Held {
    PacketRef p;
    Layout l;
    uint32_t header_crc = 0;  // the ICRC's header part; rewriting masked fields keeps it valid
    bool retained = false;    // released and kept for a resend
  };
  struct Slot {
    uint64_t seq = 0;       // slot sequence (message * ppm + packet index) it holds
    uint64_t arrived = 0;   // one bit per rank
    SlotState state = SlotState::empty;
    bool ecn = false;       // some input was CE-marked or had FECN
    uint32_t payload_crc = 0;
  };

  JobSpec spec;
  JobState state = JobState::active;
  std::string error;
  uint32_t ppm = 0;    // packets per message
  uint32_t nslots = 0; // 2 W ppm
  std::vector<Slot> slots;
  std::vector<Held> held;  // nslots x n
  uint8_t* sums = nullptr; // nslots x P retained sums, 64-byte aligned
  std::vector<Conn> conns;
  wire::Crc32Shift shift;
  uint64_t cursor = 0;     // next sequence to release
  uint64_t highest = 0;    // one past the highest sequence any packet has claimed
  size_t held_count = 0, retained_count = 0;
  uint64_t last_progress_ns = 0, last_release_ns = 0;
  size_t memory = 0, mbufs = 0;
  uint64_t drop_log_ns = 0, drops_unlogged = 0;  // rate limit of the drop log line
  bool drop_logged = false;
  EngineCounters c;

  Slot& slot(uint64_t seq) { return slots[seq % nslots]; }
  Held& held_at(uint64_t seq, unsigned rank) { return held[(seq % nslots) * spec.workers + rank]; }
  uint8_t* sum_at(uint64_t seq) { return sums + (seq % nslots) * spec.payload_bytes; }

  // Whether the sender's packet of `seq` is in (or went out with a sum).
  bool arrived(uint64_t seq, unsigned rank) {
    const Slot& s = slot(seq);
    if (s.state == SlotState::empty || s.seq < seq) return false;
    if (s.seq > seq || s.state != SlotState::collecting) return true;
    return bit(s.arrived, rank);
  }
};

// Open-addressing map (address, QPN) -> (job, rank, direction) or a closed connection, rebuilt on
// every job change (the control path), read-only on the fast path.
struct Engine::ConnEntry {
  bool used = false;
  bool ack_direction = false;  // key is the sender's QP: ACKs flow to it
  wire::IpAddr addr;
  uint32_t qpn = 0;
  Job* job = nullptr;          // nullptr: a closed connection
  unsigned rank = 0;
  uint64_t closed_until_ns = 0;
};

struct Engine::ConnTable {
  std::vector<ConnEntry> entries;
  size_t mask = 0;
  bool any_v4 = false;  // whether an IPv4-mapped IPv6 destination could name a key

  ConnTable() { resize(0); }
  // Sized to the connections in use (load <= 1/2), so the fast path's probes stay in cache.
  void resize(size_t conns) {
    size_t cap = 16;
    while (cap < 2 * conns) cap <<= 1;
    entries.assign(cap, ConnEntry{});
    mask = cap - 1;
    any_v4 = false;
  }
  static size_t hash(const uint8_t* addr, uint32_t qpn) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ qpn;
    for (int i = 0; i < 16; i += 8) {
      uint64_t w;
      std::memcpy(&w, addr + i, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdull;
      h ^= h >> 33;
    }
    return static_cast<size_t>(h);
  }
  void insert(const ConnEntry& e) {
    if (e.addr.version == wire::IpVersion::v4) any_v4 = true;
    for (size_t i = hash(e.addr.bytes.data(), e.qpn) & mask;; i = (i + 1) & mask) {
      if (!entries[i].used) {
        entries[i] = e;
        return;
      }
    }
  }
  const ConnEntry* find(wire::IpVersion v, const uint8_t* addr, uint32_t qpn) const {
    uint8_t key[16] = {};
    if (v == wire::IpVersion::v4)
      std::memcpy(key, addr, 4);
    else
      std::memcpy(key, addr, 16);
    for (size_t i = hash(key, qpn) & mask;; i = (i + 1) & mask) {
      const ConnEntry& e = entries[i];
      if (!e.used) return nullptr;
      if (e.qpn == qpn && e.addr.version == v && std::memcmp(e.addr.bytes.data(), key, 16) == 0) return &e;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Control path.

Engine::Engine(const EngineConfig& cfg, const BufferOps& ops)
    : cfg_(cfg), ops_(ops), conns_(std::make_unique<ConnTable>()) {}

Engine::~Engine() {
  for (auto& j : jobs_) free_job_memory(*j);
}

Engine::Job* Engine::find_job(uint32_t id) {
  for (auto& j : jobs_)
    if (j->spec.id == id) return j.get();
  return nullptr;
}

bool Engine::add_job(const JobSpec& spec_in, std::string* error) {
  JobSpec s = spec_in;
  for (ConnectionSpec& c : s.conns) {  // a GID given as ::ffff:a.b.c.d is the IPv4 address
    c.src_ip = wire::gid_address(c.src_ip);
    c.dst_ip = wire::gid_address(c.dst_ip);
  }
  auto fail = [&](const std::string& msg) {
    *error = "job " + std::to_string(s.id) + ": " + msg;
    return false;
  };
  if (s.workers < 1 || s.workers > 64) return fail("workers must be between 1 and 64 (got " + std::to_string(s.workers) + ")");
  if (s.conns.size() != s.workers)
    return fail("needs one connection per worker: " + std::to_string(s.workers) + " workers but " +
                std::to_string(s.conns.size()) + " conn lines");
  const size_t esize = dtype_size(s.dtype);
  if (s.payload_bytes == 0 || s.payload_bytes % 4 != 0 || s.payload_bytes % esize != 0 || s.payload_bytes > 8192)
    return fail("payload_bytes must be a positive multiple of 4 and at most 8192 (the path MTU payload, e.g. 1024 or 4096); got " +
                std::to_string(s.payload_bytes));
  if (s.message_bytes == 0 || s.message_bytes % s.payload_bytes != 0)
    return fail("message_bytes (" + std::to_string(s.message_bytes) + ") must be a positive multiple of payload_bytes (" +
                std::to_string(s.payload_bytes) + ")");
  if (s.window < 1) return fail("window must be at least 1 message");
  const uint64_t ppm = s.message_bytes / s.payload_bytes;
  if (ppm * s.window >= (1u << 22))
    return fail("window x packets per message must stay below 2^22 so 24-bit PSNs extend unambiguously; lower window or message_bytes");
  uint64_t ranks_seen = 0;
  for (const ConnectionSpec& c : s.conns) {
    if (c.rank >= s.workers) return fail("conn rank " + std::to_string(c.rank) + " is not below workers (" + std::to_string(s.workers) + ")");
    if (bit(ranks_seen, c.rank)) return fail("rank " + std::to_string(c.rank) + " has two conn lines");
    ranks_seen |= 1ull << c.rank;
    if (c.src_ip.version == wire::IpVersion::none || c.src_ip.version != c.dst_ip.version)
      return fail("rank " + std::to_string(c.rank) + ": source and destination must both be IPv4 or both IPv6");
    if (c.src_qpn > 0xffffff || c.dst_qpn > 0xffffff) return fail("rank " + std::to_string(c.rank) + ": QPNs are 24-bit");
    if (c.start_psn > 0xffffff) return fail("rank " + std::to_string(c.rank) + ": start PSN is 24-bit");
  }
  std::sort(s.conns.begin(), s.conns.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  // The ring: rank r writes to rank r+1, so its destination is where r+1 sends from. A job that is
  // not a ring cannot be summed (some receiver's traffic would never match), so refuse it now.
  for (unsigned r = 0; r < s.workers; ++r) {
    const ConnectionSpec& c = s.conns[r];
    const ConnectionSpec& succ = s.conns[(r + 1) % s.workers];
    if (!(c.dst_ip == succ.src_ip) && s.workers == 1)
      return fail("not a ring: its one rank writes to " + wire::ip_text(c.dst_ip) + " but sends from " +
                  wire::ip_text(c.src_ip) + " (a job of one rank writes to itself: give the same address twice)");
    if (!(c.dst_ip == succ.src_ip))
      return fail("not a ring: rank " + std::to_string(r) + " writes to " + wire::ip_text(c.dst_ip) + " but rank " +
                  std::to_string(succ.rank) + ", its successor, sends from " + wire::ip_text(succ.src_ip) +
                  " (each rank's destination must be its successor's source; check the conn lines' addresses)");
  }

  Job* old = find_job(s.id);
  if (old && old->state == JobState::active)
    return fail("already exists and is active; remove it first");
  // Keys must not collide with another job's (a failed job being replaced does not count) or
  // with each other. Closed connections (holds, tombstones) give way to the job.
  std::vector<std::pair<wire::IpAddr, uint32_t>> keys;
  for (const ConnectionSpec& c : s.conns) {
    keys.push_back({c.dst_ip, c.dst_qpn});
    keys.push_back({c.src_ip, c.src_qpn});
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t k = i + 1; k < keys.size(); ++k)
      if (keys[i] == keys[k]) return fail("QP " + qp_str(keys[i].first, keys[i].second) + " appears twice in the job");
    const ConnEntry* e = conns_->find(keys[i].first.version, keys[i].first.bytes.data(), keys[i].second);
    if (e && e->job && e->job != old)
      return fail("QP " + qp_str(keys[i].first, keys[i].second) + " already belongs to job " + std::to_string(e->job->spec.id));
  }
  size_t total_conns = 0;
  for (auto& j : jobs_)
    if (j.get() != old) total_conns += 2 * j->spec.workers;
  if (total_conns + 2 * s.workers > cfg_.max_connections)
    return fail("would exceed the engine's " + std::to_string(cfg_.max_connections) + " connections");
  if (!old && jobs_.size() >= cfg_.max_jobs) return fail("the engine already has its maximum of " + std::to_string(cfg_.max_jobs) + " jobs");

  const uint32_t nslots = static_cast<uint32_t>(2 * s.window * ppm);
  const size_t mem = static_cast<size_t>(nslots) *
                     (sizeof(Job::Slot) + s.workers * sizeof(Job::Held) + s.payload_bytes);
  const size_t mbufs = static_cast<size_t>(nslots) * s.workers;
  if (memory_used_ + mem > cfg_.memory_budget_bytes)
    return fail("needs " + std::to_string(mem >> 10) + " KiB of slot memory but only " +
                std::to_string((cfg_.memory_budget_bytes - memory_used_) >> 10) +
                " KiB of the budget is free; lower window or message_bytes, or raise the memory budget");
  if (mbufs_reserved_ + mbufs > cfg_.mbuf_budget)
    return fail("needs up to " + std::to_string(mbufs) + " held packet buffers (2 x window x packets per message x workers) but only " +
                std::to_string(cfg_.mbuf_budget - mbufs_reserved_) + " of the mbuf budget are free");

  auto job = std::make_unique<Job>();
  job->spec = s;
  job->ppm = static_cast<uint32_t>(ppm);
  job->nslots = nslots;
  job->slots.resize(nslots);
  job->held.resize(static_cast<size_t>(nslots) * s.workers);
  job->sums = static_cast<uint8_t*>(std::aligned_alloc(64, (static_cast<size_t>(nslots) * s.payload_bytes + 63) / 64 * 64));
  if (job->sums == nullptr) return fail("out of memory for the retained sums");
  job->conns.resize(s.workers);
  for (unsigned r = 0; r < s.workers; ++r) {
    job->conns[r].spec = job->spec.conns[r];
    job->conns[r].resend_interval_ns = cfg_.resend_timeout_ns;
  }
  job->shift = wire::Crc32Shift(s.payload_bytes);
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
  Job* job = find_job(id);
  if (!job) {
    *error = "no job " + std::to_string(id) + " (list jobs to see which exist)";
    return false;
  }
  // Tombstones: its senders may still be retrying; none of that may reach a receiver raw.
  for (const ConnectionSpec& c : job->spec.conns) {
    closed_.push_back({c.dst_ip, c.dst_qpn, id, now_ns_ + cfg_.closed_hold_ns});
    closed_.push_back({c.src_ip, c.src_qpn, id, now_ns_ + cfg_.closed_hold_ns});
  }
  free_job_memory(*job);
  jobs_.erase(std::find_if(jobs_.begin(), jobs_.end(), [&](auto& j) { return j.get() == job; }));
  rebuild_conn_table();
  return true;
}

void Engine::hold_closed(const JobSpec& spec) {
  for (const ConnectionSpec& c : spec.conns) {
    for (const auto& [ip, qpn] : {std::pair{wire::gid_address(c.dst_ip), c.dst_qpn}, std::pair{wire::gid_address(c.src_ip), c.src_qpn}}) {
      const ConnEntry* e = conns_->find(ip.version, ip.bytes.data(), qpn);
      if (e && e->job) continue;  // this engine's own job: it handles them
      std::erase_if(closed_, [&](const ClosedKey& k) { return k.addr == ip && k.qpn == qpn; });
      closed_.push_back({ip, qpn, spec.id, UINT64_MAX});
    }
  }
  rebuild_conn_table();
}

void Engine::release_closed(uint32_t job_id, uint64_t linger_ns) {
  for (ClosedKey& k : closed_)
    if (k.job_id == job_id && k.until_ns == UINT64_MAX) k.until_ns = now_ns_ + linger_ns;
  rebuild_conn_table();
}

size_t Engine::closed_connections() const {
  return static_cast<size_t>(std::count_if(closed_.begin(), closed_.end(), [&](const ClosedKey& k) { return k.until_ns > now_ns_; }));
}

void Engine::rebuild_conn_table() {
  std::erase_if(closed_, [&](const ClosedKey& k) { return k.until_ns <= now_ns_; });
  size_t n = closed_.size();
  for (auto& j : jobs_) n += 2 * j->spec.workers;
  conns_->resize(n);
  for (auto& j : jobs_) {
    for (unsigned r = 0; r < j->spec.workers; ++r) {
      const ConnectionSpec& c = j->conns[r].spec;
      conns_->insert({true, false, c.dst_ip, c.dst_qpn, j.get(), r, 0});  // data: to the receiver's QP
      conns_->insert({true, true, c.src_ip, c.src_qpn, j.get(), r, 0});   // ACKs: to the sender's QP
    }
  }
  for (const ClosedKey& k : closed_) {
    const ConnEntry* e = conns_->find(k.addr.version, k.addr.bytes.data(), k.qpn);
    if (e == nullptr) conns_->insert({true, false, k.addr, k.qpn, nullptr, 0, k.until_ns});
  }
}

void Engine::free_job_memory(Job& job) {
  for (Job::Held& h : job.held) {
    if (h.p.handle) ops_.free(ops_.ctx, h.p.handle);
    h = Job::Held{};
  }
  job.held_count = job.retained_count = 0;
  std::vector<Job::Held>().swap(job.held);
  std::vector<Job::Slot>().swap(job.slots);
  std::free(job.sums);
  job.sums = nullptr;
  memory_used_ -= job.memory;
  mbufs_reserved_ -= job.mbufs;
  job.memory = job.mbufs = 0;
}

bool Engine::job_info(uint32_t id, JobInfo* out) const {
  for (auto& j : jobs_) {
    if (j->spec.id != id) continue;
    *out = JobInfo{j->spec.id, j->state, j->error, j->cursor, j->held_count, j->retained_count, j->memory, j->mbufs, j->c};
    return true;
  }
  return false;
}

std::vector<uint32_t> Engine::job_ids() const {
  std::vector<uint32_t> ids;
  for (auto& j : jobs_) ids.push_back(j->spec.id);
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
  job.error = why;
  ++(job.c.*kind);
  ++(totals_.*kind);
  if (kind != &EngineCounters::timeouts) {
    ++job.c.job_errors;
    ++totals_.job_errors;
  }
  std::fprintf(stderr, "inagg: job %u aborted: %s\n", job.spec.id, why.c_str());
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
             [&] { char b[16]; std::snprintf(b, sizeof b, "%06x", c.spec.start_psn); return std::string(b); }() +
             " (last 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%06x", c.before_start_psn); return std::string(b); }() +
             "): check its start PSN";
    else if (!c.data_seen)
      why += "; no WRITE of " + rank + " to " + qp_str(c.spec.dst_ip, c.spec.dst_qpn) +
             " was ever seen (check its destination address and QPN)";
    else if (!c.acks_seen && job.cursor > 0)
      why += "; no ACK to " + rank + "'s " + qp_str(c.spec.src_ip, c.spec.src_qpn) +
             " was ever seen (check its source address and QPN)";
  }
  return why;
}

// ---------------------------------------------------------------------------------------------
// Fast path.

#define BUMP(job, name) (++(job).c.name, ++totals_.name)

void Engine::emit(const PacketRef& p, TxList& tx, Job* job) {
  if (!tx.push(p)) {
    ops_.free(ops_.ctx, p.handle);
    if (job) ++job->c.tx_full;
    ++totals_.tx_full;
  }
}

void Engine::drop(Job* job, const PacketRef& pkt, uint64_t EngineCounters::*counter) {
  if (job) ++(job->c.*counter);
  ++(totals_.*counter);
  ops_.free(ops_.ctx, pkt.handle);
}

// One line per job per drop_log_interval_ns at most, however many forged packets arrive.
void Engine::log_drop(Job& job, const char* what, unsigned rank, bool ack_direction, const PacketRef& pkt,
                      const Layout& l, uint64_t now_ns) {
  if (job.drop_logged && elapsed(now_ns, job.drop_log_ns) < cfg_.drop_log_interval_ns) {
    ++job.drops_unlogged;
    return;
  }
  char src[64] = "?";
  const uint8_t* ip = pkt.data + l.l3;
  inet_ntop(l.ip == wire::IpVersion::v4 ? AF_INET : AF_INET6, ip + (l.ip == wire::IpVersion::v4 ? 12 : 8), src, sizeof src);
  const Job::Conn& c = job.conns[rank];
  std::fprintf(stderr,
               "inagg: job %u: dropped a packet on rank %u's %s connection: %s (from %s, port %d; registered %s, first seen on port %d)"
               "; %llu more dropped since the last line\n",
               job.spec.id, rank, ack_direction ? "ACK" : "data", what, src, pkt.port == kUnknownPort ? -1 : pkt.port,
               wire::ip_text(ack_direction ? c.spec.dst_ip : c.spec.src_ip).c_str(),
               (ack_direction ? c.ack_port : c.data_port) == kUnknownPort ? -1 : (ack_direction ? c.ack_port : c.data_port),
               static_cast<unsigned long long>(job.drops_unlogged));
  job.drop_logged = true;
  job.drop_log_ns = now_ns;
  job.drops_unlogged = 0;
}

void Engine::break_contract(Job& job, const PacketRef& pkt, const std::string& why, uint64_t EngineCounters::*kind) {
  ops_.free(ops_.ctx, pkt.handle);
  abort_job(job, why, kind);
}

// A registered connection's key, also when the packet writes its IPv4 address IPv4-mapped in an
// IPv6 header (*mapped: such a packet is never placed, only dropped).
const Engine::ConnEntry* Engine::lookup(wire::IpVersion v, const uint8_t* addr, uint32_t qpn, bool* mapped) const {
  *mapped = false;
  if (const ConnEntry* e = conns_->find(v, addr, qpn)) return e;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (v == wire::IpVersion::v6 && conns_->any_v4 && std::memcmp(addr, kMapped, 12) == 0) {
    *mapped = true;
    return conns_->find(wire::IpVersion::v4, addr + 12, qpn);
  }
  return nullptr;
}

// A frame parse_frame() did not place: dropped when it is addressed to a registered or closed
// connection (it must never reach a receiver raw), else forwarded unless it is malformed RoCEv2.
void Engine::process_unplaced(const PacketRef& pkt, wire::ParseStatus st, const Layout& l, uint64_t now_ns, TxList& tx) {
  wire::RoceDestination d;
  bool mapped = false;
  const ConnEntry* e = wire::roce_destination(pkt.data, l, &d) ? lookup(d.ip, d.addr, d.qpn, &mapped) : nullptr;
  if (e && e->job == nullptr && e->closed_until_ns <= now_ns) e = nullptr;  // a tombstone that expired
  if (e) {
    Job* job = e->job;
    if (job) ++job->c.rx_packets;
    if (e->job == nullptr) return drop(nullptr, pkt, &EngineCounters::drop_closed);
    if (wire::is_malformed(st)) return drop(job, pkt, &EngineCounters::malformed);
    log_drop(*job, wire::parse_status_text(st).data(), e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(job, pkt, &EngineCounters::drop_unplaceable);
  }
  if (wire::is_malformed(st)) return drop(nullptr, pkt, &EngineCounters::malformed);
  ++totals_.passthrough;
  emit(pkt, tx, nullptr);
}

void Engine::process(const PacketRef& pkt, uint64_t now_ns, TxList& tx) {
  ++totals_.rx_packets;
  if (now_ns > now_ns_) now_ns_ = now_ns;
  Layout l;
  const wire::ParseStatus st = wire::parse_frame({pkt.data, pkt.len}, l);
  if (st != wire::ParseStatus::roce) return process_unplaced(pkt, st, l, now_ns, tx);
  const uint8_t* ip = pkt.data + l.l3;
  const bool v4 = l.ip == wire::IpVersion::v4;
  const uint8_t* dst = ip + (v4 ? 16 : 24);
  const uint8_t* src = ip + (v4 ? 12 : 8);
  bool mapped = false;
  const ConnEntry* e = lookup(l.ip, dst, wire::bth_of(pkt.data, l).dest_qp(), &mapped);
  if (e && e->job == nullptr && e->closed_until_ns <= now_ns) e = nullptr;  // a tombstone that expired
  if (e == nullptr) {
    ++totals_.passthrough;
    emit(pkt, tx, nullptr);
    return;
  }
  const bool cnp = l.opcode == wire::op::kCnp;  // congestion control stays end to end, always
  if (e->job == nullptr) {
    if (!cnp) return drop(nullptr, pkt, &EngineCounters::drop_closed);
    ++totals_.passthrough;
    emit(pkt, tx, nullptr);
    return;
  }
  Job& job = *e->job;
  ++job.c.rx_packets;
  if (cnp) {
    BUMP(job, cnp_forwarded);
    emit(pkt, tx, &job);
    return;
  }
  Job::Conn& conn = job.conns[e->rank];
  if (mapped) {
    log_drop(job, "an IPv4 connection addressed by an IPv4-mapped IPv6 address", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_unplaceable);
  }
  // Only the registered source, on the port its rank was first seen on, speaks on a connection: a
  // forged WRITE must not reach the receiver, a forged ACK or NAK must not reach the sender.
  const wire::IpAddr& peer = e->ack_direction ? conn.spec.dst_ip : conn.spec.src_ip;
  if (v4 ? std::memcmp(peer.bytes.data(), src, 4) != 0 : std::memcmp(peer.bytes.data(), src, 16) != 0) {
    log_drop(job, "not from the registered source address", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_wrong_source);
  }
  const uint16_t port = e->ack_direction ? conn.ack_port : conn.data_port;
  if (port != kUnknownPort && pkt.port != kUnknownPort && pkt.port != port) {
    log_drop(job, "not from the port its rank was first seen on", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_wrong_port);
  }
  if (job.state == JobState::failed) return drop(&job, pkt, &EngineCounters::failed_job_drops);
  if (e->ack_direction)
    handle_ack(job, e->rank, pkt, l, now_ns, tx);
  else
    handle_data(job, e->rank, pkt, l, now_ns, tx);
}

void Engine::handle_data(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  Job::Conn& conn = job.conns[rank];
  // Header and payload CRCs are independent chains (the CPU overlaps them), joined by the job's
  // precomputed shift; the header part is kept for the release.
  const uint32_t header_crc = wire::icrc_header_crc(pkt.data, l);
  const bool icrc_ok = l.padded_payload_len() == job.spec.payload_bytes
                           ? wire::icrc_combine(header_crc, wire::icrc_payload_crc(pkt.data, l), job.shift) ==
                                 wire::icrc_stored(pkt.data, l)
                           : wire::icrc_verify(pkt.data, l);  // a length error follows; verify it plainly
  if (!icrc_ok) return drop(&job, pkt, &EngineCounters::bad_icrc);
  const wire::BthView bth = wire::bth_of(pkt.data, l);
  const uint32_t psn = bth.psn();
  auto who = [&] { return "rank " + std::to_string(rank); };  // error paths only: no string per packet
  if (!wire::is_rdma_write(l.opcode)) {
    // A SEND or READ takes PSNs the job's WRITEs need: the sums could never line up again.
    return break_contract(job, pkt,
                          contract("writes only", who() + " sent " + std::string(l.info->name) + " (PSN " + std::to_string(psn) +
                                                      ") on the job's data QP " + qp_str(conn.spec.dst_ip, conn.spec.dst_qpn) +
                                                      "; a job's QPs carry only its RDMA WRITEs"),
                          &EngineCounters::err_not_write);
  }
  if ((l.opcode & 0xe0) != wire::op::kRc) {
    // UC has no ACKs: the engine could neither know what a receiver has nor recover a loss.
    return break_contract(job, pkt,
                          contract("RC only", who() + " sent " + std::string(l.info->name) +
                                                  ": the job's QPs must be RC (UC writes cannot be aggregated transparently)"),
                          &EngineCounters::err_not_rc);
  }
  if (conn.data_port == kUnknownPort) conn.data_port = pkt.port;
  const wire::OpPosition pos = l.info->position;

  // A replayed capture starting over: a FIRST/ONLY at the start PSN once everything is released.
  if (job.spec.replay && psn == conn.spec.start_psn && job.cursor > 0 && job.cursor == job.highest &&
      (pos == wire::OpPosition::first || pos == wire::OpPosition::only)) {
    start_generation(job);
    BUMP(job, generations);
  }

  const int64_t sseq = static_cast<int64_t>(conn.expected) + sext24(psn - (conn.spec.start_psn + conn.expected));
  if (sseq < 0) {  // before the job's start PSN
    ++conn.before_start;
    conn.before_start_psn = psn;
    return drop(&job, pkt, &EngineCounters::stale);
  }
  const uint64_t seq = static_cast<uint64_t>(sseq);
  const uint64_t msg = seq / job.ppm;
  const uint32_t k = static_cast<uint32_t>(seq % job.ppm);
  const uint64_t first_incomplete_msg = job.cursor / job.ppm;
  if (msg >= first_incomplete_msg + job.spec.window) {
    return break_contract(job, pkt,
                          contract("window", who() + " sent PSN " + std::to_string(psn) + " (message " + std::to_string(msg) +
                                                 ") while message " + std::to_string(first_incomplete_msg) +
                                                 " is incomplete: ahead of the window of " + std::to_string(job.spec.window) +
                                                 " (every rank must honour the same window)"),
                          &EngineCounters::err_ahead_of_window);
  }
  if (pos != expected_position(k, job.ppm) || l.payload_len != job.spec.payload_bytes || l.pad != 0) {
    return break_contract(
        job, pkt,
        contract("message size", who() + " PSN " + std::to_string(psn) + ": " + std::string(l.info->name) + " with " +
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
    s.tos = static_cast<uint8_t>((l.ip == wire::IpVersion::v4 ? pkt.data[l.l3 + 1] : wire::load_be16(pkt.data + l.l3) >> 4) & 0xfc);
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
  // its receiver has (again, with backoff, from poll() while it does not go back).
  const bool jumped = conn.data_seen ? seq > conn.last_seq + 1 && seq > conn.filled : seq > 0;
  if (conn.nak_pending && seq <= conn.nak_seq) conn.nak_pending = false;  // the sender went back
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
      h = Job::Held{};
    }
    slot = Job::Slot{};
    slot.seq = seq;
    slot.state = SlotState::collecting;
  } else if (slot.seq > seq) {
    return drop(&job, pkt, &EngineCounters::stale);  // older than the slot's epoch: a duplicate the network made
  }
  if (seq + 1 > job.highest) job.highest = seq + 1;

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
      h = Job::Held{pkt, l, header_crc, false};
      if (ecn_of(pkt.data, l) == wire::kEcnCe || bth.fecn()) slot.ecn = true;
      note_arrival(job, rank);
      if (slot.arrived == full_mask(job.spec.workers)) {
        slot.state = SlotState::complete;
        BUMP(job, slots_completed);
        job.last_progress_ns = now_ns;
        if (seq == job.cursor) release_ready(job, now_ns, tx);
      }
      return;
    }
    case SlotState::complete:
      note_arrival(job, rank);
      return drop(&job, pkt, &EngineCounters::duplicates_dropped);
    case SlotState::released: {
      // A retransmission of a released slot: the receiver may need it (it writes any packet at or
      // above its expected PSN), so it carries the retained sum with a fresh ICRC.
      if (write_sum(job, seq, pkt.data, l, header_crc)) BUMP(job, ecn_marked);
      if (mark_if_queue_full(job, rank, pkt.data, l)) BUMP(job, ecn_marked_queue);
      BUMP(job, retransmits_answered);
      note_arrival(job, rank);
      emit(pkt, tx, &job);
      return;
    }
    case SlotState::empty:
      break;
  }
}

// Moves the sender's `filled` mark over what has arrived; a gap that filled needs no more NAKs.
void Engine::note_arrival(Job& job, unsigned rank) {
  Job::Conn& c = job.conns[rank];
  while (c.filled < c.expected && job.arrived(c.filled, rank)) ++c.filled;
  if (c.nak_pending && c.filled >= c.nak_target) c.nak_pending = false;
}

void Engine::start_generation(Job& job) {
  for (Job::Held& h : job.held) {
    if (h.p.handle) ops_.free(ops_.ctx, h.p.handle);
    h = Job::Held{};
  }
  std::fill(job.slots.begin(), job.slots.end(), Job::Slot{});
  for (Job::Conn& c : job.conns) {
    Job::Conn fresh;
    fresh.spec = c.spec;
    fresh.data_port = c.data_port;
    fresh.ack_port = c.ack_port;
    fresh.nak_template_ok = c.nak_template_ok;
    fresh.nak = c.nak;
    fresh.resend_interval_ns = cfg_.resend_timeout_ns;
    c = fresh;
  }
  job.cursor = job.highest = 0;
  job.held_count = job.retained_count = 0;
}

// Writes a slot's sum into one of its packets: payload, ECN, UDP checksum, ICRC. Returns whether
// the packet was CE-marked.
bool Engine::write_sum(Job& job, uint64_t seq, uint8_t* f, const Layout& l, uint32_t header_crc) {
  const Job::Slot& slot = job.slot(seq);
  std::memcpy(f + l.payload, job.sum_at(seq), job.spec.payload_bytes);
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
  const uint16_t succ_port = job.conns[(rank + 1) % job.spec.workers].data_port;
  const uint16_t port = succ_port != kUnknownPort ? succ_port : job.conns[rank].ack_port;
  if (cfg_.ecn_threshold_packets == 0 || ops_.tx_queue_above == nullptr || port == kUnknownPort) return false;
  const uint8_t ecn = ecn_of(f, l);
  if (ecn == wire::kEcnNotEct || ecn == wire::kEcnCe) return false;
  if (!ops_.tx_queue_above(ops_.queue_ctx, port, cfg_.ecn_threshold_packets)) return false;
  set_ce(f, l);
  return true;
}

// Releases complete slots from the cursor on, in sequence order, while TX has room for a slot.
void Engine::release_ready(Job& job, uint64_t now_ns, TxList& tx) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  const uint8_t* srcs[64];
  while (job.state == JobState::active) {
    Job::Slot& slot = job.slot(job.cursor);
    if (slot.state != SlotState::complete || slot.seq != job.cursor) return;
    if (tx.capacity() < n) {
      abort_job(job, "the TX list holds " + std::to_string(tx.capacity()) + " packets, fewer than the job's " +
                         std::to_string(n) + " workers: a slot could never be released",
                &EngineCounters::err_length_or_opcode);
      return;
    }
    if (tx.capacity() - tx.size() < n) return;  // poll() continues once the caller drained TX
    Job::Held* held = &job.held_at(job.cursor, 0);
    for (unsigned r = 0; r < n; ++r) srcs[r] = held[r].p.data + held[r].l.payload;
    uint8_t* sum = job.sum_at(job.cursor);
    sum_ranked(job.spec.dtype, sum, srcs, n, P);
    slot.payload_crc = wire::crc32({sum, P});  // once per slot; P is a multiple of 4: no pad
    for (unsigned r = 0; r < n; ++r) {
      Job::Held& h = held[r];
      if (write_sum(job, job.cursor, h.p.data, h.l, h.header_crc)) BUMP(job, ecn_marked);
      if (mark_if_queue_full(job, r, h.p.data, h.l)) BUMP(job, ecn_marked_queue);
      ops_.ref(ops_.ctx, h.p.handle);  // kept for a resend until acknowledged or the slot is reused
      h.retained = true;
      tx.push(h.p);
    }
    job.c.released_packets += n;
    totals_.released_packets += n;
    job.held_count -= n;
    job.retained_count += n;
    slot.state = SlotState::released;
    BUMP(job, slots_released);
    ++job.cursor;
    job.last_progress_ns = job.last_release_ns = now_ns;
  }
}

void Engine::handle_ack(Job& job, unsigned rank, const PacketRef& pkt, const Layout& l, uint64_t now_ns, TxList& tx) {
  if (!wire::icrc_verify(pkt.data, l)) return drop(&job, pkt, &EngineCounters::bad_icrc);
  Job::Conn& conn = job.conns[rank];
  if (l.opcode != (wire::op::kRc | wire::op::kAcknowledge)) {
    return break_contract(job, pkt,
                          contract("writes only", "the receiver of rank " + std::to_string(rank) + " sent " +
                                                      std::string(l.info->name) + " to " +
                                                      qp_str(conn.spec.src_ip, conn.spec.src_qpn) +
                                                      "; the reverse direction of a job's QP carries only ACKs and NAKs"),
                          &EngineCounters::err_not_write);
  }
  if (conn.ack_port == kUnknownPort) conn.ack_port = pkt.port;
  conn.acks_seen = true;
  const wire::AethView aeth = wire::aeth_of(pkt.data, l);
  const uint32_t psn = wire::bth_of(pkt.data, l).psn();
  const int64_t at = static_cast<int64_t>(conn.acked) + sext24(psn - (conn.spec.start_psn + conn.acked));
  // ACK p: the receiver has everything up to p. NAK / RNR NAK p: everything below p.
  const int64_t acked = aeth.is_ack() ? at + 1 : at;
  BUMP(job, acks_observed);
  if (acked >= static_cast<int64_t>(conn.acked)) conn.msn = aeth.msn();  // not from a stale, reordered ACK
  if (acked > static_cast<int64_t>(job.cursor) && !job.spec.replay) {
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
    const uint64_t from = std::max(conn.acked, to > job.nslots ? to - job.nslots : 0);
    for (uint64_t s = from; s < to; ++s) {
      Job::Held& h = job.held_at(s, rank);
      if (h.retained && job.slot(s).seq == s) {
        ops_.free(ops_.ctx, h.p.handle);
        h = Job::Held{};
        --job.retained_count;
      }
    }
    conn.acked = to;
    conn.last_ack_ns = now_ns;
    conn.resend_rounds = 0;  // the receiver moves: a fresh resend budget and backoff
    conn.resend_interval_ns = cfg_.resend_timeout_ns;
    job.last_progress_ns = now_ns;
  }
  emit(pkt, tx, &job);
}

// ---------------------------------------------------------------------------------------------
// Recovery (design.md §1 "Loss recovery that does not wait for timeouts").

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
  if (s.src_ip.version == wire::IpVersion::v6) {  // IPv6 UDP needs a checksum (kernel stacks drop 0)
    Layout nl;
    if (wire::parse_frame({nak.data, nak.len}, nl) == wire::ParseStatus::roce)
      wire::store_be16(nak.data + nl.l4 + 6, udp6_checksum(nak.data, nl));
  }
  if (why == NakReason::again) BUMP(job, naks_resent);
  else if (why == NakReason::gap) BUMP(job, naks_sent);
  else BUMP(job, tail_naks);
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
    } else if (c.data_seen && c.filled % job.ppm != 0 && c.filled == job.cursor &&
               job.slot(c.filled).seq == c.filled && job.slot(c.filled).state == SlotState::collecting &&
               (job.slot(c.filled).arrived | 1ull << r) == full_mask(job.spec.workers) &&
               elapsed(now_ns, c.last_data_ns) > 4 * cfg_.resend_timeout_ns) {
      // The whole job waits for this one packet: its sender started the message (its first
      // packets are here), every other rank sent this packet, and the sender has sent nothing
      // since: the message's tail was lost before the appliance.
      send_nak(job, r, now_ns, tx, NakReason::tail);
      c.nak_target = (c.filled / job.ppm + 1) * job.ppm;
    }
    if (tx.capacity() - tx.size() < 2) return;

    if (c.acked >= job.cursor) continue;
    if (elapsed(now_ns, std::max({c.last_ack_ns, job.last_release_ns, c.resend_ns})) <= c.resend_interval_ns) continue;
    if (c.resend_rounds >= cfg_.resend_budget) continue;
    // The oldest unacknowledged released packet (in case that is what it lost) and the newest one
    // (if anything between was lost too, the newest is beyond its expected PSN and it NAKs the
    // sender, whose go-back-N retransmissions are answered from the retained sums).
    const uint64_t oldest = std::max(c.acked, job.cursor > job.nslots ? job.cursor - job.nslots : 0);
    for (uint64_t s : {oldest, job.cursor - 1}) {
      Job::Held& h = job.held_at(s, r);
      if (!h.retained || job.slot(s).seq != s) continue;
      ops_.ref(ops_.ctx, h.p.handle);
      tx.push(h.p);
      BUMP(job, resends);
      if (job.cursor - 1 == oldest) break;
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
                                                 std::any_of(job.conns.begin(), job.conns.end(),
                                                             [&](const Job::Conn& c) { return c.acked < job.cursor; }));
    if (!pending) {
      job.last_progress_ns = now_ns;
      continue;
    }
    if (elapsed(now_ns, job.last_progress_ns) > cfg_.abort_timeout_ns) abort_job(job, timeout_reason(job), &EngineCounters::timeouts);
  }
  if (!cfg_.fast_recovery) return;
  for (auto& jp : jobs_) {
    if (jp->state != JobState::active || jp->spec.replay) continue;  // a replayed capture has no receivers
    recover(*jp, now_ns, tx);
  }
}

}  // namespace inagg::agg
