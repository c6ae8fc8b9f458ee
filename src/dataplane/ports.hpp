// The appliance's ports: the packet buffer pool, each port's configuration (one RX and one TX
// queue per datapath lcore), rte_flow steering, and their teardown. Internal to src/dataplane.
#pragma once

#include <rte_mempool.h>

#include <cstdint>
#include <string>
#include <vector>

#include "inagg/dataplane/config.hpp"
#include "inagg/dataplane/flow.hpp"
#include "inagg/dataplane/port_info.hpp"

namespace inagg::dataplane {

class PortSet {
 public:
  PortSet() = default;
  ~PortSet();  // stops and closes every port it configured, frees the pools
  PortSet(const PortSet&) = delete;
  PortSet& operator=(const PortSet&) = delete;

  // Checks cfg.ports against what EAL probed (empty: all of them). Before open().
  bool select(const ApplianceConfig& cfg, std::string* error);
  // Creates the pools (cfg.pools) and configures and starts every selected port with `queues` queue pairs. On
  // failure *error says what failed and what to change.
  bool open(const ApplianceConfig& cfg, uint16_t queues, std::string* error);
  // Waits up to `ms` for every link to be up (a net_memif port is down until its peer connects).
  void wait_for_links(uint32_t ms) const;

  rte_mempool* pool() const { return pools_.empty() ? nullptr : pools_.front(); }  // the first pool
  // The pool on NUMA node `socket`, or the first pool when there is none there.
  rte_mempool* pool_for_socket(int socket) const;
  const std::vector<rte_mempool*>& pools() const { return pools_; }
  const std::vector<uint16_t>& ids() const { return ids_; }  // port index -> DPDK port id
  std::vector<int> index_of_port() const;                    // DPDK port id -> port index (-1)
  const std::vector<PortInfo>& info() const { return info_; }
  const std::vector<uint16_t>& tx_ring_sizes() const {
    return tx_ring_size_;
  }                                // port index -> TX descriptors per queue
  std::string stats_text() const;  // one line per port: PMD counters
  FlowSteering& steering() { return steering_; }
  const FlowSteering& steering() const { return steering_; }

 private:
  bool open_port(const ApplianceConfig& cfg, uint16_t port, uint16_t queues, std::string* error);

  bool create_pools(const ApplianceConfig& cfg, uint32_t data_room, std::string* error);
  rte_mempool* create_pool(const std::string& name, const ApplianceConfig& cfg, uint32_t data_room, int socket,
                           std::string* error);

  std::vector<rte_mempool*> pools_;
  std::vector<rte_mempool*> pool_of_port_;  // port index -> the pool its RX queues fill from
  std::vector<uint16_t> ids_;
  std::vector<uint16_t> configured_;  // ports rte_eth_dev_configure accepted: to stop and close
  FlowSteering steering_;             // its rules are removed in ~PortSet, before the ports stop
  std::vector<PortInfo> info_;
  std::vector<uint16_t> tx_ring_size_;
};

}  // namespace inagg::dataplane
