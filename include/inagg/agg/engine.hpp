// The transparent RC aggregation engine (docs/protocol.md): it holds the RDMA WRITE packets of
// registered jobs per slot, sums them when all n ranks are in, regenerates their ICRCs and releases
// them in PSN order; every other packet passes untouched.
//
// Pure C++, no DPDK: packets are PacketRefs (an opaque handle the dataplane maps onto an rte_mbuf,
// plus its bytes). One Engine belongs to one lcore and is never shared: no locks. Memory is
// allocated when a job is added and returned when it is removed or aborted; process() and poll()
// allocate nothing, except the error message when a job aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/agg/dtype.hpp"
#include "inagg/agg/slot_completion.hpp"
#include "inagg/control/job.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/crc32.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"

namespace inagg::agg {

// The ingress port of a packet the engine did not receive (its own NAKs, unit tests that do not say).
inline constexpr uint16_t kUnknownPort = 0xffff;

// One packet buffer. `handle` is the dataplane's (an rte_mbuf*); the engine never looks inside it.
struct PacketRef {
  void* handle = nullptr;
  uint8_t* data = nullptr;
  uint16_t len = 0;
  uint16_t port = kUnknownPort;  // the port it arrived on (the dataplane's port id)
};

// What the engine needs from the buffer owner. Called from process()/poll() on the owning lcore.
struct BufferOps {
  void* ctx = nullptr;
  void (*free)(void* ctx, void* handle) = nullptr;  // drop one reference
  void (*ref)(void* ctx, void* handle) = nullptr;   // take one more reference (kept for resends)
  // A new buffer of at least `len` bytes for a NAK the engine sends; {nullptr} when out of buffers.
  PacketRef (*alloc)(void* ctx, uint16_t len) = nullptr;
  // Optional: whether this lcore's TX queue towards `port` holds at least `threshold` packets. The
  // engine CE-marks the ECN-capable sums it releases towards a port past EngineConfig's
  // ecn_threshold_packets (a DCQCN switch's marking, docs/protocol.md section 13).
  void* queue_ctx = nullptr;
  bool (*tx_queue_above)(void* queue_ctx, uint16_t port, uint32_t threshold) = nullptr;
};

// Packets the engine wants transmitted; each entry consumes one reference. The caller drains it
// (forwards by its L2 table) after each process()/poll() call. Its capacity must be at least the
// largest job's n: a slot's n packets leave together.
class TxList {
 public:
  explicit TxList(size_t capacity) : v_(capacity) {}
  size_t size() const { return n_; }
  size_t capacity() const { return v_.size(); }
  const PacketRef& operator[](size_t i) const { return v_[i]; }
  void clear() { n_ = 0; }
  bool push(const PacketRef& p) {
    if (n_ == v_.size()) return false;
    v_[n_++] = p;
    return true;
  }

