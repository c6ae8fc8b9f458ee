// Binding a job's ranks to the wire before their first packet: the station table the lcores fill
// from the frames they bridge, and the rules that bind each rank from it and the operator's
// binding table (rank_binding.hpp).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "inagg/dataplane/rank_binding.hpp"
#include "inagg/dataplane/stations.hpp"

using inagg::dataplane::bind_ranks;
using inagg::dataplane::BindOutcome;
using inagg::dataplane::BoundStation;
using inagg::dataplane::claimed_since;
using inagg::dataplane::Mac;
using inagg::dataplane::parse_bindings;
using inagg::dataplane::Sightings;
using inagg::dataplane::StationTable;
using inagg::util::IpAddr;

namespace {

constexpr uint64_t kAgeing = 1'000'000'000;
const Mac kMac0 = {2, 0, 0, 0, 0, 1}, kMac1 = {2, 0, 0, 0, 0, 2}, kForger = {2, 0, 0, 0, 0, 0x66};

IpAddr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) { return IpAddr::v4(uint32_t{a} << 24 | b << 16 | c << 8 | d); }

// Ethernet + the start of an IPv4 header (what note_frame reads), optionally 802.1Q-tagged.
std::vector<uint8_t> ipv4_frame(const Mac& src, const IpAddr& ip, bool vlan = false) {
  std::vector<uint8_t> f(vlan ? 64 : 60, 0);
  std::memset(f.data(), 0xff, 6);
  std::memcpy(f.data() + 6, src.data(), 6);
  size_t l3 = 14;
  if (vlan) {
    f[12] = 0x81, f[13] = 0x00, f[14] = 0, f[15] = 7;
    f[16] = 0x08, f[17] = 0x00;
    l3 = 18;
  } else {
    f[12] = 0x08, f[13] = 0x00;
  }
  f[l3] = 0x45;
  std::memcpy(f.data() + l3 + 12, ip.bytes.data(), 4);
  return f;
}

std::vector<uint8_t> arp_frame(const Mac& src, const IpAddr& sender) {
  std::vector<uint8_t> f(42, 0);
  std::memset(f.data(), 0xff, 6);
  std::memcpy(f.data() + 6, src.data(), 6);
  f[12] = 0x08, f[13] = 0x06;
  const uint8_t head[8] = {0, 1, 8, 0, 6, 4, 0, 1};  // Ethernet/IPv4, request
  std::memcpy(f.data() + 14, head, 8);
  std::memcpy(f.data() + 22, src.data(), 6);
  std::memcpy(f.data() + 28, sender.bytes.data(), 4);
  return f;
}

std::vector<uint8_t> ipv6_frame(const Mac& src, const IpAddr& ip) {
  std::vector<uint8_t> f(14 + 40, 0);
  std::memcpy(f.data() + 6, src.data(), 6);
  f[12] = 0x86, f[13] = 0xdd;
  f[14] = 0x60;
  std::memcpy(f.data() + 22, ip.bytes.data(), 16);
  return f;
}

// A job of n ranks at 10.77.0.(r + 1), none bound.
inagg::control::JobSpec job(unsigned n) {
  inagg::control::JobSpec s;
  s.id = 7;
  s.workers = n;
  for (unsigned r = 0; r < n; ++r) {
    inagg::control::ConnectionSpec c;
    c.rank = r;
    c.src_ip = v4(10, 77, 0, static_cast<uint8_t>(r + 1));
    c.dst_ip = v4(10, 77, 0, static_cast<uint8_t>((r + 1) % n + 1));
    c.src_qpn = 0x100 + r;
    c.dst_qpn = 0x200 + (r + 1) % n;
    s.conns.push_back(c);
  }
  return s;
}

Sightings from(const StationTable& t, uint64_t now, uint64_t settle_ns = 0) {
  return {[&t, now](const IpAddr& a) { return t.of_address(a, now); },
          [&t, now](const Mac& m) { return t.of_mac(m, now); }, now, settle_ns};
}

}  // namespace

