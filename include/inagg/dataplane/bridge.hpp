// The transparent L2 learning bridge for traffic inagg does not aggregate. Pure C++ (no DPDK), one
// instance per lcore: each lcore learns from the frames it sees, so nothing is shared; a miss
// floods, which is always correct, merely less efficient until that lcore has learned the address.
//
// Against a station on one port claiming another's address (as switch operating systems do): the
// MAC addresses of a job's ranks are pinned to the ports the ranks were bound to when the job was
// registered (the control side tells every lcore: pin()); no frame can move a pinned address
// (refused, counted), a flood of other addresses cannot evict it, and it never ages while a job
// binds it. Only the operator moves a bound address (docs/binding.md).
// The slot hash is keyed with a random key per table, so which addresses collide cannot be worked
// out offline. Port security: each port may hold at most a given number of learned addresses
// (frames from new ones beyond it are forwarded, not learned, and counted), for every frame; claims
// of a pinned address from another port are counted on every frame but logged at most once a
// second, with the count of those not logged.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "inagg/util/log.hpp"

namespace inagg::dataplane {

inline constexpr uint16_t kFlood = 0xffff;   // send on every port but the ingress one
inline constexpr uint16_t kDrop = 0xfffe;    // destination is behind the ingress port
inline constexpr uint16_t kNoPort = 0xffff;  // a frame the appliance made itself (no ingress port)

class MacTable {
 public:
  // `capacity` entries (rounded up to a power of two); entries older than `ageing_ns` are ignored
  // and reused. `hash_key` keys the slot hash (the appliance draws a random one per start).
  // `per_port_limit`: learned addresses a port may hold (0: as many as fit).
  MacTable(size_t capacity, uint64_t ageing_ns, uint64_t hash_key = 0, size_t per_port_limit = 0);

  // Learns the source address of a frame that came in on `port` (unicast sources only, not the
  // all-zero address). A pinned entry on another port is not moved (moves_refused); a new
  // address, or one moving, on a port at its limit is not learned (port_limit_refused).
  void learn(const uint8_t* src_mac, uint16_t port, uint64_t now_ns);
  // Makes exactly `pins` (address, port) the pinned entries: each is placed on its port (taking
  // the oldest unpinned entry of its neighbourhood when that is full), never ages, never moves and
  // does not count against its port's limit; addresses pinned before and not in `pins` become
  // ordinary entries again. False when an address found no room (its neighbourhood all pinned).
  bool set_pins(const std::vector<std::pair<std::array<uint8_t, 6>, uint16_t>>& pins, uint64_t now_ns);

  // Where a frame to `dst_mac` arriving on `in_port` goes: a port, kFlood or kDrop.
  // Broadcast and multicast destinations flood.
  uint16_t lookup(const uint8_t* dst_mac, uint16_t in_port, uint64_t now_ns) const;

  size_t size(uint64_t now_ns) const;  // live entries
  uint64_t learned() const { return learned_; }
  uint64_t moves() const { return moves_; }                            // an address seen on a new port
  uint64_t full() const { return full_; }                              // could not learn: table full of live entries
  uint64_t moves_refused() const { return moves_refused_; }            // a pinned address claimed from another port
  uint64_t port_limit_refused() const { return port_limit_refused_; }  // not learned: its port at its limit
  size_t on_port(uint16_t port) const { return port < per_port_.size() ? per_port_[port] : 0; }  // entries held

  size_t slot(const uint8_t* mac) const { return slot_of(key(mac)); }  // where its neighbourhood starts
  static uint64_t key(const uint8_t* mac);          // the table's key of an address (the lcore caches use it too)
  static constexpr uint64_t kZeroKey = 1ull << 63;  // key(00:00:00:00:00:00)

 private:
  struct Entry {
    uint64_t mac = 0;  // 48 bits; 0 = empty
    uint64_t seen_ns = 0;
    uint16_t port = 0;
    bool pinned = false;  // a bound rank's (set_pins): never ages, never moves
  };
  size_t slot_of(uint64_t k) const;
  // Off the per-frame path (bridge.cpp).
  void refuse_move(uint64_t k, uint16_t owner, uint16_t port, uint64_t now_ns);
  bool port_full(uint16_t port, uint64_t k, uint64_t now_ns);  // at its limit after forgetting aged entries
  void take(Entry& e, uint64_t k, uint64_t now_ns, uint16_t port, bool pinned);  // (re)fills e, counts per port

