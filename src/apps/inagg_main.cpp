// inagg: the appliance. `inagg [EAL args] -- [options]`; see --help and conf/inagg.conf.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_pdump.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <span>
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
#include "inagg/dataplane/eal_args.hpp"
#include "inagg/dataplane/events.hpp"
#include "inagg/dataplane/metrics.hpp"
#include "inagg/dataplane/selftest.hpp"
#include "inagg/dataplane/telemetry.hpp"
#include "inagg/util/key_value.hpp"
#include "inagg/util/log.hpp"
#include "inagg/wire/crc32.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;

namespace {

struct Options {
  dataplane::ApplianceConfig app;
  std::vector<std::string> job_files;
  std::string socket_path = control::kDefaultSocketPath;
  std::string metrics_listen;  // "" = no metrics endpoint
  std::string control_tcp;     // "" = no TCP control listener
  std::string control_secret_file;
  double stats_interval = 0;
  double idle_exit = 0;
  double run_for = 0;
  bool check_only = false;
  bool selftest = false;
  double selftest_s = 1;
};

po::options_description make_options(Options& o) {
  po::options_description d("inagg options (after `--`; each may also be set in the --config file as key = value)");
  d.add_options()("help,h", "show this help and exit")("version", "print the version and exit")(
      "check-config",
      "check what start-up would refuse without starting EAL: the options, the config and job files, the mbuf budget "
      "against the lcores of the EAL options; print the result and exit")(
      "selftest",
      "check that the ports see RoCE, then exit: send one RoCEv2 probe out of each port, listen on every port for "
      "--selftest-time seconds, and report per port what the datapath's parser made of what arrived; exit 0 when "
      "every port received RoCEv2 with a valid ICRC (its probe back over a loop, or live traffic), 1 otherwise")(
      "selftest-time", po::value<double>(&o.selftest_s)->default_value(o.selftest_s),
      "--selftest: seconds to listen (at most; it stops once every port has passed)")(
      "config,c", po::value<std::string>(),
      "file of `key = value` lines, any of these options (command line wins); see conf/inagg.conf")(
      "ports", po::value<std::string>(),
      "comma-separated DPDK port ids to switch between (default: every port EAL probed)")(
      "job", po::value<std::vector<std::string>>(&o.job_files)->composing(),
      "job file to register at start (repeatable); see conf/jobs/")(
      "socket", po::value<std::string>(&o.socket_path)->default_value(o.socket_path),
      "control socket (root only, 0600); \"\" disables it")(
      "control-tcp", po::value<std::string>(&o.control_tcp)->value_name("ADDR:PORT"),
      "also serve the control protocol over TCP at IPv4 ADDR:PORT, for workers on other hosts (off by default); "
      "every request must carry the shared secret of --control-secret-file, anything else is refused and counted")(
      "control-secret-file", po::value<std::string>(&o.control_secret_file)->value_name("FILE"),
      "the shared secret of --control-tcp: the file's first line, at least 16 characters, the file mode 0600")(
      "metrics", po::value<std::string>(&o.metrics_listen),
      "serve Prometheus metrics over HTTP at ADDRESS:PORT/metrics, e.g. 127.0.0.1:9100 (off by default; port 0 picks a "
      "free port)")("stats-interval", po::value<double>(&o.stats_interval)->default_value(0),
                    "print port, lcore and job stats every N seconds (0: only at exit)")(
      "mtu", po::value<uint32_t>(&o.app.mtu)->default_value(o.app.mtu),
      "port MTU; 9000 carries 4 KiB RoCE payloads (design.md §3 for virtual devices)")(
      "mbufs", po::value<uint32_t>(&o.app.mbufs)->default_value(o.app.mbufs),
      "packet buffers in each pool (each holds one MTU-sized frame)")(
      "mempools", po::value<std::string>()->default_value("shared"),
      "shared: one packet buffer pool, on the main lcore's NUMA node; per-socket: one per NUMA node with ports, each "
      "port filling its RX from its own node's; per-port: one per port, on its node (each pool holds --mbufs)")(
      "burst", po::value<uint16_t>(&o.app.burst)->default_value(o.app.burst), "RX/TX burst size (1-64)")(
      "rx-desc", po::value<uint16_t>(&o.app.rx_desc)->default_value(o.app.rx_desc), "RX descriptors per queue")(
      "tx-desc", po::value<uint16_t>(&o.app.tx_desc)->default_value(o.app.tx_desc), "TX descriptors per queue")(
      "drain-us", po::value<uint32_t>(&o.app.drain_us)->default_value(o.app.drain_us),
      "flush partial TX bursts at least this often")(
      "idle-sleep-us", po::value<uint32_t>(&o.app.idle_sleep_us)->default_value(o.app.idle_sleep_us),
      "lab mode: a datapath lcore whose queues stay empty backs off and sleeps, up to this many microseconds at a "
      "time, so an appliance sharing cores with its workers does not starve them (at most half of --resend-us); 0: "
      "busy-poll, for a dedicated server")("no-flow",
                                           "do not try rte_flow steering of UDP 4791 (software classification only)")(
      "mac-ageing", po::value<double>()->default_value(300), "seconds before a learned MAC address is forgotten")(
      "mbuf-budget", po::value<size_t>(&o.app.engine.mbuf_budget)->default_value(8192),
      "packet buffers the jobs of one lcore may hold (held + retained); the rest stays for forwarding")(
      "memory-budget-mb", po::value<size_t>()->default_value(512), "slot memory the jobs of one lcore may use, MiB")(
      "max-jobs", po::value<size_t>(&o.app.engine.max_jobs)->default_value(o.app.engine.max_jobs), "jobs per lcore")(
      "resend-us", po::value<double>()->default_value(200),
      "resend released packets not acknowledged within this many microseconds")(
      "resend-max-us", po::value<double>()->default_value(50000),
      "resends (and NAKs sent again) back off, doubling from --resend-us up to this many microseconds (at least "
      "--resend-us)")("resend-budget",
                      po::value<unsigned>(&o.app.engine.resend_budget)->default_value(o.app.engine.resend_budget),
                      "resend (and NAK) rounds per connection until its peer makes progress")(
      "abort-ms", po::value<double>()->default_value(30000),
      "abort a job that makes no progress for this long (must exceed the NICs' (retry count + 1) x ACK timeout)")(
      "closed-hold-ms", po::value<double>()->default_value(10000),
      "a removed job's connections stay closed this long (late packets dropped, never forwarded raw)")(
      "ecn-threshold", po::value<uint32_t>(&o.app.engine.ecn_threshold_packets)->default_value(0),
      "CE-mark released sums towards a port with at least this many packets waiting in its TX queue (0: off)")(
      "capture", po::value<std::string>(&o.app.capture_path),
      "write every RoCEv2 packet the engines emit to this pcap (debugging; costs speed)")(
      "wait-link", po::value<double>()->default_value(0),
      "wait up to this many seconds for every port's link before forwarding (e.g. a net_memif peer)")(
      "idle-exit", po::value<double>(&o.idle_exit)->default_value(0),
      "exit after this many seconds without a received packet, once one arrived (for offline pcap runs); 0: never")(
      "run-for", po::value<double>(&o.run_for)->default_value(0),
      "exit after the datapath has run this many seconds, as on SIGTERM (smoke tests: start-up time does not count); "
      "0: never");
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

// Reads a --config file with the key = value parser job files use (control/key_value.hpp): every
// key an option name, `job` repeatable, flags take true or false. The command line wins over the
// file (it was stored first). Errors name the file and line.
bool store_config_file(const std::string& path, const po::options_description& d, po::variables_map& vm,
                       std::string* error) {
  std::string text;
  if (!util::read_small_file(path, "config file", 1 << 20, "1 MiB", &text, error)) return false;
  std::vector<std::string> examples;  // KeySpec holds views
  std::vector<const po::option_description*> opts;
  for (const auto& o : d.options()) {
    const std::string& name = o->long_name();
    if (name == "help" || name == "version" || name == "config" || name == "check-config" || name == "selftest")
      continue;
    opts.push_back(o.get());
    examples.push_back(name + (o->semantic()->max_tokens() == 0 ? " = true" : " = ..."));
  }
  std::vector<util::KeySpec> keys;
  for (size_t i = 0; i < opts.size(); ++i)
    keys.push_back({opts[i]->long_name(), false, opts[i]->semantic()->is_composing(), examples[i]});
  util::ParseProblem problem;
  const bool ok = util::parse_key_values(
      text, keys,
      [&](size_t k, std::string_view value, std::string* why) {
        const std::string& name = opts[k]->long_name();
        po::parsed_options one(&d);
        if (opts[k]->semantic()->max_tokens() == 0) {  // a flag
          if (value != "true" && value != "false") {
            *why = util::quote_for_error(value) + " is not true or false";
            return false;
          }
          if (value == "false") return true;
          one.options.emplace_back(name, std::vector<std::string>{});
        } else {
          one.options.emplace_back(name, std::vector<std::string>{std::string(value)});
        }
        try {
          po::store(one, vm);
        } catch (const po::error& e) {
          *why = e.what();
          return false;
        }
        return true;
      },
      &problem);
  if (!ok) *error = problem.message(path);
  return ok;
}

// Parses the options after `--`. Returns 0 to go on, or an exit status.
int parse_app_options(int argc, char** argv, Options& o) {
  po::options_description d = make_options(o);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(d).run(), vm);
    if (vm.count("config")) {
      std::string err;
      if (!store_config_file(vm["config"].as<std::string>(), d, vm, &err)) {
        std::cerr << "inagg: " << err << "\n";
        return 2;
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "inagg: " << e.what() << " (see inagg -- --help)\n";
    return 2;
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg") << "\n";
    return 1;
  }
  if (vm.count("help")) {
    std::cout << "Usage: inagg [EAL options] -- [inagg options]\n\n"
                 "An RoCEv2 gradient-aggregating L2 switch (design.md). EAL options choose lcores (-l), memory and\n"
                 "ports (--vdev=..., -a PCI); e.g.\n"
                 "  inagg -l 0,1 --no-huge -m 1024 --vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap -- --job "
                 "conf/jobs/x.job\n\n"
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
  if (const std::string m = vm["mempools"].as<std::string>(); m == "shared") {
    o.app.pools = dataplane::PoolMode::shared;
  } else if (m == "per-socket") {
    o.app.pools = dataplane::PoolMode::per_socket;
  } else if (m == "per-port") {
    o.app.pools = dataplane::PoolMode::per_port;
  } else {
    std::cerr << "inagg: --mempools must be shared, per-socket or per-port (got '" << m << "')\n";
    return 2;
  }
  o.selftest = vm.count("selftest") > 0;
  if (!(o.selftest_s > 0 && o.selftest_s <= 3600)) {
    std::cerr << "inagg: --selftest-time must be above 0 and at most 3600 seconds\n";
    return 2;
  }
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
  o.app.engine.resend_max_ns =
      std::max(o.app.engine.resend_max_ns, o.app.engine.resend_timeout_ns);  // never below the first wait
  o.app.engine.max_connections = o.app.engine.max_jobs * 128;
  // Lab mode must not delay the engine's timers by more than half their period.
  if (o.app.idle_sleep_us > 0 && uint64_t{o.app.idle_sleep_us} * 2000 > o.app.engine.resend_timeout_ns) {
    std::cerr << "inagg: --idle-sleep-us " << o.app.idle_sleep_us << " would delay resends too much: keep it at most "
              << "half of --resend-us (" << o.app.engine.resend_timeout_ns / 2000 << " here), or raise --resend-us\n";
    return 2;
  }
  if (o.app.burst < 1 || o.app.burst > 64) {
    std::cerr << "inagg: --burst must be between 1 and 64 (got " << o.app.burst << ")\n";
    return 2;
  }
  return 0;
}

dataplane::Appliance* g_app = nullptr;  // the control thread's; telemetry goes through its own gate

void on_signal(int) { dataplane::Appliance::request_stop(); }

// Refused adds, shown by `list` for a while so that every rank of the job learns of the refusal.
control::RefusedJobs g_refused;

std::string handle_request(const control::Request& r) {
  switch (r.verb) {
    case control::Request::Verb::add: {
      std::string err;
      if (!g_app->add_job(r.job, &err)) {
        g_refused.record(r.job, err);
        util::log(util::LogModule::control, util::LogLevel::warning, "job %u refused: %s", r.job.id, err.c_str());
        return control::format_error(err);
      }
      g_refused.forget(r.job.id);
      util::log(util::LogModule::control, util::LogLevel::info, "job %u added (%u workers, %s)", r.job.id,
                r.job.workers, std::string(util::dtype_name(r.job.dtype)).c_str());
      return control::format_job_added(r.job.id);
    }
    case control::Request::Verb::remove: {
      std::string err;
      if (!g_app->remove_job(r.id, &err))
        return g_refused.forget(r.id) ? control::format_job_removed(r.id) : control::format_error(err);
      g_refused.forget(r.id);
      util::log(util::LogModule::control, util::LogLevel::info, "job %u removed", r.id);
      return control::format_job_removed(r.id);
    }
    case control::Request::Verb::list: {
      std::vector<control::JobStatus> jobs = g_app->describe_jobs();
      g_refused.add_to(&jobs);
      return control::format_job_list(jobs);
    }
    case control::Request::Verb::stats: {
      if (!r.has_id) return control::format_counters(agg::counter_list(g_app->engine_totals()));
      control::JobStatus job;
      if (!g_app->describe_job(r.id, &job))
        return control::format_error("no job " + std::to_string(r.id) + " (list jobs to see which exist)");
      return control::format_job_stats(job);
    }
  }
  return control::format_error("unsupported request");
}

// The control thread's work, every few milliseconds: the control socket, the periodic stats,
// --idle-exit.
struct ControlLoop {
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
    }
    if (server && server->is_open()) server->poll(handle_request);
    if (tcp_server && tcp_server->is_open()) tcp_server->poll(handle_request);
    events->poll();
    const auto now = std::chrono::steady_clock::now();
    if (run_for > 0 && now - started >= std::chrono::milliseconds(static_cast<int64_t>(run_for * 1000)) &&
        !dataplane::Appliance::stop_requested()) {
      util::log(util::LogModule::control, util::LogLevel::info, "ran for %.1f s: exiting (--run-for)", run_for);
      dataplane::Appliance::request_stop();
    }
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
    } else if (idle_exit > 0 && rx > 0 &&
               now - last_rx_change > std::chrono::milliseconds(static_cast<int64_t>(idle_exit * 1000))) {
      util::log(util::LogModule::control, util::LogLevel::info, "no packet for %.1f s: exiting (--idle-exit)",
                idle_exit);
      dataplane::Appliance::request_stop();
    }
  }
  static void tick_cb(void* self) { static_cast<ControlLoop*>(self)->tick(); }
};

