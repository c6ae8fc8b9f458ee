#include "inagg/client/ina_rank.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "inagg/client/clock.hpp"
#include "inagg/client/worker.hpp"

namespace inagg::client {
namespace {

// check_job_options speaks of inagg-worker's flags; say the options' field names instead.
std::string field_names(std::string why) {
  static const std::pair<const char*, const char*> names[] = {
      {"--workers", "workers"}, {"--message", "message"}, {"--payload", "payload"}, {"--dtype", "dtype"}};
  for (const auto& [flag, field] : names)
    for (size_t at; (at = why.find(flag)) != std::string::npos;) why.replace(at, std::string(flag).size(), field);
  return why;
}

}  // namespace

std::string InaRank::configure(const InaRankOptions& o) {
  o_ = o;
  if (o.address.version != util::IpVersion::v4) return "the rank's address must be IPv4 (RoCEv2 over IPv4)";
  if (o.workers >= 2 && o.rank >= o.workers) return "rank must be below the number of ranks";
  if (o.window == 0) return "window must be at least 1";
  if (!(o.ack_timeout_ms > 0) || !(o.stall_s > 0)) return "ack_timeout_ms and the stall timeout must be positive";
  if (o.chunk_bytes == 0) return "chunk_bytes must be positive";
  // The plan's rank-r address is this rank's own: its interface gives the payload (auto) and the
  // checks against its MTU, as for inagg-worker. The peers' addresses come from their endpoints.
  WorkerOptions w;
  w.rank = o.rank;
  w.rank_given = true;
  w.workers = o.workers;
  w.dtype_name = o.dtype;
  w.message = o.message;
  w.payload = o.payload;
  w.window = o.window;
  w.ip_base = util::ip_text(util::IpAddr::v4(o.address.v4_host_order() - o.rank - 1));
  if (std::string why = check_job_options(w); !why.empty()) return field_names(why);
  plan_ = w.rack;
  o_.payload = w.payload;
  // Drawn now: endpoint() publishes it before open() binds the transport.
  std::string why;
  const std::optional<RegionKey> key = random_region_key(&why);
  if (!key) return why;
  key_ = *key;
  geometry_ = {plan_.dtype, o.workers, o.message, Mode::ina};
  // The regions hold chunk_bytes rounded up to whole messages; a chunk is the data those messages
  // carry besides their tallies (ina_allreduce).
  chunk_ = geometry_.padded(o.chunk_bytes) / o.message * geometry_.data_per_message();
  // A reduce-scatter's or all-gather's piece: 1/n of a chunk of each shard (so its stream, n - 1
  // such pieces, needs regions no larger than the allreduce's), whole messages of data.
  piece_ = std::max<uint64_t>(1, chunk_ / geometry_.data_per_message() / std::max(1u, o.workers)) *
           geometry_.data_per_message();
  for (int i = 0; i < 2; ++i)
    lanes_[i].g = {plan_.dtype,
                   o.workers,
                   o.message,
                   Mode::ina,
                   i == 0 ? control::Collective::reduce_scatter : control::Collective::all_gather,
                   1};
  return "";
}

RankEndpoint InaRank::endpoint() const {
  RankEndpoint e;
  e.rank = o_.rank;
  const util::IpAddr& a = o_.address;
  e.gid = util::IpAddr::v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a.bytes[0], a.bytes[1], a.bytes[2], a.bytes[3]});
  e.send_qpn = RackPlan::send_qpn(o_.rank);
  e.recv_qpn = RackPlan::recv_qpn(o_.rank);
  e.start_psn = RackPlan::start_psn(o_.rank);
  e.recv_addr = key_.va;
  e.recv_rkey = key_.rkey;
  e.payload = plan_.payload;
  e.workers = o_.workers;
  return e;
}

