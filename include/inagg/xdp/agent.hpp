// The head agent's control side: jobs in and out of a loaded HeadProgram, counters out, through
// the same one-request-per-connection text protocol as the appliance's control socket:
//
//   request                 reply
//   add\n<head job text>    ok job <id> added        (a parent's MAC is resolved by ARP first)
//   remove <id>             ok job <id> removed
//   list                    id=<id> members=.. values=.. window=.. total_weight=.. group=..
//                             [parent=<ip> parent_rank=..] completed=<slots> results_sent=..
//                             (one line per job; "no jobs" when there are none)
//   stats [<id>]            <counter> <value> lines: job <id>'s, or, without an id, those of
//                             packets for no job on this head
//
// Errors come back as one line "error: <why>".
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "inagg/xdp/head_program.hpp"
#include "inagg/xdp/host.hpp"

namespace inagg::xdp {

class HeadAgent {
 public:
  HeadAgent(HeadProgram& program, Interface iface) : prog_(program), iface_(std::move(iface)) {}
  ~HeadAgent();
  HeadAgent(const HeadAgent&) = delete;
  HeadAgent& operator=(const HeadAgent&) = delete;

  // Resolves the MACs the job needs (its parent's, its members') by ARP, reads its key_file, adds
  // the job, and joins its parent_group on the interface (the kernel then answers IGMP for it, so
  // snooping switches and NIC filters let the parent's results through to the XDP program).
  bool add_job(HeadJob job, std::string* error);
  bool remove_job(unsigned id, std::string* error);
  std::string handle(std::string_view request);

  // "name value" lines (the counters of `row`), and the help text per counter for --help.
  std::string format_counters(unsigned row) const;
  std::string format_jobs() const;

 private:
  HeadProgram& prog_;
  Interface iface_;
  std::map<unsigned, int> joined_;  // job id -> the socket holding its parent_group membership
};

}  // namespace inagg::xdp
