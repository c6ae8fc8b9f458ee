// What EAL would make of its command line, read without starting it: for inagg --check-config,
// which checks the budgets that depend on the number of datapath lcores, and for the check after
// EAL started that every --vdev became a port.
#pragma once

#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace inagg::dataplane {

struct EalLcores {
  std::set<unsigned> lcores;  // every lcore id EAL would start
  unsigned main_lcore = 0;
  // The lcores that run a datapath loop: every worker, or the main lcore when there is no other.
  unsigned datapath_lcores() const { return lcores.size() > 1 ? static_cast<unsigned>(lcores.size() - 1) : 1u; }
};

// From -l LIST, --lcores MAP, -c MASK and --main-lcore (EAL's syntax; LIST "0-3,5", MAP
// "(0,2)@0,1@1"), or, when none is given, the CPUs this process may run on, as EAL does. On a
// malformed value returns nullopt and says what is wrong.
std::optional<EalLcores> read_eal_lcores(std::span<char* const> eal_args, std::string* error);

// The device names of every --vdev ("net_pcap0" of --vdev=net_pcap0,rx_pcap=x), in order.
std::vector<std::string> read_eal_vdevs(std::span<char* const> eal_args);

}  // namespace inagg::dataplane