TEST(StationTable, NotesTheSourceAddressOfIpv4ArpIpv6AndTaggedFrames) {
  StationTable t(256, kAgeing, 0x5eed, 0);
  const auto a = ipv4_frame(kMac0, v4(10, 77, 0, 1));
  const auto b = arp_frame(kMac1, v4(10, 77, 0, 2));
  const auto c = ipv4_frame(kMac0, v4(10, 77, 0, 3), true);
  std::array<uint8_t, 16> six{0xfd};
  six[15] = 9;
  const auto d = ipv6_frame(kMac1, IpAddr::v6(six));
  t.note_frame(a.data(), static_cast<uint32_t>(a.size()), 2, 10);
  t.note_frame(b.data(), static_cast<uint32_t>(b.size()), 3, 10);
  t.note_frame(c.data(), static_cast<uint32_t>(c.size()), 2, 10);
  t.note_frame(d.data(), static_cast<uint32_t>(d.size()), 5, 10);
  const struct {
    IpAddr ip;
    uint16_t port;
    Mac mac;
  } want[] = {{v4(10, 77, 0, 1), 2, kMac0},
              {v4(10, 77, 0, 2), 3, kMac1},
              {v4(10, 77, 0, 3), 2, kMac0},
              {IpAddr::v6(six), 5, kMac1}};
  for (const auto& w : want) {
    const auto seen = t.of_address(w.ip, 20);
    ASSERT_EQ(seen.size(), 1u) << inagg::util::ip_text(w.ip);
    EXPECT_EQ(seen[0].port, w.port);
    EXPECT_EQ(seen[0].mac, w.mac);
  }
  EXPECT_EQ(t.of_mac(kMac0, 20).size(), 1u);
  EXPECT_TRUE(t.of_address(v4(10, 77, 0, 4), 20).empty());
  EXPECT_TRUE(t.of_address(v4(10, 77, 0, 1), 10 + kAgeing + 1).empty()) << "a sighting past the ageing time counts";
}

TEST(StationTable, ASecondPortClaimingAnAddressIsKeptBesideTheFirst) {
  StationTable t(256, kAgeing, 0x5eed, 0);
  const auto real = ipv4_frame(kMac0, v4(10, 77, 0, 1)), forged = ipv4_frame(kForger, v4(10, 77, 0, 1));
  t.note_frame(real.data(), 60, 1, 10);
  for (uint64_t now = 11; now < 100; ++now) t.note_frame(forged.data(), 60, 4, now);  // claims again and again
  t.note_frame(real.data(), 60, 1, 100);
  const auto seen = t.of_address(v4(10, 77, 0, 1), 101);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].port, 1);
  EXPECT_EQ(seen[1].port, 4);
  EXPECT_EQ(seen[1].mac, kForger);
}

TEST(StationTable, AFloodOfAddressesFromOnePortStopsAtItsLimitAndEvictsNoOtherStation) {
  StationTable t(64, kAgeing, 0x5eed, 8);
  const auto rank = ipv4_frame(kMac0, v4(10, 77, 0, 1));
  t.note_frame(rank.data(), 60, 1, 1);
  for (unsigned i = 0; i < 5000; ++i) {
    Mac m = {2, 0x66, 0, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    const auto f = ipv4_frame(m, v4(10, 88, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)));
    t.note_frame(f.data(), 60, 4, 2);
  }
  EXPECT_GT(t.limit_refused(), 4900u);
  const auto seen = t.of_address(v4(10, 77, 0, 1), 3);
  ASSERT_EQ(seen.size(), 1u) << "the flood evicted the rank's station";
  EXPECT_EQ(seen[0].port, 1);
}