bool InaRank::open(const std::vector<RankEndpoint>& all, std::string* error) {
  if (all.size() != o_.workers) {
    *error = std::to_string(all.size()) + " endpoints for " + std::to_string(o_.workers) + " ranks";
    return false;
  }
  for (unsigned r = 0; r < all.size(); ++r) {
    const RankEndpoint& e = all[r];
    const util::IpAddr ip = util::gid_address(e.gid);
    std::string why;
    if (e.rank != r)
      why = "its endpoint names rank " + std::to_string(e.rank);
    else if (e.workers != o_.workers)
      why = "it was started for " + std::to_string(e.workers) + " ranks, this rank for " + std::to_string(o_.workers);
    else if (e.payload != plan_.payload)
      why = "its path MTU payload is " + std::to_string(e.payload) + ", this rank's " + std::to_string(plan_.payload) +
            " (give every rank the same payload, or links of the same MTU)";
    else if (ip.version != util::IpVersion::v4)
      why = "its address " + util::ip_text(e.gid) + " is not IPv4";
    for (unsigned q = 0; q < r && why.empty(); ++q)
      if (util::gid_address(all[q].gid) == ip)
        why = "it has the same address as rank " + std::to_string(q) + " (" + util::ip_text(ip) +
              "): every rank needs an address of its own";
    if (!why.empty()) {
      *error = "rank " + std::to_string(r) + ": " + why;
      return false;
    }
  }
  const RankEndpoint &succ = all[plan_.successor()], &pred = all[plan_.predecessor()];
  UdpRcConfig c = plan_.rc_config(false, o_.ack_timeout_ms, o_.retry, geometry_.send_bytes(chunk_),
                                  geometry_.receive_bytes(chunk_));
  c.send.remote_qpn = succ.recv_qpn;
  c.send.remote_ip = util::gid_address(succ.gid);
  c.receive.remote_qpn = pred.send_qpn;
  c.receive.remote_ip = util::gid_address(pred.gid);
  c.receive.recv_start_psn = pred.start_psn;
  c.receive_key = key_;
  if (!transport_.open(c, error)) return false;
  transport_.set_successor_key({succ.recv_addr, succ.recv_rkey});
  plan_.connections = connections_of(all);
  const uint64_t lane_ns = static_cast<uint64_t>(o_.stall_s * 1e9);
  for (unsigned i = 0; o_.collectives && i < 2; ++i) {
    const uint32_t step = kLaneQpnStep * (i + 1);
    RcConfig send = c.send, receive = c.receive;
    send.local_qpn += step;
    send.remote_qpn += step;
    receive.local_qpn += step;
    receive.remote_qpn += step;
    const uint64_t stream = Rotation{o_.workers, 1}.stream_messages(geometry_.messages_of(piece_)) * o_.message;
    Transport& lane = transport_.add_lane(send, receive, stream, 2 * stream);
    lanes_[i].x = std::make_unique<RingExchange>(lane, o_.message, std::numeric_limits<uint64_t>::max(), lane_ns);
  }
  // No deadline for the whole job (it lives as long as training does): an allreduce fails when
  // nothing at all arrives for stall_s, or when the RC requester gives up.
  exchange_ = std::make_unique<RingExchange>(transport_, o_.message, std::numeric_limits<uint64_t>::max(),
                                             static_cast<uint64_t>(o_.stall_s * 1e9));
  return true;
}

bool InaRank::open_receive(std::string* error) {
  if (!exchange_) {
    *error = "open_receive() before open()";
    return false;
  }
  return transport_.open_receive(error);
}

std::string InaRank::job_text(uint32_t id, control::Collective c) const {
  RackPlan p = plan_;
  p.job_id = id;
  if (c != control::Collective::allreduce) {
    const uint32_t step = kLaneQpnStep * (c == control::Collective::reduce_scatter ? 1 : 2);
    p.collective = c;
    p.chunk = 1;
    for (RankConnection& rc : p.connections) {
      rc.send_qpn += step;
      rc.recv_qpn += step;
    }
  }
  return p.job_text();
}

bool InaRank::reduce_scatter(const uint8_t* in, uint8_t* out, uint64_t shard_bytes, std::string* error) {
  return rotated(control::Collective::reduce_scatter, in, out, shard_bytes, error);
}

bool InaRank::all_gather(const uint8_t* in, uint8_t* out, uint64_t shard_bytes, std::string* error) {
  return rotated(control::Collective::all_gather, in, out, shard_bytes, error);
}

