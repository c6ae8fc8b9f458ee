// inagg's own options (after EAL's, behind "--"): what they are, their parsing from the command
// line and config files, and the checks that need no EAL. inagg_main.cpp runs the appliance.
#pragma once

#include <string>
#include <vector>

#include "inagg/control/socket.hpp"
#include "inagg/dataplane/config.hpp"

namespace inagg::apps {

struct Options {
  dataplane::ApplianceConfig app;
  std::vector<std::string> job_files;
  std::string state_dir;  // "" = no state directory: jobs registered at run time are lost on a restart
  std::string socket_path = control::kDefaultSocketPath;
  std::string metrics_listen;  // "" = no metrics endpoint
  std::string control_tcp;     // "" = no TCP control listener
  std::string control_secret_file;
  std::string job_spread;  // --job-spread: "shards", the only way left
  double stats_interval = 0;
  double idle_exit = 0;
  double run_for = 0;
  bool check_only = false;
  bool selftest = false;
  double selftest_s = 1;
};

// Parses the options after `--` (argv[0] a program name). Returns 0 to go on, or an exit status
// after printing the help, the version or a clear error.
int parse_app_options(int argc, char** argv, Options& o);

}  // namespace inagg::apps
