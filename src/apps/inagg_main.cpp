// inagg: the appliance. `inagg [EAL args] -- [options]`; see --help and conf/inagg.conf. Start-up,
// --check-config and the control thread's loop; the options are inagg_options.cpp's, the control
// requests request_dispatch.cpp's.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <span>
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
#include "inagg/util/service_notify.hpp"
#include "inagg/wire/crc32.hpp"
#include "inagg_options.hpp"
#include "request_dispatch.hpp"
#include "version.hpp"

using namespace inagg;
using apps::describe_spec;
using apps::Options;
using apps::parse_app_options;
using apps::register_saved_jobs;

namespace {

void on_signal(int) { dataplane::Appliance::request_stop(); }

// The control thread's work, every few milliseconds: the control socket, the periodic stats,
// --idle-exit.
struct ControlLoop {
  dataplane::Appliance* app;
  apps::RequestDispatcher* requests;
  dataplane::EventWatcher* events;
  control::ControlServer* server;
  control::ControlServer* tcp_server;
  double stats_interval, idle_exit, run_for;
  std::chrono::steady_clock::time_point next_stats, last_rx_change, started;
  uint64_t last_rx = 0;
  bool first = true;

  void tick() {
    if (first) {  // the loops are running from here on
      first = false;
      started = next_stats = last_rx_change = std::chrono::steady_clock::now();
      // Under systemd (Type=notify): started once the ports are up and the loops forward.
      const std::string ready = "READY=1\nSTATUS=forwarding on " + std::to_string(app->ports().size()) + " ports";
      if (std::getenv("NOTIFY_SOCKET") && !util::notify_service_manager(ready))
        util::log(util::LogModule::control, util::LogLevel::warning,
                  "could not tell the service manager that inagg is ready ($NOTIFY_SOCKET=%s)",
                  std::getenv("NOTIFY_SOCKET"));
    }
    const control::ControlServer::TenantHandler handle_request =
        [this](const control::Request& r, const control::Tenant* tenant) { return requests->handle(r, tenant); };
    if (server && server->is_open()) server->poll(handle_request);
    if (tcp_server && tcp_server->is_open()) tcp_server->poll(handle_request);
    events->poll();
    for (const uint32_t id : app->bind_waiting()) requests->forget_saved(id);
    const auto now = std::chrono::steady_clock::now();
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
  if (!dataplane::check_job_lcores(opt.app, datapath, &err)) {
    std::cerr << "inagg: " << err << "\n";
    return 2;
  }
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
int run_appliance(const Options& opt, const std::vector<control::JobSpec>& jobs) {
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
  control::ControlServer server;
  if (status == 0 && !opt.socket_path.empty() && !server.open(opt.socket_path, &err)) {
    util::log(util::LogModule::control, util::LogLevel::error, "control socket: %s", err.c_str());
    status = 2;
  }
  control::ControlServer tcp_server;
  if (status == 0 && !opt.control_tcp.empty()) {
    std::vector<control::Tenant> tenants;
    if (opt.control_secret_file.empty()) {
      util::log(util::LogModule::control, util::LogLevel::error,
                "--control-tcp needs --control-secret-file (a file with the shared secret, mode 0600)");
      status = 2;
    } else if (!control::load_tenants(opt.control_secret_file, &tenants, &err) ||
               !tcp_server.open_tcp(opt.control_tcp, tenants, &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "control over TCP: %s", err.c_str());
      status = 2;
    } else {
      util::log(util::LogModule::control, util::LogLevel::info,
                "control requests over TCP on %s (port %u), %zu tenant(s) from %s", opt.control_tcp.c_str(),
                tcp_server.port(), tenants.size(), opt.control_secret_file.c_str());
    }
  }
  // Metrics: scraped on the HTTP server's threads, never on a datapath lcore.
  dataplane::PrometheusRenderer renderer(app, apps::project_version(), apps::build_revision(), rte_get_tsc_hz());
  std::mutex render_mutex;
  dataplane::MetricsServer metrics;
  if (status == 0 && !opt.metrics_listen.empty()) {
    if (!metrics.start(
            opt.metrics_listen,
            [&] {
              std::lock_guard lock(render_mutex);
              return renderer.render();
            },
            &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "--metrics: %s", err.c_str());
      status = 2;
    } else {
      util::log(util::LogModule::control, util::LogLevel::info, "metrics at http://%s%s%s:%u/metrics",
                metrics.host().find(':') != std::string::npos ? "[" : "", metrics.host().c_str(),
                metrics.host().find(':') != std::string::npos ? "]" : "", metrics.port());
    }
  }
  if (status == 0) {
    dataplane::attach_telemetry(app);
    dataplane::EventWatcher events(app);
    apps::RequestDispatcher requests(app, state, opt.app.job_lcores);
    ControlLoop loop{&app,
                     &requests,
                     &events,
                     server.is_open() ? &server : nullptr,
                     tcp_server.is_open() ? &tcp_server : nullptr,
                     opt.stats_interval,
                     opt.idle_exit,
                     opt.run_for,
                     {},
                     {},
                     {},
                     0,
                     true};
    if (!app.run(ControlLoop::tick_cb, &loop, 2, &err)) {
      util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
      status = 2;
    }
    util::notify_service_manager("STOPPING=1");
    dataplane::detach_telemetry();
  }
  metrics.stop();
  server.close();
  std::fputs("inagg: final stats\n", stdout);
  std::fputs(app.stats_text().c_str(), stdout);
  if (tcp_server.is_open())
    std::printf("control tcp %s: refused %" PRIu64 " requests without the right credential, dropped %" PRIu64
                " connections at their deadline\n",
                opt.control_tcp.c_str(), tcp_server.refused(), tcp_server.dropped());
  tcp_server.close();
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
    status = run_appliance(opt, jobs);
  }
  if (pdump) dataplane::stop_live_capture();
  rte_eal_cleanup();
  return status;
}
