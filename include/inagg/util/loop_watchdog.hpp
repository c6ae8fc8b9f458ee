// systemd's watchdog (WatchdogSec=, sd_watchdog_enabled(3)) fed only while the loops it watches
// run: the service manager kills and restarts a unit whose pings stop, so a wedged datapath lcore
// or control thread does not leave the unit "active" while it forwards nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace inagg::util {

// The interval the service manager asked for ($WATCHDOG_USEC), when it asked this process
// ($WATCHDOG_PID unset or ours). None when unset, 0 or malformed; a malformed value sets *error
// (for one log line) and is treated as unset.
std::optional<std::chrono::microseconds> service_watchdog_interval(std::string* error);

// Decides, on every look at the loops' iteration counters (an id and a counter each), whether to
// ping now: every half interval, and only while each counter has moved within the last half
// interval. So the service manager sees pings stop at most half an interval after a loop stopped,
// and kills the service at most an interval and a half after. An idle loop still counts its
// iterations (lab mode's sleeps are far shorter than any interval systemd accepts).
class LoopWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LoopWatchdog(std::chrono::microseconds interval) : half_(interval / 2) {}

  struct Verdict {
    bool ping = false;
    std::vector<std::pair<unsigned, Clock::duration>> stalled;  // stopped moving since the last look: id, for how long
    std::vector<std::pair<unsigned, Clock::duration>> recovered;  // moving again: id, how long it had stood still
  };
  Verdict look(Clock::time_point now, std::span<const std::pair<unsigned, uint64_t>> counters);
  Clock::duration half_interval() const { return half_; }

 private:
  struct Loop {
    unsigned id;
    uint64_t count;
    Clock::time_point moved;
    bool stalled;
  };
  Clock::duration half_;
  std::vector<Loop> loops_;
  std::optional<Clock::time_point> last_ping_;
};

}  // namespace inagg::util
