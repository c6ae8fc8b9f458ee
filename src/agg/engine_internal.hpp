// The engine's private parts, shared by its files (not installed): a job's state (its slots, held
// packets, retained sums and per-connection recovery state), the connection table, and helpers.
//   engine_admission.cpp   adding, removing and ending jobs, what a job's failure says
//   engine_conn_table.cpp  the connection table: which packet belongs to which job, who may speak
//   engine_job.cpp         a job's packets as they arrive: hold, ACKs; the way chosen per job
//   engine_release.cpp     sums, releases in PSN order, retained copies; frame helpers
//   engine_leaf.cpp        what only a leaf of a job across racks does: partials up, the total down
//   engine_rotated.cpp     reduce-scatter and all-gather: rotated shards and placeholders
//   engine_recovery.cpp    NAKs, resends, timers
//   engine_resume.cpp      a job reloaded after a restart, until it finds where its ranks are
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

namespace engine_detail {

// A connection table key: an address as two words (IPv4: zero-extended).
struct ConnKey {
  uint64_t w0 = 0, w1 = 0;
};

// Helpers the engine's files share (engine_release.cpp defines the non-inline ones).
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

wire::OpPosition expected_position(uint32_t k, uint32_t ppm);
uint8_t ecn_of(const uint8_t* f, const wire::Layout& l);
void set_ce(uint8_t* f, const wire::Layout& l);
// The UDP checksum over IPv6 (mandatory there unless zero-checksum is in use).
uint16_t udp6_checksum(const uint8_t* f, const wire::Layout& l);
std::string qp_str(const util::IpAddr& a, uint32_t qpn);
// "job contract, rule 'window': ..." (docs/protocol.md section 2).
std::string contract(const char* rule, const std::string& what);

}  // namespace engine_detail

struct alignas(64) Engine::Job {
  struct alignas(64) Conn {
    control::ConnectionSpec spec;
    // The sender (data direction). The fields every data packet touches come first, so that with
    // the spec they fill two cache lines.
    uint64_t expected = 0;    // one past the highest sequence seen from the sender
    uint64_t last_seq = 0;    // the sequence of its latest packet (its current go-back-N pass)
    uint64_t filled = 0;      // every sequence below this arrived (or was released)
    uint64_t nak_seq = 0;     // the sequence the pending NAK named (the receiver's acked then)
    uint64_t nak_target = 0;  // the gap is closed once `filled` reaches this
    uint64_t last_data_ns = 0;
    uint16_t data_port = kUnknownPort;  // the sender's port: pinned by its first WRITE that fits the connection
    bool data_seen = false;
    bool nak_pending = false;      // a NAK went out; the sender has neither gone back nor filled the gap
    bool nak_template_ok = false;  // `nak` below is filled in
    uint64_t before_start = 0;     // packets before the registered start PSN (a timeout says so)
    uint32_t before_start_psn = 0;
    // Its receiver (ACK direction).
    uint64_t acked = 0;  // the receiver holds every sequence below this
    uint32_t msn = 0;    // the receiver's last reported MSN (for the NAKs we send)
    uint64_t last_ack_ns = 0;
    bool acks_seen = false;
    // The receiver's port (where its sums go): pinned by its first ACK that acknowledges something released.
    uint16_t ack_port = kUnknownPort;
    // The backoff of NAKs sent again.
    uint64_t nak_ns = 0;
    uint64_t nak_interval_ns = 0;
    unsigned nak_rounds = 0;
    // Resends to the receiver, and their backoff.
    uint64_t resend_ns = 0;
    uint64_t resend_interval_ns = 0;
    unsigned resend_rounds = 0;
    // What a NAK to the sender looks like: its first valid packet's headers, reversed.
    wire::RoceFrameSpec nak;
    // The sender's last masked header and its CRC: the next one's header CRC follows from it.
    wire::IcrcHeaderCache header_crc;

    // A replay job starting over: sequence state goes, what was learned of the peers stays.
    void start_generation(uint64_t resend_timeout_ns) {
      expected = last_seq = filled = nak_seq = nak_target = last_data_ns = 0;
      data_seen = nak_pending = false;
      before_start = 0;
      acked = 0;
      msn = 0;
      last_ack_ns = 0;
      acks_seen = false;
      nak_ns = nak_interval_ns = 0;
      nak_rounds = 0;
      resend_ns = 0;
      resend_interval_ns = resend_timeout_ns;
      resend_rounds = 0;
    }
  };
  struct Held {
    PacketRef p;
    wire::Layout l;
    uint32_t header_crc = 0;  // the ICRC's header part; rewriting masked fields keeps it valid
    bool retained = false;    // released and kept for a resend

