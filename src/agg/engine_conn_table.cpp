// The connection table: which job and rank a packet belongs to, who may speak on a registered
// connection, what happens to what cannot be placed, and connections held closed.
#include "inagg/agg/engine.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "engine_internal.hpp"
#include "inagg/util/log.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

void Engine::hold_closed(const control::JobSpec& spec) {
  // One pass over the closed list for all the job's keys (sorted, looked up by bisection), not one
  // per key: a hold runs on every lcore, between bursts.
  using Key = std::pair<util::IpAddr, uint32_t>;
  const auto before = [](const Key& a, const Key& b) {
    return std::tie(a.second, a.first.version, a.first.bytes) < std::tie(b.second, b.first.version, b.first.bytes);
  };
  std::vector<Key> keys;
  for (const control::ConnectionSpec& c : spec.conns)
    for (const Key& key : {Key{util::gid_address(c.dst_ip), c.dst_qpn}, Key{util::gid_address(c.src_ip), c.src_qpn}}) {
      const ConnEntry* e = conns_->find(key.first.version, key.first.bytes.data(), key.second);
      if (!e || !e->job) keys.push_back(key);  // not this engine's own job's (it handles those)
    }
  std::sort(keys.begin(), keys.end(), before);
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::erase_if(closed_, [&](const ClosedKey& k) {
    return std::binary_search(keys.begin(), keys.end(), Key{k.addr, k.qpn}, before);
  });
  for (const Key& key : keys) closed_.push_back({key.first, key.second, spec.id, UINT64_MAX});
  rebuild_conn_table();
}

void Engine::release_closed(uint32_t job_id, uint64_t linger_ns) {
  for (ClosedKey& k : closed_)
    if (k.job_id == job_id && k.until_ns == UINT64_MAX) k.until_ns = now_ns_ + linger_ns;
  rebuild_conn_table();
}

size_t Engine::closed_connections() const {
  return static_cast<size_t>(
      std::count_if(closed_.begin(), closed_.end(), [&](const ClosedKey& k) { return k.until_ns > now_ns_; }));
}

void Engine::route_job(const control::JobSpec& spec, uint16_t owner) {
  std::erase_if(routes_, [&](const RouteKey& k) { return k.job_id == spec.id && k.channel == spec.channel; });
  for (const control::ConnectionSpec& c : spec.conns) {
    routes_.push_back({util::gid_address(c.dst_ip), c.dst_qpn, spec.id, spec.channel, Route{owner}});  // data
    routes_.push_back({util::gid_address(c.src_ip), c.src_qpn, spec.id, spec.channel, Route{owner}});  // ACKs
  }
  rebuild_conn_table();
}

void Engine::unroute_job(uint32_t job_id) {
  std::erase_if(routes_, [&](const RouteKey& k) { return k.job_id == job_id; });
  rebuild_conn_table();
}

const Engine::Route* Engine::route_of(const uint8_t* frame, const Layout& l) const {
  wire::RoceDestination d;
  if (routes_.empty() || !wire::roce_destination(frame, l, &d)) return nullptr;
  bool mapped = false;
  const ConnEntry* e = lookup(d.ip, d.addr, d.qpn, &mapped);
  return e && e->route != ConnEntry::kNoRoute ? &routes_[e->route].route : nullptr;
}

void Engine::rebuild_conn_table() {
  std::erase_if(closed_, [&](const ClosedKey& k) { return k.until_ns <= now_ns_; });
  size_t n = closed_.size() + routes_.size();
  for (auto& j : jobs_) n += 2 * j->spec.workers;
  conns_->resize(n);
  for (auto& j : jobs_) {
    for (unsigned r = 0; r < j->spec.workers; ++r) {
      const control::ConnectionSpec& c = j->conns[r].spec;
      conns_->insert(
          {true, false, c.dst_ip, c.dst_qpn, j.get(), r, ConnEntry::kNoRoute, 0, {}});            // data: receiver's QP
      conns_->insert({true, true, c.src_ip, c.src_qpn, j.get(), r, ConnEntry::kNoRoute, 0, {}});  // ACKs: sender's QP
    }
  }
  for (const ClosedKey& k : closed_) {
    const ConnEntry* e = conns_->find(k.addr.version, k.addr.bytes.data(), k.qpn);
    if (e == nullptr) conns_->insert({true, false, k.addr, k.qpn, nullptr, 0, ConnEntry::kNoRoute, k.until_ns, {}});
  }
  // A route goes on the key's entry (this engine's job or a closed connection),
  // else on an entry of its own that places nothing (no job, not closed).
  for (size_t i = 0; i < routes_.size(); ++i) {
    const RouteKey& k = routes_[i];
    if (ConnEntry* e = conns_->find(k.addr.version, k.addr.bytes.data(), k.qpn))
      e->route = static_cast<uint32_t>(i);
    else
      conns_->insert({true, false, k.addr, k.qpn, nullptr, 0, static_cast<uint32_t>(i), 0, {}});
  }
}

