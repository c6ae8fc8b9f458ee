// One rank of an inagg job: what every front end (inagg-worker, the Python module, the torch
// backend) reaches the transport and the appliance through. The options say the job's geometry
// (RankGeometry), the transport, the appliance and the mode; validate() checks them once and
// names the options the user typed (RankOptionNames, given by the front end). A Rank then opens
// the transport, registers the job, and runs the collectives over the caller's memory, in pieces
// of the geometry's chunk_bytes:
//
//   RankOptions o;  o.geometry = {.ranks = 4, .rank = r, .dtype = "fp32"};  o.control = "/run/inagg.sock";
//   if (std::string why = o.validate(names); !why.empty()) ...   // says which option to change
//   Rank rank(o);
//   if (rank.start() != 0) ... rank.error()                      // meeting, registration, receive side
//   rank.allreduce(in, out, bytes);                              // in == out: in place
//   rank.finish();
//
// Two ways to find the other ranks: the rack plan (ip_base: rank r at ip_base + r + 1, start()
// meets them at rank 0), or a channel the caller owns (address: this rank's own; the caller
// publishes endpoint(), hands every rank's to open(endpoints), registers the jobs with
// register_job(id, collective) on rank 0 and calls open_receive() once they are active).
//
// Single-threaded, like the transport it drives: a caller with threads serialises the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inagg/client/algorithms.hpp"
#include "inagg/client/control_client.hpp"
#include "inagg/client/fallover.hpp"
#include "inagg/client/plan.hpp"
#include "inagg/client/rendezvous.hpp"
#include "inagg/client/transport/transport.hpp"
#include "inagg/client/transport/verbs_transport.hpp"
#include "inagg/client/transport/xagg_client.hpp"
#include "inagg/control/job.hpp"
#include "inagg/control/protocol.hpp"

namespace inagg::client {

class UdpRcTransport;

// The job's geometry: who this rank is among how many, and how its buffers map onto messages.
// One struct, so that a new axis of the job (its channels) is added here once.
struct RankGeometry {
  unsigned ranks = 0, rank = 0;
  std::string dtype = "fp32";  // fp32, fp16, bf16, int32 (or nccl-tests' float, half, bfloat16, int)
  // payload 0: auto, what an RDMA NIC would choose from the MTU of the interface that holds this
  // rank's address (payload_for_mtu), as if 1500 when no interface here holds it.
  uint32_t message = 65536, payload = 0;
  unsigned window = 2;  // messages in flight per QP
  // The transport's registered regions: chunk_bytes rounded up to whole messages. A buffer whose
  // data needs more messages goes in pieces of the data they carry (RankOptions::chunk_bytes_for).
  uint64_t chunk_bytes = 8u << 20;
  // What the job's own connections carry: allreduce, or reduce_scatter / all_gather in one pass
  // of rotated chunks of `chunk` messages (docs/protocol.md section 20).
  std::string collective = "allreduce";
  uint32_t chunk = 1;
  // RC connections to the successor (docs/protocol.md section 22): message m of a collective goes
  // on channel m mod channels, each channel a job of its own on the appliance, on its own lcore.
  unsigned channels = 1;
};

// The names the user gave each option (its flag, its keyword argument), for validate()'s
// sentences. The defaults are the fields' own names.
struct RankOptionNames {
  std::string ranks = "ranks", rank = "rank", dtype = "dtype", message = "message", payload = "payload",
              window = "window", chunk_bytes = "chunk_bytes", collective = "collective", chunk = "chunk",
              channels = "channels";
  std::string mode = "mode", transport = "transport", ip_base = "ip_base", address = "address",
              ack_timeout_ms = "ack_timeout_ms", timeout_s = "timeout_s", stall_s = "stall_s";
  std::string exchange = "exchange", exchange_port = "exchange_port", exchange_secret_file = "exchange_secret_file",
              insecure_exchange = "insecure_exchange", qp_timeout = "qp_timeout";
  std::string control = "control", control_secret_file = "control_secret_file", job_id = "job_id";
  std::string xdp_heads = "xdp_heads", xdp_mcast = "xdp_mcast", xdp_key_file = "xdp_key_file", xdp_scale = "xdp_scale",
              xdp_timeout_ms = "xdp_timeout_ms", racks = "racks";
  // What the ranks' meeting is called, and how else this front end's user can give its secret.
  std::string meeting = "the ranks' meeting", exchange_secret_hint;
};

struct RankOptions {
  RankGeometry geometry;
  bool rank_given = true;    // false: the front end found no rank (validate() says to give one)
  std::string mode = "ina";  // ina (the appliance sums), ring, xdp (the XDP tier), auto (ina, falling over to xdp)

