// The metrics endpoint: an HTTP server on its own thread that answers GET /metrics with what the
// renderer gives (the Prometheus text format, metrics.cpp).
#include <httplib.h>

#include <string>

#include "inagg/dataplane/metrics.hpp"
#include "inagg/util/log.hpp"

namespace inagg::dataplane {

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
