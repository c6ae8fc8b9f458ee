// inagg: the appliance. `inagg [EAL args] -- [options]`; see --help and conf/inagg.conf.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_telemetry.h>

#include <boost/program_options.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "inagg/agg/job_status.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/control/refused_jobs.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/dataplane/appliance.hpp"
#include "inagg/dataplane/metrics.hpp"
#include "inagg/wire/crc32.hpp"

namespace po = boost::program_options;
using namespace inagg;

namespace {

struct Options {
  dataplane::ApplianceConfig app;
  std::vector<std::string> job_files;
  std::string socket_path = control::kDefaultSocketPath;
  std::string metrics_listen;  // "" = no metrics endpoint
  double stats_interval = 0;
  double idle_exit = 0;
  bool check_only = false;
};

po::options_description make_options(Options& o) {
  po::options_description d("inagg options (after `--`; each may also be set in the --config file as key = value)");
  d.add_options()
      ("help,h", "show this help and exit")
      ("check-config", "parse the options, the config file and the job files, print the result and exit (no EAL)")
      ("config,c", po::value<std::string>(), "INI file with any of these options (command line wins); see conf/inagg.conf")
      ("ports", po::value<std::string>(), "comma-separated DPDK port ids to switch between (default: every port EAL probed)")
      ("job", po::value<std::vector<std::string>>(&o.job_files)->composing(), "job file to register at start (repeatable); see conf/jobs/")
      ("socket", po::value<std::string>(&o.socket_path)->default_value(o.socket_path), "control socket (root only, 0600); \"\" disables it")
      ("metrics", po::value<std::string>(&o.metrics_listen), "serve Prometheus metrics over HTTP at ADDRESS:PORT/metrics, e.g. 127.0.0.1:9100 (off by default; port 0 picks a free port)")
      ("stats-interval", po::value<double>(&o.stats_interval)->default_value(0), "print port, lcore and job stats every N seconds (0: only at exit)")
      ("mtu", po::value<uint32_t>(&o.app.mtu)->default_value(o.app.mtu), "port MTU; 9000 carries 4 KiB RoCE payloads (design.md §3 for virtual devices)")
      ("mbufs", po::value<uint32_t>(&o.app.mbufs)->default_value(o.app.mbufs), "packet buffers in the pool (each holds one MTU-sized frame)")
      ("burst", po::value<uint16_t>(&o.app.burst)->default_value(o.app.burst), "RX/TX burst size (1-64)")
      ("rx-desc", po::value<uint16_t>(&o.app.rx_desc)->default_value(o.app.rx_desc), "RX descriptors per queue")
      ("tx-desc", po::value<uint16_t>(&o.app.tx_desc)->default_value(o.app.tx_desc), "TX descriptors per queue")
      ("drain-us", po::value<uint32_t>(&o.app.drain_us)->default_value(o.app.drain_us), "flush partial TX bursts at least this often")
      ("no-flow", "do not try rte_flow steering of UDP 4791 (software classification only)")
      ("mac-ageing", po::value<double>()->default_value(300), "seconds before a learned MAC address is forgotten")
      ("mbuf-budget", po::value<size_t>(&o.app.engine.mbuf_budget)->default_value(8192), "packet buffers the jobs of one lcore may hold (held + retained); the rest stays for forwarding")
      ("memory-budget-mb", po::value<size_t>()->default_value(512), "slot memory the jobs of one lcore may use, MiB")
      ("max-jobs", po::value<size_t>(&o.app.engine.max_jobs)->default_value(o.app.engine.max_jobs), "jobs per lcore")
      ("resend-us", po::value<double>()->default_value(200), "resend released packets not acknowledged within this many microseconds")
      ("resend-max-us", po::value<double>()->default_value(50000), "resends (and NAKs sent again) back off, doubling from --resend-us up to this many microseconds (at least --resend-us)")
      ("resend-budget", po::value<unsigned>(&o.app.engine.resend_budget)->default_value(o.app.engine.resend_budget), "resend (and NAK) rounds per connection until its peer makes progress")
      ("abort-ms", po::value<double>()->default_value(30000), "abort a job that makes no progress for this long (must exceed the NICs' (retry count + 1) x ACK timeout)")
      ("closed-hold-ms", po::value<double>()->default_value(10000), "a removed job's connections stay closed this long (late packets dropped, never forwarded raw)")
      ("ecn-threshold", po::value<uint32_t>(&o.app.engine.ecn_threshold_packets)->default_value(0), "CE-mark released sums towards a port with at least this many packets waiting in its TX queue (0: off)")
      ("capture", po::value<std::string>(&o.app.capture_path), "write every RoCEv2 packet the engines emit to this pcap (debugging; costs speed)")
      ("wait-link", po::value<double>()->default_value(0), "wait up to this many seconds for every port's link before forwarding (e.g. a net_memif peer)")
      ("idle-exit", po::value<double>(&o.idle_exit)->default_value(0), "exit after this many seconds without a received packet, once one arrived (for offline pcap runs); 0: never");
  return d;
}

std::vector<uint16_t> parse_ports(const std::string& s) {
  std::vector<uint16_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    const unsigned long p = std::stoul(item, &pos);
    if (pos != item.size() || p >= 1024) throw std::invalid_argument("'" + item + "' is not a port id");
    v.push_back(static_cast<uint16_t>(p));
  }
  return v;
}

