#include "inagg/control/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <exception>
#include <fstream>
#include <thread>

#include "inagg/util/log.hpp"

namespace inagg::control {
namespace {

constexpr size_t kMaxConnectionsPerPoll = 8;  // bounds how long one poll() can keep the caller
constexpr size_t kMaxReplyBytes = 64u << 20;

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// Waits for `events` on fd until the deadline: true when ready (or on error/hangup, which the next
// read/write reports), false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;
  }
}

bool make_address(const std::string& path, sockaddr_un* addr, std::string* error) {
  *addr = {};
  addr->sun_family = AF_UNIX;
  if (path.empty()) {
    *error = "the control socket path is empty; pass a path such as " + std::string(kDefaultSocketPath);
    return false;
  }
  if (path.size() >= sizeof addr->sun_path) {
    *error = "control socket path '" + path + "' is " + std::to_string(path.size()) +
             " bytes; Unix socket paths are at most " + std::to_string(sizeof addr->sun_path - 1) +
             " bytes, choose a shorter one";
    return false;
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

// Writes all of data; false when the peer went away or the deadline passed.
bool write_all(int fd, std::string_view data, Clock::time_point deadline, int* err) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) {
        *err = ETIMEDOUT;
        return false;
      }
    } else {
      *err = n < 0 ? errno : EPIPE;
      return false;
    }
  }
  return true;
}

// "HOST:PORT" (HOST an IPv4 address or, for the client, a name): false with *error.
bool split_host_port(const std::string& text, std::string* host, uint16_t* port, std::string* error) {
  const size_t colon = text.rfind(':');
  char* end = nullptr;
  const unsigned long p = colon == std::string::npos ? 0 : std::strtoul(text.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() || *end || p > 65535) {
    *error = "'" + text + "' is not HOST:PORT (e.g. 127.0.0.1:7000)";
    return false;
  }
  *host = text.substr(0, colon);
  *port = static_cast<uint16_t>(p);
  return true;
}

}  // namespace

bool load_secret_file(const std::string& path, std::string* secret, std::string* error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *error = "cannot read the secret file '" + path + "': " + std::strerror(errno);
    return false;
  }
  if (st.st_mode & 077) {
    *error = "the secret file '" + path + "' is readable by others than its owner: chmod 600 it";
    return false;
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) line.clear();
  const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
  *secret = b == std::string::npos ? "" : line.substr(b, e - b + 1);
  if (secret->size() < 16) {
    *error = "the secret in '" + path + "' is " + std::to_string(secret->size()) +
             " characters; use at least 16 (e.g. head -c 24 /dev/urandom | base64 > FILE)";
    return false;
  }
  return true;
}

bool secret_matches(std::string_view given, std::string_view want) {
  // Every byte of the longer one is looked at, whatever differs first.
  const size_t n = std::max(given.size(), want.size());
  unsigned diff = given.size() != want.size() ? 1 : 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    const unsigned char b = i < want.size() ? static_cast<unsigned char>(want[i]) : 0;
    diff |= a ^ b;
  }
  return diff == 0 && !want.empty();
}

SecretCheck check_secret_line(std::string_view request, std::string_view secret, std::string_view* body) {
  constexpr std::string_view kPrefix = "secret ";
  const size_t nl = request.find('\n');
  if (request.substr(0, kPrefix.size()) != kPrefix || nl == std::string_view::npos) return SecretCheck::missing;
  std::string_view given = request.substr(kPrefix.size(), nl - kPrefix.size());
  if (!given.empty() && given.back() == '\r') given.remove_suffix(1);
  if (!secret_matches(given, secret)) return SecretCheck::wrong;
  *body = request.substr(nl + 1);
  return SecretCheck::ok;
}

std::string secret_refusal(SecretCheck why) {
  return format_error(why == SecretCheck::missing
                          ? "this TCP control listener requires the shared secret: begin the request with a line "
                            "`secret <the secret>` (inagg-worker --control-secret-file, the appliance's "
                            "--control-secret-file)"
                          : "wrong secret: the request's `secret` line does not match the appliance's "
                            "--control-secret-file");
}

ControlServer::~ControlServer() { close(); }

bool ControlServer::open_tcp(const std::string& listen_on, const std::string& secret, std::string* error) {
  close();
  if (secret.empty()) {
    *error = "the TCP control listener needs a shared secret (--control-secret-file)";
    return false;
  }
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(listen_on, &host, &port, error)) {
    *error = "--control-tcp: " + *error;
    return false;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    *error = "--control-tcp: '" + host + "' is not an IPv4 address (127.0.0.1, or 0.0.0.0 for every address)";
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
    *error = "cannot listen on " + listen_on + " for control requests: " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  fd_ = fd;
  tcp_ = true;
  secret_ = secret;
  port_ = ntohs(a.sin_port);
  return true;
}

