// inagg: the appliance. `inagg [EAL args] -- [options]`; see --help and conf/inagg.conf. Start-up,
// --check-config and the control thread's loop (a reload on SIGHUP, systemd's watchdog); the
// options are inagg_options.cpp's, the listeners listeners.cpp's, the control requests
// request_dispatch.cpp's.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "inagg/agg/kernels.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/job_store.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/dataplane/appliance.hpp"
#include "inagg/dataplane/eal_args.hpp"
#include "inagg/dataplane/events.hpp"
#include "inagg/dataplane/live_capture.hpp"
#include "inagg/dataplane/metrics.hpp"
#include "inagg/dataplane/selftest.hpp"
#include "inagg/dataplane/telemetry.hpp"
#include "inagg/util/log.hpp"
#include "inagg/util/loop_watchdog.hpp"
#include "inagg/util/service_notify.hpp"
#include "inagg/wire/crc32.hpp"
#include "inagg_options.hpp"
#include "listeners.hpp"
#include "request_dispatch.hpp"
#include "version.hpp"

using namespace inagg;
using apps::describe_spec;
using apps::Options;
using apps::parse_app_options;
using apps::register_saved_jobs;

namespace {

void on_signal(int) { dataplane::Appliance::request_stop(); }

// SIGHUP: a reload, carried out by the control thread at its next tick (the handler only sets this).
std::atomic<bool> g_reload_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGHUP handler needs a lock-free flag");
void on_reload_signal(int) { g_reload_requested.store(true, std::memory_order_relaxed); }

// A test of the watchdog only: $INAGG_TEST_STALL_LCORE=LCORE@SECONDS stops that datapath lcore's
// loop SECONDS after forwarding starts (Appliance::stall_lcore_for_test).
struct StallForTest {
  unsigned lcore = 0;
  double after_s = 0;
};
bool read_stall_for_test(std::optional<StallForTest>* out, std::string* error) {
  const char* v = std::getenv("INAGG_TEST_STALL_LCORE");
  if (!v || !*v) return true;
  StallForTest s;
  char at = 0, rest = 0;
  if (std::sscanf(v, "%u%c%lf%c", &s.lcore, &at, &s.after_s, &rest) != 3 || at != '@' || !(s.after_s >= 0)) {
    *error = "$INAGG_TEST_STALL_LCORE must be LCORE@SECONDS (a test of the watchdog), not '" + std::string(v) + "'";
    return false;
  }
  *out = s;
  return true;
}

std::string forwarding_status(const dataplane::Appliance& app) {
  return "STATUS=forwarding on " + std::to_string(app.ports().size()) + " ports";
}

// The control thread's work, every few milliseconds: the control socket, the periodic stats,
// --idle-exit, a reload on SIGHUP, systemd's watchdog.
struct ControlLoop {
  dataplane::Appliance* app;
  apps::RequestDispatcher* requests;
  dataplane::EventWatcher* events;
  apps::Listeners* listeners;
  Options running;                             // the options in effect: those of the start, a reload's reloadable ones
  std::vector<std::string> argv;               // inagg's own, read again by a reload
  std::optional<util::LoopWatchdog> watchdog;  // under systemd with WatchdogSec=
  std::optional<StallForTest> stall_for_test;
  std::chrono::steady_clock::time_point next_stats{}, last_rx_change{}, started{};
  uint64_t last_rx = 0;
  bool first = true;