    // Field by field, not through a temporary: a Held{} (whose PacketRef port is 0xffff) built on
    // the stack and copied in 16-byte loads stalls on store forwarding, ~10% of the fast path.
    void hold(const PacketRef& pkt, const wire::Layout& layout, uint32_t crc) {
      p.handle = pkt.handle;
      p.data = pkt.data;
      p.len = pkt.len;
      p.port = pkt.port;
      l = layout;
      header_crc = crc;
      retained = false;
    }
    void clear() {
      p.handle = nullptr;
      p.data = nullptr;
      p.len = 0;
      retained = false;
    }
  };
  struct Slot {
    uint64_t seq = 0;      // slot sequence (message * ppm + packet index) it holds
    uint64_t arrived = 0;  // one bit per rank
    engine_detail::SlotState state = engine_detail::SlotState::empty;
    bool ecn = false;          // some input was CE-marked or had FECN
    bool summed = false;       // complete, and the sum is in its packets (a leaf's total fills them)
    bool partial_out = false;  // a leaf: its rack's partial is in the uplink's packet (released in order)
    uint32_t payload_crc = 0;
    uint32_t partial_crc = 0;  // a leaf: the CRC of the partial
    uint64_t first_ns = 0;     // when the first rank's packet of this round arrived (slot_completion)
  };

  control::JobSpec spec;
  // How its packets are processed, chosen when it was added (Engine::choose_path).
  PacketPath on_data = nullptr, on_ack = nullptr;
  JobState state = JobState::active;
  std::string error;
  uint32_t ppm = 0;     // packets per message
  uint32_t nslots = 0;  // 2 W ppm
  std::vector<Slot> slots;
  std::vector<Held> held;   // nslots x n
  uint8_t* sums = nullptr;  // nslots x P retained sums, 64-byte aligned
  std::vector<Conn> conns;
  // A leaf of a job across racks (control::Tier::leaf, docs/protocol.md section 21): rank 0 is the
  // downlink (its sender in another rack, the total coming down through the spine), rank n-1 the
  // uplink (its packet carries the rack's partial up). Not a leaf: uplink == kNotLeaf.
  static constexpr unsigned kNotLeaf = ~0u;
  unsigned uplink = kNotLeaf;
  uint64_t local_mask = 0;      // the ranks whose senders sit in this rack: all but the downlink
  uint64_t up_cursor = 0;       // the uplink's next sequence to release (it runs ahead of `cursor`)
  uint8_t* partials = nullptr;  // nslots x P partials, for the uplink's retransmissions
  // A rotated collective (control::Collective reduce_scatter or all_gather, docs/protocol.md
  // section 20). A connection's sequence q is packet q mod L of a chunk (L = chunk x ppm) at
  // position t = (q / L) mod (n - 1) of round k = q / (L (n - 1)); position and rank give the
  // shard. Its slots are per shard, packet of a chunk and round, `rounds` rounds deep; each
  // connection keeps its own queue of packets (RotEntry), released in its PSN order, kept until
  // acknowledged. Not rotated: rot_L == 0.
  struct RotSlot {
    uint64_t g = 0;         // (round x n + shard) x L + packet of the chunk
    uint64_t arrived = 0;   // reduce-scatter: the contributions in; all-gather: the placeholders filled
    uint64_t waiting = 0;   // all-gather: the ranks whose placeholder waits for the copy
    uint64_t held_seq = 0;  // reduce-scatter: the held packet's sequence on its connection (rank shard - 1)
    uint64_t first_ns = 0;  // when its first packet arrived (slot_completion)
    bool used = false;
    bool done = false;  // reduce-scatter: summed into the held packet; all-gather: every placeholder filled
    bool copy = false;  // all-gather: the owner's data is in the slot's buffer
    bool ecn = false;   // reduce-scatter: some contribution was CE-marked or had FECN
    uint32_t crc = 0;   // the payload CRC of the slot's buffer (the sum or the copy)
  };
  struct RotEntry {
    Held h;
    uint64_t seq = 0;
    bool used = false;
    bool ready = false;     // may go out when its turn comes (a held one: once summed or filled)
    bool released = false;  // went out; kept until its receiver acknowledges it
  };
  struct RotPlace {
    uint64_t g;      // its slot sequence
    unsigned shard;  // the shard it carries
    unsigned t;      // its position in its round
  };
  uint32_t rot_L = 0, rot_ring = 0, rot_nslots = 0;
  std::vector<RotSlot> rot_slots;  // rot_nslots; their buffers: `sums`, P bytes each
  struct RotSrc {
    void* handle = nullptr;  // one reference, until the slot is summed
    const uint8_t* payload = nullptr;
  };
  std::vector<RotSrc> rot_srcs;        // rot_nslots x n: reduce-scatter contributions
  std::vector<uint64_t> rot_wait_seq;  // rot_nslots x n: all-gather: a waiting placeholder's sequence
  std::vector<RotEntry> rot_entries;   // n x rot_ring: each connection's queue
  std::vector<uint64_t> rot_rel;       // per connection: its next sequence to release
  wire::Crc32Shift shift;
  uint64_t cursor = 0;  // next sequence to release
  uint64_t floor = 0;   // sequences below it are stale: 0, or where a job resumed after a restart
  // A resumed job (JobStart::resume), per rank, until it resumes (engine_resume.cpp).
  struct ResumeTrack {
    bool seen = false, back = false;
    uint32_t highest = 0;      // the highest offset from the start PSN seen from the rank
    uint32_t point = 0;        // where it went back to: the first packet its receiver does not have
    uint8_t inside_round = 0;  // a rotated job's: how often it went back to a point inside a round
  };
  std::vector<ResumeTrack> resume;
  uint64_t highest = 0;  // one past the highest sequence any packet has claimed
  size_t held_count = 0, retained_count = 0;
  uint64_t last_progress_ns = 0, last_release_ns = 0;
  size_t memory = 0, mbufs = 0;
  uint64_t drop_log_ns = 0, drops_unlogged = 0;  // rate limit of the drop log line
  bool drop_logged = false;
  std::string first_unfit;  // why the first packet that broke the contract was dropped (refuse())
  EngineCounters c;
  SlotCompletionHistogram slot_completion;  // a slot's first packet to its last rank's, per slot and round

