// Live capture from any port with dpdk-dumpcap or dpdk-pdump (secondary processes, rte_pdump).
#pragma once

#include <string>

namespace inagg::dataplane {

// After rte_eal_init: serves capture requests from dpdk-dumpcap and dpdk-pdump. False (and why)
// when rte_pdump cannot start; the appliance runs without live capture then.
bool start_live_capture(std::string* error);
// Before rte_eal_cleanup, after the lcores have stopped.
void stop_live_capture();

}  // namespace inagg::dataplane
