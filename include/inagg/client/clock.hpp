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

}  // namespace inagg::client