void Engine::emit(const PacketRef& p, TxList& tx, Job* job) {
  if (!tx.push(p)) {
    ops_.free(ops_.ctx, p.handle);
    if (job) ++job->c.tx_full;
    ++totals_.tx_full;
  }
}

void Engine::drop(Job* job, const PacketRef& pkt, uint64_t EngineCounters::*counter) {
  // Drops of frames whose origin the engine could not verify: process() tells its caller.
  untrusted_ = counter == &EngineCounters::malformed || counter == &EngineCounters::bad_icrc ||
               counter == &EngineCounters::drop_wrong_source || counter == &EngineCounters::drop_wrong_port ||
               counter == &EngineCounters::drop_wrong_mac || counter == &EngineCounters::drop_unplaceable ||
               counter == &EngineCounters::drop_closed || counter == &EngineCounters::drop_unfit ||
               counter == &EngineCounters::drop_ack_unpinned;
  if (job) ++(job->c.*counter);
  ++(totals_.*counter);
  ops_.free(ops_.ctx, pkt.handle);
}

// One line per job per drop_log_interval_ns at most, however many forged packets arrive.
void Engine::log_drop(Job& job, const char* what, unsigned rank, bool ack_direction, const PacketRef& pkt,
                      const Layout& l, uint64_t now_ns) {
  if (job.drop_logged && elapsed(now_ns, job.drop_log_ns) < cfg_.drop_log_interval_ns) {
    ++job.drops_unlogged;
    return;
  }
  char src[64] = "?";
  const uint8_t* ip = pkt.data + l.l3;
  inet_ntop(l.ip == util::IpVersion::v4 ? AF_INET : AF_INET6, ip + (l.ip == util::IpVersion::v4 ? 12 : 8), src,
            sizeof src);
  const Job::Conn& c = job.conns[rank];
  const uint16_t first = ack_direction ? c.ack_port : c.data_port;
  util::log(
      util::LogModule::engine, util::LogLevel::warning,
      "job %u: dropped a packet on rank %u's %s connection: %s (from %s, port %d; registered %s, pinned to port %d)"
      "; %llu more dropped since the last line",
      job.spec.id, rank, ack_direction ? "ACK" : "data", what, src, pkt.port == kUnknownPort ? -1 : pkt.port,
      util::ip_text(ack_direction ? c.spec.dst_ip : c.spec.src_ip).c_str(), first == kUnknownPort ? -1 : first,
      static_cast<unsigned long long>(job.drops_unlogged));
  job.drop_logged = true;
  job.drop_log_ns = now_ns;
  job.drops_unlogged = 0;
}

// A registered connection's key, also when the packet writes its IPv4 address IPv4-mapped in an
// IPv6 header (*mapped: such a packet is never placed, only dropped).
const Engine::ConnEntry* Engine::lookup(util::IpVersion v, const uint8_t* addr, uint32_t qpn, bool* mapped) const {
  *mapped = false;
  if (const ConnEntry* e = conns_->find(v, addr, qpn)) return e;
  if (v == util::IpVersion::v6 && conns_->any_v4 && util::is_v4_mapped_bytes(addr)) {
    *mapped = true;
    return conns_->find(util::IpVersion::v4, addr + 12, qpn);
  }
  return nullptr;
}

