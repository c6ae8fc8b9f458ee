// The control socket: a local Unix stream socket, one request per connection (protocol.hpp); and,
// off by default, the same protocol on a TCP listener for workers on other hosts (or in VMs),
// which requires a shared secret: a TCP request's first line is `secret <the secret>`, compared
// in constant time; a request without it or with another one gets an error reply and is counted
// (refused()), and never reaches the handler.
// The server side runs on the appliance's control thread, never on an lcore; poll() does not block
// for long, so it fits in a loop that also drains the lcores' reply rings.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <functional>
#include <string>
#include <string_view>

#include "inagg/control/protocol.hpp"

namespace inagg::control {

inline constexpr const char* kDefaultSocketPath = "/run/inagg/inagg.sock";
inline constexpr size_t kMaxRequestBytes = 1 << 20;
inline constexpr int kRequestTimeoutMs = 200;      // to read a whole request, and again to write the reply
inline constexpr int kTcpRequestTimeoutMs = 1000;  // the same over TCP (other hosts, emulated VMs)
inline constexpr const char* kTcpScheme = "tcp://";

// The shared secret from a file: its first line, without surrounding whitespace. False with
// *error when the file cannot be read, the secret is shorter than 16 characters, or the file is
// readable by others than its owner (chmod 600).
bool load_secret_file(const std::string& path, std::string* secret, std::string* error);

// Constant time in the contents (not in the lengths): true when `given` equals `want`.
bool secret_matches(std::string_view given, std::string_view want);

// A TCP request's secret line. ok: *body is the request after it.
enum class SecretCheck { ok, missing, wrong };
SecretCheck check_secret_line(std::string_view request, std::string_view secret, std::string_view* body);
// The error reply for a refused request (missing or wrong), one sentence that says what to change.
std::string secret_refusal(SecretCheck why);
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
  // The TCP listener: `listen` is IPV4:PORT (127.0.0.1:7000; 0.0.0.0 for every address; port 0
  // picks a free one, see port()); `secret` non-empty (load_secret_file).
  bool open_tcp(const std::string& listen, const std::string& secret, std::string* error);
  uint16_t port() const { return port_; }        // TCP: the port listened on
  uint64_t refused() const { return refused_; }  // TCP: requests refused for their secret
  int fd() const { return fd_; }                 // readable when a client is waiting (for epoll/poll)
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
  bool tcp_ = false;
  std::string secret_;
  uint16_t port_ = 0;
  uint64_t refused_ = 0;
  std::string path_;
  dev_t dev_ = 0;  // identity of the socket file we created
  ino_t ino_ = 0;
};

// Client side: connects, sends `request`, shuts down the write side and reads the reply until the
// server closes, all within timeout_ms. On failure returns false and sets *error, e.g. "cannot
// connect to /run/inagg/inagg.sock: No such file or directory (is inagg running?)"; `server`
// names the program in that hint. `socket_path` tcp://HOST:PORT (an IPv4 address or a name)
// means the TCP listener, and `secret` goes first.
bool send_request(const std::string& socket_path, const std::string& request, std::string* reply, std::string* error,
                  int timeout_ms = 5000, const char* server = "inagg", const std::string& secret = "");

}  // namespace inagg::control
