// The appliance's datapath lcores: their state, the loop they run, and the request messages through
// which the control side reaches them (ip_pipeline style). Internal to src/dataplane.
//
// Who touches what: an LcoreState is written only by its lcore while the loops run (its counters
// are read by the control side for display: see LcoreCounters). The control side talks to an lcore
// only by messages on its request ring; the lcore applies them between bursts and answers on its
// reply ring. The datapath never takes a lock.
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_ring.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/dataplane/bridge.hpp"
#include "inagg/dataplane/counters.hpp"
#include "inagg/dataplane/stations.hpp"
#include "inagg/util/pcap.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::dataplane {

inline constexpr uint16_t kMaxBurst = 64;

// Set by Appliance::request_stop() (from a signal handler too); every loop polls it.
inline std::atomic<bool> g_force_quit{false};

struct TxBuffer {
  uint16_t n = 0;
  rte_mbuf* pkts[kMaxBurst];
};

// One per datapath lcore, cache-aligned, touched only by that lcore (but the counters: see
// counters.hpp, and `serving`: see below).
struct alignas(64) LcoreState {
  unsigned lcore_id = 0;
  uint16_t index = 0;  // among datapath lcores; also its RX/TX queue id on every port
  uint16_t queue = 0;
  std::unique_ptr<agg::Engine> engine;
  std::unique_ptr<MacTable> macs;
  // One-entry caches in front of the MAC table (valid for 1 ms; invalidated by any learning).
  std::unique_ptr<StationTable> stations;  // where each station was seen, for binding ranks
  uint64_t learn_cache_mac = ~0ull, learn_cache_addr = 0, learn_cache_ns = 0;
  uint16_t learn_cache_port = 0xffff;
  uint64_t lookup_cache_mac = ~0ull, lookup_cache_ns = 0;
  uint16_t lookup_cache_port = 0xffff, lookup_cache_out = kFlood;
  rte_ring* requests = nullptr;  // SP/SC: the control side (one caller at a time) -> this lcore
  rte_ring* replies = nullptr;   // SP/SC: this lcore -> the control side
  rte_ring* handover = nullptr;  // MP/SC: other lcores -> this lcore's engine
  std::vector<TxBuffer> tx;      // per port index
  agg::TxList engine_tx{4096};
  util::PcapWriter capture;
  LcoreCounters c;
  // For the engine's ECN threshold (tx_queue_above): DPDK port id -> port index, TX ring sizes.
  const std::vector<int>* index_of_port = nullptr;
  std::vector<uint16_t> tx_ring_size;  // per port index
  // True from start() until this lcore's loop has returned and answered its last request; then
  // the control side applies requests itself (nothing else touches the engine any more).
  alignas(64) std::atomic<bool> serving{false};
  // Loop iterations begun; live_capture.cpp waits for it to move (no lcore inside a removed callback).
  std::atomic<uint64_t> loops{0};
};

// What every loop reads and nobody writes while the loops run.
struct Datapath {
  uint16_t burst = 32;
  uint64_t tsc_hz = 0;
  uint32_t drain_us = 100;
  uint32_t idle_sleep_us = 0;       // lab mode's longest sleep; 0: busy-poll
  std::vector<uint16_t> port_ids;   // port index -> DPDK port id
  std::vector<int> index_of_port;   // DPDK port id -> port index (-1)
  std::vector<LcoreState*> lcores;  // by index, for handovers
};

// live_capture.cpp: the lcores a removed RX/TX callback waits for (nullptr: none run).
void set_live_capture_lcores(const std::vector<LcoreState*>* lcores);

// lcore_loop.cpp: the run-to-completion loop, until Appliance::stop_requested().
void run_lcore_loop(const Datapath& dp, LcoreState& l);
// lcore_loop.cpp: the engine's BufferOps::tx_queue_above for lcore `ctx` (a LcoreState): whether
// its TX queue towards DPDK port `port` holds at least `threshold` packets (its TX buffer, plus the
// NIC's TX ring where the PMD reports descriptor status).
bool tx_queue_above(void* ctx, uint16_t port, uint32_t threshold);
// lcore_loop.cpp: a word that tells a frame's source address (IPv4, IPv6 or an ARP sender's) from
// another's, for the learn cache; 0 when it has none.
inline uint64_t source_address_word(const uint8_t* f, uint32_t len) {
  if (len < 34) return 0;
  uint32_t l3 = 14;
  uint16_t type = static_cast<uint16_t>(f[12] << 8 | f[13]);
  if (type == 0x8100) {
    type = static_cast<uint16_t>(f[16] << 8 | f[17]);
    l3 = 18;
  }
  uint64_t a = 0, b = 0;
  if (type == 0x0800 && len >= l3 + 16) {
    std::memcpy(&a, f + l3 + 12, 4);
  } else if (type == 0x86dd && len >= l3 + 24) {
    std::memcpy(&a, f + l3 + 8, 8);
    std::memcpy(&b, f + l3 + 16, 8);
  } else if (type == 0x0806 && len >= l3 + 18) {
    std::memcpy(&a, f + l3 + 14, 4);
  }
  return a ^ (b * 0x9e3779b97f4a7c15ull) ^ type;
}
// A control request to one lcore, answered in place. The caller owns it and keeps it (and what
// `spec` points to) alive until the answer came back.
struct LcoreRequest {
  enum class Kind : uint8_t {
    add_job,
    remove_job,
    hold_closed,
    release_closed,
    set_owner,
    clear_owner,
    job_info,
    list_jobs,
    totals,
    stations,       // where the stations of `addresses` and `macs` were seen
    set_pins,       // the bound ranks' MAC addresses, pinned to their ports
    stall_for_test  // answered, then the loop stops until a stop is requested (the watchdog's tests)
  };
  explicit LcoreRequest(Kind k) : kind(k) {}
  Kind kind;
  const control::JobSpec* spec = nullptr;      // add_job, hold_closed, release_closed, set_owner, clear_owner
  uint32_t id = 0;                             // remove_job, job_info
  uint16_t owner = 0;                          // set_owner
  agg::JobStart start = agg::JobStart::fresh;  // add_job: a fresh job or one resumed after a restart
  uint64_t linger_ns = 0;                      // release_closed, clear_owner: how long the connections stay closed
  // The answer.
  bool ok = false;
  std::string error;
  std::vector<agg::JobInfo> infos;                        // job_info (each channel here), list_jobs
  agg::EngineCounters counters;                           // totals
  std::vector<util::IpAddr> addresses;                    // stations; set_pins: the bound ranks' addresses
  std::vector<Mac> macs;                                  // stations; set_pins: the bound ranks' MACs
  std::vector<std::vector<StationTable::Sighting>> seen;  // stations: addresses', then macs'
  std::vector<std::pair<Mac, uint16_t>> pins;             // set_pins
};

// lcore_requests.cpp. The lcore side: applies whatever requests wait on its ring (between bursts).
void serve_requests(LcoreState& l);
// The control side: sends `r` to `l` and waits for the answer; when `l` is not serving (before
// start, after its loop returned) applies it here. Callers are serialised by JobOwnership's mutex.
void call_lcore(LcoreState& l, LcoreRequest& r);
// Creates (and frees) the lcore's request and reply rings.
bool create_request_rings(LcoreState& l, std::string* error);
void free_request_rings(LcoreState& l);

}  // namespace inagg::dataplane