 private:
  std::vector<PacketRef> v_;
  size_t n_ = 0;
};

// Counters, per job and for the engine as a whole (X-macro: the struct and the printed names come
// from one list).
#define INAGG_ENGINE_COUNTERS(X)                                                                                       \
  X(rx_packets, "packets seen by the engine")                                                                          \
  X(passthrough, "packets forwarded untouched (not RoCEv2, or of no registered connection)")                           \
  X(malformed, "RoCEv2 packets that failed to parse, dropped")                                                         \
  X(bad_icrc, "packets of registered connections with a bad ICRC, dropped")                                            \
  X(drop_wrong_source, "packets on a registered connection not from its registered source address, dropped")           \
  X(drop_wrong_port,                                                                                                   \
    "packets on a registered connection from another port than the one its rank was pinned to, dropped")               \
  X(drop_wrong_mac, "packets on a registered connection whose Ethernet source is not its rank's bound MAC, dropped")   \
  X(drop_unplaceable,                                                                                                  \
    "packets addressed to a registered connection that cannot be placed (IPv6 extension headers, an IPv4-mapped IPv6 " \
    "address), dropped")                                                                                               \
  X(drop_closed,                                                                                                       \
    "packets addressed to a connection held closed (its job being added, or removed a short while ago), dropped")      \
  X(cnp_forwarded, "CNPs on registered connections, forwarded (congestion control stays end to end)")                  \
  X(aggregated_packets, "data packets added to a slot")                                                                \
  X(aggregated_bytes, "payload bytes added to a slot")                                                                 \
  X(slots_completed, "slots that received all n ranks")                                                                \
  X(slots_released, "slots whose sums were sent")                                                                      \
  X(released_packets, "packets sent with a sum")                                                                       \
  X(duplicates_collecting, "duplicates that replaced a held packet of a collecting slot")                              \
  X(duplicates_dropped, "duplicates for a complete slot, dropped")                                                     \
  X(retransmits_answered, "retransmissions of released slots answered from the retained sum")                          \
  X(stale, "packets older than their slot's epoch, dropped")                                                           \
  X(forwarded_unchanged,                                                                                               \
    "packets of a reduce-scatter or all-gather passed on unchanged (a contribution added on its way, an owner's data " \
    "copied on its way)")                                                                                              \
  X(placeholders_filled, "all-gather placeholders filled with their owner's data")                                     \
  X(drop_slot_busy,                                                                                                    \
    "packets of a reduce-scatter or all-gather whose slot still holds an earlier round, dropped (the sender resends)") \
  X(acks_observed, "ACK/NAK of registered connections, forwarded")                                                     \
  X(naks_sent, "NAKs the engine sent after a PSN jump (loss before the appliance)")                                    \
  X(tail_naks, "NAKs the engine sent for a message whose tail never arrived")                                          \
  X(naks_resent, "NAKs sent again because the sender had not gone back (the first one lost)")                          \
  X(nak_alloc_failed, "NAKs not sent for want of a buffer")                                                            \
  X(resends, "released packets sent again after no ACK within the (backed-off) resend timeout")                        \
  X(resend_budget_spent, "times a connection used up its resend budget without its receiver making progress")          \
  X(ecn_marked, "released packets CE-marked because an input of their slot was")                                       \
  X(ecn_marked_queue,                                                                                                  \
    "released packets CE-marked because the TX queue towards their receiver was past the ECN threshold")               \
  X(failed_job_drops, "packets of a failed job, dropped")                                                              \
  X(job_errors, "job errors (each aborts its job)")                                                                    \
  X(drop_unfit, "packets that break the job contract (the err_ counters say which rule), dropped; the job goes on")    \
  X(drop_ack_unpinned, "ACKs that acknowledge nothing new while their rank's ACK port is not pinned yet, dropped")     \
  X(err_length_or_opcode, "dropped (rule 'message size'): a packet's length or opcode class does not fit its slot")    \
  X(err_ahead_of_window, "dropped (rule 'window'): a packet ahead of the window")                                      \
  X(err_ack_bypass, "dropped (rule 'every packet crosses the appliance'): an ACK for a PSN never released")            \
  X(err_not_write,                                                                                                     \
    "dropped (rule 'writes only'): a SEND, READ or atomic on a data QP, or a request on its reverse direction")        \
  X(err_not_rc, "dropped (rule 'RC only'): a UC WRITE on a data QP")                                                   \
  X(timeouts, "jobs aborted after their no-progress timeout")                                                          \
  X(generations, "replay jobs restarted at their start PSN")                                                           \
  X(resumed_mid_round,                                                                                                 \
    "reduce-scatter or all-gather jobs reloaded after a restart aborted: their ranks went back inside a round")        \
  X(drop_resuming,                                                                                                     \
    "packets of a job reloaded after a restart that came before the first message begun after it, dropped")            \
  X(tx_full, "packets freed because the TX list was full")

struct EngineCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_ENGINE_COUNTERS(X)
#undef X
  void add(const EngineCounters& o);
};

// Calls f(name, text, value) for every counter.
template <class F>
void for_each_counter(const EngineCounters& c, F&& f) {
#define X(name, text) f(std::string_view(#name), std::string_view(text), c.name);
  INAGG_ENGINE_COUNTERS(X)
#undef X
}

// The job description is control's (control::JobSpec, control/job.hpp): job files and the control
// socket carry it.

enum class JobState : uint8_t { active, failed };

