// The appliance's log: util::log routed to rte_log, and the events the control side notices by
// watching the appliance (a port's link, datapath drops), one line each. (A job that fails is
// logged by its engine, "job N aborted: why"; added, refused and removed by the control thread.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "inagg/dataplane/counters.hpp"

namespace inagg::dataplane {

class Appliance;

// After rte_eal_init(): util::log goes to rte_log under the types inagg.dataplane, inagg.engine
// and inagg.control (INFO unless EAL's --log-level says otherwise for them), and rte_log's lines
// (EAL's and inagg's) go to stdout only, each line once: DPDK's default stream also sends every
// line to syslog, which under systemd reaches the journal a second time. When stdout is the
// journal's stream (systemd sets JOURNAL_STREAM to its device and inode), each line starts with
// its syslog priority ("<4>" for a warning), which journald reads as the entry's level.
void route_logs_to_rte_log();
// The stream's rule, for tests: the "<N>" prefix of an rte_log level (RTE_LOG_ERR is 4, syslog's
// LOG_ERR 3).
std::string journal_prefix(uint32_t rte_level);

// Called from the control tick: every `period_ms` compares the ports' links and the lcores' drop
// counters with what it saw last and logs each change once: "port 1 (net_pcap): link down",
// "lcore 2: 4096 packets dropped in 1.0 s (tx_dropped: a TX queue was full)" (at most one line a
// second per lcore and counter).
class EventWatcher {
 public:
  explicit EventWatcher(Appliance& app, unsigned period_ms = 200) : app_(app), period_ms_(period_ms) {}
  void poll();

 private:
  Appliance& app_;
  unsigned period_ms_;
  uint64_t next_ns_ = 0, last_drops_ns_ = 0;
  std::map<uint16_t, bool> link_up_;
  std::map<unsigned, LcoreCounters> lcores_;
};

}  // namespace inagg::dataplane
