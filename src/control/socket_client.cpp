// The control socket's client half: a request over the Unix socket or tcp://HOST:PORT (with the
// tenant's credential), in protocol 2's frames, every wait bounded by the caller's timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <sstream>
#include <thread>
#include <vector>

#include "inagg/control/socket.hpp"
#include "inagg/util/hmac.hpp"
#include "socket_io.hpp"

namespace inagg::control {

using namespace socket_io;

namespace {

// A connected non-blocking TCP socket to tcp://HOST:PORT by the deadline, or -1 with *error.
int connect_tcp(const std::string& url, Clock::time_point deadline, const char* server, std::string* error) {
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(url.substr(std::string_view(kTcpScheme).size()), &host, &port, error)) {
    *error = "control address " + url + ": " + *error;
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int g = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); g != 0 || !res) {
    *error = "cannot resolve '" + host + "' in " + url + ": " + ::gai_strerror(g);
    return -1;
  }
  sockaddr_in a = *reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  a.sin_port = htons(port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a socket: ") + std::strerror(errno);
    return -1;
  }
  int err = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      err = ETIMEDOUT;
      if (wait_for(fd, POLLOUT, deadline)) {
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
  }
  if (err != 0) {
    ::close(fd);
    *error = "cannot connect to " + url + ": " + std::strerror(err);
    if (err == ECONNREFUSED) *error += std::string(" (is ") + server + " running with --control-tcp?)";
    return -1;
  }
  return fd;
}

// A connected non-blocking Unix socket, or -1 with *error.
int connect_unix(const std::string& socket_path, Clock::time_point deadline, const std::string& no_reply,
                 const char* server, std::string* error) {
  sockaddr_un addr;
  if (!make_address(socket_path, &addr, error)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a socket: ") + std::strerror(errno);
    return -1;
  }
  while (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN) {  // the server's backlog is full: it is busy, retry until the deadline
      if (Clock::now() >= deadline) {
        *error = no_reply;
        ::close(fd);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    *error = "cannot connect to " + socket_path + ": " + std::strerror(err);
    if (err == ENOENT || err == ECONNREFUSED) *error += std::string(" (is ") + server + " running?)";
    if (err == EACCES || err == EPERM) *error += " (the control socket is root-only: run as root or with sudo)";
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace {

// Reads until `out` holds `want` bytes, or with want == npos until the first newline; false on
// the deadline or when the server closes first.
bool read_some(int fd, std::string* out, size_t want, Clock::time_point deadline, int* err) {
  char buf[16384];
  while (want == std::string::npos ? out->find('\n') == std::string::npos : out->size() < want) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
      if (out->size() > kMaxReplyBytes) {
        *err = EMSGSIZE;
        return false;
      }
      continue;
    }
    if (n == 0) {
      *err = 0;
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return false;
    }
    if (!wait_for(fd, POLLIN, deadline)) {
      *err = ETIMEDOUT;
      return false;
    }
  }
  return true;
}

}  // namespace

bool send_request(const std::string& socket_path, const std::string& request_text, std::string* reply,
                  std::string* error, int timeout_ms, const char* server, const std::string& secret) {
  reply->clear();
  const Clock::time_point deadline = deadline_after(timeout_ms);
  const std::string no_reply =
      "no reply from " + socket_path + " within " + std::to_string(timeout_ms) + " ms (is inagg busy or stuck?)";
  const bool tcp = socket_path.rfind(kTcpScheme, 0) == 0;
  const int fd = tcp ? connect_tcp(socket_path, deadline, server, error)
                     : connect_unix(socket_path, deadline, no_reply, server, error);
  if (fd < 0) return false;
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  const auto failed = [&](int err, const std::string& what) {
    if (err == ETIMEDOUT)
      *error = no_reply;
    else if (err == 0)
      *error = socket_path + " closed the connection " + what;
    else
      *error = "reading from " + socket_path + ": " + std::strerror(err);
    return false;
  };
  // The server's greeting: its protocol and this connection's nonce.
  std::string in;
  int err = 0;
  if (!read_some(fd, &in, std::string::npos, deadline, &err)) return failed(err, "before its greeting");
  const std::string greeting = in.substr(0, in.find('\n'));
  in.erase(0, greeting.size() + 1);
  constexpr std::string_view kGreeting = "inagg-control 2 ";
  if (greeting.rfind(kGreeting, 0) != 0 || greeting.size() != kGreeting.size() + 32) {
    *error = socket_path + " does not speak inagg's control protocol 2 (it said '" + greeting.substr(0, 60) +
             "'): is it an older " + server + "?";
    return false;
  }
  const std::string nonce = greeting.substr(kGreeting.size());
  // The credential: SECRET (tenant admin), TENANT SECRET, or TENANT JOBS SECRET.
  std::istringstream words(secret);
  std::vector<std::string> w;
  for (std::string x; words >> x;) w.push_back(x);
  const std::string tenant = w.empty() ? "" : w.size() == 1 ? "admin" : w.front();
  const std::string key = w.empty() ? "" : w.back();
  std::string header = "request " + std::to_string(request_text.size());
  if (tcp && !key.empty()) header += " " + tenant + " " + request_mac(key, nonce, tenant, request_text);
  if (!write_all(fd, header + "\n" + request_text, deadline, &err) && err == ETIMEDOUT) {
    *error = no_reply;
    return false;
  }
  // EPIPE/ECONNRESET: the server refused before reading it all; its reply may be waiting.
  ::shutdown(fd, SHUT_WR);

  if (!read_some(fd, &in, std::string::npos, deadline, &err)) return failed(err, "without replying");
  const std::string rheader = in.substr(0, in.find('\n'));
  in.erase(0, rheader.size() + 1);
  std::istringstream h(rheader);
  std::string word, mac;
  long long len = -1;
  h >> word >> len >> mac;
  if (word != "reply" || len < 0 || static_cast<size_t>(len) > kMaxReplyBytes) {
    *error = socket_path + " sent no reply frame ('" + rheader.substr(0, 60) + "')";
    return false;
  }
  if (!read_some(fd, &in, static_cast<size_t>(len), deadline, &err)) return failed(err, "in the middle of its reply");
  *reply = in.substr(0, static_cast<size_t>(len));
  // Over TCP a reply counts only with the tenant's MAC; a refusal (no tenant was accepted) has none.
  if (tcp && !(mac.empty() && is_error_reply(*reply)) &&
      (key.empty() || !util::equal_constant_time(mac, reply_mac(key, nonce, *reply)))) {
    *error = socket_path + " replied without a valid MAC (a wrong credential, or not the appliance)";
    reply->clear();
    return false;
  }
  return true;
}

}  // namespace inagg::control
