#include "inagg/dataplane/bridge.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

namespace inagg::dataplane {
namespace {

std::string mac_text(uint64_t k) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", static_cast<unsigned>(k & 0xff),
                static_cast<unsigned>(k >> 8 & 0xff), static_cast<unsigned>(k >> 16 & 0xff),
                static_cast<unsigned>(k >> 24 & 0xff), static_cast<unsigned>(k >> 32 & 0xff),
                static_cast<unsigned>(k >> 40 & 0xff));
  return b;
}

}  // namespace

MacTable::MacTable(size_t capacity, uint64_t ageing_ns, uint64_t hash_key, size_t per_port_limit)
    : ageing_ns_(ageing_ns),
      hash_key_(hash_key),
      limit_(per_port_limit == 0 || per_port_limit >= UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(per_port_limit)),
      per_port_(kPortIds, 0) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  entries_.resize(cap);
  mask_ = cap - 1;
}

// Every frame is counted; a station that keeps claiming a rank's address is logged once a second.
void MacTable::refuse_move(uint64_t k, uint16_t owner, uint16_t port, uint64_t now_ns) {
  ++moves_refused_;
  if (move_log_.allow(now_ns))
    util::log(util::LogModule::dataplane, util::LogLevel::warning,
              "a frame from port %u claims %s, a job rank's address bound to port %u: not learned (%" PRIu64
              " more claims refused since the last line)",
              port, mac_text(k).c_str(), owner, move_log_.take_suppressed());
}

// The port holds its limit of entries. Aged ones still count until reused: the first time a port
// is found full after a while, the whole table forgets its aged entries (at most once per ageing
// period / 4, or a second, so a port that keeps meeting its limit costs one sweep a second).
bool MacTable::port_full(uint16_t port, uint64_t k, uint64_t now_ns) {
  const uint64_t every = std::min<uint64_t>(ageing_ns_ / 4 + 1, 1'000'000'000ull);
  if (!swept_ || now_ns - swept_ns_ >= every) {
    swept_ = true;
    swept_ns_ = now_ns;
    for (Entry& e : entries_)
      if (e.mac != 0 && !e.pinned && now_ns - e.seen_ns > ageing_ns_) {
        if (e.port < per_port_.size()) --per_port_[e.port];
        e = Entry{};
      }
    if (on_port(port) < limit_) return false;
  }
  ++port_limit_refused_;
  if (limit_log_.allow(now_ns))
    util::log(util::LogModule::dataplane, util::LogLevel::warning,
              "port %u holds its limit of %u learned MAC addresses: %s not learned, its frames flood (%" PRIu64
              " more refused since the last line)",
              port, limit_, mac_text(k).c_str(), limit_log_.take_suppressed());
  return true;
}

// Off the per-frame path: the control side sets the pins when a job's ranks are bound or a job goes.
bool MacTable::set_pins(const std::vector<std::pair<std::array<uint8_t, 6>, uint16_t>>& pins, uint64_t now_ns) {
  for (Entry& e : entries_)
    if (e.pinned) {
      e.pinned = false;  // an ordinary entry again, seen now (ages from here), counted on its port
      e.seen_ns = now_ns;
      if (e.port < per_port_.size()) ++per_port_[e.port];
    }
  bool ok = true;
  for (const auto& [mac, port] : pins) {
    const uint64_t k = key(mac.data());
    size_t at = SIZE_MAX, free_slot = SIZE_MAX, oldest = SIZE_MAX;
    for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
      Entry& e = entries_[s];
      if (e.mac == k) {
        at = s;
        break;
      }
      const bool dead = e.mac == 0 || (!e.pinned && now_ns - e.seen_ns > ageing_ns_);
      if (dead && free_slot == SIZE_MAX) free_slot = s;
      if (!dead && !e.pinned && (oldest == SIZE_MAX || e.seen_ns < entries_[oldest].seen_ns)) oldest = s;
    }
    if (at == SIZE_MAX) at = free_slot != SIZE_MAX ? free_slot : oldest;  // a rank's takes a plain one's place
    if (at == SIZE_MAX) {
      ok = false;
      continue;
    }
    if (entries_[at].mac == k && entries_[at].port != port) ++moves_;
    if (entries_[at].mac != k) ++learned_;
    take(entries_[at], k, now_ns, port, true);
  }
  return ok;
}

size_t MacTable::size(uint64_t now_ns) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.mac != 0 && (e.pinned || now_ns - e.seen_ns <= ageing_ns_);
  return n;
}

}  // namespace inagg::dataplane