struct EngineConfig {
  size_t max_jobs = 64;
  size_t max_connections = 4096;  // both directions of every rank count
  size_t memory_budget_bytes = 1ull << 30;
  size_t mbuf_budget = 65536;  // held + retained packets over all jobs
  // Released but unacknowledged: send again after this, then after twice as long each round, up to
  // resend_max_ns; at most resend_budget rounds until the receiver acknowledges something. NAKs
  // the sender has not acted on are sent again on the same schedule and budget.
  uint64_t resend_timeout_ns = 200'000;
  uint64_t resend_max_ns = 50'000'000;
  unsigned resend_budget = 8;
  uint64_t abort_timeout_ns = 30'000'000'000ull;  // no progress with work pending: abort the job
  // NAK a sender on a PSN jump and resend unacknowledged released packets (docs/protocol.md section 12,
  // "Loss recovery that does not wait for timeouts"). Correctness never depends on it; off only to
  // measure what it saves.
  bool fast_recovery = true;
  // CE-mark released sums towards a port whose TX queue holds at least this many packets (0: off;
  // needs BufferOps::tx_queue_above).
  uint32_t ecn_threshold_packets = 0;
  // A removed job's connections stay closed this long (late packets of it are dropped, never
  // forwarded raw): longer than the senders' RC retry budget, (retry count + 1) x ACK timeout.
  uint64_t closed_hold_ns = 10'000'000'000ull;
  // At most one log line per job per this interval about dropped forged or unplaceable packets.
  uint64_t drop_log_interval_ns = 1'000'000'000ull;
};

struct JobInfo {
  uint32_t id;
  uint16_t channel;  // which channel of the job (control::JobSpec::channel)
  JobState state;
  std::string error;        // why it failed, when it did
  uint64_t released_slots;  // the job's release cursor (current generation)
  size_t held_packets;      // packets in collecting/complete slots
  size_t retained_packets;  // released packets kept for resend
  size_t memory_bytes;
  size_t mbuf_quota;
  EngineCounters counters;
  SlotCompletionHistogram slot_completion;  // how long its slots waited for their last rank
};

// Engine::add_job's `start`: where a job's ranks are.
enum class JobStart : uint8_t {
  fresh,  // at their start PSNs: the job counts from there
  // Somewhere past them: a job registered before the appliance restarted (reloaded from its state
  // directory), whose ranks went on. Its packets are dropped (drop_resuming) until it knows where
  // to resume: once every rank went back (its RC retransmission after the drops: the first packet
  // its receiver lacks), at the furthest of those points. Only packets that fit (a WRITE of the
  // job's size and position, a good ICRC, from the rank's registered source) count. Whatever is
  // older is stale.
  // Replay jobs always start fresh.
  resume,
};

class alignas(64) Engine {
 public:
  Engine(const EngineConfig& cfg, const BufferOps& ops);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Control path (the owning lcore, between bursts). On refusal returns false and sets *error to a
  // sentence saying what to change. A job of several channels is added one channel at a time
  // (control::channel_spec): each is a job of its own here, known by its id and channel; one
  // engine may hold several channels of a job. Re-adding the id and channel of a failed job
  // replaces it.
  bool add_job(const control::JobSpec& spec, std::string* error, JobStart start = JobStart::fresh);
  // What add_job() reserves for `spec` over all its channels together, as JobInfo's memory_bytes
  // and mbuf_quota (summed over the channels) give it once added: a tenant's budget is checked
  // against it before the job is added. {0, 0} for a spec whose sizes add_job() refuses.
  struct Footprint {
    size_t memory_bytes = 0, mbufs = 0;
  };
  static Footprint footprint(const control::JobSpec& spec);
  // Removes every channel of job `id` here; its connections stay closed for
  // EngineConfig::closed_hold_ns (tombstones).
  bool remove_job(uint32_t id, std::string* error);
  bool job_info(uint32_t id, JobInfo* out, uint16_t channel = 0) const;
  std::vector<JobInfo> job_infos() const;  // every channel of every job here
  std::vector<uint32_t> job_ids() const;   // each job once, however many of its channels are here

  // Connections held closed: every packet addressed to them but CNPs is dropped (drop_closed). A
  // multi-lcore appliance holds a job's connections closed on every lcore before the job is added,
  // and on the lcores that do not own it for as long as it lives, so that no packet of it is ever
  // forwarded raw while the lcores are being told. add_job takes over the closed connections it
  // registers; a hold ends with release_closed, the connections staying closed linger_ns longer
  // (0: open at once). Keys of this engine's own jobs are never held. Times are the engine's
  // clock, the last now_ns that process() or poll() saw.
  void hold_closed(const control::JobSpec& spec);
  void release_closed(uint32_t job_id, uint64_t linger_ns);
  size_t closed_connections() const;  // held or lingering, not yet expired
  // No frame can belong to anything this engine knows: no job, no route to another lcore's job, no
  // connection held closed. The dataplane then bridges RoCEv2 like any frame, without parsing it
  // (docs/protocol.md section 4), and counts it here as passed through.
  bool knows_no_connection() const { return jobs_.empty() && routes_.empty() && closed_.empty(); }
  void count_passthrough() {
    ++totals_.rx_packets;
    ++totals_.passthrough;
  }

