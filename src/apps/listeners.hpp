// The appliance's listeners: the control socket (--socket), the control protocol over TCP with
// the tenants of its --control-secret-file (--control-tcp), and the metrics endpoint (--metrics).
// Opened at start from the options; a reload (SIGHUP) reads the tenants file again and replaces
// each listener whose address changed, the new one listening before the old one closes, all or
// nothing. They are the control thread's: nothing else touches them.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "inagg/control/socket.hpp"
#include "inagg/dataplane/metrics.hpp"
#include "inagg_options.hpp"

namespace inagg::apps {

class Listeners {
 public:
  // `render_metrics` answers every scrape, on the metrics server's thread.
  explicit Listeners(std::function<std::string()> render_metrics) : render_(std::move(render_metrics)) {}
  ~Listeners() { close(); }
  Listeners(const Listeners&) = delete;
  Listeners& operator=(const Listeners&) = delete;

  // Opens what `opt` names. False with *error (a sentence naming the listener) on failure.
  bool open(const Options& opt, std::string* error);
  // A reload to `next`: reads its --control-secret-file (when it has --control-tcp), then opens
  // each listener whose address changed, or that `next` adds, before closing the one it replaces
  // (where the new address takes the old one's port, the old one closes first and comes back if
  // the new one fails), and closes those `next` drops. An unchanged listener keeps its socket and
  // its connections; the TCP listener takes the tenants read. False, with nothing changed and
  // *error naming the file or listener, when the file does not read or a listener does not open.
  bool reopen(const Options& next, std::string* error);
  // Serves the control socket and the TCP listener: what is ready now (the control thread's tick).
  void poll(const control::ControlServer::TenantHandler& handler);
  // Closes them all; prints what the TCP listener refused and dropped.
  void close();

 private:
  enum Which { kSocket, kTcp, kMetrics, kCount };
  struct Listener {
    std::string listen;  // its address, as the option gave it; "" when off
    std::unique_ptr<control::ControlServer> control;
    std::unique_ptr<dataplane::MetricsServer> metrics;
    bool is_open() const { return control || metrics; }
  };
  // Opens `l` (its `listen` set) as listener `which`, logging where it listens.
  bool start(Which which, Listener& l, const std::vector<control::Tenant>& tenants, std::string* error);
  void stop(Which which, Listener& l);

  std::function<std::string()> render_;
  std::array<Listener, kCount> now_;
  std::vector<control::Tenant> tenants_;  // the TCP listener's
  std::string secret_file_;
};

}  // namespace inagg::apps
