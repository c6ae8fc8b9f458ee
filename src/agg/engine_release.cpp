// A job's complete slots (docs/protocol.md sections 6-8): summed into their n packets, ICRCs
// regenerated, released in PSN order; retained copies freed as receivers acknowledge them; and the
// helpers on frames the engine's files share.
#include "inagg/agg/engine.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "engine_internal.hpp"
#include "inagg/agg/kernels.hpp"
#include "inagg/wire/icrc.hpp"

namespace inagg::agg {

using wire::Layout;
using namespace engine_detail;

namespace engine_detail {

wire::OpPosition expected_position(uint32_t k, uint32_t ppm) {
  if (ppm == 1) return wire::OpPosition::only;
  if (k == 0) return wire::OpPosition::first;
  if (k == ppm - 1) return wire::OpPosition::last;
  return wire::OpPosition::middle;
}

uint8_t ecn_of(const uint8_t* f, const Layout& l) {
  const uint8_t* ip = f + l.l3;
  return l.ip == util::IpVersion::v4 ? (ip[1] & 3) : static_cast<uint8_t>((wire::load_be16(ip) >> 4) & 3);
}

void set_ce(uint8_t* f, const Layout& l) {
  uint8_t* ip = f + l.l3;
  if (l.ip == util::IpVersion::v4) {
    ip[1] |= wire::kEcnCe;
    ip[10] = ip[11] = 0;
    wire::store_be16(ip + 10, wire::ipv4_header_checksum(ip, static_cast<size_t>(ip[0] & 0x0f) * 4));
  } else {
    ip[1] |= wire::kEcnCe << 4;
  }
}

// The UDP checksum over IPv6 (mandatory there unless zero-checksum is in use).
uint16_t udp6_checksum(const uint8_t* f, const Layout& l) {
  const uint8_t* ip = f + l.l3;
  const uint8_t* udp = f + l.l4;
  const uint32_t len = wire::load_be16(udp + 4);
  uint64_t sum = 0;
  for (int i = 8; i < 40; i += 2) sum += wire::load_be16(ip + i);
  sum += len + wire::kIpProtoUdp;
  for (uint32_t i = 0; i + 1 < len; i += 2)
    if (i != 6) sum += wire::load_be16(udp + i);
  if (len & 1) sum += static_cast<uint32_t>(udp[len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t c = static_cast<uint16_t>(~sum);
  return c == 0 ? 0xffff : c;
}

std::string qp_str(const util::IpAddr& a, uint32_t qpn) {
  char buf[80], ip[64];
  inet_ntop(a.version == util::IpVersion::v4 ? AF_INET : AF_INET6, a.bytes.data(), ip, sizeof ip);
  std::snprintf(buf, sizeof buf, "%s qpn 0x%x", ip, qpn);
  return buf;
}

// "job contract, rule 'window': ..." (docs/protocol.md section 2).
std::string contract(const char* rule, const std::string& what) {
  return std::string("job contract, rule '") + rule + "': " + what;
}

}  // namespace engine_detail

// Writes a slot's sum into one of its packets: payload, ECN, UDP checksum, ICRC. Returns whether
// the packet was CE-marked.
bool Engine::write_sum(Job& job, uint64_t seq, uint8_t* f, const Layout& l, uint32_t header_crc) {
  std::memcpy(f + l.payload, job.sum_at(seq), job.spec.payload_bytes);
  return finish_sum(job, seq, f, l, header_crc);
}

// write_sum for a packet whose payload already holds the sum: ECN, ICRC, UDP checksum.
bool Engine::finish_sum(Job& job, uint64_t seq, uint8_t* f, const Layout& l, uint32_t header_crc) {
  const Job::Slot& slot = job.slot(seq);
  return finish_payload(job, slot.ecn, f, l, header_crc, slot.payload_crc);
}

// The same for a payload whose CRC is `payload_crc` (a leaf's partial, or its slot's sum).
bool Engine::finish_payload(Job& job, bool ecn, uint8_t* f, const Layout& l, uint32_t header_crc,
                            uint32_t payload_crc) {
  const bool mark = ecn && ecn_of(f, l) != wire::kEcnNotEct;  // only ECN-capable packets
  if (mark) set_ce(f, l);
  // The header part of the ICRC masks TOS, checksums and FECN: the input's header CRC still holds.
  wire::icrc_store(f, l, wire::icrc_combine(header_crc, payload_crc, job.shift));
  uint8_t* udp = f + l.l4;
  if (l.ip == util::IpVersion::v4) {
    udp[6] = udp[7] = 0;
  } else if (udp[6] | udp[7]) {
    wire::store_be16(udp + 6, udp6_checksum(f, l));  // covers the new ICRC too
  }
  return mark;
}

// The appliance's own congestion: an ECN-capable sum going out towards a port whose TX queue is
// past the threshold is CE-marked, as a DCQCN switch marks its queues, so the senders slow down
// before that queue drops. The receiver of rank r is rank r+1's host (a job is a ring), so its
// port is where rank r+1's WRITEs come from, or else where its ACKs do. The ICRC masks TOS.
bool Engine::mark_if_queue_full(Job& job, unsigned rank, uint8_t* f, const Layout& l) {
  if (cfg_.ecn_threshold_packets == 0 || ops_.tx_queue_above == nullptr) return false;
  const uint16_t succ_port = job.conns[rank + 1 == job.spec.workers ? 0 : rank + 1].data_port;
  const uint16_t port = succ_port != kUnknownPort ? succ_port : job.conns[rank].ack_port;
  if (port == kUnknownPort) return false;
  const uint8_t ecn = ecn_of(f, l);
  if (ecn == wire::kEcnNotEct || ecn == wire::kEcnCe) return false;
  if (!ops_.tx_queue_above(ops_.queue_ctx, port, cfg_.ecn_threshold_packets)) return false;
  set_ce(f, l);
  return true;
}

// Sums a complete slot into its n packets and its retained copy, and finishes each packet (ICRC,
// ECN, UDP checksum): everything of a release but the hand-over.
void Engine::sum_slot(Job& job, uint64_t seq) {
  const unsigned n = job.spec.workers;
  const uint32_t P = job.spec.payload_bytes;
  const uint8_t* srcs[64] = {};
  uint8_t* dsts[65] = {};
  Job::Slot& slot = job.slot(seq);
  Job::Held* held = &job.held_at(seq, 0);
  // The sum goes straight into the n packets (each over its own payload, chunk by chunk) and the
  // retained copy, in one pass: no copy of it afterwards.
  uint8_t* sum = job.sum_at(seq);
  dsts[0] = sum;
  for (unsigned r = 0; r < n; ++r) srcs[r] = dsts[r + 1] = held[r].p.data + held[r].l.payload;
  sum_ranked_broadcast(job.spec.dtype, dsts, n + 1, srcs, n, P);
  slot.payload_crc = wire::crc32({sum, P});  // once per slot; P is a multiple of 4: no pad
  for (unsigned r = 0; r < n; ++r) {
    Job::Held& h = held[r];
    if (finish_sum(job, seq, h.p.data, h.l, h.header_crc)) BUMP(job, ecn_marked);
    if (mark_if_queue_full(job, r, h.p.data, h.l)) BUMP(job, ecn_marked_queue);
  }
  slot.summed = true;
}

// Releases complete slots from the cursor on, in sequence order, while TX has room for a slot.
void Engine::release_plain(Job& job, uint64_t now_ns, TxList& tx) {
  const unsigned n = job.spec.workers;
  while (job.state == JobState::active) {
    Job::Slot& slot = job.slot(job.cursor);
    if (slot.state != SlotState::complete || slot.seq != job.cursor) return;
    Job::Held* held = &job.held_at(job.cursor, 0);
    if (tx.capacity() < n) {
      abort_job(job,
                "the TX list holds " + std::to_string(tx.capacity()) + " packets, fewer than the job's " +
                    std::to_string(n) + " workers: a slot could never be released",
                &EngineCounters::err_length_or_opcode);
      return;
    }
    if (tx.capacity() - tx.size() < n) return;  // poll() continues once the caller drained TX
    if (!slot.summed) sum_slot(job, job.cursor);
    for (unsigned r = 0; r < n; ++r) {
      if (r == job.uplink) continue;         // a leaf's uplink went out with the partial
      ops_.ref(ops_.ctx, held[r].p.handle);  // kept for a resend until acknowledged or the slot is reused
      tx.push(held[r].p);
    }
    mark_released(job, now_ns);
  }
}

// The cursor's slot's n packets went out: they stay retained for resends until acknowledged.
void Engine::mark_released(Job& job, uint64_t now_ns) {
  const unsigned n = job.spec.workers - (job.leaf() ? 1 : 0);  // a leaf's uplink is counted already
  Job::Slot& slot = job.slot(job.cursor);
  Job::Held* held = &job.held_at(job.cursor, 0);
  for (unsigned r = 0; r < job.spec.workers; ++r)
    if (r != job.uplink) held[r].retained = true;
  job.c.released_packets += n;
  totals_.released_packets += n;
  job.held_count -= n;
  job.retained_count += n;
  slot.state = SlotState::released;
  BUMP(job, slots_released);
  ++job.cursor;
  job.last_progress_ns = job.last_release_ns = now_ns;
}

// Any kind of job, for the callers off the per-packet path (timers).
void Engine::release_ready(Job& job, uint64_t now_ns, TxList& tx) {
  if (job.rotated()) {
    for (unsigned r = 0; r < job.spec.workers; ++r) rot_release(job, r, now_ns, tx);
    return;
  }
  if (job.leaf()) release_uplink(job, now_ns, tx);
  release_plain(job, now_ns, tx);
}

// The receiver of `rank` holds every sequence below `to`: the retained copies of them go.
void Engine::free_acknowledged(Job& job, unsigned rank, uint64_t to) {
  if (job.rotated()) return rot_free_acknowledged(job, rank, to);
  Job::Conn& conn = job.conns[rank];
  const uint64_t from = std::max(conn.acked, to > job.span() ? to - job.span() : 0);
  for (uint64_t s = from; s < to; ++s) {
    Job::Held& h = job.held_at(s, rank);
    if (h.retained && job.slot(s).seq == s) {
      ops_.free(ops_.ctx, h.p.handle);
      h.clear();
      --job.retained_count;
    }
  }
}

}  // namespace inagg::agg
