#include "inagg/dataplane/metrics.hpp"
#include "inagg/util/log.hpp"

#include <httplib.h>
#include <rte_ethdev.h>

#include <cstdio>
#include <sstream>
#include <string_view>
#include <variant>

#include "inagg/dataplane/appliance.hpp"

namespace inagg::dataplane {
namespace {

// One metric family: its HELP and TYPE lines, then samples added with sample().
class Family {
 public:
  Family(std::ostringstream& out, std::string_view name, std::string_view help, std::string_view type)
      : out_(out), name_(name) {
    out_ << "# HELP " << name << ' ';
    for (const char c : help) {  // HELP escapes backslash and newline
      if (c == '\\')
        out_ << "\\\\";
      else if (c == '\n')
        out_ << "\\n";
      else
        out_ << c;
    }
    out_ << "\n# TYPE " << name << ' ' << type << '\n';
  }
  Family& sample(const std::string& labels, double v) {
    out_ << name_;
    if (!labels.empty()) out_ << '{' << labels << '}';
    char buf[40];
    std::snprintf(buf, sizeof buf, " %.17g\n", v);
    out_ << buf;
    return *this;
  }
  Family& sample(const std::string& labels, uint64_t v) {
    out_ << name_;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << v << '\n';
    return *this;
  }

