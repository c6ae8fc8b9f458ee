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
#include "socket_io.hpp"

namespace inagg::control {
using namespace socket_io;

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

}  // namespace inagg::control
