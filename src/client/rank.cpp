// client::Rank (rank.hpp): the set-up on the rack plan, registration on the appliance, the
// collectives in pieces, auto's fall-over. The caller's-channel set-up is in rank_peers.cpp, the
// options' checks in rank_options.cpp.
#include "inagg/client/rank.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "inagg/client/clock.hpp"
#include "inagg/client/control_client.hpp"
#include "inagg/client/transport/udp_transport.hpp"
#include "inagg/control/job_file.hpp"

namespace inagg::client {

Rank::Rank(const RankOptions& o, TransportFactory transport)
    : o_(o), open_transport_(std::move(transport)), fallover_(o.geometry.ranks) {
  const RankOptions::Resolved& r = o_.resolved;
  if (!open_transport_) open_transport_ = r.use_verbs ? open_verbs_transport : open_udp_transport;
  geometry_ = {r.dtype, o.geometry.ranks, o.geometry.message, r.mode, r.collective, o.geometry.chunk};
  // The chunk formula: the regions hold chunk_bytes rounded up to whole messages; a piece is the
  // data those messages carry besides their tallies. A reduce-scatter's or all-gather's lane
  // piece is 1/n of it of each shard (its stream, n - 1 such pieces, needs regions no larger than
  // the allreduce's), whole messages.
  const uint64_t dpm = geometry_.data_per_message();
  piece_ = geometry_.padded(o.geometry.chunk_bytes) / o.geometry.message * dpm;
  lane_piece_ = std::max<uint64_t>(1, piece_ / dpm / o.geometry.ranks) * dpm;
  for (int i = 0; i < 2; ++i)
    lanes_[i].g = {r.dtype,
                   o.geometry.ranks,
                   o.geometry.message,
                   Mode::ina,
                   i == 0 ? control::Collective::reduce_scatter : control::Collective::all_gather,
                   1};
  last_tier_ = r.mode == Mode::xdp ? Tier::xdp : Tier::appliance;
  stall_ns_ = geometry_.committed()
                  // auto: silence for twice the requester's retry budget means the predecessor fell over.
                  ? 2 * (o.retry + 1) * static_cast<uint64_t>(o.ack_timeout_ms * 1e6)
                  : static_cast<uint64_t>(o.stall_s * 1e9);
  if (o.address) {
    // Drawn now: endpoint() publishes it before open() binds the transport.
    std::string why;
    const std::optional<RegionKey> key = random_region_key(&why);
    if (key)
      key_ = *key;
    else
      error_ = why;
  }
}

Rank::~Rank() = default;

bool Rank::fail(std::string why) {
  error_ = std::move(why);
  return false;
}

int Rank::fail_code(int code, std::string why) {
  error_ = std::move(why);
  return code;
}

int Rank::start() {
  deadline_ns_ = now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9);
  RackPlan& rack = o_.resolved.rack;
  // The order: bind the transport (verbs, --exchange: and exchange the endpoints, whose QPs the
  // job registers); ask the appliance whether it answers at all, so that a rank learns at once
  // that it is absent instead of waiting in the meeting; meet the other ranks at rank 0; register
  // the job; open the receive side.
  std::optional<TransportRequest> request;
  if (o_.resolved.mode != Mode::xdp) {
    request = TransportRequest{rack,
                               o_.resolved.mode == Mode::ring,
                               o_.ack_timeout_ms,
                               o_.retry,
                               geometry_.send_bytes(piece_),
                               geometry_.receive_bytes(piece_),
                               o_.verbs,
                               static_cast<uint16_t>(o_.exchange_port),
                               deadline_ns_,
                               o_.meet,
                               o_.exchange && !o_.resolved.use_verbs,
                               o_.exchange_secret,
                               o_.insecure_exchange};
    transport_ = open_transport_(*request, &error_);
    if (!transport_) return 2;
    // A transport whose QPs are the device's registers them instead of the plan's.
    if (const std::vector<RankConnection>* c = transport_->job_connections()) rack.connections = *c;
    const uint64_t job_deadline = o_.stall_s > 0 ? std::numeric_limits<uint64_t>::max() : deadline_ns_;
    exchange_ = std::make_unique<RingExchange>(*transport_, o_.geometry.message, job_deadline, stall_ns_);
  }
  if (o_.uses_tier()) {
    xagg_ = std::make_unique<XaggClient>();
    if (!xagg_->open(o_.resolved.xdp.xagg_config(rack), &error_)) return 2;
    tier_ = std::make_unique<TierAllreduce>(*xagg_, o_.resolved.dtype, o_.geometry.ranks, o_.xdp_scale, piece_);
  }
  if (o_.resolved.mode == Mode::ring) scratch_.assign(geometry_.data_bytes(piece_), 0);
  if (geometry_.committed()) held_.assign(piece_, 0);
  bool settled = false;  // the registration's outcome is known (auto: the appliance is absent)
  if (o_.registers()) {
    std::string why;
    ControlClient(o_.control, 5000, o_.resolved.control_secret).job_state(o_.job_id, &why);
    if (!why.empty()) {
      if (const int code = settle({Registration::Outcome::unreachable, why}); code != 0) return code;
      settled = true;
    }
  }
  if (transport_ && !meet_on_plan(*transport_, *request, &error_)) return 2;
  if (o_.registers() && !settled)
    if (const int code = register_rack_job(); code != 0) return code;
  if (!transport_) return 0;
  // The receive side opens once the job is active, where this rank learns it: until then the
  // appliance switched its packets unaggregated, and a WRITE taken then (anyone's, with the job's
  // QPN) could have been taken for a sum. Where it cannot learn it, no appliance stands between
  // the ranks to wait for: the ring (its writes go rank to rank, switched, never summed), and an
  // ina job someone else registers. There the region key from the meeting and the peers'
  // addresses guard the receive side alone. (The XDP tier has no receive region: xagg_client.hpp.)
  if (o_.registers() && tier() != Tier::appliance) return 0;  // auto: the appliance failed, the tier instead
  std::string why;
  if (!transport_->open_receive(&why)) return fail_code(1, "opening the receive side: " + why);
  return 0;
}

