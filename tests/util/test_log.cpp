// The log sink and the rate limit of fast-path messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inagg/util/log.hpp"

namespace inagg::util {
namespace {

std::vector<std::string> g_lines;
void capture(LogModule m, LogLevel l, const char* msg) {
  g_lines.push_back(std::string(log_module_name(m)) + "/" + std::to_string(static_cast<int>(l)) + ": " + msg);
}

TEST(Log, GoesToTheSinkFormatted) {
  g_lines.clear();
  set_log_sink(capture);
  log(LogModule::control, LogLevel::info, "job %u added (%s)", 7u, "fp32");
  log(LogModule::engine, LogLevel::warning, "%s", std::string(2000, 'x').c_str());  // cut, never overrun
  set_log_sink(nullptr);
  ASSERT_EQ(g_lines.size(), 2u);
  EXPECT_EQ(g_lines[0], "inagg.control/3: job 7 added (fp32)");
  EXPECT_EQ(g_lines[1].size(), std::string("inagg.engine/1: ").size() + 1023);
}

TEST(LogRateLimit, BurstPerWindowThenCountsWhatItRefused) {
  LogRateLimit limit(3, 1000);
  int allowed = 0;
  for (uint64_t t = 0; t < 10; ++t) allowed += limit.allow(100 + t);  // one window
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(limit.take_suppressed(), 7u);
  EXPECT_EQ(limit.take_suppressed(), 0u);
  EXPECT_TRUE(limit.allow(1100));  // the next window
  EXPECT_TRUE(limit.allow(1101));
  EXPECT_TRUE(limit.allow(1102));
  EXPECT_FALSE(limit.allow(1103));
  EXPECT_TRUE(limit.allow(5000));
  EXPECT_EQ(limit.take_suppressed(), 1u);
}

}  // namespace
}  // namespace inagg::util
