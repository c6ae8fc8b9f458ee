// inagg's own options (after EAL's, behind "--"): what they are, their parsing from the command
// line and config files, and the checks that need no EAL. inagg_main.cpp runs the appliance.
#pragma once

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "inagg/control/socket.hpp"
#include "inagg/dataplane/config.hpp"
#include "inagg/dataplane/events.hpp"

namespace inagg::apps {

struct Options {
  dataplane::ApplianceConfig app;
  std::vector<std::string> job_files;
  std::string state_dir;  // "" = no state directory: jobs registered at run time are lost on a restart
  std::string socket_path = control::kDefaultSocketPath;
  std::string metrics_listen;  // "" = no metrics endpoint
  std::string control_tcp;     // "" = no TCP control listener
  std::string control_secret_file;
  double stats_interval = 0;
  double idle_exit = 0;
  double run_for = 0;
  bool check_only = false;
  bool selftest = false;
  double selftest_s = 1;
  std::vector<dataplane::LogLevelRule> log_levels;  // --log-level, in order
  // Every option given, by name, with its values as written (the command line's, then the config
  // file's where the command line has none, or both for a repeatable one): what a reload compares.
  std::map<std::string, std::vector<std::string>> given;
};

// Parses the options after `--` (argv[0] a program name). Returns 0 to go on, or an exit status
// after printing the help or the version (to stdout) or a clear error (to `errors`).
int parse_app_options(int argc, char** argv, Options& o, std::ostream& errors = std::cerr);

// Whether a reload (SIGHUP) applies option `name`: the control socket, the TCP listener and its
// tenants file, the metrics endpoint, the binding table, the log levels, the stats interval.
// Every other option takes effect at the next start.
bool reloadable_option(const std::string& name);
// The options a reload does not apply whose values differ between `running` and `next`, by name.
std::vector<std::string> restart_only_changes(const Options& running, const Options& next);

}  // namespace inagg::apps
