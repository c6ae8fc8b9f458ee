// The appliance's figures in the Prometheus text format (exposition format 0.0.4), served over HTTP
// by a thread of the control plane; never by a datapath lcore. Off unless `--metrics` is given.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

namespace inagg::dataplane {

class Appliance;

// Renders every figure of `app` with Prometheus's naming conventions (units in the name, `_total`
// on counters, one family per quantity with a `reason` label where it has several causes, labels
// with few values): inagg_build_info and process_start_time_seconds; per port packets, bytes,
// drops by reason, errors; per lcore its counters and the seconds its loop spent busy and idle;
// engine totals; per job (label `job_id`) inagg_job_info, its state as inagg_job_state (a
// StateSet), its gauges, the engine's counters and how long its slots waited for their last rank
// (inagg_job_slot_completion_seconds). Reads only what the Appliance's thread-safe accessors,
// rte_eth_stats_get and rte_eth_link_get_nowait give; keeps no state between scrapes (ratios are
// the query's to compute, e.g. rate(inagg_lcore_loop_seconds_total{state="busy"}[...])).
class PrometheusRenderer {
 public:
  PrometheusRenderer(Appliance& app, std::string version, std::string revision, uint64_t tsc_hz);
  std::string render();

 private:
  Appliance& app_;
  std::string version_, revision_;
  uint64_t tsc_hz_;
  double start_time_seconds_;  // process_start_time_seconds, read once
};

// True when every engine and lcore counter has its place in a metric family and every job field
// (INAGG_JOB_FIELDS) its place among the job families or a reason not to be there; otherwise
// *missing names those that have none (a counter or field added must be given one).
bool every_counter_exported(std::string* missing);

// A minimal HTTP server for GET /metrics on its own thread.
class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // `listen` is ADDRESS:PORT ("127.0.0.1:9100", "[::1]:9100", "0.0.0.0:9100"; port 0 picks a free
  // one). `render` is called on the server's thread for every scrape. On failure returns false and
  // sets *error to a sentence saying what to change.
  bool start(const std::string& listen, std::function<std::string()> render, std::string* error);
  void stop();
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::string host_;
  uint16_t port_ = 0;
};

// Splits "ADDRESS:PORT" ("[v6]:PORT" for IPv6); a bare "PORT" is the loopback, 127.0.0.1:PORT.
// False with *error on a malformed value.
bool parse_listen_address(const std::string& s, std::string* host, uint16_t* port, std::string* error);

}  // namespace inagg::dataplane
