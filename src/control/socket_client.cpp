// The control socket's client half: a request over the Unix socket or tcp://HOST:PORT (with the
// shared secret), the reply read to its end, every wait bounded by the caller's timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <thread>

#include "inagg/control/socket.hpp"
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
  // Over TCP the secret comes first (an empty one too: the server's refusal then says what is missing).
  const std::string request = tcp && !secret.empty() ? "secret " + secret + "\n" + request_text : request_text;

  int err = 0;
  if (!write_all(fd, request, deadline, &err)) {
    if (err == ETIMEDOUT) {
      *error = no_reply;
      return false;
    }
    // EPIPE/ECONNRESET: the server stopped reading (e.g. an oversized request); its reply may be
    // waiting for us, so read on.
  }
  ::shutdown(fd, SHUT_WR);

  char buf[16384];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      if (reply->size() + static_cast<size_t>(n) > kMaxReplyBytes) {
        *error = "the reply from " + socket_path + " is larger than 64 MiB; giving up";
        return false;
      }
      reply->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) {
        *error = no_reply;
        return false;
      }
      continue;
    }
    if (errno == ECONNRESET && !reply->empty()) break;  // reset after the reply: it is complete
    *error = "reading the reply from " + socket_path + ": " + std::strerror(errno);
    return false;
  }
  if (reply->empty()) {
    *error = socket_path + " closed the connection without replying";
    return false;
  }
  return true;
}

}  // namespace inagg::control
