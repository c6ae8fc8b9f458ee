// inagg's own options: the table, the config file, and the checks that need no EAL.
#include "inagg_options.hpp"

#include <boost/program_options.hpp>

#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "inagg/dataplane/events.hpp"
#include "inagg/dataplane/metrics.hpp"
#include "inagg/util/key_value.hpp"
#include "inagg/util/log.hpp"
#include "version.hpp"

namespace po = boost::program_options;

namespace inagg::apps {
namespace {

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
      "state-dir", po::value<std::string>(&o.state_dir)->value_name("DIR"),
      "keep the jobs registered at run time in DIR (one file each, written when a job is added, removed with it) "
      "and register them again at start, before forwarding, so a restart does not forget them; a file that is not "
      "exactly what inagg wrote stops the start with its name (off by default; conf/inagg.conf sets "
      "/var/lib/inagg/inagg)")("socket", po::value<std::string>(&o.socket_path)->default_value(o.socket_path),
                               "control socket (root only, 0600); \"\" disables it")(
      "control-tcp", po::value<std::string>(&o.control_tcp)->value_name("ADDR:PORT"),
      "also serve the control protocol over TCP at IPv4 ADDR:PORT, for workers on other hosts (off by default); "
      "every request must carry a tenant's HMAC over the connection's nonce, anything else is refused and counted; "
      "0.0.0.0 (every address) is warned about")(
      "control-secret-file", po::value<std::string>(&o.control_secret_file)->value_name("FILE"),
      "the tenants of --control-tcp, one line each: TENANT JOBS [OPTION...] SECRET (JOBS: * for the operator, or N "
      "or N-M, the job ids it may manage; OPTIONs: prefixes=P,... the addresses its jobs may name, without which "
      "it adds none; ports=N,... the appliance ports its connections must name; max_jobs=N, max_memory=BYTES[K|M|G], "
      "max_mbufs=N its budgets; no two tenants may share an id, an address or a port; docs/deploy.md, \"Tenants\"), "
      "or one line with only a SECRET (tenant admin, every job); secrets of at least 16 characters, the file ours or "
      "root's, mode 0600")(
      "metrics", po::value<std::string>(&o.metrics_listen),
      "serve Prometheus metrics over HTTP at ADDRESS:PORT/metrics, or PORT alone for 127.0.0.1:PORT (off by default; "
      "every address, 0.0.0.0 or [::], is warned about; port 0 picks a "
      "free port)")("stats-interval", po::value<double>(&o.stats_interval)->default_value(0),
                    "print port, lcore and job stats every N seconds (0: only at exit)")(
      "mtu", po::value<uint32_t>(&o.app.mtu)->default_value(o.app.mtu),
      "port MTU; 9000 carries 4 KiB RoCE payloads (docs/lab.md for virtual devices)")(
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
      "mac-limit-per-port", po::value<size_t>(&o.app.mac_limit_per_port)->default_value(0),
      "learned MAC addresses each port may hold; frames from new addresses beyond it are forwarded (flooded to "
      "them) but not learned, and counted (mac_limit_refused); a bound rank's address is always kept (0: no limit)")(
      "bindings", po::value<std::string>()->value_name("FILE"),
      "the binding table: ADDRESS PORT [MAC] a line; a job's rank at such an address is bound to that port (and "
      "MAC) instead of where its address was seen (docs/binding.md)")(
      "log-level", po::value<std::vector<std::string>>()->composing()->value_name("PATTERN:LEVEL"),
      "log level of the log types PATTERN matches, as EAL's --log-level takes it (inagg.*:debug, "
      "inagg.control:warning; levels emergency, alert, critical, error, warning, notice, info, debug), applied "
      "after EAL's (repeatable; later ones win)")(
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
      "capture-max-mb", po::value<uint64_t>()->default_value(1024),
      "--capture: at most this many MiB per file; later packets are skipped, and they and write errors are "
      "counted in the log at exit")(
      "wait-link", po::value<double>()->default_value(0),
      "wait up to this many seconds for every port's link before forwarding (e.g. a net_memif peer)")(
      "idle-exit", po::value<double>(&o.idle_exit)->default_value(0),
      "exit after this many seconds without a received packet, once one arrived (for offline pcap runs); 0: never")(
      "run-for", po::value<double>(&o.run_for)->default_value(0),
      "exit after the datapath has run this many seconds, as on SIGTERM (smoke tests: start-up time does not count); "
      "0: never");
  return d;
}