std::string describe_spec(const agg::JobSpec& j) {
  return std::string(util::dtype_name(j.dtype)) + ", " + std::to_string(j.workers) + " workers, " +
         std::to_string(j.message_bytes) + "-byte messages of " + std::to_string(j.payload_bytes) +
         "-byte packets, window " + std::to_string(j.window) + (j.replay ? ", replay" : "");
}

// --check-config: what can be checked without EAL, with the checks start-up makes.
int check_config(const Options& opt, const std::vector<agg::JobSpec>& jobs, std::span<char* const> eal_args) {
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
  for (const agg::JobSpec& j : jobs) std::printf("job %u: %s\n", j.id, describe_spec(j).c_str());
  return 0;
}

// From EAL up to the final stats. The appliance is gone when this returns, so EAL can be cleaned up.
int run_appliance(const Options& opt, const std::vector<agg::JobSpec>& jobs) {
  dataplane::Appliance app;
  std::string err;
  if (!app.init(opt.app, &err)) {
    util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
    return 2;
  }
  g_app = &app;
  util::log(util::LogModule::dataplane, util::LogLevel::info, "%zu ports, %s, kernels %s, crc32 %s", app.ports().size(),
            app.single_lcore() ? "one lcore (main) for the datapath, a control thread beside it"
                               : "datapath on the worker lcores",
            std::string(agg::kernels_tier_name()).c_str(), std::string(wire::crc32_impl_name()).c_str());
  int status = 0;
  for (const agg::JobSpec& spec : jobs) {
    if (!app.add_job(spec, &err)) {
      util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
      status = 2;
      break;
    }
    util::log(util::LogModule::control, util::LogLevel::info, "job %u registered (%s)", spec.id,
              describe_spec(spec).c_str());
  }
  control::ControlServer server;
  if (status == 0 && !opt.socket_path.empty() && !server.open(opt.socket_path, &err)) {
    util::log(util::LogModule::control, util::LogLevel::error, "control socket: %s", err.c_str());
    status = 2;
  }
  control::ControlServer tcp_server;
  if (status == 0 && !opt.control_tcp.empty()) {
    std::string secret;
    if (opt.control_secret_file.empty()) {
      util::log(util::LogModule::control, util::LogLevel::error,
                "--control-tcp needs --control-secret-file (a file with the shared secret, mode 0600)");
      status = 2;
    } else if (!control::load_secret_file(opt.control_secret_file, &secret, &err) ||
               !tcp_server.open_tcp(opt.control_tcp, secret, &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "control over TCP: %s", err.c_str());
      status = 2;
    } else {
      util::log(util::LogModule::control, util::LogLevel::info,
                "control requests over TCP on %s (port %u), with the shared secret of %s", opt.control_tcp.c_str(),
                tcp_server.port(), opt.control_secret_file.c_str());
    }
  }
  // Metrics: scraped on the HTTP server's threads, never on a datapath lcore.
  dataplane::PrometheusRenderer renderer(app);
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
    ControlLoop loop{&events,
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
    dataplane::detach_telemetry();
  }
  metrics.stop();
  server.close();
  std::fputs("inagg: final stats\n", stdout);
  std::fputs(app.stats_text().c_str(), stdout);
  if (tcp_server.is_open())
    std::printf("control tcp %s: refused %" PRIu64 " requests without the right secret\n", opt.control_tcp.c_str(),
                tcp_server.refused());
  tcp_server.close();
  std::fflush(stdout);
  g_app = nullptr;
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

  if (opt.check_only) return check_config(opt, jobs, std::span<char* const>(argv, static_cast<size_t>(sep)));
  // Before EAL: a stop asked for during start-up ends the run cleanly (final stats, status 0).
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (rte_eal_init(sep, argv) < 0) {
    std::cerr << "inagg: EAL initialisation failed: " << rte_strerror(rte_errno)
              << " (check the EAL options before `--`: hugepages or --no-huge, -l, --vdev, --file-prefix)\n";
    return 2;
  }
  dataplane::route_logs_to_rte_log();
  // dpdk-dumpcap and dpdk-pdump attach as secondary processes and capture from any port.
  const bool pdump = rte_pdump_init() == 0;
  if (!pdump)
    util::log(util::LogModule::dataplane, util::LogLevel::warning, "packet capture (rte_pdump) unavailable: %s",
              rte_strerror(rte_errno));
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
  if (pdump) rte_pdump_uninit();
  rte_eal_cleanup();
  return status;
}
