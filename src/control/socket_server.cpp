// The control socket's server loop (socket.hpp): every connection at once, non-blocking, each
// with its own deadline; a request is answered only once its whole frame is in.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <exception>
#include <sstream>

#include "inagg/control/socket.hpp"
#include "inagg/util/hmac.hpp"
#include "inagg/util/log.hpp"
#include "socket_io.hpp"

namespace inagg::control {
using namespace socket_io;

namespace {

constexpr size_t kMaxHeader = 256;

std::string frame(std::string_view body, const std::string& mac) {
  return "reply " + std::to_string(body.size()) + (mac.empty() ? "" : " " + mac) + "\n" + std::string(body);
}

std::string peer_name(int fd) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  char addr[INET_ADDRSTRLEN] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) return "local";
  ::inet_ntop(AF_INET, &peer.sin_addr, addr, sizeof addr);
  return std::string(addr) + ":" + std::to_string(ntohs(peer.sin_port));
}

}  // namespace

size_t ControlServer::poll(const Handler& handler) {
  const TenantHandler told = [&handler](const Request& r, const Tenant*) { return handler(r); };
  return serve({}, &told);
}
size_t ControlServer::poll(const TenantHandler& handler) { return serve({}, &handler); }
size_t ControlServer::poll_text(const TextHandler& handler) { return serve(handler, nullptr); }

void ControlServer::refuse(Connection& c, const std::string& why) {
  ++refused_;
  const auto now = Clock::now();
  if (now - last_log_ >= std::chrono::seconds(1)) {
    util::log(util::LogModule::control, util::LogLevel::warning,
              "control request from %s refused: %s (%" PRIu64 " refused so far, %" PRIu64 " not logged)",
              peer_name(c.fd).c_str(), why.c_str(), refused_, unlogged_);
    last_log_ = now;
    unlogged_ = 0;
  } else {
    ++unlogged_;
  }
  c.out += frame(format_error(why), "");
  c.answered = true;
}

void ControlServer::accept_waiting() {
  const int timeout_ms = tcp_ ? kTcpRequestTimeoutMs : kRequestTimeoutMs;
  for (int i = 0; i < 64 && fd_ >= 0; ++i) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: nobody waiting; EMFILE and friends: next call
    }
    if (conns_.size() >= kMaxConnections) {  // the oldest one still without its reply makes room
      auto victim = std::min_element(conns_.begin(), conns_.end(), [](const Connection& a, const Connection& b) {
        return a.answered != b.answered ? !a.answered : a.deadline < b.deadline;
      });
      ::close(victim->fd);
      *victim = std::move(conns_.back());
      conns_.pop_back();
      ++dropped_;
    }
    Connection c;
    c.fd = fd;
    c.deadline = deadline_after(timeout_ms);
    c.nonce = util::random_hex();
    if (c.nonce.empty()) {
      ::close(fd);
      continue;
    }
    c.out = "inagg-control 2 " + c.nonce + "\n";
    ucred cred{};
    socklen_t len = sizeof cred;
    if (!tcp_ && ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid != 0 &&
        cred.uid != ::geteuid())
      refuse(c, "permission denied: only root may use the control socket");
    conns_.push_back(std::move(c));
  }
}