// Options inagg had and no longer has: recognised (on the command line and in a config file) only to
// say what took their place, never shown in the help. Their old default, which a config file written
// for an older inagg may still set, changes nothing and is only warned about; any other value is
// refused.
struct RemovedOption {
  const char* name;
  const char* old_default;
  const char* why;
};
constexpr RemovedOption kRemovedOptions[] = {
    {"job-lcores", "1",
     "a job is spread over lcores by its channels now: give its job file `channels = C` (C RC connections per "
     "rank, each channel on an lcore of its own; docs/protocol.md section 22) and leave job-lcores out"},
    {"job-spread", "shards",
     "it chose how job-lcores spread a job, and channels replaced that (docs/protocol.md section 22): leave "
     "job-spread out"},
};

po::options_description removed_options() {
  po::options_description d;
  for (const RemovedOption& r : kRemovedOptions) d.add_options()(r.name, po::value<std::string>(), r.why);
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
                       std::map<std::string, std::vector<std::string>>* given, std::string* error) {
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
        (*given)[name].push_back(std::string(value));
        return true;
      },
      &problem);
  if (!ok) *error = problem.message(path);
  return ok;
}

}  // namespace

int parse_app_options(int argc, char** argv, Options& o, std::ostream& errors) {
  po::options_description d = make_options(o);
  po::options_description parsed;  // what is read: d and the removed options
  parsed.add(d).add(removed_options());
  po::variables_map vm;
  try {
    const po::parsed_options command_line = po::command_line_parser(argc, argv).options(parsed).run();
    po::store(command_line, vm);
    for (const po::option& given : command_line.options)
      o.given[given.string_key].push_back(given.value.empty() ? "true" : given.value.front());
    if (vm.count("config")) {
      std::string err;
      std::map<std::string, std::vector<std::string>> in_file;
      if (!store_config_file(vm["config"].as<std::string>(), parsed, vm, &in_file, &err)) {
        errors << "inagg: " << err << "\n";
        return 2;
      }
      // As po::store took them: the command line wins, but repeatable options add up.
      for (auto& [name, values] : in_file) {
        std::vector<std::string>& mine = o.given[name];
        if (mine.empty() || parsed.find(name, false).semantic()->is_composing())
          mine.insert(mine.end(), values.begin(), values.end());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    errors << "inagg: " << e.what() << " (see inagg -- --help)\n";
    return 2;
  }
  for (const RemovedOption& r : kRemovedOptions) {
    if (!vm.count(r.name)) continue;
    if (vm[r.name].as<std::string>() == r.old_default) {
      util::log(util::LogModule::control, util::LogLevel::warning, "--%s %s is ignored: the option was removed; %s",
                r.name, r.old_default, r.why);
      o.given.erase(r.name);  // it changes nothing, so neither does a reload that drops it
      continue;
    }
    errors << "inagg: --" << r.name << " was removed: " << r.why << "\n";
    return 2;
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg") << "\n";
    return 1;
  }
  if (vm.count("help")) {
    std::cout << "Usage: inagg [EAL options] -- [inagg options]\n\n"
                 "An RoCEv2 gradient-aggregating L2 switch (docs/protocol.md). EAL options choose lcores (-l),\n"
                 "memory and ports (--vdev=..., -a PCI); e.g.\n"
                 "  inagg -l 0,1 --no-huge -m 1024 --vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap -- --job "
                 "conf/jobs/example-fp32-4workers.job\n\n"
                 "SIGTERM stops it. SIGHUP reloads: the command line and --config file are read again and, once\n"
                 "every file they name checks out, --control-secret-file, --control-tcp, --socket, --metrics,\n"
                 "--bindings, --log-level and --stats-interval are applied while the datapath runs on; the other\n"
                 "options take effect at the next start (docs/operations.md, \"Reloading\").\n\n"
              << d << "\n";
    return 1;
  }
  try {
    if (vm.count("ports")) o.app.ports = parse_ports(vm["ports"].as<std::string>());
  } catch (const std::exception& e) {
    errors << "inagg: --ports: " << e.what() << "; give comma-separated port ids, e.g. --ports 0,1\n";
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
    errors << "inagg: --mempools must be shared, per-socket or per-port (got '" << m << "')\n";
    return 2;
  }
  o.selftest = vm.count("selftest") > 0;
  if (!(o.selftest_s > 0 && o.selftest_s <= 3600)) {
    errors << "inagg: --selftest-time must be above 0 and at most 3600 seconds\n";
    return 2;
  }
  if (!o.metrics_listen.empty()) {
    std::string host, err;
    uint16_t port = 0;
    if (!dataplane::parse_listen_address(o.metrics_listen, &host, &port, &err)) {
      errors << "inagg: --metrics: " << err << "\n";
      return 2;
    }
  }
  o.app.capture_max_bytes = vm["capture-max-mb"].as<uint64_t>() << 20;
  o.app.wait_link_ms = static_cast<uint32_t>(vm["wait-link"].as<double>() * 1000);
  o.app.flow_steering = vm.count("no-flow") == 0;
  o.app.mac_ageing_ns = static_cast<uint64_t>(vm["mac-ageing"].as<double>() * 1e9);
  if (vm.count("bindings")) {
    std::string err;
    if (!dataplane::load_bindings(vm["bindings"].as<std::string>(), &o.app.bindings, &err)) {
      errors << "inagg: --bindings: " << err << "\n";
      return 2;
    }
  }
  if (vm.count("log-level"))
    for (const std::string& text : vm["log-level"].as<std::vector<std::string>>()) {
      std::string err;
      o.log_levels.emplace_back();
      if (!dataplane::parse_log_level_rule(text, &o.log_levels.back(), &err)) {
        errors << "inagg: --log-level: " << err << "\n";
        return 2;
      }
    }
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
    errors << "inagg: --idle-sleep-us " << o.app.idle_sleep_us << " would delay resends too much: keep it at most "
           << "half of --resend-us (" << o.app.engine.resend_timeout_ns / 2000 << " here), or raise --resend-us\n";
    return 2;
  }
  if (o.app.burst < 1 || o.app.burst > 64) {
    errors << "inagg: --burst must be between 1 and 64 (got " << o.app.burst << ")\n";
    return 2;
  }
  return 0;
}

}  // namespace inagg::apps

namespace inagg::apps {

bool reloadable_option(const std::string& name) {
  static const std::set<std::string> kReloadable = {
      "control-secret-file", "control-tcp", "socket", "metrics", "bindings", "log-level", "stats-interval"};
  return kReloadable.count(name) > 0;
}

std::vector<std::string> restart_only_changes(const Options& running, const Options& next) {
  std::set<std::string> names;
  for (const auto& [name, values] : running.given) names.insert(name);
  for (const auto& [name, values] : next.given) names.insert(name);
  std::vector<std::string> changed;
  for (const std::string& name : names) {
    if (reloadable_option(name)) continue;
    const auto a = running.given.find(name), b = next.given.find(name);
    const std::vector<std::string> none;
    if ((a == running.given.end() ? none : a->second) != (b == next.given.end() ? none : b->second))
      changed.push_back(name);
  }
  return changed;
}

}  // namespace inagg::apps
