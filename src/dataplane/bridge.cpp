#include "inagg/dataplane/bridge.hpp"

#include <cstring>

namespace inagg::dataplane {

MacTable::MacTable(size_t capacity, uint64_t ageing_ns) : ageing_ns_(ageing_ns) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  entries_.resize(cap);
  mask_ = cap - 1;
}

size_t MacTable::size(uint64_t now_ns) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.mac != 0 && now_ns - e.seen_ns <= ageing_ns_;
  return n;
}

}  // namespace inagg::dataplane