// Parses the options after `--`. Returns 0 to go on, or an exit status.
int parse_app_options(int argc, char** argv, Options& o) {
  po::options_description d = make_options(o);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(d).run(), vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream f(path);
      if (!f) {
        std::cerr << "inagg: cannot read config file '" << path << "': " << std::strerror(errno) << "\n";
        return 2;
      }
      po::store(po::parse_config_file(f, d), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "inagg: " << e.what() << " (see inagg -- --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << "Usage: inagg [EAL options] -- [inagg options]\n\n"
                 "An RoCEv2 gradient-aggregating L2 switch (design.md). EAL options choose lcores (-l), memory and\n"
                 "ports (--vdev=..., -a PCI); e.g.\n"
                 "  inagg -l 0,1 --no-huge -m 1024 --vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap -- --job conf/jobs/x.job\n\n"
              << d << "\n";
    return 1;
  }
  try {
    if (vm.count("ports")) o.app.ports = parse_ports(vm["ports"].as<std::string>());
  } catch (const std::exception& e) {
    std::cerr << "inagg: --ports: " << e.what() << "; give comma-separated port ids, e.g. --ports 0,1\n";
    return 2;
  }
  o.check_only = vm.count("check-config") > 0;
  if (!o.metrics_listen.empty()) {
    std::string host, err;
    uint16_t port = 0;
    if (!dataplane::parse_listen_address(o.metrics_listen, &host, &port, &err)) {
      std::cerr << "inagg: --metrics: " << err << "\n";
      return 2;
    }
  }
  o.app.wait_link_ms = static_cast<uint32_t>(vm["wait-link"].as<double>() * 1000);
  o.app.flow_steering = vm.count("no-flow") == 0;
  o.app.mac_ageing_ns = static_cast<uint64_t>(vm["mac-ageing"].as<double>() * 1e9);
  o.app.engine.memory_budget_bytes = vm["memory-budget-mb"].as<size_t>() << 20;
  o.app.engine.resend_timeout_ns = static_cast<uint64_t>(vm["resend-us"].as<double>() * 1e3);
  o.app.engine.abort_timeout_ns = static_cast<uint64_t>(vm["abort-ms"].as<double>() * 1e6);
  o.app.engine.resend_max_ns = static_cast<uint64_t>(vm["resend-max-us"].as<double>() * 1e3);
  o.app.engine.closed_hold_ns = static_cast<uint64_t>(vm["closed-hold-ms"].as<double>() * 1e6);
  o.app.engine.resend_max_ns = std::max(o.app.engine.resend_max_ns, o.app.engine.resend_timeout_ns);  // never below the first wait
  o.app.engine.max_connections = o.app.engine.max_jobs * 128;
  if (o.app.burst < 1 || o.app.burst > 64) {
    std::cerr << "inagg: --burst must be between 1 and 64 (got " << o.app.burst << ")\n";
    return 2;
  }
  return 0;
}

dataplane::Appliance* g_app = nullptr;

void on_signal(int) { dataplane::Appliance::request_stop(); }

// Refused adds, shown by `list` for a while so that every rank of the job learns of the refusal.
control::RefusedJobs g_refused;

std::string handle_request(const control::Request& r) {
  switch (r.verb) {
    case control::Request::Verb::add: {
      std::string err;
      if (!g_app->add_job(r.job, &err)) {
        g_refused.record(r.job, err);
        return control::format_error(err);
      }
      g_refused.forget(r.job.id);
      std::fprintf(stderr, "inagg: job %u added (%u workers, %s)\n", r.job.id, r.job.workers,
                   std::string(agg::dtype_name(r.job.dtype)).c_str());
      return control::format_job_added(r.job.id);
    }
    case control::Request::Verb::remove: {
      std::string err;
      if (!g_app->remove_job(r.id, &err)) return g_refused.forget(r.id) ? control::format_job_removed(r.id) : control::format_error(err);
      g_refused.forget(r.id);
      std::fprintf(stderr, "inagg: job %u removed\n", r.id);
      return control::format_job_removed(r.id);
    }
    case control::Request::Verb::list: {
      std::vector<control::JobStatus> entries;
      for (const agg::JobInfo& info : g_app->list_jobs()) {
        agg::JobSpec spec;
        entries.push_back(agg::job_status(info, g_app->job_spec(info.id, &spec) ? &spec : nullptr));
      }
      g_refused.add_to(&entries);
      return control::format_job_list(entries);
    }
    case control::Request::Verb::stats: {
      if (!r.has_id) return control::format_counters(agg::counter_list(g_app->engine_totals()));
      agg::JobInfo info{};
      if (!g_app->job_info(r.id, &info)) return control::format_error("no job " + std::to_string(r.id) + " (list jobs to see which exist)");
      return control::format_job_stats(agg::job_status(info));
    }
  }
  return control::format_error("unsupported request");
}

