#include "inagg/dataplane/events.hpp"

#include <rte_ethdev.h>
#include <rte_log.h>

#include <sys/stat.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "inagg/dataplane/appliance.hpp"
#include "inagg/util/log.hpp"

namespace inagg::dataplane {
namespace {

int g_types[static_cast<size_t>(util::LogModule::count)];

uint32_t rte_level(util::LogLevel l) {
  switch (l) {
    case util::LogLevel::error:
      return RTE_LOG_ERR;
    case util::LogLevel::warning:
      return RTE_LOG_WARNING;
    case util::LogLevel::notice:
      return RTE_LOG_NOTICE;
    case util::LogLevel::info:
      return RTE_LOG_INFO;
    case util::LogLevel::debug:
      return RTE_LOG_DEBUG;
  }
  return RTE_LOG_INFO;
}

void rte_log_sink(util::LogModule m, util::LogLevel l, const char* message) {
  rte_log(rte_level(l), static_cast<uint32_t>(g_types[static_cast<size_t>(m)]), "inagg: %s\n", message);
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Whether stdout is the stream systemd connected to the journal (JOURNAL_STREAM=DEVICE:INODE).
bool stdout_is_journal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  if (!js || fstat(fileno(stdout), &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
  return dev == static_cast<unsigned long long>(st.st_dev) && ino == static_cast<unsigned long long>(st.st_ino);
}

// rte_log's stream: writes to stdout, with a priority prefix at each line's start for journald.
struct LogStream {
  bool journal = false;
  bool line_start = true;
};
LogStream g_stream;

ssize_t log_stream_write(void* cookie, const char* buf, size_t size) {
  auto* ls = static_cast<LogStream*>(cookie);
  size_t done = 0;
  while (done < size) {
    if (ls->journal && ls->line_start) {
      const std::string p = journal_prefix(static_cast<uint32_t>(rte_log_cur_msg_loglevel()));
      std::fwrite(p.data(), 1, p.size(), stdout);
    }
    const char* nl = static_cast<const char*>(std::memchr(buf + done, '\n', size - done));
    const size_t n = nl ? static_cast<size_t>(nl - (buf + done)) + 1 : size - done;
    std::fwrite(buf + done, 1, n, stdout);
    ls->line_start = nl != nullptr;
    done += n;
  }
  std::fflush(stdout);
  return static_cast<ssize_t>(size);
}

}  // namespace

std::string journal_prefix(uint32_t rte_level) {
  const uint32_t l = rte_level >= RTE_LOG_EMERG && rte_level <= RTE_LOG_DEBUG ? rte_level - 1 : 6;
  return "<" + std::to_string(l) + ">";
}

void route_logs_to_rte_log() {
  g_stream.journal = stdout_is_journal();
  cookie_io_functions_t io{};
  io.write = log_stream_write;
  if (FILE* f = fopencookie(&g_stream, "w", io)) {
    setvbuf(f, nullptr, _IOLBF, 0);
    rte_openlog_stream(f);  // stays open for the process's life, as EAL's own stream
  }
  for (size_t i = 0; i < static_cast<size_t>(util::LogModule::count); ++i) {
    const int t =
        rte_log_register_type_and_pick_level(util::log_module_name(static_cast<util::LogModule>(i)), RTE_LOG_INFO);
    if (t < 0) return;  // keep the stderr sink
    g_types[i] = t;
  }
  util::set_log_sink(rte_log_sink);
}

bool parse_log_level_rule(const std::string& text, LogLevelRule* rule, std::string* error) {
  static constexpr const char* kNames[] = {"emergency", "alert",  "critical", "error",
                                           "warning",   "notice", "info",     "debug"};
  const size_t colon = text.rfind(':');
  const std::string pattern = colon == std::string::npos ? "" : text.substr(0, colon);
  const std::string level = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (pattern.empty() || pattern.find_first_of(" \t") != std::string::npos) {
    *error = "'" + text + "' is not PATTERN:LEVEL (e.g. inagg.*:debug, inagg.control:warning)";
    return false;
  }
  for (uint32_t i = 0; i < 8; ++i)
    if (level == kNames[i] || level == std::to_string(i + 1)) {
      *rule = {pattern, i + 1};
      return true;
    }
  *error = "'" + text + "': the level must be emergency, alert, critical, error, warning, notice, info, debug or 1-8";
  return false;
}

void apply_log_level_rules(const std::vector<LogLevelRule>& rules) {
  static std::vector<int> start_levels;  // by type, as EAL's options left them; the control thread's
  static bool taken = false;
  if (!taken) {
    taken = true;
    for (uint32_t type = 0;; ++type) {
      const int level = rte_log_get_level(type);
      if (level < 0) break;  // past the last registered type
      start_levels.push_back(level);
    }
  }
  for (size_t type = 0; type < start_levels.size(); ++type)
    if (rte_log_get_level(static_cast<uint32_t>(type)) != start_levels[type])
      rte_log_set_level(static_cast<uint32_t>(type), static_cast<uint32_t>(start_levels[type]));
  for (const LogLevelRule& r : rules)
    if (rte_log_set_level_pattern(r.pattern.c_str(), r.level) != 0)
      util::log(util::LogModule::control, util::LogLevel::warning, "log level %s:%u not applied (out of memory)",
                r.pattern.c_str(), r.level);
}

void EventWatcher::poll() {
  const uint64_t now = now_ns();
  if (now < next_ns_) return;
  next_ns_ = now + uint64_t{period_ms_} * 1'000'000;
  using util::LogLevel, util::LogModule;

  // Links.
  for (const PortInfo& p : app_.ports()) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(p.port, &link) != 0) continue;
    const bool up = link.link_status == RTE_ETH_LINK_UP;
    auto it = link_up_.find(p.port);
    if (it == link_up_.end() || it->second != up) {
      char speed[32] = "speed unknown";
      if (link.link_speed != RTE_ETH_SPEED_NUM_NONE && link.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN)
        std::snprintf(speed, sizeof speed, "%u Mbit/s", link.link_speed);
      if (up)
        util::log(LogModule::dataplane, it == link_up_.end() ? LogLevel::info : LogLevel::notice,
                  "port %u (%s): link up, %s", p.port, p.name.c_str(), speed);
      else
        util::log(LogModule::dataplane, LogLevel::warning, "port %u (%s): link down", p.port, p.name.c_str());
      link_up_[p.port] = up;
    }
  }

  // Datapath drops, at most one line per lcore and counter a second.
  if (now - last_drops_ns_ < 1'000'000'000ull) return;
  const double secs = last_drops_ns_ ? static_cast<double>(now - last_drops_ns_) / 1e9 : 0;
  last_drops_ns_ = now;
  for (const auto& [lc, c] : app_.lcore_counters()) {
    auto it = lcores_.find(lc);
    if (it != lcores_.end()) {
      const LcoreCounters& was = it->second;
      auto report = [&](uint64_t a, uint64_t b, const char* name, const char* why) {
        if (a > b)
          util::log(LogModule::dataplane, LogLevel::warning, "lcore %u: %" PRIu64 " packets dropped in %.1f s (%s: %s)",
                    lc, a - b, secs, name, why);
      };
      report(c.tx_dropped, was.tx_dropped, "tx_dropped", "a TX queue was full");
      report(c.handover_full, was.handover_full, "handover_full", "the ring to the lcore that owns their job was full");
    }
    lcores_[lc] = c;
  }
}

}  // namespace inagg::dataplane
