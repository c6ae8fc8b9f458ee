// What handing a packet's payload to another core costs here (bench/run job-lcores): a
// 4 KiB payload written on one core (as a PMD's RX copy writes it) and then read once by a CRC pass
// (as the engine's ICRC verify reads it), on the same core, and on the other core while the first
// keeps writing the next ones (as a pipeline of two lcores does). A split of one job's work over
// two lcores gains only where the work it moves costs more than this hand-off. Last, both cores
// working on payloads of their own at once against one alone: what two cores give here right now.
//
//   bench_handoff [CPU_A=0] [CPU_B=1]     prints ns per 4 KiB payload and a key=value line
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "inagg/wire/crc32.hpp"

namespace {

constexpr size_t kPayload = 4096;
constexpr size_t kBuffers = 64;  // 256 KiB in flight: in L2 on either core
constexpr uint64_t kCount = 300'000;

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct alignas(64) Counter {
  std::atomic<uint64_t> v{0};
};

}  // namespace

int main(int argc, char** argv) {
  const int cpu_a = argc > 1 ? std::atoi(argv[1]) : 0, cpu_b = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<uint8_t> mem(kBuffers * kPayload + 64);
  uint8_t* buf = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
  uint32_t sink = 0;

  // One core: write a payload, then CRC it.
  pin(cpu_b);
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    uint8_t* p = buf + (i % kBuffers) * kPayload;
    std::memset(p, static_cast<int>(i), kPayload);
    sink ^= inagg::wire::crc32({p, kPayload});
  }
  const double same = seconds_since(t0) / kCount * 1e9;

  // The CRC alone, over payloads already in this core's cache: the work a hand-off would have to save.
  t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kCount; ++i) sink ^= inagg::wire::crc32({buf + (i % kBuffers) * kPayload, kPayload});
  const double crc_only = seconds_since(t0) / kCount * 1e9;

  // Two cores: A writes payload i while B CRCs payload i - 1 (at most half the buffers ahead).
  Counter produced, consumed;
  std::thread writer([&] {
    pin(cpu_a);
    for (uint64_t i = 0; i < kCount; ++i) {
      while (i - consumed.v.load(std::memory_order_acquire) >= kBuffers / 2) {}
      std::memset(buf + (i % kBuffers) * kPayload, static_cast<int>(i), kPayload);
      produced.v.store(i + 1, std::memory_order_release);
    }
  });
  t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    while (produced.v.load(std::memory_order_acquire) <= i) {}
    sink ^= inagg::wire::crc32({buf + (i % kBuffers) * kPayload, kPayload});
    consumed.v.store(i + 1, std::memory_order_release);
  }
  const double two = seconds_since(t0) / kCount * 1e9;
  writer.join();

  // What two cores give at all, right now: each CPU writes and CRCs payloads of its own (no sharing),
  // both at once, against CPU B alone (same_core above). On a machine shared with other work this is
  // the ceiling of any two-lcore ratio measured at the same time.
  std::vector<uint8_t> mem_a(kBuffers * kPayload + 64);
  uint8_t* buf_a = mem_a.data() + (64 - reinterpret_cast<uintptr_t>(mem_a.data()) % 64) % 64;
  uint32_t sink_a = 0;
  double both_a = 0;
  std::thread other([&] {
    pin(cpu_a);
    const auto t = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < kCount; ++i) {
      uint8_t* p = buf_a + (i % kBuffers) * kPayload;
      std::memset(p, static_cast<int>(i), kPayload);
      sink_a ^= inagg::wire::crc32({p, kPayload});
    }
    both_a = seconds_since(t);
  });
  t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    uint8_t* p = buf + (i % kBuffers) * kPayload;
    std::memset(p, static_cast<int>(i), kPayload);
    sink ^= inagg::wire::crc32({p, kPayload});
  }
  const double both_b = seconds_since(t0);
  other.join();
  // Payloads per second of both together, over CPU B's alone.
  const double two_cores_vs_one = (kCount / both_a + kCount / both_b) / (1e9 / same);

  std::printf(
      "4 KiB payload, written then CRC'd on CPU %d: %.0f ns; the CRC alone (in cache): %.0f ns; written on CPU "
      "%d and CRC'd on CPU %d (pipelined, per payload): %.0f ns; CPUs %d and %d each on payloads of their own at "
      "once: %.2fx one (sink %u)\n",
      cpu_b, same, crc_only, cpu_a, cpu_b, two, cpu_a, cpu_b, two_cores_vs_one, (sink ^ sink_a) & 1);
  // handoff_extra_ns: what reading a payload another core wrote costs the reader beyond its CRC.
  std::printf("crc_ns=%.0f handoff_read_ns=%.0f same_core_ns=%.0f handoff_extra_ns=%.0f two_cores_vs_one=%.2f\n",
              crc_only, two, same, two - crc_only, two_cores_vs_one);
  return 0;
}
