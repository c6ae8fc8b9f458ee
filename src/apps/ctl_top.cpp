#include "ctl_top.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "inagg/control/protocol.hpp"
#include "inagg/control/socket.hpp"

namespace inagg::ctl {
namespace {

using Counters = std::map<std::string, uint64_t>;

struct JobSample {
  uint32_t id = 0;
  std::string state, error;
  Counters c;
};

struct Sample {
  std::chrono::steady_clock::time_point t;
  Counters engine;
  std::vector<JobSample> jobs;
};

// "name value" lines; lines whose value is not a number ("state active") are skipped.
Counters parse_counters(const std::string& text) {
  Counters c;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string name;
    uint64_t v = 0;
    if (in >> name >> v) c[name] = v;
  }
  return c;
}

// Packets dropped for any reason: every counter that says so by its name, plus the engine's
// drop reasons that do not.
uint64_t drops(const Counters& c) {
  uint64_t d = 0;
  for (const auto& [name, v] : c)
    if (name.find("drop") != std::string::npos || name == "malformed" || name == "bad_icrc" || name == "stale" ||
        name == "tx_full")
      d += v;
  return d;
}

bool ask(const TopOptions& o, control::Request req, std::string* reply) {
  std::string error;
  if (!control::send_request(o.socket, control::format_request(req), reply, &error, o.timeout_ms)) {
    std::cerr << "inagg-ctl top: " << error << "\n";
    return false;
  }
  return true;
}

bool take(const TopOptions& o, Sample* s) {
  s->t = std::chrono::steady_clock::now();
  std::string reply;
  control::Request req;
  req.verb = control::Request::Verb::stats;
  if (!ask(o, req, &reply)) return false;
  s->engine = parse_counters(reply);
  req.verb = control::Request::Verb::list;
  if (!ask(o, req, &reply)) return false;
  std::istringstream lines(reply);
  for (std::string line; std::getline(lines, line);) {
    const auto j = control::parse_job_list_line(line);
    if (!j) continue;
    JobSample js{j->id, j->state, j->error, {}};
    control::Request one;
    one.verb = control::Request::Verb::stats;
    one.id = j->id;
    one.has_id = true;
    std::string stats;
    if (ask(o, one, &stats) && !control::is_error_reply(stats)) js.c = parse_counters(stats);
    s->jobs.push_back(std::move(js));
  }
  return true;
}

// "12.3k" style, for rates.
std::string si(double v) {
  char buf[32];
  if (v >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1fG", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

double rate(const Counters& a, const Counters& b, const std::string& name, double dt) {
  const auto ia = a.find(name), ib = b.find(name);
  if (ia == a.end() || ib == b.end() || ib->second < ia->second) return 0;
  return static_cast<double>(ib->second - ia->second) / dt;
}

uint64_t value(const Counters& c, const std::string& name) {
  const auto i = c.find(name);
  return i == c.end() ? 0 : i->second;
}

std::string frame(const TopOptions& o, const Sample& a, const Sample& b) {
  const double dt = std::chrono::duration<double>(b.t - a.t).count();
  std::ostringstream out;
  char line[512];
  const std::time_t now = std::time(nullptr);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
  std::snprintf(line, sizeof line, "inagg-ctl top  %s  every %.1f s  %s\n", o.socket.c_str(), o.interval_s, clock);
  out << line;
  const Counters& e = b.engine;
  std::snprintf(
      line, sizeof line,
      "engine: rx %s pps  aggregated %s pps (%s bit/s)  released %s slots/s  NAKs %s/s  resends %s/s  drops %s/s  "
      "job errors %llu\n\n",
      si(rate(a.engine, e, "rx_packets", dt)).c_str(), si(rate(a.engine, e, "aggregated_packets", dt)).c_str(),
      si(8 * rate(a.engine, e, "aggregated_bytes", dt)).c_str(), si(rate(a.engine, e, "slots_released", dt)).c_str(),
      si(rate(a.engine, e, "naks_sent", dt)).c_str(), si(rate(a.engine, e, "resends", dt)).c_str(),
      si((static_cast<double>(drops(e)) - static_cast<double>(drops(a.engine))) / dt).c_str(),
      static_cast<unsigned long long>(value(e, "job_errors")));
  out << line;
  std::snprintf(line, sizeof line, "%8s %-8s %10s %10s %10s %8s %9s %8s %9s %8s\n", "job", "state", "aggr pps", "bit/s",
                "slots/s", "held", "retained", "NAKs/s", "resends/s", "drops/s");
  out << line;
  if (b.jobs.empty()) out << "   (no jobs)\n";
  for (const JobSample& j : b.jobs) {
    const JobSample* prev = nullptr;
    for (const JobSample& p : a.jobs)
      if (p.id == j.id) prev = &p;
    const Counters none;
    const Counters& pc = prev ? prev->c : none;
    const double dr = prev ? (static_cast<double>(drops(j.c)) - static_cast<double>(drops(pc))) / dt : 0;
    std::snprintf(line, sizeof line, "%8u %-8s %10s %10s %10s %8llu %9llu %8s %9s %8s\n", j.id, j.state.c_str(),
                  si(prev ? rate(pc, j.c, "aggregated_packets", dt) : 0).c_str(),
                  si(prev ? 8 * rate(pc, j.c, "aggregated_bytes", dt) : 0).c_str(),
                  si(prev ? rate(pc, j.c, "slots_released", dt) : 0).c_str(),
                  static_cast<unsigned long long>(value(j.c, "held_packets")),
                  static_cast<unsigned long long>(value(j.c, "retained_packets")),
                  si(prev ? rate(pc, j.c, "naks_sent", dt) : 0).c_str(),
                  si(prev ? rate(pc, j.c, "resends", dt) : 0).c_str(), si(dr).c_str());
    out << line;
    if (!j.error.empty()) out << "         " << j.state << ": " << j.error << "\n";
  }
  return out.str();
}

}  // namespace

int run_top(const TopOptions& o) {
  const bool tty = o.count == 0 && ::isatty(STDOUT_FILENO);
  Sample prev;
  if (!take(o, &prev)) return 2;
  for (unsigned shown = 0; o.count == 0 || shown < o.count; ++shown) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    Sample cur;
    if (!take(o, &cur)) return 2;
    const std::string f = frame(o, prev, cur);
    if (tty)
      std::cout << "\033[H\033[2J";  // home, clear: each frame replaces the last
    else if (shown > 0)
      std::cout << "\n";
    std::cout << f << std::flush;
    prev = std::move(cur);
  }
  return 0;
}

}  // namespace inagg::ctl
