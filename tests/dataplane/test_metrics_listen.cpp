// --metrics' address: a bare port is the loopback, never every address.
#include <gtest/gtest.h>

#include "inagg/dataplane/metrics.hpp"

namespace inagg::dataplane {
namespace {

TEST(MetricsListen, ABarePortIsTheLoopback) {
  std::string host, err;
  uint16_t port = 0;
  ASSERT_TRUE(parse_listen_address("9100", &host, &port, &err)) << err;
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9100);
  ASSERT_TRUE(parse_listen_address("[::1]:9101", &host, &port, &err)) << err;
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9101);
  ASSERT_TRUE(parse_listen_address("0.0.0.0:9102", &host, &port, &err)) << err;  // allowed, with a warning
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_FALSE(parse_listen_address("99999", &host, &port, &err));
  EXPECT_FALSE(parse_listen_address("", &host, &port, &err));
}

// Every engine and lcore counter lands in a metric family: a counter added without a place in
// metrics.cpp's tables would otherwise be missing from the scrape.
TEST(MetricsNames, EveryCounterIsExported) {
  std::string missing;
  EXPECT_TRUE(every_counter_exported(&missing)) << missing;
}

}  // namespace
}  // namespace inagg::dataplane
