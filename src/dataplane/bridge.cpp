#include "inagg/dataplane/bridge.hpp"

#include <cstring>

namespace inagg::dataplane {

MacTable::MacTable(size_t capacity, uint64_t ageing_ns) : ageing_ns_(ageing_ns) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  entries_.resize(cap);
  mask_ = cap - 1;
}

uint64_t MacTable::key(const uint8_t* mac) {
  uint64_t k = 0;
  std::memcpy(&k, mac, 6);
  return k | (1ull << 63);  // never 0, so 0 can mean "empty"
}

size_t MacTable::slot_of(uint64_t k) const {
  uint64_t h = k * 0x9e3779b97f4a7c15ull;
  return static_cast<size_t>(h >> 32) & mask_;
}

void MacTable::learn(const uint8_t* src_mac, uint16_t port, uint64_t now_ns) {
  if (src_mac[0] & 1) return;  // a group address is never a source
  const uint64_t k = key(src_mac);
  size_t free_slot = SIZE_MAX;
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    Entry& e = entries_[s];
    if (e.mac == k) {
      if (e.port != port) ++moves_;
      e.port = port;
      e.seen_ns = now_ns;
      return;
    }
    const bool dead = e.mac == 0 || now_ns - e.seen_ns > ageing_ns_;
    if (dead && free_slot == SIZE_MAX) free_slot = s;
  }
  if (free_slot == SIZE_MAX) {
    ++full_;
    return;
  }
  entries_[free_slot] = {k, now_ns, port};
  ++learned_;
}

uint16_t MacTable::lookup(const uint8_t* dst_mac, uint16_t in_port, uint64_t now_ns) const {
  if (dst_mac[0] & 1) return kFlood;
  const uint64_t k = key(dst_mac);
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    const Entry& e = entries_[s];
    if (e.mac == k) {
      if (now_ns - e.seen_ns > ageing_ns_) return kFlood;
      return e.port == in_port ? kDrop : e.port;
    }
  }
  return kFlood;
}

size_t MacTable::size(uint64_t now_ns) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.mac != 0 && now_ns - e.seen_ns <= ageing_ns_;
  return n;
}

}  // namespace inagg::dataplane