  void tick() {
    const auto now = std::chrono::steady_clock::now();
    if (first) {  // the loops are running from here on
      first = false;
      started = next_stats = last_rx_change = now;
      // Under systemd (Type=notify): started once the ports are up and the loops forward.
      if (std::getenv("NOTIFY_SOCKET") && !util::notify_service_manager("READY=1\n" + forwarding_status(*app)))
        util::log(util::LogModule::control, util::LogLevel::warning,
                  "could not tell the service manager that inagg is ready ($NOTIFY_SOCKET=%s)",
                  std::getenv("NOTIFY_SOCKET"));
    }
    if (watchdog) feed_watchdog(now);
    if (g_reload_requested.exchange(false, std::memory_order_relaxed)) reload(now);
    listeners->poll(
        [this](const control::Request& r, const control::Tenant* tenant) { return requests->handle(r, tenant); });
    events->poll();
    for (const uint32_t id : app->check_bindings()) requests->forget_saved(id);
    if (stall_for_test && now - started >= std::chrono::duration<double>(stall_for_test->after_s)) {
      std::string err;
      if (!app->stall_lcore_for_test(stall_for_test->lcore, &err))
        util::log(util::LogModule::control, util::LogLevel::error, "$INAGG_TEST_STALL_LCORE: %s", err.c_str());
      stall_for_test.reset();
    }
    const double run_for = running.run_for, idle_exit = running.idle_exit, stats_interval = running.stats_interval;
    if (run_for > 0 && now - started >= std::chrono::milliseconds(static_cast<int64_t>(run_for * 1000)) &&
        !dataplane::Appliance::stop_requested()) {
      util::log(util::LogModule::control, util::LogLevel::info, "ran for %.1f s: exiting (--run-for)", run_for);
      dataplane::Appliance::request_stop();
    }
    if (stats_interval > 0 && now >= next_stats) {
      std::printf("stats t=%.3f s\n", std::chrono::duration<double>(now - started).count());
      std::fputs(app->stats_text().c_str(), stdout);
      std::fflush(stdout);
      next_stats = now + std::chrono::milliseconds(static_cast<int64_t>(stats_interval * 1000));
    }
    const uint64_t rx = app->total_rx();
    if (rx != last_rx) {
      last_rx = rx;
      last_rx_change = now;
    } else if (idle_exit > 0 && rx > 0 &&
               now - last_rx_change > std::chrono::milliseconds(static_cast<int64_t>(idle_exit * 1000))) {
      util::log(util::LogModule::control, util::LogLevel::info, "no packet for %.1f s: exiting (--idle-exit)",
                idle_exit);
      dataplane::Appliance::request_stop();
    }
  }
  static void tick_cb(void* self) { static_cast<ControlLoop*>(self)->tick(); }

  // WATCHDOG=1 while every datapath lcore begins loop iterations (util::LoopWatchdog); a stalled
  // lcore is named in the log, and the pings stop until it moves again.
  void feed_watchdog(std::chrono::steady_clock::time_point now) {
    const util::LoopWatchdog::Verdict v = watchdog->look(now, app->lcore_loops());
    using seconds = std::chrono::duration<double>;
    for (const auto& [lcore, still] : v.stalled)
      util::log(util::LogModule::control, util::LogLevel::error,
                "lcore %u has begun no loop iteration for %.1f s: watchdog pings stop, so systemd restarts inagg "
                "(WatchdogSec=) unless the lcore moves again",
                lcore, seconds(still).count());
    for (const auto& [lcore, still] : v.recovered)
      util::log(util::LogModule::control, util::LogLevel::warning,
                "lcore %u runs its loop again after %.1f s: watchdog pings resume", lcore, seconds(still).count());
    if (v.ping) util::notify_service_manager("WATCHDOG=1");
  }

