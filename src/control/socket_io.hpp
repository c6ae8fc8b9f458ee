// The control socket's I/O helpers, shared by its server (socket.cpp) and client
// (socket_client.cpp) halves. Internal to the control library.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include "inagg/control/socket.hpp"

namespace inagg::control::socket_io {

constexpr size_t kMaxConnectionsPerPoll = 8;  // bounds how long one poll() can keep the caller
constexpr size_t kMaxReplyBytes = 64u << 20;

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_after(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// Waits for `events` on fd until the deadline: true when ready (or on error/hangup, which the next
// read/write reports), false on timeout.
inline bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;
  }
}

inline bool make_address(const std::string& path, sockaddr_un* addr, std::string* error) {
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
inline bool write_all(int fd, std::string_view data, Clock::time_point deadline, int* err) {
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
inline bool split_host_port(const std::string& text, std::string* host, uint16_t* port, std::string* error) {
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

}  // namespace inagg::control::socket_io
