#include "ctl_top.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "inagg/control/protocol.hpp"
#include "inagg/control/reply_json.hpp"
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

// What one frame shows: the rates between two samples, computed once for the text and the JSON form.
struct Rates {
  double rx_pps = 0, aggregated_pps = 0, aggregated_bits_per_s = 0, slots_per_s = 0, naks_per_s = 0, resends_per_s = 0,
         drops_per_s = 0;
};

struct JobRow {
  uint32_t id = 0;
  std::string state, error;
  Rates r;  // zero for a job that the earlier sample did not have
  uint64_t held = 0, retained = 0;
};

struct Frame {
  double elapsed_s = 0;
  Rates engine;
  uint64_t job_errors = 0;
  std::vector<JobRow> jobs;
};

Rates rates_between(const Counters& a, const Counters& b, double dt) {
  Rates r;
  r.rx_pps = rate(a, b, "rx_packets", dt);
  r.aggregated_pps = rate(a, b, "aggregated_packets", dt);
  r.aggregated_bits_per_s = 8 * rate(a, b, "aggregated_bytes", dt);
  r.slots_per_s = rate(a, b, "slots_released", dt);
  r.naks_per_s = rate(a, b, "naks_sent", dt);
  r.resends_per_s = rate(a, b, "resends", dt);
  r.drops_per_s = (static_cast<double>(drops(b)) - static_cast<double>(drops(a))) / dt;
  return r;
}

Frame frame_between(const Sample& a, const Sample& b) {
  Frame f;
  f.elapsed_s = std::chrono::duration<double>(b.t - a.t).count();
  f.engine = rates_between(a.engine, b.engine, f.elapsed_s);
  f.job_errors = value(b.engine, "job_errors");
  for (const JobSample& j : b.jobs) {
    JobRow row{j.id, j.state, j.error, {}, value(j.c, "held_packets"), value(j.c, "retained_packets")};
    for (const JobSample& p : a.jobs)
      if (p.id == j.id) row.r = rates_between(p.c, j.c, f.elapsed_s);
    f.jobs.push_back(std::move(row));
  }
  return f;
}

std::string text_frame(const TopOptions& o, const Frame& f) {
  std::ostringstream out;
  char line[512];
  const std::time_t now = std::time(nullptr);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
  std::snprintf(line, sizeof line, "inagg-ctl top  %s  every %.1f s  %s\n", o.socket.c_str(), o.interval_s, clock);
  out << line;
  const Rates& e = f.engine;
  std::snprintf(line, sizeof line,
                "engine: rx %s pps  aggregated %s pps (%s bit/s)  released %s slots/s  NAKs %s/s  resends %s/s  "
                "drops %s/s  job errors %llu\n\n",
                si(e.rx_pps).c_str(), si(e.aggregated_pps).c_str(), si(e.aggregated_bits_per_s).c_str(),
                si(e.slots_per_s).c_str(), si(e.naks_per_s).c_str(), si(e.resends_per_s).c_str(),
                si(e.drops_per_s).c_str(), static_cast<unsigned long long>(f.job_errors));
  out << line;
  std::snprintf(line, sizeof line, "%8s %-8s %10s %10s %10s %8s %9s %8s %9s %8s\n", "job", "state", "aggr pps", "bit/s",
                "slots/s", "held", "retained", "NAKs/s", "resends/s", "drops/s");
  out << line;
  if (f.jobs.empty()) out << "   (no jobs)\n";
  for (const JobRow& j : f.jobs) {
    std::snprintf(line, sizeof line, "%8u %-8s %10s %10s %10s %8llu %9llu %8s %9s %8s\n", j.id, j.state.c_str(),
                  si(j.r.aggregated_pps).c_str(), si(j.r.aggregated_bits_per_s).c_str(), si(j.r.slots_per_s).c_str(),
                  static_cast<unsigned long long>(j.held), static_cast<unsigned long long>(j.retained),
                  si(j.r.naks_per_s).c_str(), si(j.r.resends_per_s).c_str(), si(j.r.drops_per_s).c_str());
    out << line;
    if (!j.error.empty()) out << "         " << j.state << ": " << j.error << "\n";
  }
  return out.str();
}

// A rate as a JSON number (rates are finite: the interval is at least 0.1 s).
std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string json_rates(const Rates& r) {
  return "\"aggregated_packets_per_s\": " + json_number(r.aggregated_pps) +
         ", \"aggregated_bits_per_s\": " + json_number(r.aggregated_bits_per_s) +
         ", \"slots_released_per_s\": " + json_number(r.slots_per_s) +
         ", \"naks_sent_per_s\": " + json_number(r.naks_per_s) +
         ", \"resends_per_s\": " + json_number(r.resends_per_s) +
         ", \"dropped_packets_per_s\": " + json_number(r.drops_per_s);
}

// One object a frame, on one line: {"socket", "interval_s", "elapsed_s", "engine": {...},
// "jobs": [{"id", "state", "error", ..., "held_packets", "retained_packets"}]}.
std::string json_frame(const TopOptions& o, const Frame& f) {
  std::string out = "{\"socket\": " + control::json_quote(o.socket) + ", \"interval_s\": " + json_number(o.interval_s) +
                    ", \"elapsed_s\": " + json_number(f.elapsed_s) +
                    ", \"engine\": {\"rx_packets_per_s\": " + json_number(f.engine.rx_pps) + ", " +
                    json_rates(f.engine) + ", \"job_errors\": " + std::to_string(f.job_errors) + "}, \"jobs\": [";
  for (size_t i = 0; i < f.jobs.size(); ++i) {
    const JobRow& j = f.jobs[i];
    out += (i ? ", " : "") + std::string("{\"id\": ") + std::to_string(j.id) +
           ", \"state\": " + control::json_quote(j.state) + ", \"error\": " + control::json_quote(j.error) + ", " +
           json_rates(j.r) + ", \"held_packets\": " + std::to_string(j.held) +
           ", \"retained_packets\": " + std::to_string(j.retained) + "}";
  }
  return out + "]}\n";
}

}  // namespace

int run_top(const TopOptions& o) {
  const bool tty = o.count == 0 && !o.json && ::isatty(STDOUT_FILENO);
  Sample prev;
  if (!take(o, &prev)) return 2;
  for (unsigned shown = 0; o.count == 0 || shown < o.count; ++shown) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    Sample cur;
    if (!take(o, &cur)) return 2;
    const Frame fr = frame_between(prev, cur);
    const std::string f = o.json ? json_frame(o, fr) : text_frame(o, fr);
    if (tty)
      std::cout << "\033[H\033[2J";  // home, clear: each frame replaces the last
    else if (shown > 0 && !o.json)
      std::cout << "\n";
    std::cout << f << std::flush;
    prev = std::move(cur);
  }
  return 0;
}

}  // namespace inagg::ctl