// Telemetry (dpdk-telemetry.py): /inagg/engine, /inagg/jobs, /inagg/job,<id>, /inagg/lcores.
int tel_engine(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  agg::for_each_counter(g_app->engine_totals(), [&](std::string_view name, std::string_view, uint64_t v) {
    rte_tel_data_add_dict_u64(d, std::string(name).c_str(), v);
  });
  return 0;
}
int tel_jobs(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
  for (const agg::JobInfo& j : g_app->list_jobs()) rte_tel_data_add_array_int(d, static_cast<int>(j.id));
  return 0;
}
int tel_job(const char*, const char* params, rte_tel_data* d) {
  if (params == nullptr || *params == 0) return -EINVAL;
  char* end = nullptr;
  const unsigned long id = std::strtoul(params, &end, 0);
  if (*end != 0) return -EINVAL;
  agg::JobInfo info{};
  if (!g_app->job_info(static_cast<uint32_t>(id), &info)) return -ENOENT;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "id", info.id);
  rte_tel_data_add_dict_string(d, "state", info.state == agg::JobState::active ? "active" : "failed");
  rte_tel_data_add_dict_u64(d, "released_slots", info.released_slots);
  rte_tel_data_add_dict_u64(d, "held_packets", info.held_packets);
  rte_tel_data_add_dict_u64(d, "retained_packets", info.retained_packets);
  rte_tel_data_add_dict_u64(d, "memory_bytes", info.memory_bytes);
  agg::for_each_counter(info.counters, [&](std::string_view name, std::string_view, uint64_t v) {
    rte_tel_data_add_dict_u64(d, std::string(name).c_str(), v);
  });
  return 0;
}
int tel_lcores(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  for (auto& [lc, c] : g_app->lcore_counters()) {
    const std::string p = "lcore" + std::to_string(lc) + ".";
#define X(name, text) rte_tel_data_add_dict_u64(d, (p + #name).c_str(), c.name);
    INAGG_LCORE_COUNTERS(X)
#undef X
  }
  return 0;
}

struct ControlLoop {
  control::ControlServer* server;
  double stats_interval, idle_exit;
  std::chrono::steady_clock::time_point next_stats, last_rx_change, started = std::chrono::steady_clock::now();
  uint64_t last_rx = 0;