// start()'s registration: rank 0 adds the job, every rank waits until it is active.
int Rank::register_rack_job() {
  // auto: an appliance that cannot be reached, refuses the job or does not activate it within
  // 5 s means the XDP tier from the start.
  const uint64_t wait_until = o_.resolved.mode == Mode::automatic
                                  ? std::min<uint64_t>(deadline_ns_, now_ns() + 5'000'000'000ull)
                                  : deadline_ns_;
  const ControlClient control(o_.control, 5000, o_.resolved.control_secret);
  return settle(control.register_job(o_.geometry.rank == 0, o_.resolved.rack.job_text(), o_.job_id, wait_until, 20,
                                     o_.geometry.rank));
}

// The registration switch: what each outcome means for a rank that registers through start()
// (ina: stop with a reason and an exit code; auto: the XDP tier instead). 0 to go on.
int Rank::settle(const Registration& r) {
  const bool tallied = o_.resolved.mode == Mode::automatic;
  const uint32_t id = o_.job_id;
  const std::string line = r.reason.substr(0, r.reason.find('\n'));
  switch (r.outcome) {
    case Registration::Outcome::active:
      return 0;
    case Registration::Outcome::unreachable:
      if (!tallied) return fail_code(2, "the appliance cannot be reached: " + r.reason);
      fallover_.registration_failed(FallOverCause::appliance_absent, "the appliance cannot be reached: " + r.reason);
      return 0;
    case Registration::Outcome::refused:
      if (!tallied) return fail_code(2, "the appliance refused the job: " + line);
      fallover_.registration_failed(FallOverCause::job_refused, "the appliance refused the job: " + line);
      return 0;
    case Registration::Outcome::not_active:
      if (!tallied)
        return fail_code(1, "job " + std::to_string(id) + " never became active on " + o_.control + " within " +
                                std::to_string(static_cast<int>(o_.timeout_s)) + " s (is rank 0 running?)");
      fallover_.registration_failed(FallOverCause::job_not_active,
                                    "job " + std::to_string(id) + " is not active on " + o_.control);
      return 0;
  }
  return 0;
}

// A job stopped while it ran (another host claimed a rank's place, docs/binding.md) or failed is
// listed so for a while, with the reason: every rank names it beside its own error.
std::string Rank::appliance_word(uint32_t id) const {
  if (o_.resolved.mode != Mode::ina || !o_.registers()) return "";
  std::string e;
  const std::optional<control::JobListLine> l =
      ControlClient(o_.control, 2000, o_.resolved.control_secret).job_state(id, &e);
  if (!l || (l->state != "refused" && l->state != "failed") || l->error.empty()) return "";
  return "; the appliance: job " + std::to_string(id) + " " + l->state + ": " + l->error;
}

std::string Rank::register_job(uint32_t id, control::Collective c, bool adds) {
  if (o_.control.empty()) return "no control socket was given";
  const ControlClient control(o_.control, 5000, o_.resolved.control_secret);
  const Registration r = control.register_job(
      adds, job_text(id, c), id, now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9), 20, o_.geometry.rank);
  switch (r.outcome) {
    case Registration::Outcome::active:
      return "";
    case Registration::Outcome::unreachable:
      return "the appliance cannot be reached at " + o_.control + ": " + r.reason;
    case Registration::Outcome::refused:
      return "the appliance refused job " + std::to_string(id) + ": " + r.reason.substr(0, r.reason.find('\n'));
    case Registration::Outcome::not_active:
      break;
  }
  return "job " + std::to_string(id) + " did not become active on " + o_.control + " within " +
         std::to_string(static_cast<int>(o_.timeout_s)) + " s";
}

