// The watchdog's decisions against a hand-driven clock: pings every half interval while every
// loop moves, none once one stands still for more than half an interval (named once), pings again
// when it moves; and $WATCHDOG_USEC / $WATCHDOG_PID read as sd_watchdog_enabled(3) reads them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "inagg/util/loop_watchdog.hpp"

namespace inagg::util {
namespace {

using namespace std::chrono_literals;
using Counters = std::vector<std::pair<unsigned, uint64_t>>;

TEST(LoopWatchdog, PingsEveryHalfIntervalWhileEveryLoopMoves) {
  LoopWatchdog w(10s);
  const LoopWatchdog::Clock::time_point t0{};
  int pings = 0;
  // 20 s of looks every 10 ms, both loops moving: a ping at 0 s, 5 s, 10 s, 15 s, 20 s.
  for (int ms = 0; ms <= 20'000; ms += 10) {
    const auto v = w.look(t0 + std::chrono::milliseconds(ms), Counters{{1, uint64_t(ms)}, {2, uint64_t(ms) * 3}});
    pings += v.ping;
    EXPECT_TRUE(v.stalled.empty());
  }
  EXPECT_EQ(pings, 5);
}

TEST(LoopWatchdog, StopsPingingOnceALoopStandsStillAndResumesWhenItMoves) {
  LoopWatchdog w(2s);
  const LoopWatchdog::Clock::time_point t0{};
  std::vector<bool> pinged;
  std::vector<std::pair<int, std::vector<std::pair<unsigned, LoopWatchdog::Clock::duration>>>> stalls, recoveries;
  for (int ms = 0; ms <= 6000; ms += 100) {
    // Loop 2 stops at 1.5 s and moves again at 4 s; loop 1 always moves.
    const uint64_t two = ms < 1500 ? ms : ms < 4000 ? 1500 : ms;
    const auto v = w.look(t0 + std::chrono::milliseconds(ms), Counters{{1, uint64_t(ms)}, {2, two}});
    pinged.push_back(v.ping);
    if (!v.stalled.empty()) stalls.push_back({ms, v.stalled});
    if (!v.recovered.empty()) recoveries.push_back({ms, v.recovered});
  }
  // Pings at 0, 1 and 2 s; loop 2 last moved at 1.5 s, so from 2.6 s none; it is named once, then.
  for (int ms = 0; ms <= 6000; ms += 100) {
    const bool want = ms == 0 || ms == 1000 || ms == 2000 || ms == 4000 || ms == 5000 || ms == 6000;
    EXPECT_EQ(pinged[ms / 100], want) << "at " << ms << " ms";
  }
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].first, 2600);
  ASSERT_EQ(stalls[0].second.size(), 1u);
  EXPECT_EQ(stalls[0].second[0].first, 2u);
  EXPECT_EQ(stalls[0].second[0].second, 1100ms);
  ASSERT_EQ(recoveries.size(), 1u);
  EXPECT_EQ(recoveries[0].first, 4000);
  EXPECT_EQ(recoveries[0].second[0].first, 2u);
  EXPECT_EQ(recoveries[0].second[0].second, 2500ms);
}

TEST(LoopWatchdog, ALoopThatNeverMovesIsCaughtFromItsFirstLook) {
  LoopWatchdog w(1s);
  const LoopWatchdog::Clock::time_point t0{};
  EXPECT_TRUE(w.look(t0, Counters{{7, 42}}).ping);
  EXPECT_FALSE(w.look(t0 + 600ms, Counters{{7, 42}}).ping);
  EXPECT_FALSE(w.look(t0 + 1200ms, Counters{{7, 42}}).ping);
}

struct EnvGuard {
  ~EnvGuard() {
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
  }
};

TEST(ServiceWatchdogInterval, ReadsTheEnvironmentAsSystemdSetsIt) {
  EnvGuard guard;
  std::string err;
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  EXPECT_FALSE(service_watchdog_interval(&err));
  ::setenv("WATCHDOG_USEC", "10000000", 1);
  EXPECT_EQ(service_watchdog_interval(&err), std::chrono::microseconds(10'000'000));
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  EXPECT_EQ(service_watchdog_interval(&err), std::chrono::microseconds(10'000'000));
  EXPECT_TRUE(err.empty());
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);  // another process's
  EXPECT_FALSE(service_watchdog_interval(&err));
  EXPECT_TRUE(err.empty());
  ::unsetenv("WATCHDOG_PID");
  for (const char* bad : {"0", "ten", "-5", "10s"}) {
    err.clear();
    ::setenv("WATCHDOG_USEC", bad, 1);
    EXPECT_FALSE(service_watchdog_interval(&err)) << bad;
    EXPECT_NE(err.find("$WATCHDOG_USEC"), std::string::npos) << bad << ": " << err;
  }
}

}  // namespace
}  // namespace inagg::util