 private:
  std::ostringstream& out_;
  std::string name_;
};

// A label value as the text format wants it (backslash, quote and newline escaped).
std::string label(std::string_view key, std::string_view value) {
  std::string s(key);
  s += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s + '"';
}

}  // namespace

std::string PrometheusRenderer::render() {
  std::ostringstream o;
  const std::vector<PortInfo>& ports = app_.ports();
  std::vector<rte_eth_stats> st(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) rte_eth_stats_get(ports[i].port, &st[i]);
  auto port_family = [&](const char* name, const char* help, uint64_t rte_eth_stats::*field) {
    Family f(o, name, help, "counter");
    for (size_t i = 0; i < ports.size(); ++i)
      f.sample(label("port", std::to_string(ports[i].port)) + "," + label("driver", ports[i].name), st[i].*field);
  };
  port_family("inagg_port_rx_packets_total", "packets received by the port", &rte_eth_stats::ipackets);
  port_family("inagg_port_tx_packets_total", "packets sent by the port", &rte_eth_stats::opackets);
  port_family("inagg_port_rx_bytes_total", "bytes received by the port", &rte_eth_stats::ibytes);
  port_family("inagg_port_tx_bytes_total", "bytes sent by the port", &rte_eth_stats::obytes);
  port_family("inagg_port_rx_missed_total", "packets the port dropped for want of RX descriptors",
              &rte_eth_stats::imissed);
  port_family("inagg_port_rx_nombuf_total", "packets the port dropped for want of mbufs", &rte_eth_stats::rx_nombuf);
  port_family("inagg_port_rx_errors_total", "erroneous packets received", &rte_eth_stats::ierrors);
  port_family("inagg_port_tx_errors_total", "packets the port failed to send", &rte_eth_stats::oerrors);
  {
    Family f(o, "inagg_port_info",
             "the port's driver, MTU and how RoCE is steered: rte_flow RSS by UDP source port (rss), rte_flow to "
             "queue 0 (queue), or classified in software",
             "gauge");
    for (const PortInfo& p : ports)
      f.sample(label("port", std::to_string(p.port)) + "," + label("driver", p.name) + "," +
                   label("mtu", std::to_string(p.mtu)) + "," + label("steering", p.flow_mode),
               uint64_t{1});
  }

  const auto lcores = app_.lcore_counters();
#define X(name, text)                                                                        \
  {                                                                                          \
    Family f(o, "inagg_lcore_" #name "_total", text, "counter");                             \
    for (const auto& [id, c] : lcores) f.sample(label("lcore", std::to_string(id)), c.name); \
  }
  INAGG_LCORE_COUNTERS(X)
#undef X
  {
    Family f(
        o, "inagg_lcore_busy_ratio",
        "share of the lcore's loop cycles that moved packets, since the previous scrape (since start on the first)",
        "gauge");
    for (const auto& [id, c] : lcores) {
      auto& last = last_cycles_[id];
      const uint64_t busy = c.busy_cycles - last.first, idle = c.idle_cycles - last.second;
      last = {c.busy_cycles, c.idle_cycles};
      f.sample(label("lcore", std::to_string(id)),
               busy + idle ? static_cast<double>(busy) / static_cast<double>(busy + idle) : 0.0);
    }
  }

  {
    const Appliance::MbufUse use = app_.mbuf_use();
    Family(o, "inagg_mbufs_in_use", "packet buffers in use: held by jobs, queued, or in per-lcore caches", "gauge")
        .sample("", use.in_use);
    Family(o, "inagg_mbufs", "packet buffers in the pools", "gauge").sample("", static_cast<uint64_t>(use.total));
  }
  {
    const Appliance::FlowRuleCounts rules = app_.flow_rules();
    Family(o, "inagg_flow_job_rules",
           "per-job rte_flow rules steering jobs' connections to the queue of the lcore that takes them first", "gauge")
        .sample("", rules.in_place);
    Family(o, "inagg_flow_job_rules_refused_total",
           "per-job rte_flow rules a port's PMD refused (those packets reach the owner through a handover ring)",
           "counter")
        .sample("", rules.refused);
    Family(o, "inagg_flow_job_rules_contended_total",
           "per-job rte_flow rules not made because another job's rule steers the same address pair to another "
           "queue (those packets reach their lcore through a handover ring)",
           "counter")
        .sample("", rules.contended);
  }

  const agg::EngineCounters totals = app_.engine_totals();
  agg::for_each_counter(totals, [&](std::string_view name, std::string_view text, uint64_t v) {
    Family(o, "inagg_engine_" + std::string(name) + "_total", text, "counter").sample("", v);
  });

  // Per job, from the job description (INAGG_JOB_FIELDS): its text fields as labels of
  // inagg_job_up, each numeric field a gauge family, each engine counter a counter family.
  const std::vector<control::JobStatus> jobs = app_.describe_jobs();
  {
    Family f(o, "inagg_job_up", "1 for a registered job, with its state (active or failed), dtype and why it failed",
             "gauge");
    for (const control::JobStatus& j : jobs) {
      std::string labels = label("job", std::to_string(j.id));
      control::for_each_job_field(j, [&](std::string_view name, std::string_view, const control::JobFieldValue& v) {
        if (const std::string* text = std::get_if<std::string>(&v)) labels += "," + label(name, *text);
      });
      f.sample(labels, uint64_t{1});
    }
  }
  if (!jobs.empty()) {
    control::for_each_job_field(
        jobs[0], [&](std::string_view name, std::string_view help, const control::JobFieldValue& v) {
          if (name == "id" || !std::holds_alternative<uint64_t>(v)) return;
          Family f(o, "inagg_job_" + std::string(name), help, "gauge");
          for (const control::JobStatus& j : jobs)
            control::for_each_job_field(j, [&](std::string_view n, std::string_view, const control::JobFieldValue& x) {
              if (n == name) f.sample(label("job", std::to_string(j.id)), std::get<uint64_t>(x));
            });
        });
  }
  // One family per engine counter with a sample per job (a family's samples must not interleave
  // with another's).
  size_t k = 0;
  agg::for_each_counter(agg::EngineCounters{}, [&](std::string_view name, std::string_view text, uint64_t) {
    Family f(o, "inagg_job_" + std::string(name) + "_total", text, "counter");
    for (const control::JobStatus& j : jobs)
      if (k < j.counters.size()) f.sample(label("job", std::to_string(j.id)), j.counters[k].value);
    ++k;
  });
  return o.str();
}

bool parse_listen_address(const std::string& s_in, std::string* host, uint16_t* port, std::string* error) {
  // A bare port: the loopback (whoever scrapes from elsewhere names the address to expose).
  const std::string s =
      !s_in.empty() && s_in.find_first_not_of("0123456789") == std::string::npos ? "127.0.0.1:" + s_in : s_in;
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    *error = "'" + s + "' is not ADDRESS:PORT (e.g. 127.0.0.1:9100, [::1]:9100, 0.0.0.0:9100)";
    return false;
  }
  std::string h = s.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']') {
      *error = "'" + s + "': an IPv6 address goes in brackets, e.g. [::1]:9100";
      return false;
    }
    h = h.substr(1, h.size() - 2);
  }
  const std::string p = s.substr(colon + 1);
  unsigned long v = 0;
  size_t used = 0;
  try {
    v = std::stoul(p, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != p.size() || v > 65535) {
    *error = "'" + s + "': the port must be a number from 0 to 65535";
    return false;
  }
  *host = h;
  *port = static_cast<uint16_t>(v);
  return true;
}

struct MetricsServer::Impl {
  httplib::Server server;
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}
MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::start(const std::string& listen, std::function<std::string()> render, std::string* error) {
  std::string host;
  uint16_t port = 0;
  if (!parse_listen_address(listen, &host, &port, error)) return false;
  if (host == "0.0.0.0" || host == "::")
    util::log(util::LogModule::control, util::LogLevel::warning,
              "metrics listen on every address (%s): any host that reaches this one can read every job's counters; "
              "give the monitoring network's address, or a bare port for the loopback",
              listen.c_str());
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second appliance would
  // silently share the port (and the scrapes) instead of being refused.
  impl_->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl_->server.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl_->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("inagg: metrics at /metrics (Prometheus text format)\n", "text/plain");
  });
  int bound = port == 0 ? impl_->server.bind_to_any_port(host.c_str())
                        : (impl_->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    *error = "cannot listen on " + listen + " for metrics (address not local, or port in use?)";
    return false;
  }
  host_ = host;
  port_ = static_cast<uint16_t>(bound);
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  return true;
}

void MetricsServer::stop() {
  if (thread_.joinable()) {
    impl_->server.stop();
    thread_.join();
  }
}

}  // namespace inagg::dataplane