  // The transport: udp (the software RoCEv2 RC endpoint over kernel UDP) or verbs (rdma-core).
  std::string transport = "udp";
  std::string ip_base = "10.77.0.0";    // the rack plan: rank r at ip_base + r + 1
  std::optional<util::IpAddr> address;  // or this rank's own address; the peers' from endpoints
  // The RC failure budget, (retry + 1) x ack_timeout_ms, is how long a rank may wait for an ACK
  // while the appliance holds its packets for a rank that is not sending.
  double ack_timeout_ms = 250;
  unsigned retry = 15;
  size_t max_queued_kib = 64;  // RcConfig::max_queued_bytes / 1024 (0: no limit)
  double rto_min_ms = 2;       // RcConfig::rto_min_ns, in ms
  size_t cwnd_min_kib = 16;    // RcConfig::cwnd_min_bytes / 1024 (0: no congestion window)
  VerbsDeviceOptions verbs;
  // How long the set-up (meeting, registration) and the finish may take; with stall_s 0 also the
  // whole job's deadline (inagg-worker's -T). stall_s > 0: no deadline for the job (it lives as
  // long as training does), a collective fails when nothing arrives for stall_s.
  double timeout_s = 60, stall_s = 0;

  // The ranks' meeting at rank 0 (the rack plan): its TCP port and the job's secret, the same on
  // every rank ($INAGG_EXCHANGE_SECRET, else the file, else exchange_secret as given).
  bool meet = true;       // false: ranks that never meet share a fixed region key (kUnmetKey)
  bool exchange = false;  // udp: the endpoints from the exchange verbs ranks use, not the plan
  unsigned exchange_port = 18516;
  std::string exchange_secret_file, exchange_secret;
  bool insecure_exchange = false;  // a lab's opt-out: the meeting without a secret

  // The appliance: "" = the job is registered by someone else; a path or tcp://HOST:PORT.
  std::string control;
  std::string control_secret_file;  // tcp://: the tenant's credential ($INAGG_CONTROL_SECRET first)
  uint32_t job_id = 1;
  // Also a reduce-scatter's and an all-gather's QP pairs (docs/protocol.md section 20), each the
  // QPs of a job of its own (job_text(id, collective)): the allreduce's QPNs + kLaneQpnStep x 1, 2.
  bool lanes = false;

  // The XDP tier (xdp, auto).
  std::string xdp_heads;  // comma-separated: the head of group g is the g-th
  unsigned xdp_group_size = 0;
  std::string xdp_mcast = "239.77.0.1";
  unsigned xdp_values = 256, xdp_window = 8, xdp_port = 4792;
  double xdp_timeout_ms = 20;
  double xdp_scale = 1048576;
  std::string xdp_key_file;       // the job's MAC key on the tier ($INAGG_XDP_KEY first)
  std::vector<unsigned> rack_of;  // ina: every rank's rack when leaves and a spine sum the job

  // Checks every option and resolves what follows from them (below): "" or one sentence that
  // names the option to change as `names` spells it. Reads the secrets and keys it names.
  std::string validate(const RankOptionNames& names = {});
  // Only what the appliance's job file needs (ranks, addresses, sizes), as validate() checks it:
  // for a front end that prints the job without starting a rank.
  std::string validate_job(const RankOptionNames& names = {});

  // The chunk_bytes whose regions carry `data_bytes` in one piece, for a front end whose buffers
  // never go in pieces (after validate_job(): the element's size).
  uint64_t chunk_bytes_for(uint64_t data_bytes) const;

