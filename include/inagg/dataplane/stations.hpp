// Where the appliance has seen each station lately: for the source IP address (IPv4 or IPv6
// header, an ARP sender's) and the source MAC of every frame it bridges, the ports it came from,
// with the MAC each address came with. Pure C++ (no DPDK), one instance per lcore, written only
// by its lcore; the control side reads it through a request (lcore_requests.cpp).
//
// What it is for: binding a job's ranks to the wire before their first packet, as a switch's
// DHCP snooping table binds hosts to ports (docs/binding.md). A rank's
// port is the one port its address has been seen on; seen on two, it is ambiguous and the job is
// refused, never bound to whichever claim came first. Packets of registered connections never
// teach it (the lcore notes only the frames it bridges), so nothing a job's packets claim can
// place a rank.
//
// Against a flood of forged addresses: each port may create at most `per_port_limit` entries (a
// port at its limit is counted and its new addresses not noted, so it cannot evict the entries of
// stations on other ports), and the slot hash is keyed at random per table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "inagg/util/ip_addr.hpp"

namespace inagg::dataplane {

using Mac = std::array<uint8_t, 6>;

class StationTable {
 public:
  // One station seen on one port: the last time, and (for an address) the MAC it came with.
  struct Sighting {
    uint16_t port = 0;
    Mac mac{};
    uint64_t seen_ns = 0;   // the last time
    uint64_t first_ns = 0;  // the first time (since it was last forgotten)
  };
  static constexpr size_t kSightings = 4;  // per address or MAC: (port, MAC) pairs, the oldest replaced

  StationTable(size_t capacity, uint64_t ageing_ns, uint64_t hash_key, size_t per_port_limit);

  // A bridged frame: notes its source MAC, and its source address when it has one (IPv4, IPv6,
  // ARP; one 802.1Q tag is looked through). `len` is the frame's length.
  void note_frame(const uint8_t* frame, uint32_t len, uint16_t port, uint64_t now_ns);
  void note_address(const util::IpAddr& ip, const uint8_t* mac, uint16_t port, uint64_t now_ns);
  void note_mac(const uint8_t* mac, uint16_t port, uint64_t now_ns);

  // Keeps an entry for each of these addresses and MACs (the bound ranks'), whatever the table's
  // fill and the ports' limits, never aged out or taken by another station: a claim of a bound
  // rank's address or MAC from any port is always noted, also after a flood filled the table or
  // the claimer's port reached its limit. The entries pinned before and not named now age again.
  // False when one found no room (its neighbourhood holds only pinned entries).
  bool set_pinned(const std::vector<util::IpAddr>& addresses, const std::vector<Mac>& macs, uint64_t now_ns);

  // What was seen within the ageing time, newest first.
  std::vector<Sighting> of_address(const util::IpAddr& ip, uint64_t now_ns) const;
  std::vector<Sighting> of_mac(const Mac& mac, uint64_t now_ns) const;

  uint64_t limit_refused() const { return limit_refused_; }  // not noted: its port at its limit
  uint64_t full() const { return full_; }                    // not noted: its neighbourhood full of live entries

 private:
  struct Key {
    std::array<uint8_t, 17> b{};  // [0]: 0 empty, 4 or 6 an address, 1 a MAC
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    uint16_t creator = 0;  // the port whose frame made the entry (its limit counts it; kPortIds: pinned)
    bool pinned = false;   // a bound rank's (set_pinned): never dead
    std::array<Sighting, kSightings> seen{};
    uint64_t last_ns() const;
  };
  static Key address_key(const util::IpAddr& ip);
  static Key mac_key(const uint8_t* mac);
  size_t slot_of(const Key& k) const;
  void note(const Key& k, const uint8_t* mac, uint16_t port, uint64_t now_ns);
  bool pin(const Key& k, uint64_t now_ns);
  const Entry* find(const Key& k) const;
  std::vector<Sighting> live(const Entry* e, uint64_t now_ns) const;

  std::vector<Entry> entries_;
  std::vector<uint32_t> per_port_;  // live entries each port created (recounted as entries age)
  size_t mask_;
  uint64_t ageing_ns_, hash_key_;
  uint32_t limit_;
  uint64_t limit_refused_ = 0, full_ = 0;
  uint64_t recounted_ns_ = 0;  // the last recount of the ports' entries (at most one per second)
  bool recounted_ = false;
  static constexpr size_t kMaxProbe = 16;
  static constexpr size_t kPortIds = 1024;
};

}  // namespace inagg::dataplane
