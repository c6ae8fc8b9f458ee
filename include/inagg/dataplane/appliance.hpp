// The appliance's data plane: EAL ports, one run-to-completion loop per worker lcore (l3fwd
// style), the RC engine per lcore for the jobs it owns, the L2 bridge for everything else, and the
// request rings through which the control thread reaches the lcores (ip_pipeline style).
// Sources: src/dataplane/ports.cpp (pool, ports), lcore_loop.cpp (the loop), lcore_requests.cpp
// (requests to the lcores), job_ownership.cpp (which lcore owns which job), appliance.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/control/protocol.hpp"

namespace inagg::dataplane {

// How the packet buffers are pooled. shared: one pool on the main lcore's NUMA node. per_socket:
// one pool per NUMA node that has ports, each port's RX from the pool on its own node. per_port:
// one pool per port, on the port's node. Each pool holds `mbufs` buffers; an engine allocates
// (NAKs, resends' copies) from the pool on its lcore's node, or the first pool.
enum class PoolMode : uint8_t { shared, per_socket, per_port };

struct ApplianceConfig {
  std::vector<uint16_t> ports;  // empty: every port EAL probed
  uint32_t mtu = 9000;          // jumbo frames so 4 KiB RoCE payloads fit
  uint32_t mbufs = 32768;       // packet buffers in each pool
  PoolMode pools = PoolMode::shared;
  uint32_t mbuf_cache = 256;
  uint16_t rx_desc = 1024, tx_desc = 1024;
  uint16_t burst = 32;
  uint32_t drain_us = 100;  // TX buffers are flushed at least this often
  // Lab mode: a datapath lcore whose queues stay empty backs off and sleeps, up to this many
  // microseconds at a time (lcore_loop.cpp). 0: busy-poll (a dedicated server).
  uint32_t idle_sleep_us = 0;
  bool flow_steering = true;  // try rte_flow for UDP 4791 (falls back to software)
  uint64_t mac_ageing_ns = 300'000'000'000ull;
  size_t mac_table_size = 4096;
  size_t mac_limit_per_port = 0;  // learned MAC addresses a port may hold (0: no limit)
  agg::EngineConfig engine;       // per lcore; budgets are per lcore too
  std::string capture_path;       // pcap of every RoCEv2 packet the engines emit; "" = off
  // Per capture file; later packets are skipped and counted.
  uint64_t capture_max_bytes = 1ull << 30;
  uint32_t wait_link_ms = 0;  // before starting the loops, wait this long for every link to be up
  // Datapath lcores each job is spread over (protocol.md section 4): 1, its owner alone; N > 1, its
  // slots sharded by index: lcore i of N (the owner is 0) takes every sequence s with s mod N == i
  // and does all the work of its slots; releases leave in PSN order through the owner's ordered
  // ring. N a power of two, at most 8, and at most the datapath lcores.
  uint16_t job_lcores = 1;
};

// Per-lcore counters, written only by their lcore. The control thread reads them without a lock
// for display: each is a naturally aligned 64-bit word, so a read sees an old or a new value,
// never a torn one.
#define INAGG_LCORE_COUNTERS(X)                                                                       \
  X(rx, "packets received")                                                                           \
  X(tx, "packets handed to the PMDs")                                                                 \
  X(tx_dropped, "packets a PMD did not take, freed")                                                  \
  X(bridged, "frames forwarded by the L2 table")                                                      \
  X(flooded, "frames flooded (unknown unicast, broadcast, multicast)")                                \
  X(same_port_drops, "frames whose destination is behind their ingress port")                         \
  X(mac_moves_refused, "frames claiming a rank's sticky MAC from another port, not learned")          \
  X(mac_limit_refused, "frames from a new MAC on a port at its --mac-limit-per-port, not learned")    \
  X(roce, "RoCEv2 packets given to an engine")                                                        \
  X(handover_out, "RoCEv2 packets handed to the lcore that owns their job")                           \
  X(handover_in, "packets received from other lcores")                                                \
  X(handover_full, "handovers dropped: the owner's ring was full")                                    \
  X(ordered, "released packets of sharded jobs this lcore sent from its ordered ring (--job-lcores)") \
  X(rx_deferred, "RX polls skipped: a handover ring had no room for a burst (--job-lcores)")          \
  X(multiseg_linearize_failed,                                                                        \
    "chained mbufs that could not be made contiguous (RoCEv2 ones dropped, others bridged)")          \
  X(idle_sleeps, "times the loop slept with its queues empty (lab mode, --idle-sleep-us)")            \
  X(busy_cycles, "TSC cycles of loop iterations that moved packets")                                  \
  X(idle_cycles, "TSC cycles of loop iterations that found nothing")

struct LcoreCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_LCORE_COUNTERS(X)
#undef X
};