  void tick() {
    if (server && server->is_open()) server->poll(handle_request);
    const auto now = std::chrono::steady_clock::now();
    if (stats_interval > 0 && now >= next_stats) {
      std::printf("stats t=%.3f s\n", std::chrono::duration<double>(now - started).count());
      std::fputs(g_app->stats_text().c_str(), stdout);
      std::fflush(stdout);
      next_stats = now + std::chrono::milliseconds(static_cast<int64_t>(stats_interval * 1000));
    }
    const uint64_t rx = g_app->total_rx();
    if (rx != last_rx) {
      last_rx = rx;
      last_rx_change = now;
    } else if (idle_exit > 0 && rx > 0 && now - last_rx_change > std::chrono::milliseconds(static_cast<int64_t>(idle_exit * 1000))) {
      std::fprintf(stderr, "inagg: no packet for %.1f s: exiting (--idle-exit)\n", idle_exit);
      dataplane::Appliance::request_stop();
    }
  }
  static void tick_cb(void* self) { static_cast<ControlLoop*>(self)->tick(); }
};

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
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) app_argv.push_back(argv[i]);
  Options opt;
  if (int rc = parse_app_options(static_cast<int>(app_argv.size()), app_argv.data(), opt); rc != 0) return rc == 1 ? 0 : rc;

  std::vector<agg::JobSpec> jobs;
  for (const std::string& path : opt.job_files) {
    std::string err;
    auto spec = control::load_job_file(path, &err);
    if (!spec) {
      std::cerr << "inagg: " << err << "\n";
      return 2;
    }
    jobs.push_back(*spec);
  }

  if (opt.check_only) {
    std::printf("config ok: mtu %u, mbufs %u, burst %u, mbuf budget %zu, memory budget %zu MiB, %zu job(s)\n", opt.app.mtu,
                opt.app.mbufs, opt.app.burst, opt.app.engine.mbuf_budget, opt.app.engine.memory_budget_bytes >> 20,
                jobs.size());
    for (const agg::JobSpec& j : jobs)
      std::printf("job %u: %s, %u workers, %u-byte messages, %u-byte packets, window %u%s\n", j.id,
                  std::string(agg::dtype_name(j.dtype)).c_str(), j.workers, j.message_bytes, j.payload_bytes, j.window,
                  j.replay ? ", replay" : "");
    return 0;
  }
  if (rte_eal_init(sep, argv) < 0) {
    std::cerr << "inagg: EAL initialisation failed: " << rte_strerror(rte_errno)
              << " (check the EAL options before `--`: hugepages or --no-huge, -l, --vdev, --file-prefix)\n";
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  int status = 0;
  {
    dataplane::Appliance app;
    g_app = &app;
    std::string err;
    if (!app.init(opt.app, &err)) {
      std::cerr << "inagg: " << err << "\n";
      g_app = nullptr;
      rte_eal_cleanup();
      return 2;
    }
    std::fprintf(stderr, "inagg: %zu ports, %s, kernels %s, crc32 %s\n", app.ports().size(),
                 app.single_lcore() ? "one lcore (main) for data and control" : "datapath on the worker lcores",
                 std::string(agg::kernels_tier_name()).c_str(), std::string(wire::crc32_impl_name()).c_str());
    for (const agg::JobSpec& spec : jobs) {
      if (!app.add_job(spec, &err)) {
        std::cerr << "inagg: " << err << "\n";
        status = 2;
        break;
      }
      std::fprintf(stderr, "inagg: job %u registered (%u workers, %s, %u-byte messages of %u-byte packets, window %u%s)\n",
                   spec.id, spec.workers, std::string(agg::dtype_name(spec.dtype)).c_str(), spec.message_bytes,
                   spec.payload_bytes, spec.window, spec.replay ? ", replay" : "");
    }
    control::ControlServer server;
    if (status == 0 && !opt.socket_path.empty() && !server.open(opt.socket_path, &err)) {
      std::cerr << "inagg: control socket: " << err << "\n";
      status = 2;
    }
    // Metrics: scraped on the HTTP server's threads, never on a datapath lcore.
    dataplane::PrometheusRenderer renderer(app);
    std::mutex render_mutex;
    dataplane::MetricsServer metrics;
    if (status == 0 && !opt.metrics_listen.empty()) {
      if (!metrics.start(opt.metrics_listen, [&] { std::lock_guard lock(render_mutex); return renderer.render(); }, &err)) {
        std::cerr << "inagg: --metrics: " << err << "\n";
        status = 2;
      } else {
        std::fprintf(stderr, "inagg: metrics at http://%s%s%s:%u/metrics\n", metrics.host().find(':') != std::string::npos ? "[" : "",
                     metrics.host().c_str(), metrics.host().find(':') != std::string::npos ? "]" : "", metrics.port());
      }
    }
    if (status == 0) {
      rte_telemetry_register_cmd("/inagg/engine", tel_engine, "Engine counters summed over lcores. No parameters.");
      rte_telemetry_register_cmd("/inagg/jobs", tel_jobs, "Ids of the registered jobs. No parameters.");
      rte_telemetry_register_cmd("/inagg/job", tel_job, "One job's state and counters. Parameter: job id.");
      rte_telemetry_register_cmd("/inagg/lcores", tel_lcores, "Per-lcore datapath counters. No parameters.");
      ControlLoop loop{server.is_open() ? &server : nullptr, opt.stats_interval, opt.idle_exit, {}, {}, std::chrono::steady_clock::now(), 0};
      loop.next_stats = loop.last_rx_change = std::chrono::steady_clock::now();
      app.set_tick(ControlLoop::tick_cb, &loop);
      if (!app.start(&err)) {
        std::cerr << "inagg: " << err << "\n";
        status = 2;
      } else if (app.single_lcore()) {
        app.run_main_lcore();
      } else {
        while (!dataplane::Appliance::stop_requested()) {
          loop.tick();
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      }
      metrics.stop();
      app.stop();
    }
    metrics.stop();
    std::fputs("inagg: final stats\n", stdout);
    std::fputs(app.stats_text().c_str(), stdout);
    std::fflush(stdout);
    server.close();
    g_app = nullptr;
  }  // ports closed here: a net_pcap output file is complete
  rte_eal_cleanup();
  return status;
}