bool ControlServer::open(const std::string& path, std::string* error) {
  close();
  sockaddr_un addr;
  if (!make_address(path, &addr, error)) return false;

  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      // Only the socket's own directory (/run/inagg): a missing /run means something else is wrong.
      if (errno != ENOENT || ::mkdir(dir.c_str(), 0700) != 0) {
        *error = "cannot create directory '" + dir + "' for the control socket: " + std::strerror(errno);
        return false;
      }
    } else if (!S_ISDIR(st.st_mode)) {
      *error = "'" + dir + "' is not a directory; choose another control socket path";
      return false;
    }
  }

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = "'" + path + "' exists and is not a socket; remove it or choose another control socket path";
      return false;
    }
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) {
      *error = std::string("cannot create a socket: ") + std::strerror(errno);
      return false;
    }
    const int r = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    const int err = errno;
    ::close(probe);
    if (r == 0 || err == EAGAIN || err == EINPROGRESS) {  // EAGAIN: alive, its backlog is full
      *error = "another server is already listening on '" + path +
               "' (is inagg already running?); stop it or choose another control socket path";
      return false;
    }
    if (err != ECONNREFUSED) {
      *error = "cannot check the existing socket '" + path + "': " + std::strerror(err);
      return false;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {  // stale: left by a server that died
      *error = "cannot remove the stale socket '" + path + "': " + std::strerror(errno);
      return false;
    }
  }

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a socket: ") + std::strerror(errno);
    return false;
  }
  // The file is created by bind() with the umask applied: make it 0600 from the start rather than
  // chmod after, so no other user can ever connect. (umask is per process; this runs at start-up.)
  const mode_t old_mask = ::umask(0177);
  const int b = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_err = errno;
  ::umask(old_mask);
  if (b != 0) {
    ::close(fd);
    *error = "cannot create the control socket '" + path + "': " + std::strerror(bind_err);
    return false;
  }
  if (::chmod(path.c_str(), 0600) != 0 || ::stat(path.c_str(), &st) != 0 || ::listen(fd, 16) != 0) {
    *error = "cannot set up the control socket '" + path + "': " + std::strerror(errno);
    ::unlink(path.c_str());
    ::close(fd);
    return false;
  }
  fd_ = fd;
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  return true;
}

void ControlServer::close() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (tcp_) {
    tcp_ = false;
    return;
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  path_.clear();
}

size_t ControlServer::poll(const Handler& handler) {
  return poll_text([&handler](std::string_view text) {
    std::string why;
    const std::optional<Request> req = parse_request(text, &why);
    return req ? handler(*req) : format_error(why);
  });
}

size_t ControlServer::poll_text(const TextHandler& handler) {
  size_t served = 0;
  const Clock::time_point stop = deadline_after(kRequestTimeoutMs);  // slow clients wait for the next call
  while (fd_ >= 0 && served < kMaxConnectionsPerPoll && (served == 0 || Clock::now() < stop)) {
    const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;  // EAGAIN: nobody waiting; EMFILE and friends: try again next call
    }
    serve(conn, handler);
    ::close(conn);
    ++served;
  }
  return served;
}

void ControlServer::serve(int conn, const TextHandler& handler) {
  ucred cred{};
  socklen_t len = sizeof cred;
  const int timeout_ms = tcp_ ? kTcpRequestTimeoutMs : kRequestTimeoutMs;
  if (!tcp_ && ::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid != 0 &&
      cred.uid != ::geteuid()) {
    int err = 0;
    write_all(conn, format_error("permission denied: only root may use the control socket"),
              deadline_after(kRequestTimeoutMs), &err);
    return;
  }

  const Clock::time_point deadline = deadline_after(timeout_ms);
  std::string request;
  bool too_large = false, timed_out = false;
  char buf[16384];
  while (true) {
    const ssize_t n = ::read(conn, buf, sizeof buf);
    if (n > 0) {
      // Past the limit keep reading (and discarding) to the end, so the client finishes its
      // write and reads our reply instead of failing with EPIPE.
      if (!too_large && request.size() + static_cast<size_t>(n) > kMaxRequestBytes) {
        too_large = true;
        request.clear();
        request.shrink_to_fit();
      }
      if (!too_large) request.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return;  // the client went away: nobody to reply to
    if (!wait_for(conn, POLLIN, deadline)) {
      timed_out = true;
      break;
    }
  }

  std::string reply;
  std::string_view body = request;
  SecretCheck secret = SecretCheck::ok;
  // Over TCP the secret comes first, also for a request that is incomplete or too large: whoever
  // lacks it learns nothing else.
  if (tcp_) secret = check_secret_line(request, secret_, &body);
  if (secret != SecretCheck::ok) {
    ++refused_;
    sockaddr_in peer{};
    socklen_t plen = sizeof peer;
    char addr[INET_ADDRSTRLEN] = "?";
    if (::getpeername(conn, reinterpret_cast<sockaddr*>(&peer), &plen) == 0)
      ::inet_ntop(AF_INET, &peer.sin_addr, addr, sizeof addr);
    util::log(util::LogModule::control, util::LogLevel::warning,
              "TCP control request from %s:%u refused: %s secret (%" PRIu64 " refused so far)", addr,
              ntohs(peer.sin_port), secret == SecretCheck::missing ? "no" : "a wrong", refused_);
    reply = secret_refusal(secret);
  } else if (too_large) {
    reply = format_error("request larger than 1 MiB; a job file is a few KiB (is this a job file?)");
  } else if (timed_out) {
    reply = format_error("request incomplete after " + std::to_string(timeout_ms) +
                         " ms; send it, then shut down the write side to end it");
  } else {
    try {
      reply = handler(body);
    } catch (const std::exception& e) {
      reply = format_error(std::string("internal error: ") + e.what());
    }
    if (reply.empty()) reply = format_error("internal error: the server produced no reply");
    if (reply.back() != '\n') reply += '\n';
  }
  int err = 0;
  write_all(conn, reply, deadline_after(timeout_ms), &err);  // a client that went away just misses it
}

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
