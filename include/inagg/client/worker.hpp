// One rank of an allreduce job, as inagg-worker runs it: the rack plan, the transport (ina, ring,
// auto), the XDP tier's client (xdp, auto), the job's registration on the appliance, the
// algorithms and auto mode's fall-over. inagg-worker is this class plus option parsing and output;
// a test or another program drives it the same way:
//
//   Worker w(options);                     // options passed check_job_options/check_run_options
//   w.open(&error);                        // sockets, registered memory, the ranks' meeting
//   w.register_job();                      // ina/auto with a control socket; then the receive side
//   for (...) { fill_input(..., w.data(), bytes); w.allreduce(bytes); ... w.last_tier(); }
//   w.finish();
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
#include "inagg/client/transport/transport.hpp"
#include "inagg/client/transport/verbs_transport.hpp"
#include "inagg/client/transport/xagg_client.hpp"

namespace inagg::client {

// inagg-worker's options (its --help says what each means).
struct WorkerOptions {
  unsigned rank = 0, workers = 0;
  bool rank_given = false;
  std::string ip_base = "10.77.0.0";
  std::string dtype_name = "float";  // nccl-tests' names and aliases (nccl::parse_type)
  // The sweep, with nccl-tests' defaults: one size of 32 MiB; sizes grow by `factor` when it is
  // above 1, else by `step_bytes`.
  uint64_t min_bytes = 32ull << 20, max_bytes = 32ull << 20, step_bytes = 1ull << 20;
  unsigned factor = 1;
  unsigned iters = 20, warmup = 1;
  unsigned check = 1;      // checked iterations per size and placement (nccl-tests' -c); 0: none
  bool in_place = true;    // also run the in-place placement after the out-of-place one
  std::string op = "sum";  // the only reduction the appliance does
  unsigned corrupt = 0;    // tests only: elements of this rank's checked input altered after the reference
  std::string mode_name = "ina";
  // What the job does: allreduce, or (ina) reduce_scatter / all_gather in one pass of rotated
  // chunks of `chunk` messages (docs/protocol.md section 20), as nccl-tests' reduce_scatter_perf
  // and all_gather_perf size them (the sizes are the whole buffer, n shards).
  std::string collective_name = "allreduce";
  uint32_t chunk = 1;
  // payload 0: auto, what an RDMA NIC would choose from the MTU of the interface that holds this
  // rank's address (payload_for_mtu; 4096 on the virtual rack's MTU 4200 links), as if 1500 when
  // no interface here holds it. check_job_options fills it in.
  uint32_t payload = 0, message = 65536;
  unsigned window = 2;
  // The RC failure budget, (retry + 1) x ack_timeout_ms = 4 s, is how long a rank may wait for an
  // ACK while the appliance holds its packets for a rank that is not sending (descheduled, in a
  // long computation, gone). Losses do not wait for it: the RTO follows the round trip.
  double ack_timeout_ms = 250;
  unsigned retry = 15;
  size_t max_queued_kib = 64;  // RcConfig::max_queued_bytes / 1024 (0: no limit)
  double rto_min_ms = 2;       // RcConfig::rto_min_ns, in ms
  size_t cwnd_min_kib = 16;    // RcConfig::cwnd_min_bytes / 1024 (0: no congestion window)
  uint32_t seed = 1;
  double timeout_s = 60;
  uint32_t job_id = 1;
  std::string register_socket;      // "" = the job is registered by someone else; or tcp://HOST:PORT
  std::string control_secret_file;  // tcp://: the shared secret
  std::string control_secret;       // read from it by check_run_options
  std::string xdp_heads;            // comma-separated: the head of group g is the g-th
  unsigned xdp_group_size = 0;
  std::string xdp_mcast = "239.77.0.1";
  unsigned xdp_values = 256, xdp_window = 8, xdp_port = 4792;
  double xdp_timeout_ms = 20;
  double xdp_scale = 1048576;
  std::string xdp_key_file;  // the job's MAC key on the tier ($INAGG_XDP_KEY first)
  // ina/auto: every rank's rack when leaves and a spine sum the job (empty: one appliance).
  std::vector<unsigned> rack_of;
  std::string transport_name = "udp";  // udp (the software RC endpoint) or verbs (rdma-core)
  VerbsDeviceOptions verbs;
  unsigned exchange_port = 18516;    // verbs: rank 0's TCP port for the ranks' out-of-band exchange
  bool exchange = false;             // udp: join that exchange (a ring with verbs ranks)
  std::string exchange_secret_file;  // the job's secret for the ranks' meeting ($INAGG_EXCHANGE_SECRET first)
  std::string exchange_secret;       // read by check_run_options
  bool insecure_exchange = false;    // a lab's opt-out: the meeting without a secret (RendezvousConfig::insecure)

