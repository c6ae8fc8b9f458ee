#include "inagg/dataplane/stations.hpp"

#include <algorithm>
#include <cstring>

namespace inagg::dataplane {
namespace {

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

}  // namespace

StationTable::StationTable(size_t capacity, uint64_t ageing_ns, uint64_t hash_key, size_t per_port_limit)
    : per_port_(kPortIds, 0),
      ageing_ns_(ageing_ns),
      hash_key_(hash_key),
      limit_(per_port_limit == 0 || per_port_limit >= UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(per_port_limit)) {
  size_t cap = 16;
  while (cap < capacity) cap <<= 1;
  entries_.resize(cap);
  mask_ = cap - 1;
}

uint64_t StationTable::Entry::last_ns() const {
  uint64_t t = 0;
  for (const Sighting& s : seen) t = std::max(t, s.seen_ns);
  return t;
}

StationTable::Key StationTable::address_key(const util::IpAddr& ip) {
  Key k;
  k.b[0] = static_cast<uint8_t>(ip.version == util::IpVersion::v6 ? 6 : 4);
  std::memcpy(k.b.data() + 1, ip.bytes.data(), ip.version == util::IpVersion::v6 ? 16 : 4);
  return k;
}

StationTable::Key StationTable::mac_key(const uint8_t* mac) {
  Key k;
  k.b[0] = 1;
  std::memcpy(k.b.data() + 1, mac, 6);
  return k;
}

// Keyed multiply-xorshift over the key's words, as the MAC table's (not cryptographic; the key is
// never shown).
size_t StationTable::slot_of(const Key& k) const {
  uint64_t h = hash_key_;
  for (size_t i = 0; i < k.b.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, k.b.data() + i, std::min<size_t>(8, k.b.size() - i));
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  h *= 0xbf58476d1ce4e5b9ull;
  return static_cast<size_t>(h >> 32) & mask_;
}

void StationTable::note_frame(const uint8_t* f, uint32_t len, uint16_t port, uint64_t now_ns) {
  if (len < 14 || (f[6] & 1)) return;  // a group address is no station's
  const uint8_t* src_mac = f + 6;
  note_mac(src_mac, port, now_ns);
  uint32_t l3 = 14;
  uint16_t type = be16(f + 12);
  if (type == 0x8100 && len >= 18) {
    type = be16(f + 16);
    l3 = 18;
  }
  util::IpAddr ip;
  if (type == 0x0800 && len >= l3 + 20) {
    ip.version = util::IpVersion::v4;
    std::memcpy(ip.bytes.data(), f + l3 + 12, 4);
  } else if (type == 0x86dd && len >= l3 + 40) {
    ip.version = util::IpVersion::v6;
    std::memcpy(ip.bytes.data(), f + l3 + 8, 16);
  } else if (type == 0x0806 && len >= l3 + 28 && be16(f + l3) == 1 && be16(f + l3 + 2) == 0x0800) {
    ip.version = util::IpVersion::v4;  // Ethernet/IPv4 ARP: the sender's protocol address
    std::memcpy(ip.bytes.data(), f + l3 + 14, 4);
  } else {
    return;
  }
  static constexpr uint8_t kZero[16] = {};
  if (std::memcmp(ip.bytes.data(), kZero, ip.version == util::IpVersion::v6 ? 16 : 4) == 0) return;  // DAD, DHCP
  note_address(ip, src_mac, port, now_ns);
}

void StationTable::note_address(const util::IpAddr& ip, const uint8_t* mac, uint16_t port, uint64_t now_ns) {
  note(address_key(ip), mac, port, now_ns);
}

void StationTable::note_mac(const uint8_t* mac, uint16_t port, uint64_t now_ns) {
  note(mac_key(mac), mac, port, now_ns);
}

void StationTable::note(const Key& k, const uint8_t* mac, uint16_t port, uint64_t now_ns) {
  now_ns = std::max<uint64_t>(now_ns, 1);  // 0 marks an unused sighting
  size_t free_slot = SIZE_MAX;
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    Entry& e = entries_[s];
    if (e.key == k) {
      // The same (port, MAC) again, else a new pair in place of the oldest.
      Sighting* oldest = &e.seen[0];
      for (Sighting& x : e.seen) {
        if (x.seen_ns != 0 && x.port == port && std::memcmp(x.mac.data(), mac, 6) == 0) {
          if (now_ns - x.seen_ns > ageing_ns_) x.first_ns = now_ns;  // forgotten, then seen again
          x.seen_ns = now_ns;
          return;
        }
        if (x.seen_ns < oldest->seen_ns) oldest = &x;
      }
      oldest->port = port;
      std::memcpy(oldest->mac.data(), mac, 6);
      oldest->seen_ns = oldest->first_ns = now_ns;
      return;
    }
    const bool dead = !e.pinned && (e.key.b[0] == 0 || now_ns - e.last_ns() > ageing_ns_);
    if (dead && free_slot == SIZE_MAX) free_slot = s;
  }
  if (free_slot == SIZE_MAX) {
    ++full_;
    return;
  }
  if (port < per_port_.size() && per_port_[port] >= limit_) {
    // Forget the aged entries (they no longer count) before refusing, at most once a second (or
    // per ageing period / 4): a port at its limit that keeps sending new addresses costs one sweep
    // a second, not one per frame.
    const uint64_t every = std::min<uint64_t>(ageing_ns_ / 4 + 1, 1'000'000'000ull);
    if (!recounted_ || now_ns - recounted_ns_ >= every) {
      recounted_ = true;
      recounted_ns_ = now_ns;
      for (Entry& e : entries_)
        if (e.key.b[0] != 0 && !e.pinned && now_ns - e.last_ns() > ageing_ns_) {
          if (e.creator < per_port_.size() && per_port_[e.creator] > 0) --per_port_[e.creator];
          e = Entry{};
        }
    }
    if (per_port_[port] >= limit_) {
      ++limit_refused_;
      return;
    }
  }
  Entry& e = entries_[free_slot];
  if (e.key.b[0] != 0 && e.creator < per_port_.size() && per_port_[e.creator] > 0) --per_port_[e.creator];
  e = Entry{};
  e.key = k;
  e.creator = port;
  e.seen[0].port = port;
  std::memcpy(e.seen[0].mac.data(), mac, 6);
  e.seen[0].seen_ns = e.seen[0].first_ns = now_ns;
  if (port < per_port_.size()) ++per_port_[port];
}

bool StationTable::set_pinned(const std::vector<util::IpAddr>& addresses, const std::vector<Mac>& macs,
                              uint64_t now_ns) {
  for (Entry& e : entries_) e.pinned = false;
  bool ok = true;
  for (const util::IpAddr& a : addresses) ok = pin(address_key(a), now_ns) && ok;
  for (const Mac& m : macs) ok = pin(mac_key(m.data()), now_ns) && ok;
  return ok;
}

// The key's entry, pinned; a new one (with no sighting yet) in the first slot not pinned whose
// entry is empty or aged, else in the first one not pinned at all: a pinned key takes room from
// stations that are not bound ranks, never the other way round.
bool StationTable::pin(const Key& k, uint64_t now_ns) {
  size_t unpinned = SIZE_MAX, free_slot = SIZE_MAX;
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    Entry& e = entries_[s];
    if (e.key == k) {
      e.pinned = true;
      return true;
    }
    if (e.pinned) continue;
    if (unpinned == SIZE_MAX) unpinned = s;
    if (free_slot == SIZE_MAX && (e.key.b[0] == 0 || now_ns - e.last_ns() > ageing_ns_)) free_slot = s;
  }
  const size_t s = free_slot != SIZE_MAX ? free_slot : unpinned;
  if (s == SIZE_MAX) return false;
  Entry& e = entries_[s];
  if (e.key.b[0] != 0 && e.creator < per_port_.size() && per_port_[e.creator] > 0) --per_port_[e.creator];
  e = Entry{};
  e.key = k;
  e.creator = static_cast<uint16_t>(kPortIds);
  e.pinned = true;
  return true;
}

const StationTable::Entry* StationTable::find(const Key& k) const {
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_)
    if (entries_[s].key == k) return &entries_[s];
  return nullptr;
}

std::vector<StationTable::Sighting> StationTable::live(const Entry* e, uint64_t now_ns) const {
  std::vector<Sighting> out;
  if (!e) return out;
  for (const Sighting& s : e->seen)
    if (s.seen_ns != 0 && now_ns - s.seen_ns <= ageing_ns_) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const Sighting& a, const Sighting& b) { return a.seen_ns > b.seen_ns; });
  return out;
}

std::vector<StationTable::Sighting> StationTable::of_address(const util::IpAddr& ip, uint64_t now_ns) const {
  return live(find(address_key(ip)), now_ns);
}

std::vector<StationTable::Sighting> StationTable::of_mac(const Mac& mac, uint64_t now_ns) const {
  return live(find(mac_key(mac.data())), now_ns);
}

}  // namespace inagg::dataplane
