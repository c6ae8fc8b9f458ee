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
// traffic) or any other route to rank 0.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/transport.hpp"
#include "inagg/util/ip_addr.hpp"

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

// The job's connections as the exchange made them (rank 0 registers these with the appliance).
std::vector<RankConnection> connections_of(const std::vector<RankEndpoint>& all);

struct RendezvousConfig {
  unsigned rank = 0, workers = 0;
  util::IpAddr host;  // rank 0's address (the others connect to it)
  uint16_t port = 18516;
  uint64_t deadline_ns = 0;  // steady clock (clock.hpp)
};

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

  // What to do while waiting for the other ranks, instead of sleeping: called with at most
  // kIdleMs. A software RC endpoint is its own NIC: it must keep answering its peers in the
  // barriers (UdpRcTransport). Not set: the waits sleep in poll().
  using Idle = std::function<void(int wait_ms)>;
  static constexpr int kIdleMs = 1;
  void set_idle(Idle idle) { idle_ = std::move(idle); }

 private:
  // Rank 0: one line from each of the others, then answer(lines) to every one of them.
  using Answer = std::function<std::string(std::vector<std::string>&)>;
  bool gather(const std::string& what, std::vector<std::string>* lines, const Answer& answer, std::string* error);
  // The others: connect, send `line`, read the answer up to "end\n".
  bool ask(const std::string& line, std::string* answer, std::string* error);

  // poll() on one fd until `events` or the deadline (false), calling idle_ meanwhile when set.
  bool wait_for(int fd, short events) const;
  bool read_until(int fd, const std::string& stop, std::string* out) const;
  bool write_all(int fd, const std::string& s) const;

  // Rank 0: tells every kept connection `why` and ends its side of each; others: close theirs.
  // Every later barrier then fails with `why`.
  void drop_peers(const std::string& why);

  RendezvousConfig cfg_;
  int listen_fd_ = -1;
  // The kept connections: rank 0's to rank r at [r] ([0] unused, -1); another rank's to rank 0 at [0].
  std::vector<int> peers_;
  std::string broken_;  // why the connections were dropped; every later barrier fails with it
  Idle idle_;
};

}  // namespace inagg::client
