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
// (Tenant) limits it to its own range of job ids, addresses, ports and budgets. A refused request never reaches the
// handler; refusals are counted (refused()) and logged at most once a second.
// The server runs on the appliance's control thread, never on an lcore: poll() never blocks; it
// serves every connection at once (up to kMaxConnections, the oldest unfinished one dropped for a
// new one), each within its own deadline.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <chrono>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/control/protocol.hpp"
#include "inagg/util/ip_addr.hpp"

namespace inagg::control {

inline constexpr const char* kDefaultSocketPath = "/run/inagg/inagg.sock";
inline constexpr size_t kMaxRequestBytes = 1 << 20;
inline constexpr int kRequestTimeoutMs = 2000;     // per connection, from connect to the last byte of the reply
inline constexpr int kTcpRequestTimeoutMs = 5000;  // the same over TCP (other hosts, emulated VMs)
inline constexpr size_t kMaxConnections = 256;     // open at once per listener
inline constexpr const char* kTcpScheme = "tcp://";
inline constexpr const char* kControlSecretEnv = "INAGG_CONTROL_SECRET";  // a client's credential

// An IPv4 or IPv6 prefix: 10.0.1.0/24, fd00:1::/64 (an IPv4-mapped one, ::ffff:a.b.c.d/N, is the
// IPv4 prefix it names, as a job's addresses are).
struct AddressPrefix {
  util::IpAddr net;
  unsigned length = 0;
  // Whether `ip` (a GID given as ::ffff:a.b.c.d being its IPv4 address) lies in it.
  bool contains(const util::IpAddr& ip) const;
  bool overlaps(const AddressPrefix& o) const { return contains(o.net) || o.contains(net); }
};
std::optional<AddressPrefix> parse_prefix(std::string_view text);
std::string prefix_text(const AddressPrefix& p);

// Who may use the TCP listener: each line of the appliance's --control-secret-file is
//   TENANT JOBS [OPTION...] SECRET
// JOBS: * (every job: the operator's credential, as unrestricted as the local socket), N, or N-M
// (the ids it may add, remove, see). A tenant with a range owns, by its OPTIONs:
//   prefixes=P[,P...]   the addresses its jobs may name (every connection's source and destination);
//                       a tenant without any may add no job
//   ports=N[,N...]      the appliance ports its hosts are behind: each of its connections must name
//                       one; a port no tenant names is open to the tenants without ports=
//   max_jobs=N  max_memory=BYTES (or with K, M, G: KiB, MiB, GiB)  max_mbufs=N   its budgets over
//                       the whole appliance (the engine accounts each job's slot memory and packet
//                       buffers; list shows them)
// or, for a file of one line, just SECRET (the tenant "admin", every job). '#' starts a comment.
// The secret comes last, so that a client may take its line as its credential. No two tenants
// with ranges may share a job id, an address or a port: such a file is refused with the line.
struct Tenant {
  std::string name, secret;
  uint32_t first_job = 0, last_job = UINT32_MAX;
  std::vector<AddressPrefix> prefixes;
  std::vector<uint16_t> ports;  // empty: the ports no tenant names
  std::optional<size_t> max_jobs, max_memory_bytes, max_mbufs;
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
// are not its own (`list`'s reply is filtered instead, filter_job_list); an add only on its own
// addresses and ports (`tenants`: every tenant of the listener, for the ports others own). "" when
// it may, else the refusal's reason, which names nothing of another tenant.
std::string tenant_refusal(const Tenant& tenant, const Request& r, const std::vector<Tenant>& tenants = {});
// `list`'s reply with only the lines of jobs `tenant` owns ("no jobs" when none is left).
std::string filter_job_list(const Tenant& tenant, std::string_view reply);

// What a tenant's jobs hold now (the appliance's figures for the jobs in its range), and whether
// adding job `id` with the given footprint keeps it within its budgets: "" or the refusal, naming
// the budget. `used` must leave out job `id` itself (a failed job being replaced).
struct TenantUse {
  size_t jobs = 0, memory_bytes = 0, mbufs = 0;
};
std::string budget_refusal(const Tenant& tenant, uint32_t id, const TenantUse& used, size_t memory_bytes, size_t mbufs);

class ControlServer {
 public:
  using Handler = std::function<std::string(const Request&)>;
  // The same, told who asks: the TCP listener's tenant (its credential checked), or null on the
  // local socket (the operator).
  using TenantHandler = std::function<std::string(const Request&, const Tenant*)>;
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
  // The TCP listener's tenants from now on (a reload): the requests answered from here on, of
  // connections already open too, are checked against them. At least one tenant.
  bool set_tenants(std::vector<Tenant> tenants, std::string* error);
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
  size_t poll(const TenantHandler& handler);
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
  size_t serve(const TextHandler& handler, const TenantHandler* requests);
  void accept_waiting();
  // A whole frame is in: checks it and sets the reply. Returns whether it was answered by the handler.
  bool answer(Connection& c, const TextHandler& handler, const TenantHandler* requests);
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
