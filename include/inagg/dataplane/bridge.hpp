// The transparent L2 learning bridge for traffic inagg does not aggregate. Pure C++ (no DPDK), one
// instance per lcore: each lcore learns from the frames it sees, so nothing is shared; a miss
// floods, which is always correct, merely less efficient until that lcore has learned the address.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace inagg::dataplane {

inline constexpr uint16_t kFlood = 0xffff;  // send on every port but the ingress one
inline constexpr uint16_t kDrop = 0xfffe;   // destination is behind the ingress port
inline constexpr uint16_t kNoPort = 0xffff; // a frame the appliance made itself (no ingress port)

class MacTable {
 public:
  // `capacity` entries (rounded up to a power of two); entries older than `ageing_ns` are ignored
  // and reused.
  MacTable(size_t capacity, uint64_t ageing_ns);

  // Learns the source address of a frame that came in on `port` (unicast sources only).
  void learn(const uint8_t* src_mac, uint16_t port, uint64_t now_ns);

  // Where a frame to `dst_mac` arriving on `in_port` goes: a port, kFlood or kDrop.
  // Broadcast and multicast destinations flood.
  uint16_t lookup(const uint8_t* dst_mac, uint16_t in_port, uint64_t now_ns) const;

  size_t size(uint64_t now_ns) const;  // live entries
  uint64_t learned() const { return learned_; }
  uint64_t moves() const { return moves_; }   // an address seen on a new port
  uint64_t full() const { return full_; }     // could not learn: table full of live entries

 private:
  struct Entry {
    uint64_t mac = 0;      // 48 bits; 0 = empty
    uint64_t seen_ns = 0;
    uint16_t port = 0;
  };
  static uint64_t key(const uint8_t* mac);
  size_t slot_of(uint64_t k) const;

  std::vector<Entry> entries_;
  size_t mask_;
  uint64_t ageing_ns_;
  uint64_t learned_ = 0, moves_ = 0, full_ = 0;
  static constexpr size_t kMaxProbe = 16;
};

}  // namespace inagg::dataplane