  size_t index(uint64_t seq) const { return seq % nslots; }
  Slot& slot(uint64_t seq) { return slots[index(seq)]; }
  Held& held_at(uint64_t seq, unsigned rank) { return held[index(seq) * spec.workers + rank]; }
  uint8_t* sum_at(uint64_t seq) { return sums + index(seq) * spec.payload_bytes; }
  uint8_t* partial_at(uint64_t seq) { return partials + index(seq) * spec.payload_bytes; }
  bool leaf() const { return uplink != kNotLeaf; }
  bool rotated() const { return rot_L != 0; }
  bool reduce_scatter() const { return spec.collective == control::Collective::reduce_scatter; }
  // Every sequence below this went out to rank's receiver: a leaf's uplink runs ahead of the rest;
  // a rotated collective's connections each go at their own pace.
  uint64_t released_for(unsigned rank) const { return rank == uplink ? up_cursor : rotated() ? rot_rel[rank] : cursor; }
  RotPlace rot_place(unsigned rank, uint64_t q) const {
    const unsigned n = spec.workers;
    const uint64_t b = q / rot_L, k = b / (n - 1);
    const unsigned t = static_cast<unsigned>(b % (n - 1));
    // Reduce-scatter: shards r + 2, ..., r - 1, then the successor's r + 1 last. All-gather: its
    // own shard r, then r - 1, ..., r + 2.
    const unsigned s = reduce_scatter() ? (t + 2 < n ? (rank + 2 + t) % n : (rank + 1) % n) : (rank + n - t) % n;
    return {(k * n + s) * rot_L + q % rot_L, s, t};
  }
  // Whether a packet at this place goes on unchanged: a reduce-scatter contribution that is not
  // the last of its round, an all-gather owner's data (else: a sum or a copy goes into it).
  bool rot_passes(const RotPlace& at) const { return reduce_scatter() ? at.t + 2 < spec.workers : at.t == 0; }
  // A round: one chunk of each of the n - 1 shards a connection carries, in packets.
  uint64_t rot_round() const { return uint64_t{spec.workers - 1} * rot_L; }
  size_t rot_index(uint64_t g) const { return g % rot_nslots; }
  RotSlot& rot_slot(uint64_t g) { return rot_slots[rot_index(g)]; }
  RotEntry& rot_entry(unsigned rank, uint64_t q) { return rot_entries[size_t{rank} * rot_ring + q % rot_ring]; }
  uint8_t* rot_buf(uint64_t g) { return sums + rot_index(g) * spec.payload_bytes; }
  // The ranks a slot still waits for before it can move: a leaf waits for its rack's packets until
  // the partial is out, then for the downlink's total.
  uint64_t awaited(const Slot& s) const {
    return leaf() && !s.partial_out ? local_mask : engine_detail::full_mask(spec.workers);
  }
  // How far back the slots reach: sequences older than the newest minus this are not held.
  uint64_t span() const { return rotated() ? rot_ring : nslots; }

