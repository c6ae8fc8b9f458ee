// inagg-ctl top: a live terminal view of the appliance's engine and jobs.
#pragma once

#include <string>

namespace inagg::ctl {

struct TopOptions {
  std::string socket;
  double interval_s = 1.0;
  unsigned count = 0;  // frames to show; 0: until interrupted
  int timeout_ms = 5000;
  bool json = false;  // each frame one JSON object on a line of its own
};

// Polls the control socket every interval and prints the rates between two polls. On a terminal
// each frame replaces the last; otherwise (or with count, or as JSON) frames follow one another. Returns the
// exit status: 0, or 2 when the appliance cannot be reached (with the reason on stderr).
int run_top(const TopOptions& o);

}  // namespace inagg::ctl