bool Rank::control_request(const std::string& text, std::string* reply, std::string* error) const {
  if (o_.control.empty()) {
    *error = "no control socket was given";
    return false;
  }
  return ControlClient(o_.control, 5000, o_.resolved.control_secret).request(text, reply, error);
}

std::optional<control::JobListLine> Rank::job_state(uint32_t id, std::string* error) const {
  if (o_.control.empty()) {
    *error = "no control socket was given";
    return std::nullopt;
  }
  return ControlClient(o_.control, 5000, o_.resolved.control_secret).job_state(id, error);
}

Tier Rank::tier() const {
  if (o_.resolved.mode == Mode::automatic) return fallover_.tier();
  return o_.resolved.mode == Mode::xdp ? Tier::xdp : Tier::appliance;
}

// A collective may run: opened, and no earlier failure (which every later call repeats).
bool Rank::ready(const char* what) {
  if (!error_.empty()) return false;
  if (!exchange_ && !tier_) return fail(std::string(what) + " before the rank was started or opened");
  return true;
}

bool Rank::allreduce(const uint8_t* in, uint8_t* out, uint64_t bytes) {
  if (geometry_.rotated())
    return fail("this rank's job is a " + o_.geometry.collective + ": call " + o_.geometry.collective);
  if (!ready("allreduce")) return false;
  for (uint64_t off = 0; off < bytes; off += piece_) {
    const uint64_t n = std::min(piece_, bytes - off);
    if (!allreduce_piece(in + off, out + off, n)) {
      std::string why = "allreduce " + std::to_string(collectives_ + 1) + " (" + std::to_string(bytes) + " bytes of " +
                        std::string(util::dtype_name(o_.resolved.dtype)) + "): " + error_;
      if (transport_ && last_tier_ == Tier::appliance) {
        why += appliance_word(o_.job_id);
        const TransportCounters t = transport_->counters();
        why += " [this rank so far: " + std::to_string(t.packets_sent) + " packets sent, " +
               std::to_string(t.retransmitted) + " again, " + std::to_string(t.timeouts) + " ACK timeouts, " +
               std::to_string(t.naks_received) + " NAKs; " + std::to_string(t.accepted) + " received, " +
               std::to_string(t.duplicates) + " duplicates]";
      }
      return fail(why);
    }
    messages_ += geometry_.messages_of(n);
  }
  ++collectives_;
  bytes_ += bytes;
  return true;
}

bool Rank::allreduce_piece(const uint8_t* in, uint8_t* out, uint64_t bytes) {
  switch (o_.resolved.mode) {
    case Mode::ina:  // sends from the input and receives into the output
      if (Outcome r = ina_allreduce(*exchange_, geometry_, in, out, bytes); !r.ok()) return fail(r.error);
      return true;
    case Mode::ring: {
      // The ring works on n chunks padded to whole elements: in a buffer of its own.
      std::memcpy(scratch_.data(), in, bytes);
      if (Outcome r = ring_allreduce(*exchange_, geometry_, o_.geometry.rank, scratch_.data(), bytes,
                                     geometry_.ring_stride(piece_));
          !r.ok())
        return fail(r.error);
      std::memcpy(out, scratch_.data(), bytes);
      return true;
    }
    case Mode::xdp: {
      if (in != out) std::memcpy(out, in, bytes);
      std::string why;
      return tier_->run(out, bytes, deadline_ns_, &why) || fail(why);
    }
    case Mode::automatic:
      if (in != out) std::memcpy(out, in, bytes);
      return auto_allreduce(out, bytes);
  }
  return fail("unknown mode");
}