  // A released packet of rank's connection kept for a resend, if there is one at this sequence.
  Held* retained(unsigned rank, uint64_t seq) {
    if (rotated()) {
      RotEntry& e = rot_entry(rank, seq);
      return e.used && e.seq == seq && e.released ? &e.h : nullptr;
    }
    Held& h = held_at(seq, rank);
    return h.retained && slot(seq).seq == seq ? &h : nullptr;
  }

  // Whether the sender's packet of `seq` is in (or went out with a sum).
  bool arrived(uint64_t seq, unsigned rank) {
    if (rotated()) {
      const RotEntry& e = rot_entry(rank, seq);
      return seq < rot_rel[rank] || (e.used && e.seq == seq);
    }
    const Slot& s = slot(seq);
    if (s.state == engine_detail::SlotState::empty || s.seq < seq) return false;
    if (s.seq > seq || s.state != engine_detail::SlotState::collecting) return true;
    return engine_detail::bit(s.arrived, rank);
  }
};

// Open-addressing map (address, QPN) -> (job, rank, direction) or a closed connection, rebuilt on
// every job change (the control path), read-only on the fast path.
struct Engine::ConnEntry {
  static constexpr uint32_t kNoRoute = 0xffffffff;
  bool used = false;
  bool ack_direction = false;  // key is the sender's QP: ACKs flow to it
  util::IpAddr addr;
  uint32_t qpn = 0;
  Job* job = nullptr;  // nullptr: a closed connection
  unsigned rank = 0;
  uint32_t route = kNoRoute;  // index into Engine::routes_: the lcore that takes its packets
  uint64_t closed_until_ns = 0;
  engine_detail::ConnKey key;  // addr as ConnTable::key_of reads it from a packet (set by insert)
};

struct Engine::ConnTable {
  static_assert(sizeof(ConnEntry) == 64, "one cache line per entry: a lookup's probe touches one line");
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
  // The key as two words straight from the packet (IPv4: its 4 bytes, zero-extended), never through
  // a buffer on the stack: an 8-byte load over a 16-byte zeroing store and a 4-byte copy fails store
  // forwarding, which cost ~10% of the engine's time per packet (bench/README.md).
  using Key = engine_detail::ConnKey;
  static Key key_of(util::IpVersion v, const uint8_t* addr) {
    if (v == util::IpVersion::v4) {
      uint32_t a;
      std::memcpy(&a, addr, 4);
      return {a, 0};
    }
    Key k;
    std::memcpy(&k.w0, addr, 8);
    std::memcpy(&k.w1, addr + 8, 8);
    return k;
  }
  static size_t hash(const Key& k, uint32_t qpn) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ qpn;
    h = (h ^ k.w0) * 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h = (h ^ k.w1) * 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
  void insert(const ConnEntry& e) {
    if (e.addr.version == util::IpVersion::v4) any_v4 = true;
    for (size_t i = hash(key_of(e.addr.version, e.addr.bytes.data()), e.qpn) & mask;; i = (i + 1) & mask) {
      if (!entries[i].used) {
        entries[i] = e;
        entries[i].key = key_of(e.addr.version, e.addr.bytes.data());
        return;
      }
    }
  }
  ConnEntry* find(util::IpVersion v, const uint8_t* addr, uint32_t qpn) {
    return const_cast<ConnEntry*>(std::as_const(*this).find(v, addr, qpn));
  }
  const ConnEntry* find(util::IpVersion v, const uint8_t* addr, uint32_t qpn) const {
    const Key k = key_of(v, addr);
    for (size_t i = hash(k, qpn) & mask;; i = (i + 1) & mask) {
      const ConnEntry& e = entries[i];
      if (!e.used) return nullptr;
      if (e.qpn == qpn && e.addr.version == v && e.key.w0 == k.w0 && e.key.w1 == k.w1) return &e;
    }
  }
};

// A counter of the job and of the engine's totals (inside Engine's members only).
#define BUMP(job, name) (++(job).c.name, ++totals_.name)

}  // namespace inagg::agg