struct PortInfo {
  uint16_t port;
  std::string name;
  std::string flow_reason;  // why the PMD refused the better steering modes, when it did
  uint32_t mtu;
  std::string flow_mode = "software";  // rss, queue or software (flow.hpp)
  bool flow_steered() const { return flow_mode != "software"; }
};

// The engines' mbuf budget must leave the pool buffers for forwarding: the check inagg makes at
// start-up and inagg --check-config makes without EAL (so both say the same). On failure *error
// says which option to change.
bool check_mbuf_budget(const ApplianceConfig& cfg, unsigned datapath_lcores, std::string* error);
// job_lcores must be between 1 and the datapath lcores, and for shards a power of two of at most 8
// (the same check at start-up and --check-config).
bool check_job_lcores(const ApplianceConfig& cfg, unsigned datapath_lcores, std::string* error);

class Appliance {
 public:
  Appliance();
  ~Appliance();  // stops; closes the ports (a net_pcap output file is complete after it). Before rte_eal_cleanup().
  Appliance(const Appliance&) = delete;
  Appliance& operator=(const Appliance&) = delete;

  // After rte_eal_init(). Sets up the pool, the ports, the lcores' state. Clear error on failure.
  bool init(const ApplianceConfig& cfg, std::string* error);
  // Runs until stop is requested: the datapath loop on every worker lcore, or on this (the main)
  // lcore when there is none; `control_tick` every `tick_ms` on this lcore, or, when this lcore
  // runs the datapath, on a control thread of its own (rte_ctrl_thread_create: off the datapath's
  // cores where EAL left any). The datapath never waits for the control tick: control requests
  // reach it as messages on its lcores' rings. Returns false with *error if it could not start.
  bool run(void (*control_tick)(void*), void* arg, unsigned tick_ms, std::string* error);
  bool single_lcore() const;  // the main lcore runs the datapath

  static void request_stop();  // async-signal-safe
  static bool stop_requested();

  // Control side; any thread, serialised among themselves, applied by the owning lcores between
  // bursts (or here while no loop runs).
  bool add_job(const control::JobSpec& spec, std::string* error, agg::JobStart start = agg::JobStart::fresh);
  bool remove_job(uint32_t id, std::string* error);
  // Jobs as the control protocol describes them (control::JobStatus: the engine's figures and
  // counters, the spec's dtype and workers), by id.
  std::vector<control::JobStatus> describe_jobs();
  bool describe_job(uint32_t id, control::JobStatus* out);
  agg::EngineCounters engine_totals();
  // Lock-free reads of the lcores' counters and the ports.
  std::vector<std::pair<unsigned, LcoreCounters>> lcore_counters() const;
  const std::vector<PortInfo>& ports() const;
  uint64_t total_rx() const;
  // Packet buffers of the appliance's pools: in use (held by jobs, queued, in per-lcore caches) and
  // in all. A lock-free read.
  struct MbufUse {
    uint64_t in_use = 0, total = 0;
  };
  MbufUse mbuf_use() const;
  // Per-job rte_flow rules in place, refused by a PMD, and not made because another job's rule
  // holds the address pair (flow.hpp); zero where no port takes per-job rules.
  struct FlowRuleCounts {
    uint64_t in_place = 0, refused = 0, contended = 0;
  };
  FlowRuleCounts flow_rules() const;
  std::string stats_text();  // ports, lcores, jobs: the periodic and final print

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace inagg::dataplane
