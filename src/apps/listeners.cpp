#include "listeners.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "inagg/util/log.hpp"

namespace inagg::apps {
namespace {

constexpr const char* kNames[] = {"the control socket", "control over TCP", "the metrics endpoint"};

// The tenants of `opt`'s TCP listener, read now; none without one.
bool read_tenants(const Options& opt, std::vector<control::Tenant>* tenants, std::string* error) {
  if (opt.control_tcp.empty()) return true;
  if (opt.control_secret_file.empty()) {
    *error = "--control-tcp needs --control-secret-file (a file with the shared secret, mode 0600)";
    return false;
  }
  if (control::load_tenants(opt.control_secret_file, tenants, error)) return true;
  *error = "control over TCP: " + *error;
  return false;
}

// Whether two listen addresses name the same port (not 0, which picks a free one): the new one
// cannot listen while the old one does, if their addresses overlap.
bool same_port(const std::string& a, const std::string& b) {
  const auto port = [](const std::string& s) { return s.substr(s.rfind(':') + 1); };  // npos + 1: all of it
  return port(a) == port(b) && port(a) != "0";
}

}  // namespace

bool Listeners::start(Which which, Listener& l, const std::vector<control::Tenant>& tenants, std::string* error) {
  using util::LogModule, util::LogLevel;
  switch (which) {
    case kSocket:
      l.control = std::make_unique<control::ControlServer>();
      if (!l.control->open(l.listen, error)) {
        l.control.reset();
        *error = "control socket: " + *error;
        return false;
      }
      util::log(LogModule::control, LogLevel::info, "control requests on the socket %s", l.listen.c_str());
      return true;
    case kTcp:
      l.control = std::make_unique<control::ControlServer>();
      if (!l.control->open_tcp(l.listen, tenants, error)) {
        l.control.reset();
        *error = "control over TCP: " + *error;
        return false;
      }
      util::log(LogModule::control, LogLevel::info, "control requests over TCP on %s (port %u), %zu tenant(s) from %s",
                l.listen.c_str(), l.control->port(), tenants.size(), secret_file_.c_str());
      return true;
    case kMetrics: {
      l.metrics = std::make_unique<dataplane::MetricsServer>();
      if (!l.metrics->start(l.listen, render_, error)) {
        l.metrics.reset();
        *error = "--metrics: " + *error;
        return false;
      }
      const bool v6 = l.metrics->host().find(':') != std::string::npos;
      util::log(LogModule::control, LogLevel::info, "metrics at http://%s%s%s:%u/metrics", v6 ? "[" : "",
                l.metrics->host().c_str(), v6 ? "]" : "", l.metrics->port());
      return true;
    }
    case kCount:
      break;
  }
  return false;
}

void Listeners::stop(Which which, Listener& l) {
  if (which == kTcp && l.control)
    std::printf("control tcp %s: refused %" PRIu64 " requests without the right credential, dropped %" PRIu64
                " connections at their deadline\n",
                l.listen.c_str(), l.control->refused(), l.control->dropped());
  if (l.control) l.control->close();
  if (l.metrics) l.metrics->stop();
  l.control.reset();
  l.metrics.reset();
}

bool Listeners::open(const Options& opt, std::string* error) {
  if (!read_tenants(opt, &tenants_, error)) return false;
  secret_file_ = opt.control_secret_file;
  const std::array<std::string, kCount> listen = {opt.socket_path, opt.control_tcp, opt.metrics_listen};
  for (int w = 0; w < kCount; ++w) {
    now_[w].listen = listen[w];
    if (!listen[w].empty() && !start(static_cast<Which>(w), now_[w], tenants_, error)) return false;
  }
  return true;
}

bool Listeners::reopen(const Options& next, std::string* error) {
  std::vector<control::Tenant> tenants;
  if (!read_tenants(next, &tenants, error)) return false;
  const std::string secret_file = std::exchange(secret_file_, next.control_secret_file);
  std::array<Listener, kCount> fresh;  // what is new; closed when it goes out of scope unused
  fresh[kSocket].listen = next.socket_path;
  fresh[kTcp].listen = next.control_tcp;
  fresh[kMetrics].listen = next.metrics_listen;
  std::array<std::string, kCount> old;
  std::vector<Which> changed, deferred;
  for (int i = 0; i < kCount; ++i) {
    const Which w = static_cast<Which>(i);
    old[w] = now_[w].listen;
    if (fresh[w].listen == old[w]) continue;
    changed.push_back(w);
    if (fresh[w].listen.empty() || start(w, fresh[w], tenants, error)) continue;
    if (now_[w].is_open() && same_port(old[w], fresh[w].listen)) {
      deferred.push_back(w);  // probably our own listener holds the port
      continue;
    }
    secret_file_ = secret_file;
    return false;
  }
  // The new address takes the old one's port: the old one closes first. If the new one does not
  // open even then, the old ones closed so far listen again.
  for (size_t k = 0; k < deferred.size(); ++k) {
    const Which w = deferred[k];
    util::log(util::LogModule::control, util::LogLevel::info,
              "%s: %s takes the port of %s, which closes first (reload)", kNames[w], fresh[w].listen.c_str(),
              old[w].c_str());
    stop(w, now_[w]);
    if (start(w, fresh[w], tenants, error)) continue;
    secret_file_ = secret_file;
    for (size_t j = 0; j <= k; ++j) {
      const Which back = deferred[j];
      stop(back, fresh[back]);
      now_[back].listen = old[back];
      std::string err;
      if (!start(back, now_[back], tenants_, &err))
        util::log(util::LogModule::control, util::LogLevel::error, "%s is closed: it could not listen again on %s: %s",
                  kNames[back], old[back].c_str(), err.c_str());
    }
    return false;
  }
  // Everything opened: the new ones replace the old ones.
  for (const Which w : changed) {
    if (fresh[w].listen.empty())
      util::log(util::LogModule::control, util::LogLevel::info, "%s on %s closed (reload)", kNames[w], old[w].c_str());
    else if (!old[w].empty())
      util::log(util::LogModule::control, util::LogLevel::info, "%s moved from %s to %s (reload)", kNames[w],
                old[w].c_str(), fresh[w].listen.c_str());
    stop(w, now_[w]);
    now_[w] = std::move(fresh[w]);
  }
  if (now_[kTcp].control && (std::find(changed.begin(), changed.end(), kTcp) == changed.end())) {
    if (!now_[kTcp].control->set_tenants(tenants, error)) return false;  // read_tenants gives at least one
    util::log(util::LogModule::control, util::LogLevel::info, "control over TCP on %s: %zu tenant(s) from %s (reload)",
              now_[kTcp].listen.c_str(), tenants.size(), secret_file_.c_str());
  }
  tenants_ = std::move(tenants);
  return true;
}

void Listeners::poll(const control::ControlServer::TenantHandler& handler) {
  for (const Which w : {kSocket, kTcp})
    if (now_[w].control && now_[w].control->is_open()) now_[w].control->poll(handler);
}

void Listeners::close() {
  for (int w = 0; w < kCount; ++w) stop(static_cast<Which>(w), now_[w]);
}

}  // namespace inagg::apps
