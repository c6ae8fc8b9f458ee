// client::Rank through a channel the caller owns (rank.hpp): its endpoint, the checks of every
// rank's, the job files; the transport factories of the rack plan; a rank's own address.
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
#include "inagg/client/rank.hpp"
#include "inagg/client/transport/udp_transport.hpp"

namespace inagg::client {

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
  UdpRcConfig c = r.rack.rc_config(r.ring, r.ack_timeout_ms, r.retry, r.send_bytes, r.receive_bytes);
  // Ranks that never meet (an ina job someone else registers, from the Python module) cannot tell
  // each other a random region key: they share the fixed one, and only their peers' addresses
  // guard their receive regions.
  if (!r.meet && !r.exchange) c.receive_key = UdpRcTransport::kUnmetKey;
  if (!t->open(c, error)) return nullptr;
  if (!r.meet && !r.exchange) t->set_successor_key(UdpRcTransport::kUnmetKey);
  if (!r.exchange) return t;  // the plan's ranks meet later: meet_on_plan()
  std::vector<RankEndpoint> all;
  if (!t->exchange(rendezvous_config(r), &all, error)) return nullptr;
  t->set_peers(all[r.rack.successor()], all[r.rack.predecessor()]);  // connected by open_receive()
  t->set_job_connections(connections_of(all));
  return t;
}

bool meet_on_plan(Transport& t, const TransportRequest& r, std::string* error) {
  auto* udp = dynamic_cast<UdpRcTransport*>(&t);
  if (!udp || !r.meet || r.exchange) return true;
  return udp->meet(rendezvous_config(r), error);
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

RankEndpoint Rank::endpoint() const {
  RankEndpoint e;
  const unsigned rank = o_.geometry.rank;
  e.rank = rank;
  const util::IpAddr a = o_.address.value_or(plan().ip_of(rank));
  e.gid = util::IpAddr::v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a.bytes[0], a.bytes[1], a.bytes[2], a.bytes[3]});
  e.send_qpn = RackPlan::send_qpn(rank);
  e.recv_qpn = RackPlan::recv_qpn(rank);
  e.start_psn = RackPlan::start_psn(rank);
  e.recv_addr = key_.va;
  e.recv_rkey = key_.rkey;
  e.payload = plan().payload;
  e.workers = o_.geometry.ranks;
  return e;
}

bool Rank::open(const std::vector<RankEndpoint>& all) {
  if (!error_.empty()) return false;
  if (!o_.address) return fail("open(endpoints) is for ranks given their own address; this one has the rack plan's");
  const unsigned ranks = o_.geometry.ranks;
  if (all.size() != ranks)
    return fail(std::to_string(all.size()) + " endpoints for " + std::to_string(ranks) + " ranks");
  for (unsigned r = 0; r < all.size(); ++r) {
    const RankEndpoint& e = all[r];
    const util::IpAddr ip = util::gid_address(e.gid);
    std::string why;
    if (e.rank != r)
      why = "its endpoint names rank " + std::to_string(e.rank);
    else if (e.workers != ranks)
      why = "it was started for " + std::to_string(e.workers) + " ranks, this rank for " + std::to_string(ranks);
    else if (e.payload != plan().payload)
      why = "its path MTU payload is " + std::to_string(e.payload) + ", this rank's " + std::to_string(plan().payload) +
            " (give every rank the same payload, or links of the same MTU)";
    else if (ip.version != util::IpVersion::v4)
      why = "its address " + util::ip_text(e.gid) + " is not IPv4";
    for (unsigned q = 0; q < r && why.empty(); ++q)
      if (util::gid_address(all[q].gid) == ip)
        why = "it has the same address as rank " + std::to_string(q) + " (" + util::ip_text(ip) +
              "): every rank needs an address of its own";
    if (!why.empty()) return fail("rank " + std::to_string(r) + ": " + why);
  }
  RackPlan& plan = o_.resolved.rack;
  const RankEndpoint &succ = all[plan.successor()], &pred = all[plan.predecessor()];
  UdpRcConfig c =
      plan.rc_config(false, o_.ack_timeout_ms, o_.retry, geometry_.send_bytes(piece_), geometry_.receive_bytes(piece_));
  c.send.remote_qpn = succ.recv_qpn;
  c.send.remote_ip = util::gid_address(succ.gid);
  c.receive.remote_qpn = pred.send_qpn;
  c.receive.remote_ip = util::gid_address(pred.gid);
  c.receive.recv_start_psn = pred.start_psn;
  c.receive_key = key_;
  RackPlan::add_channels(&c, plan.channels);  // from the endpoints' channel 0, not the plan's addresses
  auto t = std::make_unique<UdpRcTransport>();
  if (!t->open(c, &error_)) return false;
  t->set_successor_key({succ.recv_addr, succ.recv_rkey});
  plan.connections = connections_of(all);
  // No deadline for the whole job (it lives as long as training does): a collective fails when
  // nothing at all arrives for stall_s, or when the RC requester gives up.
  const uint64_t forever = std::numeric_limits<uint64_t>::max();
  for (unsigned i = 0; o_.lanes && i < 2; ++i) {
    const uint32_t step = kLaneQpnStep * (i + 1);
    RcConfig send = c.send, receive = c.receive;
    send.local_qpn += step;
    send.remote_qpn += step;
    receive.local_qpn += step;
    receive.remote_qpn += step;
    const uint64_t stream =
        Rotation{ranks, 1}.stream_messages(geometry_.messages_of(lane_piece_)) * o_.geometry.message;
    Transport& lane = t->add_lane(send, receive, stream, 2 * stream);
    lanes_[i].x = std::make_unique<RingExchange>(lane, o_.geometry.message, forever, stall_ns_);
  }
  exchange_ = std::make_unique<RingExchange>(*t, o_.geometry.message, forever, stall_ns_);
  udp_ = t.get();
  transport_ = std::move(t);
  return true;
}

bool Rank::open_receive() {
  if (!exchange_) return fail("open_receive() before open()");
  std::string why;
  return transport_->open_receive(&why) || fail("opening the receive side: " + why);
}

std::string Rank::job_text(uint32_t id, control::Collective c) const {
  RackPlan p = plan();
  p.job_id = id;
  if (c != control::Collective::allreduce && c != p.collective) {
    const uint32_t step = kLaneQpnStep * (c == control::Collective::reduce_scatter ? 1 : 2);
    p.collective = c;
    p.chunk = 1;
    p.channels = 1;  // a lane is one connection a rank
    for (RankConnection& rc : p.connections) {
      rc.send_qpn += step;
      rc.recv_qpn += step;
    }
  }
  return p.job_text();
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
