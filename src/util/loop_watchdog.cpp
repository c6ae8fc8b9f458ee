#include "inagg/util/loop_watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace inagg::util {

std::optional<std::chrono::microseconds> service_watchdog_interval(std::string* error) {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (!usec || !*usec) return std::nullopt;
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid && *pid) {
    char* end = nullptr;
    const long long p = std::strtoll(pid, &end, 10);
    if (*end != '\0' || p <= 0) {
      *error = "$WATCHDOG_PID '" + std::string(pid) + "' is not a process id: no watchdog pings";
      return std::nullopt;
    }
    if (p != static_cast<long long>(::getpid())) return std::nullopt;  // meant for another process
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(usec, &end, 10);
  if (*end != '\0' || usec[0] == '-' || v == 0) {
    *error = "$WATCHDOG_USEC '" + std::string(usec) + "' is not a positive number of microseconds: no watchdog pings";
    return std::nullopt;
  }
  return std::chrono::microseconds(v);
}

LoopWatchdog::Verdict LoopWatchdog::look(Clock::time_point now,
                                         std::span<const std::pair<unsigned, uint64_t>> counters) {
  Verdict v;
  bool all_moving = true;
  for (const auto& [id, count] : counters) {
    const unsigned which = id;  // (a structured binding is not captured before clang 16)
    auto it = std::find_if(loops_.begin(), loops_.end(), [which](const Loop& l) { return l.id == which; });
    if (it == loops_.end()) {  // first seen: it has until half an interval from now to move
      loops_.push_back({id, count, now, false});
      continue;
    }
    if (count != it->count) {
      if (it->stalled) v.recovered.push_back({id, now - it->moved});
      *it = {id, count, now, false};
      continue;
    }
    if (now - it->moved <= half_) continue;
    all_moving = false;
    if (!it->stalled) {
      it->stalled = true;
      v.stalled.push_back({id, now - it->moved});
    }
  }
  if (all_moving && (!last_ping_ || now - *last_ping_ >= half_)) {
    v.ping = true;
    last_ping_ = now;
  }
  return v;
}

}  // namespace inagg::util