bool ControlServer::answer(Connection& c, const TextHandler& handler, const TenantHandler* requests) {
  const size_t nl = c.in.find('\n');
  std::istringstream header(c.in.substr(0, nl));
  std::string word, tenant, mac, extra;
  size_t len = 0;
  header >> word >> len >> tenant >> mac >> extra;
  const std::string_view body = std::string_view(c.in).substr(nl + 1, len);
  const Tenant* t = nullptr;
  if (tcp_) {
    for (const Tenant& x : tenants_)
      if (x.name == tenant) t = &x;
    if (tenant.empty()) {
      refuse(c,
             "this TCP control listener requires a credential: the request names a tenant and carries an HMAC of "
             "the server's nonce (inagg-worker, inagg-ctl: --control-secret-file or $INAGG_CONTROL_SECRET)");
      return false;
    }
    if (!t || !util::equal_constant_time(mac, request_mac(t->secret, c.nonce, tenant, body))) {
      refuse(c, "wrong credential: tenant '" + tenant.substr(0, 64) +
                    "' unknown or its MAC does not match the appliance's --control-secret-file");
      return false;
    }
  }
  std::string reply;
  bool handled = false;
  try {
    if (requests) {
      std::string why;
      const std::optional<Request> req = parse_request(body, &why);
      if (req && t) why = tenant_refusal(*t, *req, tenants_);
      if (!req || !why.empty()) {
        if (req) {
          refuse(c, why);
          return false;
        }
        reply = format_error(why);
      } else {
        reply = (*requests)(*req, t);
        if (t && req->verb == Request::Verb::list) reply = filter_job_list(*t, reply);
        handled = true;
      }
    } else {
      reply = handler(body);
      handled = true;
    }
  } catch (const std::exception& e) {
    reply = format_error(std::string("internal error: ") + e.what());
  }
  if (reply.empty()) reply = format_error("internal error: the server produced no reply");
  if (reply.back() != '\n') reply += '\n';
  c.out += frame(reply, t ? reply_mac(t->secret, c.nonce, reply) : "");
  c.answered = true;
  return handled;
}

size_t ControlServer::serve(const TextHandler& handler, const TenantHandler* requests) {
  accept_waiting();
  if (conns_.empty()) return 0;
  std::vector<pollfd> fds;
  for (const Connection& c : conns_)
    fds.push_back({c.fd, static_cast<short>(POLLIN | (c.sent < c.out.size() ? POLLOUT : 0)), 0});
  ::poll(fds.data(), fds.size(), 0);
  size_t answered = 0;
  const Clock::time_point now = Clock::now();
  std::vector<size_t> done;
  for (size_t i = 0; i < conns_.size(); ++i) {
    Connection& c = conns_[i];
    bool eof = false;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      while (true) {
        const ssize_t n = ::read(c.fd, buf, sizeof buf);
        if (n > 0) {
          // After the reply (or past a frame's end) what comes is read and dropped, so the client
          // never meets a reset before it has read the reply.
          if (!c.answered) c.in.append(buf, static_cast<size_t>(n));
          if (!c.answered && c.in.size() > kMaxHeader + kMaxRequestBytes) break;
          continue;
        }
        if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
        if (n < 0 && errno == EINTR) continue;
        break;
      }
    }
    if (!c.answered && !c.in.empty()) {
      const size_t nl = c.in.find('\n');
      std::istringstream header(c.in.substr(0, std::min(nl, kMaxHeader)));
      std::string word;
      long long len = -1;
      header >> word >> len;
      if (nl == std::string::npos && c.in.size() <= kMaxHeader && !eof) {
        // the header is still coming
      } else if (nl == std::string::npos || nl > kMaxHeader || word != "request" || len < 0) {
        refuse(c,
               "not a request frame: send 'request <length> [<tenant> <mac>]', a newline and the request (inagg's "
               "control protocol 2: inagg-ctl, inagg-worker and the Python module speak it)");
      } else if (static_cast<size_t>(len) > kMaxRequestBytes) {
        c.out += frame(format_error("request larger than 1 MiB; a job file is a few KiB (is this a job file?)"), "");
        c.answered = true;
      } else if (c.in.size() - nl - 1 >= static_cast<size_t>(len)) {
        answered += answer(c, handler, requests) ? 1 : 0;
      } else if (eof) {
        c.out += frame(format_error("request truncated: " + std::to_string(c.in.size() - nl - 1) + " of " +
                                    std::to_string(len) + " bytes arrived; nothing was applied"),
                       "");
        c.answered = true;
      }
    }
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
        break;
      }
    }
    if (c.answered && c.sent == c.out.size() && !c.shut) {
      ::shutdown(c.fd, SHUT_WR);  // the reply is complete: the client reads to its end and closes
      c.shut = true;
      c.in.clear();
    }
    const bool finished = c.answered && c.sent == c.out.size() && eof;
    if (finished || eof || now >= c.deadline) {
      if (!finished && !c.answered) ++dropped_;
      done.push_back(i);
    }
  }
  for (size_t k = done.size(); k-- > 0;) {
    ::close(conns_[done[k]].fd);
    conns_[done[k]] = std::move(conns_.back());
    conns_.pop_back();
  }
  return answered;
}

}  // namespace inagg::control