  std::vector<Entry> entries_;
  size_t mask_;
  uint64_t ageing_ns_;
  uint64_t hash_key_;
  uint32_t limit_;                  // per port; UINT32_MAX: none
  std::vector<uint32_t> per_port_;  // entries (live or aged, not yet reused) per port id
  uint64_t learned_ = 0, moves_ = 0, full_ = 0, moves_refused_ = 0, port_limit_refused_ = 0;
  uint64_t swept_ns_ = 0;
  bool swept_ = false;
  util::LogRateLimit move_log_{1}, limit_log_{1};
  static constexpr size_t kMaxProbe = 16;
  static constexpr size_t kPortIds = 1024;  // DPDK's RTE_MAX_ETHPORTS is at most this
};

// The per-frame calls, inline: they run twice for every forwarded frame (~3 ns each when the
// neighbourhood is in cache).
inline uint64_t MacTable::key(const uint8_t* mac) {
  // Two loads, not a 6-byte memcpy into a stack word: that becomes two partial stores and a
  // wide load, a store-forwarding stall that cost ~30% of the forwarding rate.
  uint32_t lo;
  uint16_t hi;
  std::memcpy(&lo, mac, 4);
  std::memcpy(&hi, mac + 4, 2);
  return lo | uint64_t{hi} << 32 | (1ull << 63);  // never 0, so 0 can mean "empty"
}

// Keyed: the key enters before two multiply-xorshift rounds, so every bit of the address and of the
// key reaches the slot bits (one multiply alone left addresses differing only in their last byte's
// high bits in one slot, whatever the key). Not a cryptographic hash; the key is never shown.
inline size_t MacTable::slot_of(uint64_t k) const {
  uint64_t h = (k ^ hash_key_) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return static_cast<size_t>(h >> 32) & mask_;
}

inline void MacTable::learn(const uint8_t* src_mac, uint16_t port, uint64_t now_ns) {
  if (src_mac[0] & 1) return;  // a group address is never a source
  const uint64_t k = key(src_mac);
  // 00:00:00:00:00:00 is no station's address (Linux's bridge drops such frames); a virtual device
  // that sends zeroed frames (net_null) would otherwise have every frame dropped as going back
  // out of its ingress port. Not learned: frames to it flood.
  if (k == kZeroKey) return;
  size_t free_slot = SIZE_MAX;
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    Entry& e = entries_[s];
    if (e.mac == k) {
      if (e.port != port) {
        if (e.pinned) return refuse_move(k, e.port, port, now_ns);
        if (on_port(port) >= limit_ && port_full(port, k, now_ns)) return;
        ++moves_;
        take(e, k, now_ns, port, false);
        return;
      }
      e.seen_ns = now_ns;
      return;
    }
    const bool dead = e.mac == 0 || (!e.pinned && now_ns - e.seen_ns > ageing_ns_);
    if (dead && free_slot == SIZE_MAX) free_slot = s;
  }
  if (free_slot == SIZE_MAX) {
    ++full_;
    return;
  }
  if (on_port(port) >= limit_ && port_full(port, k, now_ns)) return;
  take(entries_[free_slot], k, now_ns, port, false);
  ++learned_;
}

inline void MacTable::take(Entry& e, uint64_t k, uint64_t now_ns, uint16_t port, bool pinned) {
  if (e.mac != 0 && !e.pinned && e.port < per_port_.size()) --per_port_[e.port];
  e = {k, now_ns, port, pinned};
  if (!pinned && port < per_port_.size()) ++per_port_[port];
}

inline uint16_t MacTable::lookup(const uint8_t* dst_mac, uint16_t in_port, uint64_t now_ns) const {
  if (dst_mac[0] & 1) return kFlood;
  const uint64_t k = key(dst_mac);
  for (size_t i = 0, s = slot_of(k); i < kMaxProbe; ++i, s = (s + 1) & mask_) {
    const Entry& e = entries_[s];
    if (e.mac == k) {
      if (!e.pinned && now_ns - e.seen_ns > ageing_ns_) return kFlood;
      return e.port == in_port ? kDrop : e.port;
    }
  }
  return kFlood;
}

}  // namespace inagg::dataplane
