// The appliance's configuration: its ports, packet buffer pools, queues, datapath loop and the
// engines' budgets (ApplianceConfig, filled from inagg's options), and the checks made on it both at
// start-up and by inagg --check-config, without EAL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inagg/dataplane/rank_binding.hpp"

#include "inagg/agg/engine.hpp"

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
  // The operator's binding table (--bindings): where ranks' addresses are (rank_binding.hpp).
  std::vector<BoundStation> bindings;
  agg::EngineConfig engine;  // per lcore; budgets are per lcore too
  std::string capture_path;  // pcap of every RoCEv2 packet the engines emit; "" = off
  // Per capture file; later packets are skipped and counted.
  uint64_t capture_max_bytes = 1ull << 30;
  uint32_t wait_link_ms = 0;  // before starting the loops, wait this long for every link to be up
};

// The engines' mbuf budget must leave the pool buffers for forwarding: the check inagg makes at
// start-up and inagg --check-config makes without EAL (so both say the same). On failure *error
// says which option to change.
bool check_mbuf_budget(const ApplianceConfig& cfg, unsigned datapath_lcores, std::string* error);

}  // namespace inagg::dataplane