bool Rank::auto_allreduce(uint8_t* buf, uint64_t bytes) {
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

bool Rank::fall_over() {
  FallOver::Agreement a = fallover_.contribution();
  std::string why;
  if (!tier_->agree(&a, deadline_ns_, &why)) {
    fallover_.tier_failed(why);
    return fail(fallover_.error());
  }
  const FallOver::Resume resume = fallover_.agreed(a);
  if (on_note)
    on_note("# rank " + std::to_string(o_.geometry.rank) + ": falling over to the XDP tier at allreduce " +
            std::to_string(fallover_.fell_over_at()) + " (" + fallover_.reason() +
            "); the tier takes over from allreduce " + std::to_string(fallover_.resume_point()) + "\n");
  return resume != FallOver::Resume::error || fail(fallover_.error());
}

bool Rank::reduce_scatter(const uint8_t* in, uint8_t* out, uint64_t shard_bytes) {
  return rotated(control::Collective::reduce_scatter, in, out, shard_bytes);
}

bool Rank::all_gather(const uint8_t* in, uint8_t* out, uint64_t shard_bytes) {
  return rotated(control::Collective::all_gather, in, out, shard_bytes);
}

// Through the job's own connections when the job is this collective (Rotation of its chunk), else
// through the collective's lane. Long shards go in pieces: the same range of every shard at a
// time (the input's shards for a reduce-scatter, the output's for an all-gather, shard_bytes apart).
bool Rank::rotated(control::Collective c, const uint8_t* in, uint8_t* out, uint64_t shard_bytes) {
  const bool rs = c == control::Collective::reduce_scatter;
  const char* name = control::collective_name(c);
  const bool own = geometry_.collective == c;
  Lane& lane = lanes_[rs ? 0 : 1];
  if (!ready(name)) return false;
  if (!own && !lane.x)
    return fail(std::string(name) + " needs a job of that collective (" + o_.geometry.collective +
                " here) or the options' lanes");
  if (shard_bytes % geometry_.element())
    return fail(std::string(name) + " of " + std::to_string(shard_bytes) + " bytes a rank: not whole elements");
  RingExchange& x = own ? *exchange_ : *lane.x;
  const Geometry& g = own ? geometry_ : lane.g;
  const Rotation rot{o_.geometry.ranks, own ? o_.geometry.chunk : 1u};
  const uint64_t piece = own ? std::max<uint64_t>(geometry_.element(), geometry_.chunk_of(piece_)) : lane_piece_;
  for (uint64_t off = 0; off < shard_bytes; off += piece) {
    const uint64_t len = std::min(piece, shard_bytes - off);
    const Outcome r = rs ? ina_reduce_scatter(x, g, rot, o_.geometry.rank, in + off, out + off, len, shard_bytes)
                         : ina_all_gather(x, g, rot, o_.geometry.rank, in + off, out + off, len, shard_bytes);
    if (!r.ok())
      return fail(std::string(name) + " of " + std::to_string(shard_bytes) + " bytes a rank (" +
                  std::string(util::dtype_name(o_.resolved.dtype)) + "): " + r.error +
                  (own ? appliance_word(o_.job_id) : ""));
  }
  ++collectives_;
  bytes_ += shard_bytes * o_.geometry.ranks;
  return true;
}

bool Rank::barrier(const std::string& what) {
  // Only the appliance holds a rank's packets for the others; the XDP tier has rounds of its own.
  // auto: no barriers after the start either. A rank that saw the appliance fail goes to the
  // tier's fall-over agreement while another, whose last allreduce completed, would wait for it in
  // a barrier: each would wait for the other. Its tallied path tolerates a silent predecessor for
  // twice the RC budget instead.
  if (o_.resolved.mode == Mode::automatic) return true;
  if (!transport_ || tier() != Tier::appliance || !transport_->error().empty()) return true;
  std::string why;
  return transport_->barrier(what, &why) || fail("the ranks' barrier before " + what + ": " + why);
}

bool Rank::gather(const std::string& what, const std::string& mine, std::vector<std::string>* all) {
  if (!can_gather()) return fail("gathering '" + what + "': the ranks of this job do not meet at rank 0");
  std::string why;
  return transport_->gather(what, mine, all, &why) || fail("the ranks' gather of " + what + ": " + why);
}

bool Rank::can_gather() const { return transport_ && !o_.address && (o_.meet || o_.exchange || o_.resolved.use_verbs); }

void Rank::serve(int wait_ms) {
  if (transport_ && tier() == Tier::appliance && transport_->error().empty())
    transport_->poll(wait_ms);
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
}

bool Rank::finish() {
  const uint64_t deadline = o_.stall_s > 0 ? now_ns() + static_cast<uint64_t>(o_.timeout_s * 1e9) : deadline_ns_;
  if (transport_ && tier() == Tier::appliance) {
    transport_->finish(deadline);
    if (o_.resolved.mode != Mode::automatic && !transport_->error().empty()) return fail(transport_->error());
  }
  if (o_.resolved.mode != Mode::automatic || fallover_.state() != FallOver::State::appliance) return true;
  fallover_.finish();
  FallOver::Agreement a = fallover_.contribution();
  std::string why;
  if (!tier_->agree(&a, deadline, &why)) {
    fallover_.tier_failed(why);
    return fail(fallover_.error());
  }
  fallover_.closing_agreed(a);
  return fallover_.state() == FallOver::State::done || fail(fallover_.error());
}

std::optional<TransportCounters> Rank::transport_counters() const {
  if (udp_) return udp_->counters_with_lanes();
  if (!transport_) return std::nullopt;
  return transport_->counters();
}

std::string Rank::transport_description() const { return transport_ ? transport_->description() : ""; }
const XaggCounters* Rank::tier_counters() const { return xagg_ ? &xagg_->counters() : nullptr; }
uint64_t Rank::saturated() const { return tier_ ? tier_->saturated() : 0; }

}  // namespace inagg::client
