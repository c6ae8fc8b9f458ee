// inagg-worker's command line: nccl-tests' all_reduce_perf options with their meaning, then the
// worker's own; parsed and checked into the rank's options (client::RankOptions) and the sweep.
#pragma once

#include <string>

#include "inagg/client/rank.hpp"
#include "nccl_table.hpp"

namespace inagg::apps {

// The sweep, with nccl-tests' defaults: one size of 32 MiB; sizes grow by `factor` when it is
// above 1, else by `step_bytes`.
struct Sweep {
  uint64_t min_bytes = 32ull << 20, max_bytes = 32ull << 20, step_bytes = 1ull << 20;
  unsigned factor = 1;
  unsigned iters = 20, warmup = 1;
  unsigned check = 1;      // checked iterations per size and placement (nccl-tests' -c); 0: none
  bool in_place = true;    // also run the in-place placement after the out-of-place one
  std::string op = "sum";  // the only reduction the appliance does
  uint32_t seed = 1;       // of the inputs
  // --corrupt-input, for the tests of the check: elements of this rank's checked input altered
  // after the reference was made.
  unsigned corrupt = 0;
};

// The command line after parsing: the options, and where --rank/--workers came from.
struct CommandLine {
  client::RankOptions o;
  Sweep sweep;
  std::string rank_from, workers_from;  // an MPI launcher's variable, or "" when given
  // -J/--output_file (--output-file): rank 0 also writes the results to this file, nccl-tests'
  // JSON, or CSV when the name ends in .csv.
  std::string output_file;
  bool output_file_csv = false;
  apps::nccl::Average average = apps::nccl::Average::mean;  // -a: how rows aggregate the ranks' times
  bool rank_figures = false;  // --rank-figures: every rank also prints its own rows as comments
};

// The rank's options as inagg-worker's flags name them (validate()'s sentences).
const client::RankOptionNames& option_names();

// Prints "inagg-worker: WHY" and returns the usage exit status, 2.
int usage(const std::string& why);

// Parses and checks the command line into *cl. Returns -1 to go on, else the exit status (after
// the help, the version, --print-job, or a clear error).
int parse_command_line(int argc, char** argv, CommandLine* cl);

}  // namespace inagg::apps
