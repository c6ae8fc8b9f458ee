#include "inagg/client/worker.hpp"

#include <chrono>
#include <thread>

#include <algorithm>
#include <cstring>

#include "inagg/client/clock.hpp"
#include "inagg/client/nccl_table.hpp"
#include "inagg/client/transport/udp_transport.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/util/hmac.hpp"
#include "inagg/wire/xagg_mac.hpp"

namespace inagg::client {

std::string check_job_options(WorkerOptions& o) {
  const std::optional<util::Dtype> dt = nccl::parse_type(o.dtype_name);
  if (!dt)
    return "--dtype must be fp32, fp16, bf16 or int32 (or nccl-tests' float, half, bfloat16, int32); got '" +
           o.dtype_name + "'";
  if (o.workers < 2 || o.workers > 64) return "--workers must be between 2 and 64";
  const std::optional<util::IpAddr> base = util::parse_ip(o.ip_base);
  if (!base || base->version != util::IpVersion::v4) return "--ip-base must be an IPv4 address";
  o.rack.ip_base = *base;
  std::string dev;
  const std::optional<uint32_t> mtu = interface_mtu(o.rack.ip_of(o.rank), &dev);
  const std::string where = mtu ? dev + " (MTU " + std::to_string(*mtu) + ")" : "";
  if (o.payload == 0) {
    o.payload = payload_for_mtu(mtu.value_or(1500), o.message);
    if (o.payload == 0)
      return "--payload auto: no path MTU payload of 256..4096 bytes fits " +
             (mtu ? where : std::string("an MTU of 1500")) + " and divides --message " + std::to_string(o.message) +
             ": give --payload and a --message that is a multiple of it";
  } else if (mtu && o.payload + kRoceV4Overhead > *mtu) {
    return "--payload " + std::to_string(o.payload) + " needs an MTU of " +
           std::to_string(o.payload + kRoceV4Overhead) + " or more, but this rank's address is on " + where +
           ": give --payload " + std::to_string(std::max(256u, payload_for_mtu(*mtu, 1u << 30))) +
           " or raise the link's MTU";
  }
  if (o.payload % 4 || o.message % o.payload)
    return "--message must be a multiple of --payload, and --payload a multiple of 4";
  o.rack.workers = o.workers;
  o.rack.rank = o.rank;
  o.rack.ip_base = *base;
  o.rack.job_id = o.job_id;
  o.rack.dtype = *dt;
  o.rack.message = o.message;
  o.rack.payload = o.payload;
  o.rack.window = o.window;
  o.rack.max_queued_bytes = o.max_queued_kib * 1024;
  o.rack.rto_min_ms = o.rto_min_ms;
  o.rack.cwnd_min_bytes = o.cwnd_min_kib * 1024;
  const std::optional<control::Collective> c = control::collective_of(o.collective_name);
  if (!c) return "--collective must be allreduce, reduce_scatter or all_gather; got '" + o.collective_name + "'";
  if (o.chunk == 0) return "--chunk must be at least 1 message";
  o.rack.collective = *c;
  o.rack.chunk = o.chunk;
  return "";
}

std::string check_run_options(WorkerOptions& o) {
  if (!o.rank_given || o.rank >= o.workers) return "--rank must be given and below --workers";
  if (o.mode_name == "ina")
    o.mode = Mode::ina;
  else if (o.mode_name == "ring")
    o.mode = Mode::ring;
  else if (o.mode_name == "xdp")
    o.mode = Mode::xdp;
  else if (o.mode_name == "auto")
    o.mode = Mode::automatic;
  else
    return "--mode must be ina (through the appliance), ring (the classic ring allreduce), xdp (the XDP tier) or auto "
           "(ina, falling over to xdp)";
  if (o.rack.collective != control::Collective::allreduce) {
    const std::string what = "--collective " + o.collective_name;
    if (o.mode != Mode::ina)
      return what + " runs through the appliance only (--mode ina); the ring, the XDP tier and auto do allreduce";
    if (!o.rack_of.empty()) return what + " runs on one appliance: it cannot be split across racks (--racks) yet";
    if (o.max_bytes / util::dtype_size(o.rack.dtype) / o.workers == 0)
      return what + ": --maxbytes (-e) holds less than one element per rank";
  }
  XdpPlan& x = o.xdp;
  x.heads.clear();
  for (size_t start = 0; o.uses_tier() && start <= o.xdp_heads.size();) {
    const size_t comma = std::min(o.xdp_heads.find(',', start), o.xdp_heads.size());
    const std::optional<util::IpAddr> h = util::parse_ip(o.xdp_heads.substr(start, comma - start));
    if (!h || h->version != util::IpVersion::v4)
      return "--xdp-heads must list the heads' IPv4 addresses, comma-separated";
    x.heads.push_back(*h);
    start = comma + 1;
  }
  x.group_size = o.xdp_group_size;
  const unsigned group_size = x.size_of_groups(o.workers), groups = (o.workers + group_size - 1) / group_size;
  const std::optional<util::IpAddr> mcast = util::parse_ip(o.xdp_mcast);
  if (o.uses_tier()) {
    if (x.heads.size() != groups)
      return std::to_string(o.workers) + " workers in groups of " + std::to_string(group_size) + " need " +
             std::to_string(groups) + " --xdp-heads, got " + std::to_string(x.heads.size());
    if (!mcast || mcast->version != util::IpVersion::v4 || (mcast->bytes[0] & 0xf0) != 0xe0)
      return "--xdp-mcast must be an IPv4 multicast address (e.g. 239.77.0.1)";
    if (o.job_id > 255 || o.xdp_scale <= 0 || o.xdp_timeout_ms <= 0 || o.xdp_port == 0 || o.xdp_port > 65535)
      return "the XDP tier needs --job-id 0..255, --xdp-scale > 0, --xdp-timeout-ms > 0 and a UDP port";
    x.mcast = *mcast;
    if (o.xdp_key_file.empty() && !std::getenv(wire::kXaggKeyEnv))
      return "--mode " + o.mode_name + " needs the job's key for the XDP tier (every packet carries a MAC under it): " +
             "--xdp-key-file FILE, the file the heads' key_file names (inagg-xdp key FILE makes one), or $" +
             wire::kXaggKeyEnv;
    std::string why;
    if (!wire::load_xagg_key(wire::kXaggKeyEnv, o.xdp_key_file, &x.key, &why)) return why;
  }
  if (o.op != "sum")
    return "--op (-o) '" + o.op + "' is not supported: the appliance and the XDP tier only sum (-o sum)";
  if (o.max_bytes < o.min_bytes)
    return "--maxbytes (-e) " + std::to_string(o.max_bytes) + " is below --minbytes (-b) " +
           std::to_string(o.min_bytes);
  if (o.factor < 2 && o.step_bytes == 0)
    return "the sizes never grow: give --stepfactor (-f) >= 2 or --stepbytes (-i) > 0";
  if (o.factor >= 2 && o.min_bytes == 0) return "with --stepfactor (-f), --minbytes (-b) must be above 0";
  if (o.iters == 0) return "--iters (-n) must be at least 1";
  if (o.max_bytes > (64ull << 30)) return "--maxbytes (-e) above 64G is not supported";
  x.values = o.xdp_values;
  x.window = o.xdp_window;
  x.port = static_cast<uint16_t>(o.xdp_port);
  x.timeout_ms = o.xdp_timeout_ms;
  if (o.register_socket.rfind(control::kTcpScheme, 0) == 0) {
    if (o.control_secret_file.empty() && !std::getenv(control::kControlSecretEnv))
      return "--register tcp://HOST:PORT needs --control-secret-file or $INAGG_CONTROL_SECRET (a tenant's credential "
             "from the appliance's --control-secret-file)";
    std::string why;
    if (!control::load_secret_file(o.control_secret_file, &o.control_secret, &why))
      return "--control-secret-file: " + why;
  }
  o.use_verbs = o.transport_name == "verbs";
  if (o.use_verbs) {
    if (!verbs_supported())
      return "--transport verbs: this build of inagg-worker has no verbs support (meson did not find libibverbs; "
             "install libibverbs-dev and rebuild)";
    if (o.mode != Mode::ina && o.mode != Mode::ring)
      return "--transport verbs runs --mode ina or ring (auto's fall-over over verbs is not done yet)";
    if (o.exchange_port == 0 || o.exchange_port > 65535) return "--exchange-port must be a TCP port";
    if (o.verbs.qp_timeout < 1 || o.verbs.qp_timeout > 31) return "--qp-timeout must be 1..31 (4.096 us x 2^t)";
  } else if (o.transport_name == "udp" && o.exchange) {
    if (o.mode != Mode::ina && o.mode != Mode::ring)
      return "--exchange runs --mode ina or ring (auto's fall-over with verbs ranks is not done yet)";
    if (o.exchange_port == 0 || o.exchange_port > 65535) return "--exchange-port must be a TCP port";
  } else if (o.transport_name != "udp") {
    return "--transport must be udp (the software RoCE endpoint) or verbs (rdma-core: an RDMA NIC or Soft-RoCE)";
  }
  // Every rank with a transport meets the others at rank 0 (the exchange, or the meeting on the
  // rack plan): with the job's secret, or, by name only, without one on a lab network.
  if (o.mode != Mode::xdp) {
    std::string why;
    const bool given = !o.exchange_secret_file.empty() || std::getenv(kExchangeSecretEnv);
    if (given && !util::load_secret(kExchangeSecretEnv, o.exchange_secret_file, &o.exchange_secret, &why))
      return std::string("the ranks' meeting secret: ") + why;
    if (!given && !o.insecure_exchange)
      return std::string("the ranks' meeting needs the job's secret, the same on every rank: set $") +
             kExchangeSecretEnv + " where the job is launched (e.g. export " + kExchangeSecretEnv +
             "=$(head -c 24 /dev/urandom | base64); mpirun -x " + kExchangeSecretEnv +
             " and srun pass it on) or give --exchange-secret-file FILE (mode 0600); on a lab network of your own, "
             "--insecure-exchange runs the meeting without one";
  }
  o.rack.rank = o.rank;
  return "";
}

namespace {

RendezvousConfig rendezvous_config(const TransportRequest& r) {
  RendezvousConfig rc;
  rc.rank = r.rack.rank;
  rc.workers = r.rack.workers;
  rc.host = r.rack.ip_of(0);
  rc.port = r.exchange_port;
  rc.deadline_ns = r.deadline_ns;
  rc.secret = r.exchange_secret;
  rc.insecure = r.insecure_exchange;
  return rc;
}

}  // namespace

std::unique_ptr<Transport> open_udp_transport(const TransportRequest& r, std::string* error) {
  auto t = std::make_unique<UdpRcTransport>();
  if (!t->open(r.rack.rc_config(r.ring, r.ack_timeout_ms, r.retry, r.send_bytes, r.receive_bytes), error))
    return nullptr;
  if (!r.exchange) {
    if (!t->meet(rendezvous_config(r), error)) return nullptr;
    return t;
  }
  std::vector<RankEndpoint> all;
  if (!t->exchange(rendezvous_config(r), &all, error)) return nullptr;
  t->set_peers(all[r.rack.successor()], all[r.rack.predecessor()]);  // connected by open_receive()
  t->set_job_connections(connections_of(all));
  return t;
}

#ifndef INAGG_HAVE_VERBS
bool verbs_supported() { return false; }

std::unique_ptr<Transport> open_verbs_transport(const TransportRequest&, std::string* error) {
  *error = "this build has no verbs support (meson did not find libibverbs: install libibverbs-dev and rebuild)";
  return nullptr;
}
#else
bool verbs_supported() { return true; }

std::unique_ptr<Transport> open_verbs_transport(const TransportRequest& r, std::string* error) {
  auto t = std::make_unique<VerbsTransport>();
  VerbsConfig c;
  c.dev = r.verbs;
  c.rank = r.rack.rank;
  c.start_psn = RackPlan::start_psn(r.rack.rank);
  c.payload = r.rack.payload;
  c.window = r.rack.window;
  c.retry = r.retry;
  c.send_bytes = r.send_bytes;
  c.receive_bytes = r.receive_bytes;
  if (!t->open(c, error)) return nullptr;
  std::vector<RankEndpoint> all;
  if (!t->exchange(rendezvous_config(r), &all, error)) return nullptr;
  t->set_peers(all[r.rack.successor()], all[r.rack.predecessor()]);  // connected by open_receive()
  t->set_job_connections(connections_of(all));
  return t;
}
#endif

Worker::Worker(const WorkerOptions& o, TransportFactory transport)
    : o_(o), open_transport_(std::move(transport)), fallover_(o.workers) {
  geometry_ = {o.rack.dtype, o.workers, o.message, o.mode, o.rack.collective, o.rack.chunk};
  last_tier_ = o.mode == Mode::xdp ? Tier::xdp : Tier::appliance;
}

bool Worker::fail(std::string why) {
  error_ = std::move(why);
  return false;
}

bool Worker::open(std::string* error) {
  deadline_ns_ = now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9);
  if (o_.mode != Mode::xdp) {
    const TransportRequest r{o_.rack,
                             o_.mode == Mode::ring,
                             o_.ack_timeout_ms,
                             o_.retry,
                             geometry_.send_bytes(o_.max_bytes),
                             geometry_.receive_bytes(o_.max_bytes),
                             o_.verbs,
                             static_cast<uint16_t>(o_.exchange_port),
                             deadline_ns_,
                             o_.exchange && !o_.use_verbs,
                             o_.exchange_secret,
                             o_.insecure_exchange};
    transport_ = open_transport_(r, error);
    if (!transport_) return false;
    // A transport whose QPs are the device's registers them instead of the plan's.
    if (const std::vector<RankConnection>* c = transport_->job_connections()) o_.rack.connections = *c;
    // auto: silence for twice the requester's retry budget means the predecessor fell over.
    const uint64_t ack_ns = static_cast<uint64_t>(o_.ack_timeout_ms * 1e6);
    const uint64_t stall_ns = geometry_.committed() ? 2 * (o_.retry + 1) * ack_ns : 0;
    exchange_ = std::make_unique<RingExchange>(*transport_, o_.message, deadline_ns_, stall_ns);
    // The receive side opens once the job is active (register_job), where this rank learns it.
    // Where it cannot, no appliance stands between the ranks to wait for: the ring (its writes
    // go rank to rank, switched, never summed), and an ina job someone else registers (whose
    // ranks are told nothing). There the region key from the meeting and the peers' addresses
    // guard the receive side alone. (The XDP tier has no receive region: xagg_client.hpp.)
    if (!registers() && !transport_->open_receive(error)) return false;
  }
  if (o_.uses_tier()) {
    xagg_ = std::make_unique<XaggClient>();
    if (!xagg_->open(o_.xdp.xagg_config(o_.rack), error)) return false;
    tier_ = std::make_unique<TierAllreduce>(*xagg_, o_.rack.dtype, o_.workers, o_.xdp_scale, o_.max_bytes);
  }
  data_.assign(geometry_.data_bytes(o_.max_bytes), 0);
  result_.assign(geometry_.data_bytes(o_.max_bytes), 0);
  if (geometry_.committed()) held_.assign(o_.max_bytes, 0);
  return true;
}

