// inagg-ctl: adds, removes, lists jobs of a running appliance and prints its counters, over the
// control socket (include/inagg/control/protocol.hpp). Exit status 0 when the appliance says ok, 1
// when it refuses (an "error:" reply), 2 on a usage, job file or connection error.
#include <boost/program_options.hpp>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "command_words.hpp"
#include "ctl_top.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/control/racks.hpp"
#include "inagg/control/reply_json.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/util/text.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;

namespace {

constexpr const char* kCommands =
    "Commands:\n"
    "  add JOBFILE   check JOBFILE here (syntax, ranges), then add its job to the appliance;\n"
    "                conf/jobs/*.job are commented examples of the format\n"
    "  remove ID     remove job ID and free its slots\n"
    "  list          one line per job: id, state (active|failed), dtype, workers, released slots,\n"
    "                held packets, and why it failed\n"
    "  stats [ID]    counters of the whole engine, or of job ID, as 'name value' lines\n"
    "  top           a live view: the engine's and every job's rates (aggregated packets and bits,\n"
    "                released slots, NAKs, resends, drops) and slot occupancy, every --interval;\n"
    "                ports and lcores are in the Prometheus metrics (inagg --metrics); with --json\n"
    "                each frame is one JSON object on a line of its own (--once: one frame, one\n"
    "                object): {\"socket\", \"interval_s\", \"elapsed_s\", \"engine\": {rates,\n"
    "                \"job_errors\"}, \"jobs\": [{\"id\", \"state\", \"error\", rates, \"held_packets\",\n"
    "                \"retained_packets\"}]}, each rate a number per second named after its counter\n"
    "  split JOBFILE --racks R0,R1,..  a job whose ranks sit in several racks: writes each\n"
    "                appliance's part to --out-dir (leaf-0.job, leaf-1.job, .. in ring order, and\n"
    "                spine.job), to be added to each rack's leaf and to the spine; rank r sits in\n"
    "                rack Rr, each rack's ranks consecutive in the ring (no appliance is contacted)\n";

int usage_error(const std::string& msg) {
  std::cerr << "inagg-ctl: " << msg << " (see inagg-ctl --help)\n";
  return 2;
}

// `split`: the parts of a job across racks, one job file each.
int split_job(const std::string& path, const std::string& racks_text, const std::string& out_dir) {
  std::string error;
  const std::optional<control::JobSpec> job = control::load_job_file(path, &error);
  if (!job) {
    std::cerr << "inagg-ctl: " << error << "\n";
    return 2;
  }
  const std::optional<std::vector<unsigned>> racks = control::parse_rack_list(racks_text, &error);
  if (!racks) return usage_error("--racks: " + error);
  const std::optional<control::RackParts> parts = control::split_across_racks(*job, *racks, &error);
  if (!parts) {
    std::cerr << "inagg-ctl: " << path << ": " << error << "\n";
    return 2;
  }
  auto write = [&](const std::string& name, const control::JobSpec& spec) {
    const std::string file = out_dir + "/" + name;
    std::ofstream out(file);
    out << control::format_job(spec);
    out.close();
    if (!out) {
      std::cerr << "inagg-ctl: cannot write " << file << "\n";
      return false;
    }
    std::cout << file << ": " << control::tier_name(spec.tier) << ", " << spec.workers << " connections\n";
    return true;
  };
  for (size_t i = 0; i < parts->leaves.size(); ++i)
    if (!write("leaf-" + std::to_string(i) + ".job", parts->leaves[i])) return 2;
  if (parts->spine && !write("spine.job", *parts->spine)) return 2;
  return 0;
}

bool parse_id_arg(const std::string& text, uint32_t* id) {
  const std::optional<uint64_t> v = util::parse_unsigned(text, UINT32_MAX);
  if (v) *id = static_cast<uint32_t>(*v);
  return v.has_value();
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts("Options");
  opts.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "socket,s", po::value<std::string>()->default_value(control::kDefaultSocketPath)->value_name("PATH"),
      "the appliance's control socket, or tcp://HOST:PORT (its --control-tcp)")(
      "control-secret-file", po::value<std::string>()->value_name("FILE"),
      "tcp://: the file with this tenant's credential, one line: SECRET (tenant admin) or TENANT SECRET (mode "
      "0600); $INAGG_CONTROL_SECRET takes precedence")(
      "timeout", po::value<int>()->default_value(5000)->value_name("MS"), "milliseconds to wait for the reply")(
      "interval", po::value<double>()->default_value(1.0)->value_name("S"), "top: seconds between frames")(
      "count", po::value<unsigned>()->default_value(0)->value_name("N"),
      "top: show N frames and exit (0: until Ctrl-C)")("once", "top: show one frame and exit (--count 1)")(
      "racks", po::value<std::string>()->value_name("R0,R1,.."), "split: the rack of each rank")(
      "out-dir", po::value<std::string>()->default_value(".")->value_name("DIR"),
      "split: where the parts' job files go")(
      "json,j",
      "print the reply as one JSON object (add, remove, list, stats; the names of the text form): "
      "{\"ok\": false, \"error\": ...} for a refusal; top: one object a frame");
  const std::string usage =
      "Usage: inagg-ctl [options] add JOBFILE | remove ID | list | stats [ID] | top [--once] | split JOBFILE --racks "
      "LIST\n\n";
  po::variables_map vm;
  std::vector<std::string> words;
  try {
    words = apps::parse_command_words(argc, argv, opts, vm);
  } catch (const po::error& e) {
    return usage_error(e.what());
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg-ctl") << "\n";
    return 0;
  }
  if (vm.count("help")) {
    std::cout << usage << kCommands << "\n"
              << opts
              << "\nExit status: 0 ok, 1 the appliance refused the request (its reply starts with \"error:\"),\n"
                 "2 a usage, job file or connection error.\n";
    return 0;
  }
  if (words.empty())
    return usage_error("no command; expected add JOBFILE, remove ID, list, stats [ID], top or split JOBFILE");
  const int timeout_ms = vm["timeout"].as<int>();
  if (timeout_ms <= 0) return usage_error("--timeout must be a positive number of milliseconds");

