// The out-of-band exchange of a job's ranks over TCP, as perftest and ibv_rc_pingpong exchange QP
// numbers before an RC connection exists: rank 0 listens, every other rank connects to it and
// sends one line, and rank 0 answers all of them with every rank's line once it has them. A
// hardware transport (VerbsTransport) learns its peers' QPNs, PSNs, GIDs, addresses and rkeys this
// way, and rank 0 the real connections it registers with the appliance. The same listener then
// serves the ranks' barriers: no rank sends before every receive QP is ready (a packet that reaches
// a QP not yet in RTR is dropped unanswered and costs a whole ACK timeout), and no rank destroys
// its QPs while a peer may still need an ACK.
//
// The TCP connections run over the data network (the appliance switches them like any non-RoCE
// traffic) or any other route to rank 0. Every rank holds the job's secret, handed to it out of
// band (as NCCL's unique id): rank 0 opens each connection with a fresh nonce, a rank's message
// carries an HMAC-SHA256 over that nonce, its own nonce and the message, and rank 0's answer one
// over both nonces and the answer. There is no meeting without a secret but where a lab asks for
// one by name (RendezvousConfig::insecure, logged by every rank). Rank 0 reads all connections at
// once and gives each 3 s (kAuthMs) to prove itself. A connection that does not (a wrong MAC, an
// idle or malformed peer, a replayed message: the nonce is another) is dropped unanswered; one
// that proves itself but whose line is bad (no rank, a rank out of 1..workers-1 or already taken,
// a line that does not parse, another --workers or --payload) is told why and dropped. Either is
// counted (refused()) and logged on stderr, and the meeting goes on: it completes when every real
// rank has arrived, or fails at its deadline naming the last refusal. A rank whose connection
// closes before the answer frees its place for a rank that comes again. docs/protocol.md "The
// ranks' exchange" has the messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/transport/transport.hpp"
#include "inagg/util/ip_addr.hpp"
#include "inagg/util/log.hpp"

namespace inagg::client {

// What one rank tells the others about its two RC QPs (verbs: after creating them, before connecting).
struct RankEndpoint {
  unsigned rank = 0;
  util::IpAddr gid;        // the GID the QPs use (an IPv4-mapped GID: RoCEv2 over IPv4)
  uint32_t send_qpn = 0;   // our QP to the successor (the job's data QP)
  uint32_t recv_qpn = 0;   // our QP for the predecessor's writes
  uint32_t start_psn = 0;  // the first PSN of our writes to the successor
  uint64_t recv_addr = 0;  // the receive region (RDMA WRITE target) and its rkey
  uint32_t recv_rkey = 0;
  uint32_t payload = 0;  // path MTU payload P: every rank must agree
  unsigned workers = 0;  // the job's ranks as this rank was told (--workers): every rank must agree
};

// "endpoint rank=0 gid=::ffff:10.77.0.101 send_qpn=0x11 ..." (one line, no newline).
std::string format_endpoint(const RankEndpoint& e);
// nullopt (with *error) when a field is missing or out of range.
std::optional<RankEndpoint> parse_endpoint(const std::string& line, std::string* error);
// The rank=N field of an exchange line (0..63); nullopt when there is none.
std::optional<unsigned> rank_field(const std::string& line);

// The job's connections as the exchange made them (rank 0 registers these with the appliance).
std::vector<RankConnection> connections_of(const std::vector<RankEndpoint>& all);

struct RendezvousConfig {
  unsigned rank = 0, workers = 0;
  util::IpAddr host;  // rank 0's address (the others connect to it; rank 0 listens on it)
  uint16_t port = 18516;
  uint64_t deadline_ns = 0;  // steady clock (clock.hpp)
  std::string secret;        // the job's shared secret (at least 16 characters), the same on every rank
  // A lab's opt-out, by name only (inagg-worker --insecure-exchange): with no secret the meeting
  // runs with the same messages, MACs keyed with "" (no protection: any host that reaches rank 0's
  // port can join as a rank or answer as rank 0). Every rank says so on stderr.
  bool insecure = false;
};

// Where inagg-worker and the Python module take the job's secret from: this environment variable
// (a launcher sets it once for all ranks: mpirun -x, srun's environment), else a file.
inline constexpr const char* kExchangeSecretEnv = "INAGG_EXCHANGE_SECRET";
inline constexpr size_t kMinExchangeSecret = 16;

class Rendezvous {
 public:
  Rendezvous() = default;
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Every rank's endpoint, indexed by rank, each checked to name its own rank once and the same P.
  // False with *error ("rank 2 did not reach rank 0 at 10.77.0.101:18516 within 60 s ...").
  bool exchange(const RendezvousConfig& cfg, const RankEndpoint& mine, std::vector<RankEndpoint>* all,
                std::string* error);
  // Returns once every rank has called it with the same `what`: "connected" (every QP is ready to
  // receive before anyone sends), "done", and the workers' barriers before their sends. It runs
  // over the connections the exchange made, kept open for the job: a rank whose process ends
  // closes its own, rank 0 then tells every other rank which one went away, and each barrier fails
  // at once with that reason instead of at the deadline. After a failed barrier every later one
  // fails too.
  bool barrier(const std::string& what, std::string* error);
  // A barrier that carries one line of text from every rank to rank 0, on the same connections
  // with the same MACs and sequence numbers: rank 0's *all gets every rank's `mine`, indexed by
  // rank (its own at [0]); another rank's is left empty. Every rank calls it with the same `what`
  // (no tab or newline); `mine` has no newline and at most kMaxGatherText bytes.
  bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all, std::string* error);
  static constexpr size_t kMaxGatherText = 3072;

