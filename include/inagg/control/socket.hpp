// The control socket: a local Unix stream socket and, off by default, a TCP listener for workers
// on other hosts (or in VMs), both serving protocol.hpp's requests in frames:
//
//   server → client   inagg-control 2 <nonce>                     (on connect; 16 random bytes, hex)
//   client → server   request <length> [<tenant> <mac>]\n<length bytes: the request>
//   server → client   reply <length> [<mac>]\n<length bytes: the reply>
//
// A request is taken only once all its bytes are in: a client that dies mid-write has nothing
// applied. Over TCP every request names a tenant and carries HMAC-SHA256(the tenant's secret,
// "inagg-control request\n" nonce "\n" tenant "\n" request); the reply carries
// HMAC(secret, "inagg-control reply\n" nonce "\n" reply), which the client checks. The nonce is
// fresh per connection, so nothing seen on the wire can be replayed. A tenant's credential
// (TenantFile) limits it to its own range of job ids. A refused request never reaches the
// handler; refusals are counted (refused()) and logged at most once a second.
// The server runs on the appliance's control thread, never on an lcore: poll() never blocks; it
// serves every connection at once (up to kMaxConnections, the oldest unfinished one dropped for a
// new one), each within its own deadline.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <chrono>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/control/protocol.hpp"

namespace inagg::control {

inline constexpr const char* kDefaultSocketPath = "/run/inagg/inagg.sock";
inline constexpr size_t kMaxRequestBytes = 1 << 20;
inline constexpr int kRequestTimeoutMs = 2000;     // per connection, from connect to the last byte of the reply
inline constexpr int kTcpRequestTimeoutMs = 5000;  // the same over TCP (other hosts, emulated VMs)
inline constexpr size_t kMaxConnections = 256;     // open at once per listener
inline constexpr const char* kTcpScheme = "tcp://";
inline constexpr const char* kControlSecretEnv = "INAGG_CONTROL_SECRET";  // a client's credential

// Who may use the TCP listener: each line of the appliance's --control-secret-file is
//   TENANT JOBS SECRET      JOBS: * (every job), N, or N-M (the ids it may add, remove, see)
// or, for a file of one line, just SECRET (the tenant "admin", every job). '#' starts a comment.
struct Tenant {
  std::string name, secret;
  uint32_t first_job = 0, last_job = UINT32_MAX;
  bool owns(uint32_t id) const { return id >= first_job && id <= last_job; }
  bool every_job() const { return first_job == 0 && last_job == UINT32_MAX; }
};
// Parses such a file's text; false with *error naming the line.
bool parse_tenants(std::string_view text, std::vector<Tenant>* tenants, std::string* error);
// Reads it (a regular file of ours or root's, mode 0600, opened once) and parses it.
bool load_tenants(const std::string& path, std::vector<Tenant>* tenants, std::string* error);

// A client's credential: $INAGG_CONTROL_SECRET, else the first line of `path` (the same checks):
// SECRET, TENANT SECRET, or a TENANT JOBS SECRET line copied from the appliance's file.
bool load_secret_file(const std::string& path, std::string* credential, std::string* error);

// The MACs of a frame (socket.hpp's header comment), as 64 hex digits.
std::string request_mac(std::string_view secret, std::string_view nonce, std::string_view tenant,
                        std::string_view request);
std::string reply_mac(std::string_view secret, std::string_view nonce, std::string_view reply);

// Whether `tenant` may send `r`: its own jobs only, and neither `list` nor `stats` of jobs that
// are not its own (`list`'s reply is filtered instead, filter_job_list). "" when it may, else the
// refusal's reason.
std::string tenant_refusal(const Tenant& tenant, const Request& r);
// `list`'s reply with only the lines of jobs `tenant` owns ("no jobs" when none is left).
std::string filter_job_list(const Tenant& tenant, std::string_view reply);

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
  // The TCP listener: `listen` is IPV4:PORT (127.0.0.1:7000; 0.0.0.0 for every address, with a
  // warning in the log; port 0 picks a free one, see port()); at least one tenant.
  bool open_tcp(const std::string& listen, std::vector<Tenant> tenants, std::string* error);
  // One tenant "admin" with every job.
  bool open_tcp(const std::string& listen, const std::string& secret, std::string* error);
  uint16_t port() const { return port_; }        // TCP: the port listened on
  uint64_t refused() const { return refused_; }  // requests refused for their credential or framing
  uint64_t dropped() const { return dropped_; }  // connections closed at their deadline or for room
  int fd() const { return fd_; }                 // readable when a client is waiting (for epoll/poll)
  bool is_open() const { return fd_ >= 0; }
  size_t connections() const { return conns_.size(); }

  // Serves what is ready now, without waiting: accepts waiting clients, reads, answers complete
  // requests (calling `handler` on this thread), writes replies, and closes connections past their
  // deadline (kRequestTimeoutMs, over TCP kTcpRequestTimeoutMs, from connect). Returns the number
  // of requests answered. A request that is too large, truncated, malformed or refused gets an
  // error reply without calling `handler`.
  size_t poll(const Handler& handler);
  // The same for another protocol over this transport (inagg-xdp's): `handler` gets the raw
  // request text and returns the reply; the size and time limits are the same.
  size_t poll_text(const TextHandler& handler);

  // Stops listening, closes every connection and unlinks the socket file (unless another server
  // has replaced it since).
  void close();

 private:
  struct Connection {
    int fd = -1;
    std::chrono::steady_clock::time_point deadline;
    std::string nonce, in, out;
    size_t sent = 0;
    bool answered = false;  // `out` holds the whole reply: close once it is sent
    bool shut = false;      // the reply is sent and our side shut down
  };
  size_t serve(const TextHandler& handler, const Handler* requests);
  void accept_waiting();
  // A whole frame is in: checks it and sets the reply. Returns whether it was answered by the handler.
  bool answer(Connection& c, const TextHandler& handler, const Handler* requests);
  void refuse(Connection& c, const std::string& why);

  int fd_ = -1;
  bool tcp_ = false;
  std::vector<Tenant> tenants_;
  std::vector<Connection> conns_;
  uint16_t port_ = 0;
  uint64_t refused_ = 0, dropped_ = 0, unlogged_ = 0;
  std::chrono::steady_clock::time_point last_log_{};
  std::string path_;
  dev_t dev_ = 0;  // identity of the socket file we created
  ino_t ino_ = 0;
};

// Client side: connects, takes the server's nonce, sends `request` in a frame and reads the reply's
// frame, all within timeout_ms. On failure returns false and sets *error, e.g. "cannot connect to
// /run/inagg/inagg.sock: No such file or directory (is inagg running?)"; `server` names the
// program in that hint. `socket_path` tcp://HOST:PORT (an IPv4 address or a name) means the TCP
// listener: `secret` is then the credential (load_secret_file), and the reply's MAC is checked.
bool send_request(const std::string& socket_path, const std::string& request, std::string* reply, std::string* error,
                  int timeout_ms = 5000, const char* server = "inagg", const std::string& secret = "");

}  // namespace inagg::control