// A bound rank's address and MAC keep their entries (set_pinned), so that a claim of either is
// noted after a flood from the claimer's port reached its limit, or a flood filled the table: here
// the rank's own frames never noted it (a job's RoCE frames note nothing).
TEST(StationTable, AClaimOfAPinnedStationIsNotedWhateverTheFloodBeforeIt) {
  const auto flood = [](StationTable& t, uint16_t port, uint64_t at) {
    for (unsigned i = 0; i < 5000; ++i) {
      Mac m = {2, 0x66, 0, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
      const auto f = ipv4_frame(m, v4(10, 88, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)));
      t.note_frame(f.data(), 60, port, at);
    }
  };
  const auto garp = arp_frame(kForger, v4(10, 77, 0, 1)), mac_claim = ipv4_frame(kMac0, v4(10, 99, 0, 9));
  for (const size_t limit : {size_t{8}, size_t{0}}) {  // the claimer's port at its limit; the whole table full
    StationTable t(64, kAgeing, 0x5eed, limit);
    ASSERT_TRUE(t.set_pinned({v4(10, 77, 0, 1)}, {kMac0}, 1));
    EXPECT_TRUE(t.of_address(v4(10, 77, 0, 1), 1).empty()) << "a pinned entry is no sighting";
    flood(t, 4, 2);
    EXPECT_GT(limit ? t.limit_refused() : t.full(), 4000u);
    t.note_frame(garp.data(), 42, 4, 3);
    t.note_frame(mac_claim.data(), 60, 4, 3);
    const auto at = t.of_address(v4(10, 77, 0, 1), 4), mac_at = t.of_mac(kMac0, 4);
    ASSERT_EQ(at.size(), 1u) << "limit " << limit << ": the claim of the rank's address was not noted";
    EXPECT_EQ(at[0].port, 4);
    EXPECT_EQ(at[0].mac, kForger);
    ASSERT_EQ(mac_at.size(), 1u) << "limit " << limit << ": the claim of the rank's MAC was not noted";
    EXPECT_EQ(mac_at[0].port, 4);
  }
  // Unpinned (the job removed), the entries age and give their room back.
  StationTable u(16, kAgeing, 0x5eed, 0);
  ASSERT_TRUE(u.set_pinned({v4(10, 77, 0, 1)}, {}, 1));
  ASSERT_TRUE(u.set_pinned({}, {}, 1));
  flood(u, 4, 2 * kAgeing);
  u.note_frame(garp.data(), 42, 4, 2 * kAgeing + 1);
  EXPECT_TRUE(u.of_address(v4(10, 77, 0, 1), 2 * kAgeing + 2).empty())
      << "an unpinned entry kept its room in a full table";
}

TEST(BindRanks, EachRankGoesToThePortAndMacItsAddressWasSeenWith) {
  StationTable t(256, kAgeing, 1, 0);
  for (unsigned r = 0; r < 3; ++r) {
    const Mac m = {2, 0, 0, 0, 0, static_cast<uint8_t>(r + 1)};
    const auto f = ipv4_frame(m, v4(10, 77, 0, static_cast<uint8_t>(r + 1)));
    t.note_frame(f.data(), 60, static_cast<uint16_t>(r), 5);
  }
  const BindOutcome b = bind_ranks(job(3), {}, from(t, 6));
  ASSERT_EQ(b.kind, BindOutcome::Kind::bound) << b.why;
  for (unsigned r = 0; r < 3; ++r) {
    EXPECT_EQ(b.spec.conns[r].port, r);
    EXPECT_EQ(b.spec.conns[r].mac, (Mac{2, 0, 0, 0, 0, static_cast<uint8_t>(r + 1)}));
  }
}

