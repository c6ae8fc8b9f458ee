#include "inagg/control/socket.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

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

}  // namespace

ControlServer::~ControlServer() { close(); }

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
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid != 0 && cred.uid != ::geteuid()) {
    int err = 0;
    write_all(conn, format_error("permission denied: only root may use the control socket"),
              deadline_after(kRequestTimeoutMs), &err);
    return;
  }

  const Clock::time_point deadline = deadline_after(kRequestTimeoutMs);
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
  if (too_large) {
    reply = format_error("request larger than 1 MiB; a job file is a few KiB (is this a job file?)");
  } else if (timed_out) {
    reply = format_error("request incomplete after " + std::to_string(kRequestTimeoutMs) +
                         " ms; send it, then shut down the write side to end it");
  } else {
    try {
      reply = handler(request);
    } catch (const std::exception& e) {
      reply = format_error(std::string("internal error: ") + e.what());
    }
    if (reply.empty()) reply = format_error("internal error: the server produced no reply");
    if (reply.back() != '\n') reply += '\n';
  }
  int err = 0;
  write_all(conn, reply, deadline_after(kRequestTimeoutMs), &err);  // a client that went away just misses it
}

bool send_request(const std::string& socket_path, const std::string& request, std::string* reply, std::string* error,
                  int timeout_ms, const char* server) {
  reply->clear();
  sockaddr_un addr;
  if (!make_address(socket_path, &addr, error)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a socket: ") + std::strerror(errno);
    return false;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  const Clock::time_point deadline = deadline_after(timeout_ms);
  const std::string no_reply =
      "no reply from " + socket_path + " within " + std::to_string(timeout_ms) + " ms (is inagg busy or stuck?)";

  while (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN) {  // the server's backlog is full: it is busy, retry until the deadline
      if (Clock::now() >= deadline) {
        *error = no_reply;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    *error = "cannot connect to " + socket_path + ": " + std::strerror(err);
    if (err == ENOENT || err == ECONNREFUSED) *error += std::string(" (is ") + server + " running?)";
    if (err == EACCES || err == EPERM) *error += " (the control socket is root-only: run as root or with sudo)";
    return false;
  }

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
