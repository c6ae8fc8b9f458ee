// inagg's log lines: one per significant event (a job added, refused, failed and why; a port's
// link going up or down; a fallback to software steering), by module and level. A program routes
// them where it wants with set_log_sink(): the appliance hands them to DPDK's rte_log under the
// types inagg.dataplane, inagg.engine and inagg.control, so EAL's --log-level (e.g.
// --log-level=inagg.*:debug, --log-level=inagg.control:warning) selects them as it does DPDK's own;
// everything else prints "inagg: <message>" on stderr. Below every module, so the engine can log
// without knowing DPDK.
#pragma once

#include <cstdint>

namespace inagg::util {

enum class LogModule : uint8_t { dataplane, engine, control, count };
enum class LogLevel : uint8_t { error, warning, notice, info, debug };

const char* log_module_name(LogModule m);  // "inagg.dataplane", ...

using LogSink = void (*)(LogModule module, LogLevel level, const char* message);
void set_log_sink(LogSink sink);  // nullptr: back to stderr

// printf-style; the message is one line (no trailing newline needed).
void log(LogModule module, LogLevel level, const char* format, ...) __attribute__((format(printf, 3, 4)));

// For messages a fast path could emit per packet: at most `burst` per `window_ns`, the rest
// counted. Not thread-safe: one per call site and thread (an lcore, the control thread).
//   static thread_local util::LogRateLimit limit;
//   if (limit.allow(now_ns)) util::log(..., "... (%llu like it suppressed)", limit.take_suppressed());
class LogRateLimit {
 public:
  explicit LogRateLimit(uint32_t burst = 5, uint64_t window_ns = 1'000'000'000ull)
      : burst_(burst), window_ns_(window_ns) {}
  bool allow(uint64_t now_ns);
  uint64_t take_suppressed();  // messages refused since the last call

 private:
  uint32_t burst_;
  uint64_t window_ns_;
  uint64_t window_start_ = 0;
  uint32_t used_ = 0;
  uint64_t suppressed_ = 0;
  bool started_ = false;
};

}  // namespace inagg::util