  // What to do while waiting for the other ranks, instead of sleeping: called with at most
  // kIdleMs. A software RC endpoint is its own NIC: it must keep answering its peers in the
  // barriers (UdpRcTransport). Not set: the waits sleep in poll().
  using Idle = std::function<void(int wait_ms)>;
  static constexpr int kIdleMs = 1;
  void set_idle(Idle idle) { idle_ = std::move(idle); }

  static constexpr int kAuthMs = 3000;       // rank 0: for a connection to send its authenticated message
  static constexpr size_t kMaxPending = 64;  // rank 0: unauthenticated connections held at once (oldest dropped)
  // Rank 0: connections dropped so far (a wrong or missing MAC, silence, a bad line, a rank that
  // closed before the answer).
  uint64_t refused() const { return refused_; }

 private:
  // Rank 0: one authenticated line from each of the others (its rank= field names it, each rank
  // once, 1..workers-1) that check() finds good ("" or why not), then answer(lines) to every one
  // of them. Any other connection is dropped, counted and logged, and the gathering goes on.
  using Check = std::function<std::string(const std::string& line)>;
  using Answer = std::function<std::string(std::vector<std::string>&)>;
  bool gather(const std::string& what, std::vector<std::string>* lines, const Check& check, const Answer& answer,
              std::string* error);
  // Refuses a meeting without a secret unless it is insecure by name (then says so, loudly).
  bool check_secret(std::string* error) const;
  // Rank 0: one stderr line per dropped connection, at most 5 a second (the rest counted).
  void note_refusal(const std::string& from, const std::string& why);
  // The others: connect, take rank 0's nonce, send `line` with its MAC, read and check the answer.
  bool ask(const std::string& line, std::string* answer, std::string* error);
  bool listen(std::string* error);

  // poll() on one fd until `events` or the deadline (false), calling idle_ meanwhile when set.
  bool wait_for(int fd, short events) const;
  bool read_until(int fd, const std::string& stop, std::string* out) const;
  bool read_answer(int fd, std::string* out) const;
  bool write_all(int fd, const std::string& s) const;

  // barrier() and gather(): every other rank sends `line` to rank 0 and waits for its answer;
  // rank 0 takes one line from each, `line` itself (texts null: a barrier) or `line` followed by
  // that rank's text (stored in (*texts)[rank]).
  bool meet(const std::string& what, const std::string& line, std::vector<std::string>* texts, std::string* error);

  // Rank 0: tells every kept connection `why` and ends its side of each; others: close theirs.
  // Every later barrier then fails with `why`.
  void drop_peers(const std::string& why);

  RendezvousConfig cfg_;
  int listen_fd_ = -1;
  // A connection kept from the exchange for the barriers, with the nonces of its exchange: every
  // barrier message carries a MAC over them and its sequence number on that connection.
  struct Kept {
    int fd = -1;
    std::string rank0_nonce, rank_nonce;
    uint64_t sent = 0, received = 0;
    std::string inbox;  // what was read past the last whole line (the next line's start, or the next line)
  };
  std::string barrier_mac(const Kept& k, const char* label, uint64_t seq, const std::string& text) const;
  // The kept connections: rank 0's to rank r at [r] ([0] unused); another rank's to rank 0 at [0].
  std::vector<Kept> peers_;
  std::string broken_;  // why the connections were dropped; every later barrier fails with it
  Idle idle_;
  uint64_t refused_ = 0;
  util::LogRateLimit refusal_log_;
};

}  // namespace inagg::client
