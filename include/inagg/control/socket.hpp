// The control socket: a local Unix stream socket, one request per connection (protocol.hpp).
// The server side runs on the appliance's control thread, never on an lcore; poll() does not block
// for long, so it fits in a loop that also drains the lcores' reply rings.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>

#include "inagg/control/protocol.hpp"

namespace inagg::control {

inline constexpr const char* kDefaultSocketPath = "/run/inagg/inagg.sock";
inline constexpr size_t kMaxRequestBytes = 1 << 20;
inline constexpr int kRequestTimeoutMs = 200;  // to read a whole request, and again to write the reply

class ControlServer {
 public:
  using Handler = std::function<std::string(const Request&)>;
  using TextHandler = std::function<std::string(std::string_view request)>;

  ControlServer() = default;
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Creates the socket file with mode 0600 (its directory, 0700, when missing) and listens,
  // non-blocking. A stale socket file (nobody answers on it) is replaced; a live one, or a file
  // that is not a socket, is refused with a sentence saying so.
  bool open(const std::string& path, std::string* error);
  int fd() const { return fd_; }  // readable when a client is waiting (for epoll/poll)
  bool is_open() const { return fd_ >= 0; }

  // Serves the clients waiting now: at most 8 per call, and no new one once kRequestTimeoutMs has
  // passed in this call. Each gets at most kRequestTimeoutMs to send its request and as long again
  // to take the reply, so one call returns within about 3 x kRequestTimeoutMs even when clients
  // stall, and within microseconds when nobody is waiting. A request that is too large, incomplete
  // in time or malformed gets an error reply without calling `handler`. Returns the number of
  // connections served.
  size_t poll(const Handler& handler);
  // The same for another protocol over this transport (inagg-xdp's): `handler` gets the raw
  // request text and returns the reply; the size and time limits are the same.
  size_t poll_text(const TextHandler& handler);

  // Stops listening and unlinks the socket file (unless another server has replaced it since).
  void close();

 private:
  void serve(int conn, const TextHandler& handler);

  int fd_ = -1;
  std::string path_;
  dev_t dev_ = 0;  // identity of the socket file we created
  ino_t ino_ = 0;
};

// Client side: connects, sends `request`, shuts down the write side and reads the reply until the
// server closes, all within timeout_ms. On failure returns false and sets *error, e.g. "cannot
// connect to /run/inagg/inagg.sock: No such file or directory (is inagg running?)"; `server`
// names the program in that hint.
bool send_request(const std::string& socket_path, const std::string& request, std::string* reply, std::string* error,
                  int timeout_ms = 5000, const char* server = "inagg");

}  // namespace inagg::control