bool InaRank::rotated(control::Collective c, const uint8_t* in, uint8_t* out, uint64_t shard_bytes,
                      std::string* error) {
  const bool rs = c == control::Collective::reduce_scatter;
  Lane& lane = lanes_[rs ? 0 : 1];
  if (error_.empty() && !lane.x)
    error_ = std::string(rs ? "reduce_scatter" : "all_gather") + " before open(), or without options().collectives";
  if (!error_.empty()) {
    *error = error_;
    return false;
  }
  const Rotation rot{o_.workers, 1};
  for (uint64_t off = 0; off < shard_bytes; off += piece_) {
    const uint64_t len = std::min(piece_, shard_bytes - off);
    // A piece is the same range of every shard: the input's (reduce-scatter) or the output's
    // (all-gather) shards lie shard_bytes apart.
    const Outcome r = rs ? ina_reduce_scatter(*lane.x, lane.g, rot, o_.rank, in + off, out + off, len, shard_bytes)
                         : ina_all_gather(*lane.x, lane.g, rot, o_.rank, in + off, out + off, len, shard_bytes);
    if (!r.ok()) {
      error_ = std::string(rs ? "reduce_scatter" : "all_gather") + " of " + std::to_string(shard_bytes) +
               " bytes a rank (" + std::string(util::dtype_name(plan_.dtype)) + "): " + r.error;
      *error = error_;
      return false;
    }
  }
  bytes_ += shard_bytes * o_.workers;
  return true;
}

bool InaRank::allreduce(uint8_t* data, uint64_t bytes, std::string* error) {
  if (error_.empty() && !exchange_) error_ = "allreduce before open()";
  if (!error_.empty()) {
    *error = error_;
    return false;
  }
  for (uint64_t off = 0; off < bytes; off += chunk_) {
    const uint64_t n = std::min(chunk_, bytes - off);
    if (const Outcome r = ina_allreduce(*exchange_, geometry_, data + off, n); !r.ok()) {
      const TransportCounters t = transport_.counters();
      error_ = "allreduce " + std::to_string(allreduces_ + 1) + " (" + std::to_string(bytes) + " bytes of " +
               std::string(util::dtype_name(plan_.dtype)) + "): " + r.error +
               " [this rank so far: " + std::to_string(t.packets_sent) + " packets sent, " +
               std::to_string(t.retransmitted) + " again, " + std::to_string(t.timeouts) + " ACK timeouts, " +
               std::to_string(t.naks_received) + " NAKs; " + std::to_string(t.accepted) + " received, " +
               std::to_string(t.duplicates) + " duplicates]";
      *error = error_;
      return false;
    }
    messages_ += geometry_.messages_of(n);
  }
  ++allreduces_;
  bytes_ += bytes;
  return true;
}

void InaRank::poll(int wait_ms) {
  if (exchange_) transport_.poll(wait_ms);
}

void InaRank::finish(uint64_t deadline_ns) {
  if (exchange_) transport_.finish(deadline_ns);
}

std::optional<util::IpAddr> interface_address(const std::string& name, std::string* error) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    *error = std::string("getifaddrs: ") + std::strerror(errno);
    return std::nullopt;
  }
  std::optional<util::IpAddr> found;
  bool exists = false;
  for (const ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (name != a->ifa_name) continue;
    exists = true;
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    found = util::IpAddr::v4(ntohl(sin->sin_addr.s_addr));
  }
  ::freeifaddrs(list);
  if (!found)
    *error = exists ? "interface " + name + " has no IPv4 address" : "there is no interface " + name + " here";
  return found;
}

std::optional<util::IpAddr> source_address_toward(const std::string& host, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res); rc != 0 || !res) {
    *error = "cannot resolve " + host + " to an IPv4 address: " + ::gai_strerror(rc);
    return std::nullopt;
  }
  std::optional<util::IpAddr> found;
  // connect() on a UDP socket sends nothing: it only picks the route, and with it the source.
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (fd < 0 || ::connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    *error = "no route toward " + host + ": " + std::strerror(errno);
  else
    found = util::IpAddr::v4(ntohl(local.sin_addr.s_addr));
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return found;
}

}  // namespace inagg::client
