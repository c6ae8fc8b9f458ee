// The L2 learning bridge (no EAL needed).
#include <gtest/gtest.h>

#include "inagg/dataplane/bridge.hpp"

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
