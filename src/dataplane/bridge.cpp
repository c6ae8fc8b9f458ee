#include "inagg/dataplane/bridge.hpp"

#include <cstring>

namespace inagg::dataplane {

MacTable::MacTable(size_t capacity, uint64_t ageing_ns, uint64_t hash_key)
    : ageing_ns_(ageing_ns), hash_key_(hash_key) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  entries_.resize(cap);
  mask_ = cap - 1;
}

// Off the per-frame path: the lcore calls it only for frames the engine vouched for, at most once a
// millisecond per station (its learn cache).
void MacTable::learn_vouched(const uint8_t* src_mac, uint16_t port, uint64_t now_ns) {
  if (src_mac[0] & 1) return;
  const uint64_t k = key(src_mac);
  if (k == kZeroKey) return;
  size_t free_slot = SIZE_MAX, oldest = SIZE_MAX;
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    Entry& e = entries_[s];
    if (e.mac == k) {
      if (e.port != port) ++moves_;
      e = {k, now_ns, port, true};
      return;
    }
    const bool dead = e.mac == 0 || now_ns - e.seen_ns > ageing_ns_;
    if (dead && free_slot == SIZE_MAX) free_slot = s;
    if (!dead && !e.sticky && (oldest == SIZE_MAX || e.seen_ns < entries_[oldest].seen_ns)) oldest = s;
  }
  if (free_slot == SIZE_MAX) free_slot = oldest;  // a rank's address takes the place of a plain one
  if (free_slot == SIZE_MAX) {
    ++full_;
    return;
  }
  entries_[free_slot] = {k, now_ns, port, true};
  ++learned_;
}

size_t MacTable::size(uint64_t now_ns) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.mac != 0 && now_ns - e.seen_ns <= ageing_ns_;
  return n;
}

}  // namespace inagg::dataplane
