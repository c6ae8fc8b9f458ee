#include "inagg/util/log.hpp"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace inagg::util {
namespace {

void stderr_sink(LogModule, LogLevel, const char* message) { std::fprintf(stderr, "inagg: %s\n", message); }

std::atomic<LogSink> g_sink{stderr_sink};

}  // namespace

const char* log_module_name(LogModule m) {
  switch (m) {
    case LogModule::dataplane:
      return "inagg.dataplane";
    case LogModule::engine:
      return "inagg.engine";
    case LogModule::control:
      return "inagg.control";
    case LogModule::count:
      break;
  }
  return "inagg";
}

void set_log_sink(LogSink sink) { g_sink.store(sink ? sink : stderr_sink); }

void log(LogModule module, LogLevel level, const char* format, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  g_sink.load()(module, level, buf);
}

bool LogRateLimit::allow(uint64_t now_ns) {
  if (!started_ || now_ns - window_start_ >= window_ns_) {
    started_ = true;
    window_start_ = now_ns;
    used_ = 0;
  }
  if (used_ < burst_) {
    ++used_;
    return true;
  }
  ++suppressed_;
  return false;
}

uint64_t LogRateLimit::take_suppressed() {
  const uint64_t n = suppressed_;
  suppressed_ = 0;
  return n;
}

}  // namespace inagg::util