  // Filled by validate().
  struct Resolved {
    util::Dtype dtype = util::Dtype::fp32;
    Mode mode = Mode::ina;
    control::Collective collective = control::Collective::allreduce;
    RackPlan rack;
    XdpPlan xdp;
    bool use_verbs = false;
    std::string control_secret;
  } resolved;
  bool uses_tier() const { return resolved.mode == Mode::xdp || resolved.mode == Mode::automatic; }
  bool registers() const {
    return (resolved.mode == Mode::ina || resolved.mode == Mode::automatic) && !control.empty();
  }
};

// What a rank's transport must connect: the plan (addresses, QPNs, PSNs; ring: the ring's QPs),
// the RC timers, and the sizes of the two regions the algorithms use.
struct TransportRequest {
  RackPlan rack;
  bool ring = false;
  double ack_timeout_ms = 250;
  unsigned retry = 15;
  uint64_t send_bytes = 0, receive_bytes = 0;
  // verbs: the device, and where and until when the ranks exchange their endpoints.
  VerbsDeviceOptions verbs;
  uint16_t exchange_port = 18516;
  uint64_t deadline_ns = 0;
  bool meet = true;                // false: no meeting; the fixed region key of ranks that never meet
  bool exchange = false;           // udp: the endpoints from the ranks' exchange, not the plan
  std::string exchange_secret;     // the job's secret for the exchange (rendezvous.hpp)
  bool insecure_exchange = false;  // none, by name (RendezvousConfig::insecure)
};
// Opens a transport for a request; nullptr with *error when it cannot.
using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportRequest&, std::string* error)>;
// The default factory: UdpRcTransport (the software RC endpoint over kernel UDP); with
// r.exchange, its endpoints are exchanged with the other ranks as open_verbs_transport does;
// without, it is only bound, and the ranks meet later (meet_on_plan).
std::unique_ptr<Transport> open_udp_transport(const TransportRequest& r, std::string* error);
// The plan's software ranks meet at rank 0 (UdpRcTransport::meet) to check that their plans agree
// and to hold the barriers before their sends; Rank::start() calls it before the registration.
// True at once for a transport of another kind, or one whose endpoints were exchanged.
bool meet_on_plan(Transport& t, const TransportRequest& r, std::string* error);
// The verbs factory: VerbsTransport::open, the exchange with the other ranks (rank 0 listens on
// the exchange port at the plan's rank 0 address), connect. Without libibverbs in the build:
// nullptr and an error saying so.
std::unique_ptr<Transport> open_verbs_transport(const TransportRequest& r, std::string* error);

class Rank {
 public:
  // `o` passed validate(). `transport`: how to open the rank's transport on the rack plan
  // (default: the options' transport, udp or verbs); a test may give its own.
  explicit Rank(const RankOptions& o, TransportFactory transport = nullptr);
  ~Rank();
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  // The rack plan's set-up: opens the transport (ina, ring, auto) and the XDP tier's client
  // (xdp, auto); the ranks meet at rank 0; with a control socket (ina, auto) rank 0 adds the job
  // and every rank waits until it is active (an appliance that does not answer at all is known
  // before the meeting); only then the receive side opens. Returns 0, or an
  // exit code with error() set: 2 when the transport cannot open or the appliance cannot be
  // reached or refused the job, 1 when it never became active. In auto mode an appliance that
  // fails means the XDP tier instead.
  int start();

  // The caller's channel (options' address): what this rank tells the others; then every rank's
  // endpoint, indexed by rank, which open() checks against this rank's before it binds and
  // connects; the jobs' texts and their registration (rank 0); open_receive() once they are
  // active. False, or a reason, with error() set.
  RankEndpoint endpoint() const;
  bool open(const std::vector<RankEndpoint>& all);
  std::string job_text(uint32_t id, control::Collective c = control::Collective::allreduce) const;
  static constexpr uint32_t kLaneQpnStep = 0x1000;
  bool open_receive();

  // Registration on the appliance (options' control socket): `adds` (rank 0) adds job `id` of
  // collective `c` (job_text), then waits until it is active. "" once active, else why.
  std::string register_job(uint32_t id, control::Collective c, bool adds);
  // One request to the control socket; false with *error (no answer, or no socket given).
  bool control_request(const std::string& text, std::string* reply, std::string* error) const;
  // The job's line in the appliance's `list`; nullopt when not listed or (*error) unreachable.
  std::optional<control::JobListLine> job_state(uint32_t id, std::string* error) const;

  // The collectives over the caller's memory (whole elements of the job's dtype). allreduce:
  // `in` summed into `out` (the same buffer: in place). reduce_scatter: `in` holds the n shards of
  // shard_bytes, `out` gets this rank's shard of the sum. all_gather: `in` is this rank's shard,
  // `out` gets the n shards. False with error(); after a failure every later call fails the same.
  bool allreduce(const uint8_t* in, uint8_t* out, uint64_t bytes);
  bool reduce_scatter(const uint8_t* in, uint8_t* out, uint64_t shard_bytes);
  bool all_gather(const uint8_t* in, uint8_t* out, uint64_t shard_bytes);
  Tier last_tier() const { return last_tier_; }  // whose sums the last allreduce holds
  Tier tier() const;                             // the tier the next one starts on

