#include "inagg/dataplane/events.hpp"

#include <rte_ethdev.h>
#include <rte_log.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>

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

}  // namespace

void route_logs_to_rte_log() {
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
