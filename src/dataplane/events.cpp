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
