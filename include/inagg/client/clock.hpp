// The one clock of the client library: steady, in nanoseconds (deadlines, timers, silence).
#pragma once

#include <chrono>
#include <cstdint>

namespace inagg::client {

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Milliseconds from now until deadline_ns (rounded up, at most 1,000,000; 0 once it has passed), for
// poll().
inline int ms_until(uint64_t deadline_ns) {
  const uint64_t t = now_ns();
  if (t >= deadline_ns) return 0;
  const uint64_t ms = (deadline_ns - t) / 1'000'000 + 1;
  return static_cast<int>(ms < 1'000'000 ? ms : 1'000'000);
}

}  // namespace inagg::client