  // Which lcore takes a connection's packets, when its job (or its channel) is owned by another
  // lcore (the datapath's routes, kept in the engine's connection table so that one table answers
  // both "whose is it" and "which job and rank"): its data and its ACKs go to the owner.
  struct Route {
    uint16_t owner = 0;
  };
  // Routes the job's connections (replacing its earlier routes); unroute_job removes them.
  void route_job(const control::JobSpec& spec, uint16_t owner);
  void unroute_job(uint32_t job_id);
  // The route of a parsed RoCEv2 frame's destination (an IPv4-mapped IPv6 destination finds its
  // IPv4 connection's), or nullptr.
  const Route* route_of(const uint8_t* frame, const wire::Layout& l) const;

  // Fast path. Takes ownership of `pkt`: it ends up in `tx` (forwarded, possibly rewritten), held
  // by the engine, or freed. May also put released packets and NAKs in `tx`. Returns false when the
  // frame was dropped as untrustworthy (malformed, bad ICRC, wrong source, port or MAC,
  // unplaceable, or on a connection held closed). The caller must not touch `pkt` after the call.
  bool process(const PacketRef& pkt, uint64_t now_ns, TxList& tx);
  // The same for a frame its caller has parsed already (the datapath parses each frame once and
  // carries the result with it): `st` and `l` are what wire::parse_frame() gave for pkt's bytes.
  bool process(const PacketRef& pkt, wire::ParseStatus st, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  // Whether the bridge may learn the source MAC of the frame process() last handled: a frame of no
  // registered connection, or one the engine took (a WRITE that fit its slot, an ACK that
  // acknowledged something new) from its rank's bound port and MAC. A stale, duplicate or dropped
  // frame teaches nothing.
  bool teaches() const { return teaches_; }

  // Timers: resends of unacknowledged released packets, NAKs sent again, no-progress aborts. Call
  // every few us.
  void poll(uint64_t now_ns, TxList& tx);

  const EngineCounters& counters() const { return totals_; }
  size_t memory_in_use() const { return memory_used_; }
  size_t mbufs_reserved() const { return mbufs_reserved_; }
  size_t held_packets() const;

  struct Job;  // defined in src/agg/engine_internal.hpp

 private:
  struct ConnTable;
  struct ConnEntry;
  // A connection key held closed on behalf of job_id until until_ns (UINT64_MAX: until released).
  struct ClosedKey {
    util::IpAddr addr;
    uint32_t qpn = 0;
    uint32_t job_id = 0;
    uint64_t until_ns = 0;
  };
  enum class NakReason : uint8_t { gap, tail, again };

  // Which job and rank a packet belongs to, who may speak, closed connections (engine_conn_table.cpp).
  const ConnEntry* lookup(util::IpVersion v, const uint8_t* addr, uint32_t qpn, bool* mapped) const;
  void process_frame(const PacketRef& pkt, wire::ParseStatus st, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  void process_unplaced(const PacketRef& pkt, wire::ParseStatus st, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  void drop(Job* job, const PacketRef& pkt, uint64_t EngineCounters::*counter);
  void log_drop(Job& job, const char* what, unsigned rank, bool ack_direction, const PacketRef& pkt,
                const wire::Layout& l, uint64_t now_ns);
  void emit(const PacketRef& p, TxList& tx, Job* job);
  void rebuild_conn_table();
  // A job's packets (engine_job.cpp). Its way of being processed is chosen once, when it is added
  // (choose_path sets Job::on_data and Job::on_ack): live or a replay, a leaf, a rotated collective.
  using PacketPath = void (Engine::*)(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l,
                                      uint64_t now_ns, TxList& tx);
  static void choose_path(Job& job);
  // One channel's slots, memory and packet buffers (add_job's budgets, footprint()).
  struct Sizing {
    uint64_t nslots = 0, rot_L = 0, rot_nslots = 0, rot_ring = 0;
    size_t memory_bytes = 0, mbufs = 0;
  };
  static Sizing sizing(const control::JobSpec& s);
  // A packet that breaks the job contract: dropped and counted (drop_unfit and its rule's err_
  // counter), never an abort, since a forger can send any of them; the first one's reason is kept
  // for the no-progress timeout's message (`why` is called only then).
  template <class Why>
  void refuse(Job& job, const PacketRef& pkt, Why&& why, uint64_t EngineCounters::*kind);
  template <bool kReplay, bool kLeaf = false>
  void handle_data(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  template <bool kReplay>
  void handle_ack(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  bool refuse_unless_rc_write(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint32_t psn);
  template <bool kLeaf, bool kRotated = false>
  bool place_data(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint32_t psn, uint64_t* seq);
  void learn_nak_template(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l);
  template <bool kReplay>
  void watch_for_gap(Job& job, unsigned rank, uint64_t seq, uint64_t now_ns, TxList& tx);
  void open_epoch(Job& job, uint64_t seq);
  template <bool kLeaf>
  void collect(Job& job, unsigned rank, uint64_t seq, const PacketRef& pkt, const wire::Layout& l, uint32_t header_crc,
               uint64_t now_ns, TxList& tx);
  void note_arrival(Job& job, unsigned rank, uint64_t seq);
  void start_generation(Job& job);  // a replay job starts over
  // A resumed job until it finds the message it resumes at (engine_resume.cpp).
  void resume_data(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  void resume_ack(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t now_ns, TxList& tx);
  void resume_from(Job& job, uint64_t seq);
  // Sums and releases (engine_release.cpp).
  void sum_slot(Job& job, uint64_t seq);
  void free_acknowledged(Job& job, unsigned rank, uint64_t to);
  bool write_sum(Job& job, uint64_t seq, uint8_t* f, const wire::Layout& l, uint32_t header_crc);
  bool finish_sum(Job& job, uint64_t seq, uint8_t* f, const wire::Layout& l, uint32_t header_crc);
  bool mark_if_queue_full(Job& job, unsigned rank, uint8_t* f, const wire::Layout& l);
  void release_plain(Job& job, uint64_t now_ns, TxList& tx);
  bool finish_payload(Job& job, bool ecn, uint8_t* f, const wire::Layout& l, uint32_t header_crc, uint32_t payload_crc);
  // A rotated collective's part (engine_rotated.cpp): reduce-scatter and all-gather.
  void handle_rotated(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t now_ns,
                      TxList& tx);
  bool admit_rotated(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint32_t* header_crc,
                     uint64_t* seq);
  void note_data(Job& job, unsigned rank, const PacketRef& pkt, const wire::Layout& l, uint64_t seq, uint64_t now_ns,
                 TxList& tx);
  void rot_release(Job& job, unsigned rank, uint64_t now_ns, TxList& tx);
  void rot_sum(Job& job, uint64_t g, unsigned shard);
  void rot_fill(Job& job, uint64_t g, unsigned rank, uint64_t q);
  void rot_free_acknowledged(Job& job, unsigned rank, uint64_t to);
  // A leaf's part (engine_leaf.cpp): the rack's partial up the uplink, the total from the downlink.
  void send_partial(Job& job, uint64_t seq, uint64_t now_ns, TxList& tx);
  void release_uplink(Job& job, uint64_t now_ns, TxList& tx);
  void fill_total(Job& job, uint64_t seq);
  void answer_uplink(Job& job, uint64_t seq, const PacketRef& pkt, const wire::Layout& l, uint32_t header_crc,
                     TxList& tx);
  void release_ready(Job& job, uint64_t now_ns, TxList& tx);  // any kind, for the timers
  void mark_released(Job& job, uint64_t now_ns);              // the cursor's slot went out
  // NAKs, resends, timers (engine_recovery.cpp).
  bool send_nak(Job& job, unsigned rank, uint64_t now_ns, TxList& tx, NakReason why);
  void recover(Job& job, uint64_t now_ns, TxList& tx);
  // Adding, removing and ending jobs (engine_admission.cpp).
  void abort_job(Job& job, const std::string& why, uint64_t EngineCounters::*kind);
  std::string timeout_reason(const Job& job) const;
  void free_job_memory(Job& job);
  Job* find_job(uint32_t id, uint16_t channel);

  EngineConfig cfg_;
  BufferOps ops_;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::unique_ptr<ConnTable> conns_;
  std::vector<ClosedKey> closed_;
  struct RouteKey {
    util::IpAddr addr;
    uint32_t qpn = 0;
    uint32_t job_id = 0;
    uint16_t channel = 0;
    Route route;
  };
  std::vector<RouteKey> routes_;
  EngineCounters totals_;
  size_t memory_used_ = 0;
  size_t mbufs_reserved_ = 0;
  uint64_t now_ns_ = 0;     // the engine's clock: the last now_ns process() or poll() saw
  bool untrusted_ = false;  // the frame process() is handling was dropped as untrustworthy
  bool teaches_ = false;    // ... may teach the bridge its source (teaches())
};

}  // namespace inagg::agg