  // SIGHUP: the options read again from the same command line and --config file, every file they
  // name checked, then applied all or nothing: the listeners and the tenants file (Listeners::reopen,
  // the only step that can fail, first), the binding table, the log levels, the stats interval.
  // Options a reload does not apply are named in a warning if they changed. The datapath lcores
  // never stop.
  void reload(std::chrono::steady_clock::time_point now) {
    timespec mono{};
    clock_gettime(CLOCK_MONOTONIC, &mono);
    util::notify_service_manager("RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC=" +
                                 std::to_string(uint64_t(mono.tv_sec) * 1'000'000 + uint64_t(mono.tv_nsec) / 1000));
    const std::string from = running.given.count("config") ? running.given.at("config").front() : "the command line";
    util::log(util::LogModule::control, util::LogLevel::info, "reloading %s (SIGHUP)", from.c_str());
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    Options next;
    std::ostringstream parse_errors;
    std::string err;
    bool ok = parse_app_options(static_cast<int>(args.size()), args.data(), next, parse_errors) == 0;
    if (!ok) {  // one line: "inagg: FILE:LINE: what", as at a start
      err = parse_errors.str();
      if (err.starts_with("inagg: ")) err.erase(0, 7);
      while (!err.empty() && err.back() == '\n') err.pop_back();
      std::replace(err.begin(), err.end(), '\n', ' ');
    } else {
      ok = listeners->reopen(next, &err);
    }
    if (!ok) {
      util::log(util::LogModule::control, util::LogLevel::error, "reload refused, nothing changed: %s", err.c_str());
    } else {
      app->set_bindings(next.app.bindings);
      if (next.stats_interval != running.stats_interval)
        next_stats = now + std::chrono::milliseconds(static_cast<int64_t>(next.stats_interval * 1000));
      const std::vector<std::string> pending = apps::restart_only_changes(running, next);
      running.socket_path = next.socket_path;
      running.control_tcp = next.control_tcp;
      running.control_secret_file = next.control_secret_file;
      running.metrics_listen = next.metrics_listen;
      running.app.bindings = next.app.bindings;
      running.log_levels = next.log_levels;
      running.stats_interval = next.stats_interval;
      for (auto it = running.given.begin(); it != running.given.end();)
        it = apps::reloadable_option(it->first) ? running.given.erase(it) : std::next(it);
      for (const auto& [name, values] : next.given)
        if (apps::reloadable_option(name)) running.given[name] = values;
      util::log(util::LogModule::control, util::LogLevel::info,
                "reloaded %s: listeners, tenants, binding table (%zu lines), %zu log level rule(s), stats interval",
                from.c_str(), next.app.bindings.size(), next.log_levels.size());
      if (!pending.empty()) {
        std::string names;
        for (const std::string& n : pending) names += (names.empty() ? "--" : ", --") + n;
        util::log(util::LogModule::control, util::LogLevel::warning,
                  "reload: %s changed, which only a restart applies (systemctl restart): still running with the "
                  "values of the start",
                  names.c_str());
      }
      dataplane::apply_log_level_rules(next.log_levels);  // last: the lines above at the levels they were asked under
    }
    util::notify_service_manager("READY=1\n" + forwarding_status(*app));
  }
};

// --check-config: what can be checked without EAL, with the checks start-up makes.
int check_config(const Options& opt, const std::vector<control::JobSpec>& jobs, std::span<char* const> eal_args) {
  std::string err;
  const std::optional<dataplane::EalLcores> lc = dataplane::read_eal_lcores(eal_args, &err);
  if (!lc) {
    std::cerr << "inagg: " << err << "\n";
    return 2;
  }
  const unsigned datapath = lc->datapath_lcores();
  if (!dataplane::check_mbuf_budget(opt.app, datapath, &err)) {
    std::cerr << "inagg: " << err << " (" << lc->lcores.size() << " EAL lcores: " << datapath
              << (datapath == 1 && lc->lcores.size() == 1 ? " datapath lcore, the main one"
                                                          : " datapath lcores and the main one")
              << ")\n";
    return 2;
  }
  const uint64_t frame = opt.app.mtu + 22ull, room = std::max<uint64_t>(2048, frame) + 128;
  static constexpr const char* kPools[] = {"shared", "per-socket", "per-port"};
  std::printf("config ok: mtu %u, mbufs %u per pool (about %" PRIu64
              " MiB of memory each), mempools %s, burst %u, %u datapath lcore(s), mbuf budget %zu per lcore, "
              "memory budget %zu MiB per lcore, %zu job(s)\n",
              opt.app.mtu, opt.app.mbufs, (uint64_t{opt.app.mbufs} * (room + 192)) >> 20,
              kPools[static_cast<int>(opt.app.pools)], opt.app.burst, datapath, opt.app.engine.mbuf_budget,
              opt.app.engine.memory_budget_bytes >> 20, jobs.size());
  for (const control::JobSpec& j : jobs) std::printf("job %u: %s\n", j.id, describe_spec(j).c_str());
  if (!opt.state_dir.empty()) {
    control::JobStore store;
    std::vector<control::SavedJob> saved;
    if (!store.open(opt.state_dir, &err, control::JobStore::Mode::check) || !store.load(&saved, &err)) {
      std::cerr << "inagg: " << err << "\n";
      return 2;
    }
    std::printf("state directory %s: %zu job(s) to register again\n", opt.state_dir.c_str(), saved.size());
    for (const control::SavedJob& j : saved)
      std::printf("job %u: %s, %s\n", j.spec.id, describe_spec(j.spec).c_str(),
                  j.lcore ? ("on lcore " + std::to_string(*j.lcore)).c_str() : "on the lcore with the fewest jobs");
  }
  return 0;
}

// From EAL up to the final stats. The appliance is gone when this returns, so EAL can be cleaned up.
// `argv`: inagg's own options (after `--`), which a reload reads again.
int run_appliance(const Options& opt, const std::vector<control::JobSpec>& jobs, const std::vector<std::string>& argv) {
  dataplane::Appliance app;
  std::string err;
  if (!app.init(opt.app, &err)) {
    util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
    return 2;
  }
  util::log(util::LogModule::dataplane, util::LogLevel::info, "%zu ports, %s, kernels %s, crc32 %s", app.ports().size(),
            app.single_lcore() ? "one lcore (main) for the datapath, a control thread beside it"
                               : "datapath on the worker lcores",
            std::string(agg::kernels_tier_name()).c_str(), std::string(wire::crc32_impl_name()).c_str());
  int status = 0;
  // Where the state directory's jobs had their ranks (rank_binding.hpp), before any job is added.
  const std::string bindings_file = opt.state_dir.empty() ? "" : opt.state_dir + "/bindings";
  if (!bindings_file.empty() && !app.remember_bindings(bindings_file, &err)) {
    util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
    status = 2;
  }
  for (const control::JobSpec& spec : jobs) {
    if (status != 0) break;
    if (!app.add_job(spec, &err)) {
      util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
      status = 2;
      break;
    }
    util::log(util::LogModule::control, util::LogLevel::info, "job %u registered (%s)", spec.id,
              describe_spec(spec).c_str());
  }
  control::JobStore store;
  control::JobStore* state = nullptr;  // the state directory once its jobs are registered again
  if (status == 0 && !opt.state_dir.empty()) {
    std::vector<control::SavedJob> saved;
    if (!store.open(opt.state_dir, &err) || !store.load(&saved, &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
      status = 2;
    } else if (!app.remember_bindings(bindings_file, &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
      status = 2;
    } else {
      const size_t registered = register_saved_jobs(app, store, saved, jobs);
      if (registered < saved.size())
        util::log(util::LogModule::control, util::LogLevel::warning,
                  "state directory %s: %zu of %zu job(s) registered again; the lines above say why the others were "
                  "not",
                  opt.state_dir.c_str(), registered, saved.size());
      state = &store;
    }
  }
  // Metrics: scraped on the HTTP server's threads, never on a datapath lcore.
  dataplane::PrometheusRenderer renderer(app, apps::release_version(), apps::build_revision(), rte_get_tsc_hz());
  std::mutex render_mutex;
  apps::Listeners listeners([&] {
    std::lock_guard lock(render_mutex);
    return renderer.render();
  });
  if (status == 0 && !listeners.open(opt, &err)) {
    util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
    status = 2;
  }
  ControlLoop loop{&app, nullptr, nullptr, &listeners, opt, argv, std::nullopt, std::nullopt};
  if (status == 0 && !read_stall_for_test(&loop.stall_for_test, &err)) {
    util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
    status = 2;
  }
  if (status == 0) {
    if (loop.stall_for_test)
      util::log(util::LogModule::control, util::LogLevel::warning,
                "$INAGG_TEST_STALL_LCORE is set: lcore %u stops its loop %.1f s after forwarding starts (a test of "
                "the watchdog; never set it in service)",
                loop.stall_for_test->lcore, loop.stall_for_test->after_s);
    std::string why;
    if (const auto interval = util::service_watchdog_interval(&why)) {
      loop.watchdog.emplace(*interval);
      util::log(util::LogModule::control, util::LogLevel::info,
                "systemd's watchdog: pinged every %.1f s while every datapath lcore runs its loop",
                std::chrono::duration<double>(loop.watchdog->half_interval()).count());
    } else if (!why.empty()) {
      util::log(util::LogModule::control, util::LogLevel::warning, "%s", why.c_str());
    }

    dataplane::attach_telemetry(app);
    dataplane::EventWatcher events(app);
    apps::RequestDispatcher requests(app, state);
    loop.requests = &requests;
    loop.events = &events;
    if (!app.run(ControlLoop::tick_cb, &loop, 2, &err)) {
      util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
      status = 2;
    }
    util::notify_service_manager("STOPPING=1");
    dataplane::detach_telemetry();
  }
  listeners.close();
  std::fputs("inagg: final stats\n", stdout);
  std::fputs(app.stats_text().c_str(), stdout);
  std::fflush(stdout);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Split at "--": EAL's arguments before, ours after. Our options are checked before EAL starts,
  // so a typo fails fast and --help works without hugepages or privileges.
  int sep = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      sep = i;
      break;
    }
  std::vector<char*> app_argv{argv[0]};
  for (int i = sep + 1; i < argc; ++i) app_argv.push_back(argv[i]);
  for (int i = 1; i < sep; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
        std::strcmp(argv[i], "--version") == 0)
      app_argv.push_back(argv[i]);
  Options opt;
  if (int rc = parse_app_options(static_cast<int>(app_argv.size()), app_argv.data(), opt); rc != 0)
    return rc == 1 ? 0 : rc;

  std::vector<control::JobSpec> jobs;
  for (const std::string& path : opt.job_files) {
    std::string err;
    auto spec = control::load_job_file(path, &err);
    if (!spec) {
      std::cerr << "inagg: " << err << "\n";
      return 2;
    }
    jobs.push_back(*spec);
  }

  if (opt.check_only) return check_config(opt, jobs, std::span<char* const>(argv, static_cast<size_t>(sep)));
  // Before EAL: a stop asked for during start-up ends the run cleanly (final stats, status 0).
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_reload_signal);
  // Read before EAL starts: rte_eal_init reorders argv.
  const std::vector<std::string> vdevs =
      dataplane::read_eal_vdevs(std::span<char* const>(argv, static_cast<size_t>(sep)));
  if (rte_eal_init(sep, argv) < 0) {
    std::cerr << "inagg: EAL initialisation failed: " << rte_strerror(rte_errno)
              << " (check the EAL options before `--`: hugepages or --no-huge, -l, --vdev, --file-prefix)\n";
    return 2;
  }
  // EAL goes on when a --vdev fails to probe; the appliance would then switch between fewer ports
  // than it was given.
  for (const std::string& name : vdevs) {
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
      std::cerr << "inagg: --vdev " << name
                << " did not become a port (EAL's lines above say why; net_af_packet and net_af_xdp need "
                   "CAP_NET_RAW and CAP_NET_ADMIN and an existing interface)\n";
      rte_eal_cleanup();
      return 2;
    }
  }
  dataplane::route_logs_to_rte_log();
  dataplane::apply_log_level_rules(opt.log_levels);
  // dpdk-dumpcap and dpdk-pdump attach as secondary processes and capture from any port.
  std::string capture_error;
  const bool pdump = dataplane::start_live_capture(&capture_error);
  if (!pdump)
    util::log(util::LogModule::dataplane, util::LogLevel::warning, "packet capture (rte_pdump) unavailable: %s",
              capture_error.c_str());
  int status = 0;
  if (opt.selftest) {
    dataplane::SelftestReport report;
    std::string err;
    if (!dataplane::run_selftest(opt.app, {static_cast<uint32_t>(opt.selftest_s * 1000)}, &report, &err)) {
      std::cerr << "inagg: selftest: " << err << "\n";
      status = 2;
    } else {
      std::fputs(report.text().c_str(), stdout);
      status = report.pass() ? 0 : 1;
    }
  } else {
    status = run_appliance(opt, jobs, std::vector<std::string>(app_argv.begin(), app_argv.end()));
  }
  if (pdump) dataplane::stop_live_capture();
  rte_eal_cleanup();
  return status;
}