bool Worker::registers() const {
  return (o_.mode == Mode::ina || o_.mode == Mode::automatic) && !o_.register_socket.empty();
}

int Worker::register_job() {
  if (!registers()) return 0;
  const bool tallied = o_.mode == Mode::automatic;
  // auto: an appliance that cannot be reached, refuses the job or does not activate it within
  // 5 s means the XDP tier from the start.
  const uint64_t wait_until = tallied ? std::min<uint64_t>(deadline_ns_, now_ns() + 5'000'000'000ull) : deadline_ns_;
  const ControlClient control(o_.register_socket, 5000, o_.control_secret);
  const Registration r = control.register_job(o_.rank == 0, o_.rack.job_text(), o_.job_id, wait_until, 20, o_.rank);
  const std::string not_active = "job " + std::to_string(o_.job_id);
  switch (r.outcome) {
    case Registration::Outcome::active: {
      // Only now: until the job was active the appliance switched its packets unaggregated, and
      // a WRITE taken then (anyone's, with the job's QPN) could have been taken for a sum.
      std::string why;
      if (transport_->open_receive(&why)) return 0;
      fail("opening the receive side: " + why);
      return 1;
    }
    case Registration::Outcome::unreachable:
      if (!tallied) {
        fail(r.reason);
        return 2;
      }
      fallover_.registration_failed(FallOverCause::appliance_absent, "the appliance cannot be reached: " + r.reason);
      return 0;
    case Registration::Outcome::refused: {
      const std::string line = r.reason.substr(0, r.reason.find('\n'));
      if (!tallied) {
        fail("the appliance refused the job: " + line);
        return 2;
      }
      fallover_.registration_failed(FallOverCause::job_refused, "the appliance refused the job: " + line);
      return 0;
    }
    case Registration::Outcome::not_active:
      if (!tallied) {
        fail(not_active + " never became active on " + o_.register_socket);
        return 1;
      }
      fallover_.registration_failed(FallOverCause::job_not_active,
                                    not_active + " is not active on " + o_.register_socket);
      return 0;
  }
  return 0;
}

Tier Worker::tier() const {
  if (o_.mode == Mode::automatic) return fallover_.tier();
  return o_.mode == Mode::xdp ? Tier::xdp : Tier::appliance;
}

bool Worker::collective(uint64_t bytes, bool in_place) {
  if (!geometry_.rotated()) return allreduce(bytes, in_place);
  const unsigned n = o_.workers, r = o_.rank;
  const size_t es = geometry_.element();
  const uint64_t shard = bytes / es / n * es;
  if (shard * n != bytes)
    return fail("a " + o_.collective_name + " of " + std::to_string(bytes) + " bytes: not " + std::to_string(n) +
                " shards of whole elements");
  const Rotation rot{n, geometry_.chunk};
  Outcome out;
  if (geometry_.collective == control::Collective::reduce_scatter) {
    uint8_t* mine = in_place ? data() + r * shard : result();
    // In place, this rank's shard of the input is the output's place: the input is copied first
    // (the schedule reads every shard of it while the sums arrive).
    if (in_place) std::memcpy(result(), data(), bytes);
    out = ina_reduce_scatter(*exchange_, geometry_, rot, r, in_place ? result() : data(), mine, shard);
  } else {
    const uint8_t* mine = in_place ? data() + r * shard : data();
    if (in_place) std::memcpy(result(), mine, shard);
    out =
        ina_all_gather(*exchange_, geometry_, rot, r, in_place ? result() : mine, in_place ? data() : result(), shard);
  }
  return out.ok() || fail(out.error);
}

bool Worker::allreduce(uint64_t bytes, bool in_place) {
  if (geometry_.rotated()) return collective(bytes, in_place);
  uint8_t* out = in_place ? data() : result();
  // ina sends from the input and receives into the output; the others work in the output buffer.
  if (o_.mode == Mode::ina) {
    if (Outcome r = ina_allreduce(*exchange_, geometry_, data(), out, bytes); !r.ok()) return fail(r.error);
    return true;
  }
  if (!in_place) std::memcpy(out, data(), bytes);
  switch (o_.mode) {
    case Mode::ina:
      break;
    case Mode::ring:
      if (Outcome r = ring_allreduce(*exchange_, geometry_, o_.rank, out, bytes, geometry_.ring_stride(o_.max_bytes));
          !r.ok())
        return fail(r.error);
      return true;
    case Mode::xdp: {
      std::string why;
      return tier_->run(out, bytes, deadline_ns_, &why) || fail(why);
    }
    case Mode::automatic:
      return auto_allreduce(out, bytes);
  }
  return fail("unknown mode");
}

bool Worker::auto_allreduce(uint8_t* buf, uint64_t bytes) {
  if (fallover_.state() == FallOver::State::appliance) {
    bool have_data = false;
    const Outcome r = tallied_allreduce(*exchange_, geometry_, buf, bytes, held_.data(), &have_data);
    if (r.ok()) {
      std::memcpy(buf, held_.data(), bytes);
      fallover_.appliance_done();
      last_tier_ = Tier::appliance;
      return true;
    }
    fallover_.appliance_failed(r.cause, r.error, have_data);
  }
  if (fallover_.state() == FallOver::State::agreeing) {
    if (!fall_over()) return false;
    if (fallover_.index() > fallover_.fell_over_at()) {  // every rank holds this allreduce's appliance sums
      std::memcpy(buf, held_.data(), bytes);
      last_tier_ = Tier::appliance;
      return true;
    }
  }
  std::string why;
  if (!tier_->run(buf, bytes, deadline_ns_, &why)) {
    fallover_.tier_failed(why);
    return fail(fallover_.error());
  }
  fallover_.tier_done();
  last_tier_ = Tier::xdp;
  return true;
}

bool Worker::fall_over() {
  FallOver::Agreement a = fallover_.contribution();
  std::string why;
  if (!tier_->agree(&a, deadline_ns_, &why)) {
    fallover_.tier_failed(why);
    return fail(fallover_.error());
  }
  const FallOver::Resume resume = fallover_.agreed(a);
  if (on_note)
    on_note("# rank " + std::to_string(o_.rank) + ": falling over to the XDP tier at allreduce " +
            std::to_string(fallover_.fell_over_at()) + " (" + fallover_.reason() +
            "); the tier takes over from allreduce " + std::to_string(fallover_.resume_point()) + "\n");
  return resume != FallOver::Resume::error || fail(fallover_.error());
}

bool Worker::barrier(const std::string& what) {
  // Only the appliance holds a rank's packets for the others; the XDP tier has rounds of its own.
  // auto: no barriers after the start either. A rank that saw the appliance fail goes to the
  // tier's fall-over agreement while another, whose last allreduce completed, would wait for it in
  // a barrier: each would wait for the other. Its tallied path tolerates a silent predecessor for
  // twice the RC budget instead.
  if (o_.mode == Mode::automatic) return true;
  if (!transport_ || tier() != Tier::appliance || !transport_->error().empty()) return true;
  std::string why;
  return transport_->barrier(what, &why) || fail("the ranks' barrier before " + what + ": " + why);
}

void Worker::serve(int wait_ms) {
  if (transport_ && tier() == Tier::appliance && transport_->error().empty())
    transport_->poll(wait_ms);
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
}

bool Worker::finish() {
  if (transport_ && tier() == Tier::appliance) {
    transport_->finish(deadline_ns_);
    if (o_.mode != Mode::automatic && !transport_->error().empty()) return fail(transport_->error());
  }
  if (o_.mode != Mode::automatic || fallover_.state() != FallOver::State::appliance) return true;
  fallover_.finish();
  FallOver::Agreement a = fallover_.contribution();
  std::string why;
  if (!tier_->agree(&a, deadline_ns_, &why)) {
    fallover_.tier_failed(why);
    return fail(fallover_.error());
  }
  fallover_.closing_agreed(a);
  return fallover_.state() == FallOver::State::done || fail(fallover_.error());
}

std::optional<TransportCounters> Worker::transport_counters() const {
  if (!transport_) return std::nullopt;
  return transport_->counters();
}

}  // namespace inagg::client
