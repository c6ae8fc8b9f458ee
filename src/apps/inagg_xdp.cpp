// inagg-xdp: the agent of the XDP aggregation tier (ALEPH) on a head host. `run` loads the head
// program, attaches it to an interface, configures jobs and serves a control socket until
// SIGINT/SIGTERM; the other commands talk to a running agent or inspect an interface.
#include <poll.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "command_words.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/control/reply_json.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/wire/xagg_mac.hpp"
#include "inagg/xdp/agent.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::xdp;

namespace {

constexpr const char* kDefaultSocket = "/run/inagg/xdp.sock";

constexpr const char* kCommands =
    "Commands:\n"
    "  run            load the head program, attach it to --iface, add the --job files, serve the\n"
    "                 control socket; runs until SIGINT/SIGTERM, then prints the counters and\n"
    "                 detaches (the attachment is a bpf_link: even a killed agent leaves nothing)\n"
    "  add JOBFILE    add a head job to the running agent (conf/xdp/*.job are commented examples)\n"
    "  remove ID      remove a job\n"
    "  list           the jobs, one line each\n"
    "  stats [ID]     a job's counters, or those of packets for no job, as 'name value' lines\n"
    "  status         what XDP program --iface has (to spot one left by another tool); with\n"
    "                 --json one object: {\"ok\": true, \"iface\", \"ifindex\", \"programs\": [{\"mode\",\n"
    "                 \"id\", \"name\", \"run_count\", \"run_time_ns\"}, ...]} ({\"ok\": false, \"error\"}\n"
    "                 when the kernel cannot be asked)\n"
    "  peer           attach an XDP_PASS program to --iface, the other end of a veth whose head\n"
    "                 runs in native mode (XDP_TX on veth needs it); --off removes it\n"
    "  key FILE       make a job's MAC key: 128 random bits into a new file of mode 0600; name it\n"
    "                 in the job's head job files (key_file) and give it to its workers\n"
    "                 (inagg-worker --xdp-key-file or $INAGG_XDP_KEY)\n";

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage_error(const std::string& msg) {
  std::cerr << "inagg-xdp: " << msg << " (see inagg-xdp --help)\n";
  return 2;
}

struct RunOptions {
  std::string iface, mode = "native", socket = kDefaultSocket, address;
  std::vector<std::string> jobs;
  unsigned port = XAGG_UDP_PORT, max_jobs = 16;
  double stats_interval = 0;
};

// `status --json`: the interface's XDP programs as one JSON object.
int print_status_json(const Interface& iface) {
  const std::optional<std::vector<XdpAttachment>> attached = xdp_attachments(iface.ifindex);
  if (!attached) {
    std::cout << "{\"ok\": false, \"error\": "
              << control::json_quote("the kernel did not answer an XDP query for " + iface.name) << "}\n";
    return 1;
  }
  std::string out = "{\"ok\": true, \"iface\": " + control::json_quote(iface.name) +
                    ", \"ifindex\": " + std::to_string(iface.ifindex) + ", \"programs\": [";
  for (size_t i = 0; i < attached->size(); ++i) {
    const XdpAttachment& a = (*attached)[i];
    out += (i ? ", " : "") + std::string("{\"mode\": ") + control::json_quote(a.mode) +
           ", \"id\": " + std::to_string(a.prog_id) + ", \"name\": " + control::json_quote(a.name) +
           ", \"run_count\": " + std::to_string(a.run_cnt) + ", \"run_time_ns\": " + std::to_string(a.run_time_ns) +
           "}";
  }
  std::cout << out << "]}\n";
  return 0;
}

std::string counter_help_text() {
  std::string out = "Counters (stats):\n";
  for (size_t i = 0; i < XAGG_NUM_COUNTERS; ++i) {
    std::string name(counter_name(i));
    name.resize(18, ' ');
    out += "  " + name + std::string(counter_help(i)) + "\n";
  }
  return out;
}

int run(const RunOptions& o) {
  std::string err;
  const std::optional<AttachMode> mode = parse_attach_mode(o.mode);
  if (!mode) return usage_error("--mode must be native or generic");
  if (o.iface.empty()) return usage_error("run needs --iface, the interface the group's packets arrive on");
  if (o.port == 0 || o.port > 65535) return usage_error("--port must be 1..65535");
  const std::optional<Interface> iface = query_interface(o.iface, &err);
  if (!iface) return usage_error(err);
  std::optional<util::IpAddr> ip = iface->ipv4;
  if (!o.address.empty()) {
    ip = util::parse_ip(o.address);
    if (!ip || ip->version != util::IpVersion::v4) return usage_error("--address must be an IPv4 address");
  }
  if (!ip) return usage_error(o.iface + " has no IPv4 address; give the head's address with --address");
  std::vector<HeadJob> jobs;
  for (const std::string& f : o.jobs) {
    std::optional<HeadJob> j = load_head_job(f, &err);
    if (!j) return usage_error(err);
    jobs.push_back(*j);
  }
  // Before anything is set up, so a signal during set-up still ends in the clean-up below.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::unique_ptr<HeadProgram> prog = HeadProgram::load(o.max_jobs, &err);
  if (!prog) {
    std::cerr << "inagg-xdp: " << err << "\n";
    return 1;
  }
  HeadAgent agent(*prog, *iface);
  if (!prog->set_identity(static_cast<uint16_t>(o.port), *ip, iface->mac, &err)) return usage_error(err);
  for (const HeadJob& j : jobs) {
    if (!agent.add_job(j, &err)) {
      std::cerr << "inagg-xdp: job " << j.id << ": " << err << "\n";
      return 1;
    }
  }
  control::ControlServer server;
  if (!o.socket.empty() && !server.open(o.socket, &err)) {
    std::cerr << "inagg-xdp: " << err << "\n";
    return 1;
  }
  if (!prog->attach(iface->ifindex, *mode, &err)) {
    std::cerr << "inagg-xdp: " << err << "\n";
    return 1;
  }
  std::cout << "inagg-xdp: xagg_head attached to " << o.iface << " (" << o.mode << "), head " << util::ip_text(*ip)
            << " " << mac_text(iface->mac) << ", UDP port " << o.port << ", " << jobs.size() << " job(s)"
            << (o.socket.empty() ? std::string() : ", control socket " + o.socket) << std::endl;
  auto last_stats = std::chrono::steady_clock::now();
  while (!g_stop) {
    pollfd p{server.is_open() ? server.fd() : -1, POLLIN, 0};
    ::poll(&p, 1, 100);
    if (server.is_open()) server.poll_text([&agent](std::string_view req) { return agent.handle(req); });
    if (o.stats_interval > 0 &&
        std::chrono::steady_clock::now() - last_stats > std::chrono::duration<double>(o.stats_interval)) {
      last_stats = std::chrono::steady_clock::now();
      std::cout << "--- inagg-xdp jobs\n" << agent.format_jobs() << std::flush;
    }
  }
  server.close();
  prog->detach();
  std::cout << "inagg-xdp: detached from " << o.iface << "\n" << agent.format_jobs();
  for (const auto& [id, j] : prog->jobs()) std::cout << "--- job " << id << "\n" << agent.format_counters(id);
  std::cout << "--- packets of no job\n" << agent.format_counters(XAGG_MAX_JOBS) << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  bool off = false, json = false;
  po::options_description opts("Options");
  opts.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "iface,i", po::value<std::string>(&o.iface)->value_name("IF"), "run, status, peer: the interface")(
      "mode", po::value<std::string>(&o.mode)->default_value(o.mode)->value_name("M"),
      "run, peer: native (in the driver) or generic (skb, any interface)")(
      "job", po::value<std::vector<std::string>>(&o.jobs)->value_name("FILE"),
      "run: a head job file to add at start (repeatable)")("port", po::value<unsigned>(&o.port)->default_value(o.port),
                                                           "run: the tier's UDP port")(
      "address", po::value<std::string>(&o.address)->value_name("IP"),
      "run: the head's IPv4 address (default: the interface's first)")(
      "max-jobs", po::value<unsigned>(&o.max_jobs)->default_value(o.max_jobs),
      "run: jobs the head holds at once (about 260 KiB of slots each)")(
      "stats-interval", po::value<double>(&o.stats_interval)->default_value(0)->value_name("S"),
      "run: print the job lines every S seconds (0: only at exit)")(
      "socket,s", po::value<std::string>(&o.socket)->default_value(o.socket)->value_name("PATH"),
      "the agent's control socket (run: \"\" for none)")(
      "json,j", po::bool_switch(&json), "status: print the interface's XDP programs as one JSON object")(
      "off", po::bool_switch(&off), "peer: remove the XDP_PASS program instead");
  po::variables_map vm;
  std::vector<std::string> words;
  try {
    words = apps::parse_command_words(argc, argv, opts, vm);
  } catch (const po::error& e) {
    return usage_error(e.what());
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg-xdp") << "\n";
    return 0;
  }
  if (vm.count("help")) {
    std::cout << "Usage: inagg-xdp run --iface IF [--job FILE]... | add FILE | remove ID | list | stats [ID]\n"
                 "       inagg-xdp status --iface IF [--json] | peer --iface IF [--off] | key FILE\n\n"
              << kCommands << "\n"
              << opts << "\n"
              << counter_help_text()
              << "\nExit status: 0 ok, 1 the agent refused the request or the kernel refused the program,\n"
                 "2 a usage, job file or connection error.\n";
    return 0;
  }
  if (words.empty()) return usage_error("no command; expected run, add, remove, list, stats, status, peer or key");
  const std::string& cmd = words[0];
  const size_t nargs = words.size() - 1;
  std::string err;
  if (json && cmd != "status") return usage_error("--json is for status only; " + cmd + " prints text");
  if (cmd == "run") {
    if (nargs) return usage_error("run takes options only");
    return run(o);
  }
  if (cmd == "key") {
    if (nargs != 1) return usage_error("key takes one file to create");
    if (!wire::make_xagg_key_file(words[1], &err)) {
      std::cerr << "inagg-xdp: " << err << "\n";
      return 1;
    }
    return 0;
  }
  if (cmd == "status" || cmd == "peer") {
    if (nargs) return usage_error(cmd + " takes options only");
    if (o.iface.empty()) return usage_error(cmd + " needs --iface");
    const std::optional<Interface> iface = query_interface(o.iface, &err);
    if (!iface) return usage_error(err);
    if (cmd == "status") {
      if (json) return print_status_json(*iface);
      std::cout << o.iface << ": " << xdp_status(iface->ifindex) << "\n";
      return 0;
    }
    const std::optional<AttachMode> mode = parse_attach_mode(o.mode);
    if (!mode) return usage_error("--mode must be native or generic");
    const bool ok = off ? detach_pass_program(iface->ifindex, &err) : attach_pass_program(iface->ifindex, *mode, &err);
    if (!ok) {
      std::cerr << "inagg-xdp: " << o.iface << ": " << err << "\n";
      return 1;
    }
    std::cout << o.iface << ": " << xdp_status(iface->ifindex) << "\n";
    return 0;
  }
  std::string request;
  if (cmd == "add") {
    if (nargs != 1) return usage_error("add takes one head job file");
    std::string text;
    if (!load_head_job(words[1], &err, &text)) return usage_error(err);
    request = "add\n" + text;
  } else if (cmd == "remove" || cmd == "stats") {
    if (nargs > 1 || (cmd == "remove" && nargs == 0))
      return usage_error(cmd + (cmd == "remove" ? " takes one job id" : " takes at most one job id"));
    request = cmd + (nargs ? " " + words[1] : "");
  } else if (cmd == "list") {
    if (nargs) return usage_error("list takes no arguments");
    request = "list";
  } else {
    return usage_error("unknown command '" + cmd + "'; valid: run, add, remove, list, stats, status, peer, key");
  }
  std::string reply;
  if (!control::send_request(o.socket, request, &reply, &err, 5000, "inagg-xdp")) {
    std::cerr << "inagg-xdp: " << err << "\n";
    return 2;
  }
  std::cout << reply;
  return control::is_error_reply(reply) ? 1 : 0;
}
