// inagg-worker's command line: nccl-tests' all_reduce_perf options with their meaning, then the
// worker's own; parsed and checked into client::WorkerOptions.
#pragma once

#include <string>

#include "inagg/client/worker.hpp"

namespace inagg::apps {

// The command line after parsing: the options, and where --rank/--workers came from.
struct CommandLine {
  client::WorkerOptions o;
  std::string rank_from, workers_from;  // an MPI launcher's variable, or "" when given
  std::string output_file;              // --output-file: the results also as JSON or CSV, by its name's end
};

// Prints "inagg-worker: WHY" and returns the usage exit status, 2.
int usage(const std::string& why);

// Parses and checks the command line into *cl. Returns -1 to go on, else the exit status (after
// the help, the version, --print-job, or a clear error).
int parse_command_line(int argc, char** argv, CommandLine* cl);

}  // namespace inagg::apps