// A frame parse_frame() did not place: dropped when it is addressed to a registered or closed
// connection (it must never reach a receiver raw), else forwarded unless it is malformed RoCEv2.
void Engine::process_unplaced(const PacketRef& pkt, wire::ParseStatus st, const Layout& l, uint64_t now_ns,
                              TxList& tx) {
  wire::RoceDestination d;
  bool mapped = false;
  const ConnEntry* e = wire::roce_destination(pkt.data, l, &d) ? lookup(d.ip, d.addr, d.qpn, &mapped) : nullptr;
  if (e && e->job == nullptr && e->closed_until_ns <= now_ns) e = nullptr;  // a tombstone that expired
  if (e) {
    Job* job = e->job;
    if (job) ++job->c.rx_packets;
    if (e->job == nullptr) return drop(nullptr, pkt, &EngineCounters::drop_closed);
    if (wire::is_malformed(st)) return drop(job, pkt, &EngineCounters::malformed);
    log_drop(*job, wire::parse_status_text(st).data(), e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(job, pkt, &EngineCounters::drop_unplaceable);
  }
  if (wire::is_malformed(st)) return drop(nullptr, pkt, &EngineCounters::malformed);
  ++totals_.passthrough;
  teaches_ = true;
  emit(pkt, tx, nullptr);
}

bool Engine::process(const PacketRef& pkt, uint64_t now_ns, TxList& tx) {
  Layout l;
  const wire::ParseStatus st = wire::parse_frame({pkt.data, pkt.len}, l);
  return process(pkt, st, l, now_ns, tx);
}

bool Engine::process(const PacketRef& pkt, wire::ParseStatus st, const Layout& l, uint64_t now_ns, TxList& tx) {
  untrusted_ = teaches_ = false;
  process_frame(pkt, st, l, now_ns, tx);
  return !untrusted_;
}

void Engine::process_frame(const PacketRef& pkt, wire::ParseStatus st, const Layout& l, uint64_t now_ns, TxList& tx) {
  ++totals_.rx_packets;
  if (now_ns > now_ns_) now_ns_ = now_ns;
  if (st != wire::ParseStatus::roce) return process_unplaced(pkt, st, l, now_ns, tx);
  const uint8_t* ip = pkt.data + l.l3;
  const bool v4 = l.ip == util::IpVersion::v4;
  const uint8_t* dst = ip + (v4 ? 16 : 24);
  const uint8_t* src = ip + (v4 ? 12 : 8);
  bool mapped = false;
  const ConnEntry* e = lookup(l.ip, dst, wire::bth_of(pkt.data, l).dest_qp(), &mapped);
  if (e && e->job == nullptr && e->closed_until_ns <= now_ns) e = nullptr;  // a tombstone that expired
  if (e == nullptr) {
    ++totals_.passthrough;
    teaches_ = true;
    emit(pkt, tx, nullptr);
    return;
  }
  const bool cnp = l.opcode == wire::op::kCnp;  // congestion control stays end to end, always
  if (e->job == nullptr) {
    if (!cnp) return drop(nullptr, pkt, &EngineCounters::drop_closed);
    ++totals_.passthrough;
    emit(pkt, tx, nullptr);
    return;
  }
  Job& job = *e->job;
  ++job.c.rx_packets;
  if (cnp) {
    BUMP(job, cnp_forwarded);
    emit(pkt, tx, &job);
    return;
  }
  Job::Conn& conn = job.conns[e->rank];
  if (mapped) {
    log_drop(job, "an IPv4 connection addressed by an IPv4-mapped IPv6 address", e->rank, e->ack_direction, pkt, l,
             now_ns);
    return drop(&job, pkt, &EngineCounters::drop_unplaceable);
  }
  // Only the registered source, on the port its rank was pinned to (engine_job.cpp: by the first
  // packet that fits the connection's state), speaks on a connection: a
  // forged WRITE must not reach the receiver, a forged ACK or NAK must not reach the sender.
  const util::IpAddr& peer = e->ack_direction ? conn.spec.dst_ip : conn.spec.src_ip;
  if (v4 ? std::memcmp(peer.bytes.data(), src, 4) != 0 : std::memcmp(peer.bytes.data(), src, 16) != 0) {
    log_drop(job, "not from the registered source address", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_wrong_source);
  }
  const uint16_t port = e->ack_direction ? conn.ack_port : conn.data_port;
  if (port != kUnknownPort && pkt.port != kUnknownPort && pkt.port != port) {
    log_drop(job, "not from the port its rank was pinned to", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_wrong_port);
  }
  // The bound MAC: a rank's data carry its own; its receiver's ACKs its successor's, which is the
  // receiver's host only in a flat ring (a leaf's or spine's receivers are in other racks).
  const control::ConnectionSpec* bound = !e->ack_direction ? &conn.spec
                                         : job.spec.tier == control::Tier::flat
                                             ? &job.spec.conns[e->rank + 1 == job.spec.workers ? 0 : e->rank + 1]
                                             : nullptr;
  if (bound && bound->has_mac() && std::memcmp(pkt.data + 6, bound->mac.data(), 6) != 0) {
    log_drop(job, "not from its rank's bound MAC address", e->rank, e->ack_direction, pkt, l, now_ns);
    return drop(&job, pkt, &EngineCounters::drop_wrong_mac);
  }
  const uint64_t expected = conn.expected, acked = conn.acked;
  (this->*(e->ack_direction ? job.on_ack : job.on_data))(job, e->rank, pkt, l, now_ns, tx);
  // Only a packet that moved its connection on (new data, an ACK of something new), from its
  // rank's bound port, teaches the bridge: a stale, duplicate or refused one does not.
  const uint16_t pinned = e->ack_direction ? conn.ack_port : conn.data_port;
  if (pinned == kUnknownPort) untrusted_ = true;  // nothing vouches for it
  teaches_ = !untrusted_ && pinned != kUnknownPort && pinned == pkt.port &&
             (e->ack_direction ? conn.acked > acked : conn.expected > expected);
}

}  // namespace inagg::agg
