// The appliance's data plane: EAL ports, one run-to-completion loop per worker lcore (l3fwd
// style), the RC engine per lcore for the jobs it owns, the L2 bridge for everything else, and the
// request rings through which the control thread reaches the lcores (ip_pipeline style).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "inagg/agg/engine.hpp"

namespace inagg::dataplane {

struct ApplianceConfig {
  std::vector<uint16_t> ports;      // empty: every port EAL probed
  uint32_t mtu = 9000;              // jumbo frames so 4 KiB RoCE payloads fit
  uint32_t mbufs = 32768;           // packet buffers in the pool
  uint32_t mbuf_cache = 256;
  uint16_t rx_desc = 1024, tx_desc = 1024;
  uint16_t burst = 32;
  uint32_t drain_us = 100;          // TX buffers are flushed at least this often
  bool flow_steering = true;        // try rte_flow for UDP 4791 (falls back to software)
  uint64_t mac_ageing_ns = 300'000'000'000ull;
  size_t mac_table_size = 4096;
  agg::EngineConfig engine;         // per lcore; budgets are per lcore too
  std::string capture_path;         // pcap of every RoCEv2 packet the engines emit; "" = off
  uint32_t wait_link_ms = 0;        // before starting the loops, wait this long for every link to be up
};

// Per-lcore counters, written only by their lcore. The control thread reads them without a lock
// for display: each is a naturally aligned 64-bit word, so a read sees an old or a new value,
// never a torn one.
#define INAGG_LCORE_COUNTERS(X)                                                      \
  X(rx, "packets received")                                                          \
  X(tx, "packets handed to the PMDs")                                                \
  X(tx_dropped, "packets a PMD did not take, freed")                                 \
  X(bridged, "frames forwarded by the L2 table")                                     \
  X(flooded, "frames flooded (unknown unicast, broadcast, multicast)")               \
  X(same_port_drops, "frames whose destination is behind their ingress port")        \
  X(roce, "RoCEv2 packets given to an engine")                                       \
  X(handover_out, "RoCEv2 packets handed to the lcore that owns their job")          \
  X(handover_in, "packets received from other lcores")                               \
  X(handover_full, "handovers dropped: the owner's ring was full")                   \
  X(multiseg_linearize_failed, "chained mbufs that could not be made contiguous (RoCEv2 ones dropped, others bridged)") \
  X(busy_cycles, "TSC cycles of loop iterations that moved packets")                  \
  X(idle_cycles, "TSC cycles of loop iterations that found nothing")

struct LcoreCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_LCORE_COUNTERS(X)
#undef X
};

struct PortInfo {
  uint16_t port;
  std::string name;
  bool flow_hardware;
  std::string flow_reason;
  uint32_t mtu;
};

class Appliance {
 public:
  Appliance();
  ~Appliance();

  // After rte_eal_init(). Sets up the pool, the ports, the lcores' state. Clear error on failure.
  bool init(const ApplianceConfig& cfg, std::string* error);
  // Launches the loop on every worker lcore (or runs it on the main lcore when there is none, in
  // which case `tick` is called from the loop every ~10 ms for the control plane).
  bool start(std::string* error);
  void stop();  // asks the loops to finish, flushes TX, waits for them
  bool single_lcore() const;
  void set_tick(void (*tick)(void*), void* arg);
  void run_main_lcore();  // single-lcore mode: runs the loop here until stop_requested()

  static void request_stop();    // async-signal-safe
  static bool stop_requested();

  // Control plane; thread-safe (serialised), applied by the owning lcores between bursts.
  bool add_job(const agg::JobSpec& spec, std::string* error);
  bool remove_job(uint32_t id, std::string* error);
  std::vector<agg::JobInfo> list_jobs();
  bool job_info(uint32_t id, agg::JobInfo* out);
  bool job_spec(uint32_t id, agg::JobSpec* out);
  agg::EngineCounters engine_totals();
  std::vector<std::pair<unsigned, LcoreCounters>> lcore_counters() const;
  const std::vector<PortInfo>& ports() const;
  uint64_t total_rx() const;
  std::string stats_text();  // ports, lcores, jobs: the periodic and final print

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace inagg::dataplane