  // Filled by the checks.
  Mode mode = Mode::ina;
  RackPlan rack;
  XdpPlan xdp;
  bool use_verbs = false;
  bool uses_tier() const { return mode == Mode::xdp || mode == Mode::automatic; }
};

// What --print-job needs (workers, addresses, sizes): "" or what to change, e.g. "--workers must
// be between 2 and 64". Fills o.rack.
std::string check_job_options(WorkerOptions& o);
// The rest (rank, mode, the XDP tier, sizes). Fills o.mode and o.xdp.
std::string check_run_options(WorkerOptions& o);

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
  bool exchange = false;           // udp: the endpoints from the ranks' exchange, not the plan
  std::string exchange_secret;     // the job's secret for the exchange (rendezvous.hpp)
  bool insecure_exchange = false;  // none, by name (RendezvousConfig::insecure)
};
// Opens a transport for a request; nullptr with *error when it cannot.
using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportRequest&, std::string* error)>;
// The default factory: UdpRcTransport (the software RC endpoint over kernel UDP); with
// r.exchange, its endpoints are exchanged with the other ranks as open_verbs_transport does;
// without, the ranks meet at rank 0 (UdpRcTransport::meet) to check their plans agree and to hold
// the barriers before their sends.
std::unique_ptr<Transport> open_udp_transport(const TransportRequest& r, std::string* error);
// The verbs factory: VerbsTransport::open, the exchange with the other ranks (rank 0 listens on
// the exchange port at the plan's rank 0 address), connect. The transport keeps the exchange for
// its final barrier. Without libibverbs in the build: nullptr and an error saying so.
std::unique_ptr<Transport> open_verbs_transport(const TransportRequest& r, std::string* error);

class Worker {
 public:
  // `transport`: how to open the rank's transport (ina, ring, auto); UdpRcTransport by default.
  explicit Worker(const WorkerOptions& o, TransportFactory transport = open_udp_transport);

  // Opens the transport and the tier's client and allocates the buffers. False with *error.
  bool open(std::string* error);

  // ina/auto with --register: rank 0 adds the job, every rank waits until it is active and only
  // then opens its receive side (Transport::open_receive; without --register, open() opened it).
  // Returns 0 to go on, or the exit code (error() says why): 2 when the appliance cannot be
  // reached or refused the job, 1 when it never became active. In auto mode these mean the XDP
  // tier instead (the receive side stays closed).
  int register_job();

  uint8_t* data() { return data_.data(); }      // the input; in place, the sum after allreduce()
  uint8_t* result() { return result_.data(); }  // out of place: the sum after allreduce()

  // One allreduce of `bytes` (whole elements) of data(): in place (the sum replaces the input) or
  // out of place (data() stays as it was, the sum lands in result(), as nccl-tests' two
  // placements). False: error(). A job of another collective runs that one (collective()).
  bool allreduce(uint64_t bytes, bool in_place = true);
  // The job's collective over a buffer of `bytes` (n shards of bytes / n, whole elements), placed
  // as nccl-tests places it:
  //   reduce_scatter: the input is data() (every shard); out of place this rank's shard of the sum
  //     lands at result(), in place at data() + rank x shard;
  //   all_gather: this rank's shard is data() out of place (the whole buffer lands at result()),
  //     data() + rank x shard in place (the whole buffer lands at data()).
  bool collective(uint64_t bytes, bool in_place = true);
  Tier last_tier() const { return last_tier_; }  // whose sums the last allreduce holds
  Tier tier() const;                             // the tier the next one starts on

  // Returns once every rank called it with the same `what` (Transport::barrier): after local work
  // whose length differs between ranks (a fill, a reference) and before the next allreduce through
  // the appliance, so that no rank's RC retry budget is spent waiting for a slower one. A no-op
  // in auto mode (a rank falling over must not wait for one that has not) and once the XDP tier
  // has taken over. False with error() set.
  bool barrier(const std::string& what);

  // Between allreduces: keeps the transport running for up to `wait_ms` (ACKs for the predecessor,
  // retransmissions to the successor), as a NIC would while the host computes. A caller that works
  // for long between two allreduces (--check's reference) calls it meanwhile, or its predecessor's
  // requester runs out of retries.
  void serve(int wait_ms);

  // After the last allreduce: the transport's final barrier, auto's closing agreement. False: error().
  bool finish();

  const std::string& error() const { return error_; }
  // "# rank ..." lines worth printing as they happen (auto's fall-over).
  std::function<void(const std::string&)> on_note;

  const WorkerOptions& options() const { return o_; }
  std::optional<TransportCounters> transport_counters() const;
  std::string transport_description() const { return transport_ ? transport_->description() : ""; }
  const XaggCounters* tier_counters() const { return xagg_ ? &xagg_->counters() : nullptr; }
  uint64_t saturated() const { return tier_ ? tier_->saturated() : 0; }

 private:
  bool fail(std::string why);
  bool registers() const;  // register_job() adds the job or waits for it (ina/auto with --register)
  bool auto_allreduce(uint8_t* buf, uint64_t bytes);
  bool fall_over();  // the agreement; then the fall-over's verdict on the allreduce in progress

  WorkerOptions o_;
  Geometry geometry_;
  uint64_t deadline_ns_ = 0;
  TransportFactory open_transport_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<RingExchange> exchange_;
  std::unique_ptr<XaggClient> xagg_;
  std::unique_ptr<TierAllreduce> tier_;
  FallOver fallover_;
  std::vector<uint8_t> data_, result_, held_;
  Tier last_tier_ = Tier::appliance;
  std::string error_;
};

}  // namespace inagg::client
