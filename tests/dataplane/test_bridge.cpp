// The L2 learning bridge (no EAL needed).
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <vector>

#include "inagg/dataplane/bridge.hpp"
#include "inagg/util/log.hpp"

using namespace inagg::dataplane;

namespace {
const uint8_t A[6] = {2, 0, 0, 0, 0, 1}, B[6] = {2, 0, 0, 0, 0, 2}, C[6] = {2, 0, 0, 0, 0, 3};
const uint8_t BCAST[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, MCAST[6] = {0x01, 0x00, 0x5e, 0, 0, 1};
}  // namespace

TEST(MacTable, LearnsForwardsFloodsAndNeverSendsBackOutTheIngressPort) {
  MacTable t(64, 1'000'000'000);
  EXPECT_EQ(t.lookup(B, 0, 0), kFlood);  // unknown unicast
  t.learn(A, 0, 10);
  t.learn(B, 1, 10);
  EXPECT_EQ(t.lookup(B, 0, 20), 1);
  EXPECT_EQ(t.lookup(A, 1, 20), 0);
  EXPECT_EQ(t.lookup(A, 0, 20), kDrop);  // destination behind the ingress port
  EXPECT_EQ(t.lookup(BCAST, 0, 20), kFlood);
  EXPECT_EQ(t.lookup(MCAST, 0, 20), kFlood);
  EXPECT_EQ(t.lookup(C, 0, 20), kFlood);
  EXPECT_EQ(t.size(20), 2u);
}

TEST(MacTable, GroupSourcesAreNotLearned) {
  MacTable t(64, 1'000'000'000);
  t.learn(BCAST, 0, 1);
  t.learn(MCAST, 0, 1);
  EXPECT_EQ(t.size(1), 0u);
}

TEST(MacTable, TheZeroAddressIsNotLearnedSoFramesToItFlood) {
  // net_null's frames are all zeros: source and destination 00:00:00:00:00:00.
  const uint8_t ZERO[6] = {};
  MacTable t(64, 1'000'000'000);
  t.learn(ZERO, 0, 1);
  EXPECT_EQ(t.size(1), 0u);
  EXPECT_EQ(t.lookup(ZERO, 0, 2), kFlood);  // not kDrop: the frame goes out of the other ports
  EXPECT_EQ(MacTable::key(ZERO), MacTable::kZeroKey);
}

TEST(MacTable, StationsMoveAndAgeOut) {
  MacTable t(64, 100);
  t.learn(A, 0, 0);
  t.learn(A, 2, 50);
  EXPECT_EQ(t.lookup(A, 1, 60), 2);
  EXPECT_EQ(t.moves(), 1u);
  EXPECT_EQ(t.lookup(A, 1, 200), kFlood);  // aged out
  EXPECT_EQ(t.size(200), 0u);
}

TEST(MacTable, AFullNeighbourhoodFloodsInsteadOfEvictingLiveEntries) {
  MacTable t(16, 1'000'000'000);
  uint8_t mac[6] = {2, 0, 0, 0, 0, 0};
  for (int i = 0; i < 100; ++i) {
    mac[4] = static_cast<uint8_t>(i >> 8);
    mac[5] = static_cast<uint8_t>(i);
    t.learn(mac, static_cast<uint16_t>(i % 3), 1);
  }
  EXPECT_LE(t.size(1), 16u);
  EXPECT_GT(t.full(), 0u);
  // Whatever was learned is right; the rest floods.
  for (int i = 0; i < 100; ++i) {
    mac[4] = static_cast<uint8_t>(i >> 8);
    mac[5] = static_cast<uint8_t>(i);
    const uint16_t out = t.lookup(mac, 7, 2);
    EXPECT_TRUE(out == kFlood || out == i % 3) << i;
  }
}

// ---- a station on one port claiming a job rank's address ----------------------------------------
// R is a rank's address, pinned to port 1 (the port its job bound it to: set_pins); the forger is
// on port 3. The lcore learns every frame it bridges (a plain frame or a gratuitous ARP, unicast
// or broadcast: the table sees a source address either way) with learn().

namespace {
const uint8_t R[6] = {2, 0, 0, 0, 0x10, 0x01};
constexpr uint64_t kAgeing = 1'000'000'000;
using Pins = std::vector<std::pair<std::array<uint8_t, 6>, uint16_t>>;
const Pins kRankOnPort1 = {{{2, 0, 0, 0, 0x10, 0x01}, 1}};
}  // namespace

TEST(MacTable, ARanksAddressClaimedFromAnotherPortIsRefusedAndCounted) {
  MacTable t(64, kAgeing, 0x1234);
  ASSERT_TRUE(t.set_pins(kRankOnPort1, 0));
  for (uint64_t now = 1; now < 10; ++now) t.learn(R, 3, now);  // the forger's frames, again and again
  EXPECT_EQ(t.lookup(R, 0, 10), 1) << "the rank's sums would leave by the forger's port";
  EXPECT_EQ(t.moves_refused(), 9u);
  EXPECT_EQ(t.moves(), 0u);
  t.learn(R, 1, 11);  // the rank's own plain frames refresh it
  EXPECT_EQ(t.lookup(R, 0, 12), 1);
}

TEST(MacTable, AClaimBeforeTheRankIsBoundIsUndoneByItsBinding) {
  MacTable t(64, kAgeing, 0x1234);
  t.learn(R, 3, 0);  // the forger first: a plain entry on its port
  EXPECT_EQ(t.lookup(R, 0, 1), 3);
  ASSERT_TRUE(t.set_pins(kRankOnPort1, 2));  // the job is registered, the rank bound to port 1
  t.learn(R, 3, 3);
  EXPECT_EQ(t.lookup(R, 0, 4), 1);
  EXPECT_EQ(t.moves_refused(), 1u);
}

TEST(MacTable, APinnedAddressNeverAgesAndMovesAgainOnlyOnceUnpinned) {
  MacTable t(64, 100, 0x1234);
  ASSERT_TRUE(t.set_pins(kRankOnPort1, 0));
  t.learn(R, 3, 50);
  EXPECT_EQ(t.lookup(R, 0, 60), 1);
  t.learn(R, 3, 10'000);  // long past the ageing time: still pinned
  EXPECT_EQ(t.lookup(R, 0, 10'010), 1);
  EXPECT_EQ(t.moves_refused(), 2u);
  ASSERT_TRUE(t.set_pins({}, 10'020));  // its job went: an ordinary entry again
  t.learn(R, 3, 10'200);                // aged by now: it moves as any address does
  EXPECT_EQ(t.lookup(R, 0, 10'210), 3);
}

TEST(MacTable, ABurstOfOtherAddressesCannotKeepARankOutOrEvictIt) {
  MacTable t(16, kAgeing, 0x1234);
  uint8_t mac[6] = {2, 0, 0, 0, 0, 0};
  auto flood = [&](uint64_t now) {
    for (int i = 0; i < 4096; ++i) {
      mac[3] = static_cast<uint8_t>(i >> 8);
      mac[4] = static_cast<uint8_t>(i);
      t.learn(mac, 3, now);
    }
  };
  flood(1);  // before the rank is bound: the table is full of live entries
  EXPECT_GT(t.full(), 0u);
  ASSERT_TRUE(t.set_pins(kRankOnPort1, 2));
  EXPECT_EQ(t.lookup(R, 0, 3), 1) << "the rank's sums would flood to every port";
  flood(4);  // and after
  EXPECT_EQ(t.lookup(R, 0, 5), 1);
}

// Addresses that share a slot under one key do not under another: which collide cannot be worked
// out without the key (each appliance start draws its own). The unkeyed hash put addresses that
// differ only in the high bits of their last byte in one slot.
TEST(MacTable, TheSlotHashIsKeyed) {
  MacTable k1(1024, kAgeing, 1), k2(1024, kAgeing, 0x9f3b5c7d2e1a4b68ull);
  // An attacker who knew key 1 would pick 24 addresses of one slot.
  std::vector<std::array<uint8_t, 6>> same;
  for (uint32_t i = 0; same.size() < 24 && i < (1u << 22); ++i) {
    std::array<uint8_t, 6> m = {
        2, 0, 0, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    if (k1.slot(m.data()) == 5) same.push_back(m);
  }
  ASSERT_EQ(same.size(), 24u);
  std::set<size_t> slots;
  for (const auto& m : same) slots.insert(k2.slot(m.data()));
  EXPECT_GT(slots.size(), 16u) << "they collide under another key too";
  // The last byte's high bits reach the slot.
  std::set<size_t> high;
  for (unsigned b = 0; b < 16; ++b) {
    const uint8_t m[6] = {2, 0, 0, 0, 0, static_cast<uint8_t>(b << 4)};
    high.insert(k2.slot(m));
  }
  EXPECT_GT(high.size(), 8u);
}

// ---- port security: a per-port limit of learned addresses, claims logged once a second ----------

namespace {
std::array<uint8_t, 6> nth(unsigned i) {
  return {2, 0, 0x77, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
}
std::vector<std::string> g_lines;
void keep_line(inagg::util::LogModule, inagg::util::LogLevel, const char* m) { g_lines.emplace_back(m); }
}  // namespace

TEST(MacTable, ABurstOfAddressesFromOnePortStopsAtItsLimitOthersStillLearn) {
  MacTable t(4096, kAgeing, 0x1234, 8);
  for (unsigned i = 0; i < 1000; ++i) t.learn(nth(i).data(), 3, 1);  // one port sends 1000 source addresses
  EXPECT_EQ(t.on_port(3), 8u);
  EXPECT_EQ(t.port_limit_refused(), 992u);
  EXPECT_EQ(t.lookup(nth(0).data(), 0, 2), 3);
  EXPECT_EQ(t.lookup(nth(8).data(), 0, 2), kFlood) << "an address past the port's limit was learned";
  // Stations on the other ports are still learned, and a rank bound to the full port is pinned there.
  t.learn(A, 1, 3);
  t.learn(B, 2, 3);
  ASSERT_TRUE(t.set_pins({{{2, 0, 0, 0, 0x10, 0x01}, 3}}, 3));
  EXPECT_EQ(t.lookup(A, 0, 4), 1);
  EXPECT_EQ(t.lookup(B, 0, 4), 2);
  EXPECT_EQ(t.lookup(R, 0, 4), 3);
  // A known station moving onto the full port is not moved there either.
  t.learn(A, 3, 5);
  EXPECT_EQ(t.lookup(A, 0, 6), 1);
  EXPECT_EQ(t.port_limit_refused(), 993u);
  // Once its addresses aged, the port learns again.
  t.learn(nth(500).data(), 3, 3 * kAgeing);
  EXPECT_EQ(t.lookup(nth(500).data(), 0, 3 * kAgeing + 1), 3);
  EXPECT_EQ(t.on_port(3), 1u);
}

TEST(MacTable, WithoutALimitAPortLearnsWhatFits) {
  MacTable t(4096, kAgeing, 0x1234);
  for (unsigned i = 0; i < 1000; ++i) t.learn(nth(i).data(), 3, 1);
  EXPECT_EQ(t.port_limit_refused(), 0u);
  EXPECT_GT(t.on_port(3), 900u);
}

TEST(MacTable, AFloodOfClaimsIsCountedEveryFrameAndLoggedOnceASecond) {
  g_lines.clear();
  inagg::util::set_log_sink(keep_line);
  MacTable t(64, 10 * kAgeing, 0x1234);
  ASSERT_TRUE(t.set_pins(kRankOnPort1, 0));
  uint64_t now = 1;
  for (int i = 0; i < 30000; ++i, now += 100'000) {  // 3 s of claims, one every 100 us, refreshed by the rank
    t.learn(R, 2, now);
    if (i % 1000 == 0) t.learn(R, 1, now);
  }
  inagg::util::set_log_sink(nullptr);
  EXPECT_EQ(t.moves_refused(), 30000u);
  EXPECT_EQ(t.lookup(R, 0, now), 1);
  EXPECT_GE(g_lines.size(), 3u);
  EXPECT_LE(g_lines.size(), 4u) << "a claim flood floods the log";
  ASSERT_FALSE(g_lines.empty());
  EXPECT_NE(g_lines[0].find("claims 02:00:00:00:10:01, a job rank's address bound to port 1"), std::string::npos)
      << g_lines[0];
  EXPECT_NE(g_lines[1].find("more claims refused since the last line"), std::string::npos) << g_lines[1];
}