  const std::string& cmd = words[0];
  const size_t nargs = words.size() - 1;
  control::Request req;
  if (cmd == "add") {
    if (nargs != 1)
      return usage_error("add takes one job file, e.g. inagg-ctl add conf/jobs/example-fp32-4workers.job");
    std::string error;
    // Send the file's own text (checked here first), comments and all: it is what the user wrote.
    if (!control::load_job_file(words[1], &error, &req.body)) {
      std::cerr << "inagg-ctl: " << error << "\n";
      return 2;
    }
    req.verb = control::Request::Verb::add;
  } else if (cmd == "remove") {
    if (nargs != 1) return usage_error("remove takes one job id, e.g. inagg-ctl remove 7");
    if (!parse_id_arg(words[1], &req.id))
      return usage_error("job id '" + words[1] + "' is not a number from 0 to 4294967295");
    req.verb = control::Request::Verb::remove;
    req.has_id = true;
  } else if (cmd == "list") {
    if (nargs != 0) return usage_error("list takes no arguments");
    req.verb = control::Request::Verb::list;
  } else if (cmd == "stats") {
    if (nargs > 1) return usage_error("stats takes at most one job id");
    req.verb = control::Request::Verb::stats;
    if (nargs == 1) {
      if (!parse_id_arg(words[1], &req.id))
        return usage_error("job id '" + words[1] + "' is not a number from 0 to 4294967295");
      req.has_id = true;
    }
  } else if (cmd == "split") {
    if (nargs != 1 || !vm.count("racks"))
      return usage_error("split takes one job file and --racks, e.g. inagg-ctl split job.job --racks 0,0,1,1");
    return split_job(words[1], vm["racks"].as<std::string>(), vm["out-dir"].as<std::string>());
  } else if (cmd == "top") {
    if (nargs != 0) return usage_error("top takes no arguments (--interval S, --count N or --once, --json)");
    const double interval = vm["interval"].as<double>();
    if (!(interval >= 0.1 && interval <= 3600)) return usage_error("--interval must be between 0.1 and 3600 seconds");
    unsigned count = vm["count"].as<unsigned>();
    if (vm.count("once")) {
      if (!vm["count"].defaulted() && count != 1) return usage_error("--once is --count 1: give one or the other");
      count = 1;
    }
    return ctl::run_top({vm["socket"].as<std::string>(), interval, count, timeout_ms, vm.count("json") > 0});
  } else {
    return usage_error("unknown command '" + cmd + "'; valid: add, remove, list, stats, top, split");
  }

  std::string reply, error, credential;
  const std::string socket = vm["socket"].as<std::string>();
  if (socket.rfind(control::kTcpScheme, 0) == 0 &&
      !control::load_secret_file(vm.count("control-secret-file") ? vm["control-secret-file"].as<std::string>() : "",
                                 &credential, &error)) {
    std::cerr << "inagg-ctl: " << socket << " needs a tenant's credential (--control-secret-file or "
              << "$INAGG_CONTROL_SECRET): " << error << "\n";
    return 2;
  }
  if (!control::send_request(socket, control::format_request(req), &reply, &error, timeout_ms, "inagg", credential)) {
    std::cerr << "inagg-ctl: " << error << "\n";
    return 2;
  }
  const bool refused = control::is_error_reply(reply);
  if (vm.count("json")) {
    const std::optional<std::string> json = control::reply_to_json(req.verb, req.has_id, reply, &error);
    if (!json) {
      std::cerr << "inagg-ctl: the appliance's reply is not in the form this inagg-ctl reads (" << error
                << "): is it another version?\n";
      return 2;
    }
    std::cout << *json << "\n";
    return refused ? 1 : 0;
  }
  // The reply is the output either way (scripts capture it); the exit status says which it was.
  std::cout << reply;
  return refused ? 1 : 0;
}