  // Returns once every rank called it with the same `what`: after local work whose length
  // differs between ranks and before the next collective through the appliance. A no-op in auto
  // mode and once the XDP tier has taken over. False with error().
  bool barrier(const std::string& what);
  // A barrier that carries one line of text (rendezvous.hpp: no newline, at most 3072 bytes) from
  // every rank to rank 0, whose *all then holds every rank's `mine`, indexed by rank; another
  // rank's is left empty. For a front end's report of every rank's figures. Unlike barrier(), it
  // meets in auto mode too: call it where no rank can be in the tier's fall-over agreement (before
  // the first collective, after finish()), and while the job is on the appliance. False with
  // error() where the ranks do not meet at rank 0 (can_gather()) or a rank went away.
  bool gather(const std::string& what, const std::string& mine, std::vector<std::string>* all);
  // Whether the ranks meet at rank 0, so that gather() can work: ina, ring and auto on the rack
  // plan; not the XDP tier alone, nor ranks on the caller's channel or that never meet.
  bool can_gather() const;
  // Between collectives: keeps the transport running for up to `wait_ms` (ACKs, retransmissions),
  // as a NIC would while the host computes.
  void serve(int wait_ms);
  // After the last collective: the transport's final barrier, auto's closing agreement. False: error().
  bool finish();

  const std::string& error() const { return error_; }
  // "# rank ..." lines worth printing as they happen (auto's fall-over).
  std::function<void(const std::string&)> on_note;

  const RankOptions& options() const { return o_; }
  util::Dtype dtype() const { return o_.resolved.dtype; }
  size_t element() const { return util::dtype_size(o_.resolved.dtype); }
  uint32_t payload() const { return o_.resolved.rack.payload; }
  // The job's connections as registered (a verbs transport's are the device's).
  const RackPlan& plan() const { return o_.resolved.rack; }
  std::optional<TransportCounters> transport_counters() const;  // with the lanes'
  std::string transport_description() const;
  const XaggCounters* tier_counters() const;
  uint64_t saturated() const;
  uint64_t collectives() const { return collectives_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t messages() const { return messages_; }

 private:
  bool fail(std::string why);
  int fail_code(int code, std::string why);
  int register_rack_job();            // start(): ina/auto with a control socket
  int settle(const Registration& r);  // the registration switch
  // "; the appliance: job N <state>: <why>" for a job the appliance stopped, refused or failed, or
  // "" (ina with a control socket only): what a rank's own error after its RC budget cannot say.
  std::string appliance_word(uint32_t id) const;
  bool ready(const char* what);
  bool allreduce_piece(const uint8_t* in, uint8_t* out, uint64_t bytes);
  bool auto_allreduce(uint8_t* buf, uint64_t bytes);
  bool fall_over();
  bool rotated(control::Collective c, const uint8_t* in, uint8_t* out, uint64_t shard_bytes);

  RankOptions o_;
  Geometry geometry_;
  uint64_t piece_ = 0;  // an allreduce's piece: chunk_bytes, whole elements
  uint64_t deadline_ns_ = 0, stall_ns_ = 0;
  TransportFactory open_transport_;
  RegionKey key_;  // the caller's channel: this rank's receive regions
  std::unique_ptr<Transport> transport_;
  UdpRcTransport* udp_ = nullptr;  // the caller's channel: the transport, with its lanes
  std::unique_ptr<RingExchange> exchange_;
  struct Lane {
    Geometry g;
    std::unique_ptr<RingExchange> x;
  };
  Lane lanes_[2];            // reduce-scatter, all-gather (options' lanes)
  uint64_t lane_piece_ = 0;  // their pieces: bytes of each shard at a time
  std::unique_ptr<XaggClient> xagg_;
  std::unique_ptr<TierAllreduce> tier_;
  FallOver fallover_;
  std::vector<uint8_t> scratch_, held_;  // ring: the padded chunks; auto: the held sums
  Tier last_tier_ = Tier::appliance;
  std::string error_;
  uint64_t collectives_ = 0, bytes_ = 0, messages_ = 0;
};

// A dtype by inagg's name (fp32, fp16, bf16, int32) or nccl-tests' (float, half, bfloat16, int32,
// and their aliases float32, float16, int), in any case; nullopt for anything else.
std::optional<util::Dtype> parse_dtype_name(std::string_view name);

// The first IPv4 address of interface `name`; nullopt with *error when it has none.
std::optional<util::IpAddr> interface_address(const std::string& name, std::string* error);
// The address this host sends from toward `host` (a name or an IPv4 address): its route's
// source. nullopt with *error when `host` does not resolve or has no route.
std::optional<util::IpAddr> source_address_toward(const std::string& host, std::string* error);

}  // namespace inagg::client