TEST(BindRanks, ARankNotSeenYetLeavesTheJobWaiting) {
  StationTable t(256, kAgeing, 1, 0);
  const auto f = ipv4_frame(kMac0, v4(10, 77, 0, 1));
  t.note_frame(f.data(), 60, 0, 5);
  const BindOutcome b = bind_ranks(job(2), {}, from(t, 6));
  EXPECT_EQ(b.kind, BindOutcome::Kind::waiting);
  EXPECT_NE(b.why.find("rank 1's address 10.77.0.2 has not been seen on any port yet"), std::string::npos) << b.why;
}

// A rank is bound where it was seen only once it has been seen for the settle time: a forger that
// claims the address just before the rank's own frames shows as a second port, not as the first.
TEST(BindRanks, AnAddressSeenOnlyJustNowWaitsForTheSettleTime) {
  StationTable t(256, kAgeing, 1, 0);
  const auto forged = ipv4_frame(kForger, v4(10, 77, 0, 1)), real = ipv4_frame(kMac0, v4(10, 77, 0, 1));
  const auto other = ipv4_frame(kMac1, v4(10, 77, 0, 2));
  t.note_frame(other.data(), 60, 1, 1'000);
  t.note_frame(forged.data(), 60, 4, 400'000'000);  // the forger, 100 ms before the settle time is up
  BindOutcome b = bind_ranks(job(2), {}, from(t, 450'000'000, 250'000'000));
  ASSERT_EQ(b.kind, BindOutcome::Kind::waiting) << b.why;
  EXPECT_NE(b.why.find("rank 0's address 10.77.0.1 has been seen on port 4 only just now"), std::string::npos) << b.why;
  t.note_frame(real.data(), 60, 0, 500'000'000);  // the rank itself, within the settle time
  b = bind_ranks(job(2), {}, from(t, 700'000'000, 250'000'000));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused) << "the first claim won the race: " << b.why;
  EXPECT_NE(b.why.find("was seen on ports 0 and 4"), std::string::npos) << b.why;
}

TEST(BindRanks, AnAddressSeenOnTwoPortsIsRefusedNeverPicked) {
  StationTable t(256, kAgeing, 1, 0);
  const auto real = ipv4_frame(kMac0, v4(10, 77, 0, 1)), forged = ipv4_frame(kForger, v4(10, 77, 0, 1));
  const auto other = ipv4_frame(kMac1, v4(10, 77, 0, 2));
  t.note_frame(forged.data(), 60, 4, 1);  // the forger first, then the rank itself
  t.note_frame(real.data(), 60, 0, 2);
  t.note_frame(other.data(), 60, 1, 2);
  const BindOutcome b = bind_ranks(job(2), {}, from(t, 3));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("rank 0's address 10.77.0.1 was seen on ports 0 and 4"), std::string::npos) << b.why;
  // The operator says where the rank is: bound there, the forger's claim notwithstanding.
  std::vector<BoundStation> table;
  std::string err;
  ASSERT_TRUE(parse_bindings("# the rack\n10.77.0.1 0 02:00:00:00:00:01\n", &table, &err)) << err;
  const BindOutcome o = bind_ranks(job(2), table, from(t, 3));
  ASSERT_EQ(o.kind, BindOutcome::Kind::bound) << o.why;
  EXPECT_EQ(o.spec.conns[0].port, 0);
  EXPECT_EQ(o.spec.conns[0].mac, kMac0);
}

