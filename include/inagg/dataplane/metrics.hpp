// The appliance's figures in the Prometheus text format (exposition format 0.0.4), served over HTTP
// by a thread of the control plane; never by a datapath lcore. Off unless `--metrics` is given.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

namespace inagg::dataplane {

class Appliance;

// Renders every figure of `app`: per port (packets, bytes, drops, errors), per lcore (counters, busy
// cycles, and the busy ratio since the previous render), engine totals, and per job (state, every
// engine counter, held and retained packets, memory). Reads only what the Appliance's thread-safe
// accessors and rte_eth_stats_get give. Keeps the previous lcore cycle counts for the busy ratio.
class PrometheusRenderer {
 public:
  explicit PrometheusRenderer(Appliance& app) : app_(app) {}
  std::string render();

 private:
  Appliance& app_;
  std::map<unsigned, std::pair<uint64_t, uint64_t>> last_cycles_;  // lcore -> (busy, idle)
};

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
