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
// A log level for the rte_log types a glob matches ("inagg.*", "pmd.net.mlx5.*"): inagg's own
// --log-level, read from its options as EAL reads its own, but applied again by a reload.
struct LogLevelRule {
  std::string pattern;
  uint32_t level = 0;  // RTE_LOG_EMERG (1) .. RTE_LOG_DEBUG (8)
};
// Parses PATTERN:LEVEL, LEVEL a name (emergency, alert, critical, error, warning, notice, info,
// debug) or 1-8, as EAL's --log-level takes it. Needs no EAL. False with *error saying what to write.
bool parse_log_level_rule(const std::string& text, LogLevelRule* rule, std::string* error);
// After route_logs_to_rte_log(): every registered type's level as EAL's options left it is kept,
// then `rules` are applied in order. Called again (a reload), the types go back to those levels
// first, so a rule taken out of the config takes its effect with it.
void apply_log_level_rules(const std::vector<LogLevelRule>& rules);

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