TEST(BindRanks, AnAddressSeenWithTwoMacsOrAMacSeenOnTwoPortsIsRefused) {
  StationTable t(256, kAgeing, 1, 0);
  const auto real = ipv4_frame(kMac0, v4(10, 77, 0, 1)), forged = ipv4_frame(kForger, v4(10, 77, 0, 1));
  const auto other = ipv4_frame(kMac1, v4(10, 77, 0, 2));
  t.note_frame(real.data(), 60, 0, 1);
  t.note_frame(forged.data(), 60, 0, 1);  // the same port, another MAC
  t.note_frame(other.data(), 60, 1, 1);
  BindOutcome b = bind_ranks(job(2), {}, from(t, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("seen with MAC addresses"), std::string::npos) << b.why;

  StationTable u(256, kAgeing, 1, 0);
  const auto spoof_mac = ipv4_frame(kMac0, v4(10, 99, 0, 9));  // rank 0's MAC from port 4, another address
  u.note_frame(real.data(), 60, 0, 1);
  u.note_frame(other.data(), 60, 1, 1);
  u.note_frame(spoof_mac.data(), 60, 4, 1);
  b = bind_ranks(job(2), {}, from(u, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("MAC 02:00:00:00:00:01 was seen on ports 0 and 4"), std::string::npos) << b.why;
}

TEST(BindRanks, ANamedPortOrMacMustAgreeWithTheTableAndTheSightings) {
  StationTable t(256, kAgeing, 1, 0);
  const auto r0 = ipv4_frame(kMac0, v4(10, 77, 0, 1)), r1 = ipv4_frame(kMac1, v4(10, 77, 0, 2));
  t.note_frame(r0.data(), 60, 0, 1);
  t.note_frame(r1.data(), 60, 1, 1);
  inagg::control::JobSpec s = job(2);
  s.conns[0].port = 4;  // a registration naming another port than the rank's
  BindOutcome b = bind_ranks(s, {}, from(t, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("was seen on port 0, but the job names port 4"), std::string::npos) << b.why;
  std::vector<BoundStation> table;
  std::string err;
  ASSERT_TRUE(parse_bindings("10.77.0.1 2\n", &table, &err)) << err;
  b = bind_ranks(s, table, from(t, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("is bound to port 2 by the binding table, but the job names port 4"), std::string::npos)
      << b.why;
  s = job(2);
  s.conns[1].mac = kForger;  // a registration reporting another MAC than the one seen
  b = bind_ranks(s, {}, from(t, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::refused);
  EXPECT_NE(b.why.find("registered with MAC 02:00:00:00:00:66 but came with 02:00:00:00:00:02"), std::string::npos)
      << b.why;
  // A job file naming every port (a capture replayed) binds without sightings.
  s = job(2);
  s.conns[0].port = 0;
  s.conns[1].port = 1;
  b = bind_ranks(s, {}, from(StationTable(16, kAgeing, 1, 0), 2));
  EXPECT_EQ(b.kind, BindOutcome::Kind::bound) << b.why;
}

// While the job runs: every claim of a bound rank's place made after the job was bound is named,
// whether from another port or with another MAC, by the rank's IPv4 or IPv6 address or its MAC;
// the rank's own frames and the claims older than the binding are not.
TEST(ClaimedSince, AClaimOfABoundRankWhileTheJobRunsIsNamed) {
  const auto r0 = ipv4_frame(kMac0, v4(10, 77, 0, 1)), r1 = ipv4_frame(kMac1, v4(10, 77, 0, 2));
  const auto seen_both = [&](StationTable& t, uint64_t at) {
    t.note_frame(r0.data(), 60, 0, at);
    t.note_frame(r1.data(), 60, 1, at);
  };
  StationTable t(256, kAgeing, 1, 0);
  seen_both(t, 1);
  const BindOutcome b = bind_ranks(job(2), {}, from(t, 2));
  ASSERT_EQ(b.kind, BindOutcome::Kind::bound) << b.why;
  EXPECT_EQ(claimed_since(b.spec, from(t, 3), 2), "");
  seen_both(t, 5);  // the ranks' own frames go on
  EXPECT_EQ(claimed_since(b.spec, from(t, 6), 2), "");
  const auto garp = arp_frame(kForger, v4(10, 77, 0, 2));  // a fifth host's gratuitous ARP for rank 1
  t.note_frame(garp.data(), 42, 4, 6);
  std::string why = claimed_since(b.spec, from(t, 7), 2);
  EXPECT_NE(why.find("job 7: rank 1's address 10.77.0.2 was seen on port 4 (MAC 02:00:00:00:00:66) while the job "
                     "ran, but the rank is bound to port 1 with MAC 02:00:00:00:00:02: another host claims it; the "
                     "job is stopped"),
            std::string::npos)
      << why;

  StationTable u(256, kAgeing, 1, 0);  // the same port, another MAC
  seen_both(u, 1);
  const auto same_port = ipv4_frame(kForger, v4(10, 77, 0, 1));
  u.note_frame(same_port.data(), 60, 0, 6);
  why = claimed_since(b.spec, from(u, 7), 2);
  EXPECT_NE(why.find("rank 0's address 10.77.0.1 was seen with MAC 02:00:00:00:00:66 on port 0 while the job ran"),
            std::string::npos)
      << why;

  StationTable w(256, kAgeing, 1, 0);  // rank 0's MAC from another port, with another address
  seen_both(w, 1);
  const auto spoof_mac = ipv4_frame(kMac0, v4(10, 99, 0, 9));
  w.note_frame(spoof_mac.data(), 60, 3, 6);
  why = claimed_since(b.spec, from(w, 7), 2);
  EXPECT_NE(why.find("rank 0's MAC 02:00:00:00:00:01 was seen on port 3 while the job ran, but the rank is bound to "
                     "port 0"),
            std::string::npos)
      << why;
  EXPECT_EQ(claimed_since(b.spec, from(w, 7), 6), "") << "a claim before the job was bound counts here";

  // An IPv6 rank bound by its conn line's port, claimed from another port.
  inagg::control::JobSpec s = job(1);
  s.conns[0].src_ip = s.conns[0].dst_ip = *inagg::util::parse_ip("fd00:77::1");
  s.conns[0].port = 2;
  StationTable v(256, kAgeing, 1, 0);
  const BindOutcome b6 = bind_ranks(s, {}, from(v, 2));
  ASSERT_EQ(b6.kind, BindOutcome::Kind::bound) << b6.why;
  EXPECT_EQ(claimed_since(b6.spec, from(v, 3), 2), "");
  const auto claim6 = ipv6_frame(kForger, s.conns[0].src_ip);
  v.note_frame(claim6.data(), 54, 0, 6);
  why = claimed_since(b6.spec, from(v, 7), 2);
  EXPECT_NE(why.find("rank 0's address fd00:77::1 was seen on port 0 (MAC 02:00:00:00:00:66) while the job ran, but "
                     "the rank is bound to port 2:"),
            std::string::npos)
      << why;
}

TEST(BindingTable, LinesAreCheckedAndNamed) {
  std::vector<BoundStation> t;
  std::string err;
  EXPECT_TRUE(parse_bindings("10.0.0.1 0\nfd00::2 3 02:aa:bb:cc:dd:ee # a comment\n\n", &t, &err)) << err;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].port, 3);
  ASSERT_TRUE(t[1].mac.has_value());
  EXPECT_EQ((*t[1].mac)[5], 0xee);
  const struct {
    const char* text;
    const char* error;
  } bad[] = {{"10.0.0.1\n", "line 1: '' is not a port id"},
             {"10.0.0.1 x\n", "line 1: 'x' is not a port id"},
             {"nohost 1\n", "line 1: 'nohost' is not an IPv4 or IPv6 address"},
             {"10.0.0.1 1 02:00\n", "line 1: '02:00' is not a MAC address"},
             {"10.0.0.1 1\n10.0.0.1 2\n", "line 2: 10.0.0.1 is bound twice"},
             {"10.0.0.1 1 02:00:00:00:00:01 extra\n", "line 1: 'extra' after the MAC"}};
  for (const auto& b : bad) {
    std::vector<BoundStation> v;
    err.clear();
    EXPECT_FALSE(parse_bindings(b.text, &v, &err)) << b.text;
    EXPECT_NE(err.find(b.error), std::string::npos) << b.text << " -> " << err;
  }
}
