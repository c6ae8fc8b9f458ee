// What the tally costs the client per ina allreduce (docs/protocol.md, "The tally"): ina_allreduce
// (each message laid out with its two tallies, both checked, the data copied out message by
// message and the first tally read again) against the plain ina it replaced (one memcpy in, the
// zero padding, one memcpy out), over the same in-memory transport that places every write in the
// receive region at once (one rank whose own sum is itself: workers = 1, so the tally passes).
// 64 KiB messages, fp32; sizes a whole number of messages, where the tally also costs one more
// message. The wire's share (bytes sent) is not here: it is the message count, in the summary.
// After the run, for each size: tally_vs_plain_<size>=X (bytes per second, tallied over plain) and
// msgs_vs_plain_<size>=Y (messages on the wire, tallied over plain).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "inagg/client/algorithms.hpp"
#include "rate_reporter.hpp"

namespace {

using namespace inagg::client;

class LoopTransport final : public Transport {
 public:
  explicit LoopTransport(uint64_t bytes) : send_(bytes), recv_(bytes) {}
  std::span<uint8_t> send_region() override { return send_; }
  std::span<const uint8_t> receive_region() const override { return recv_; }
  void post_write(uint64_t src, uint32_t len, uint64_t dst, uint32_t) override {
    std::memcpy(recv_.data() + dst, send_.data() + src, len);
    ++received_;
  }
  void poll(int) override {}
  bool writes_done() const override { return true; }
  uint64_t messages_received() const override { return received_; }
  uint64_t last_arrival_ns() const override { return 0; }
  bool barrier(const std::string&, std::string*) override { return true; }  // one rank
  bool open_receive(std::string*) override { return true; }                 // nothing to guard in memory
  const std::string& error() const override { return error_; }
  void finish(uint64_t) override {}
  TransportCounters counters() const override { return {}; }

 private:
  std::vector<uint8_t> send_, recv_;
  uint64_t received_ = 0;
  std::string error_;
};

constexpr uint32_t kMessage = 65536;

Geometry geometry() { return {inagg::util::Dtype::fp32, 1, kMessage, Mode::ina}; }

// The plain ina allreduce without the tally, as it was: the reference.
Outcome plain_ina(RingExchange& x, const Geometry& g, const uint8_t* in, uint8_t* out, uint64_t bytes) {
  const uint64_t msgs = g.padded(bytes) / g.message;
  uint8_t* send = x.transport().send_region().data();
  std::memcpy(send, in, bytes);
  std::memset(send + bytes, 0, msgs * g.message - bytes);
  Outcome r = x.exchange(0, msgs * g.message, 0, msgs);
  if (r.ok()) std::memcpy(out, x.transport().receive_region().data(), bytes);
  return r;
}

template <bool kTallied>
void BM_ina(benchmark::State& state) {
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const Geometry g = geometry();
  LoopTransport t(g.send_bytes(bytes) + kMessage);
  RingExchange x(t, kMessage, UINT64_MAX, 0);
  std::vector<uint8_t> in(bytes, 1), out(bytes);
  for (auto _ : state) {
    const Outcome r =
        kTallied ? ina_allreduce(x, g, in.data(), out.data(), bytes) : plain_ina(x, g, in.data(), out.data(), bytes);
    if (!r.ok()) state.SkipWithError(r.error.c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

constexpr int64_t kSizes[] = {64 << 10, 1 << 20, 16 << 20};

}  // namespace

BENCHMARK(BM_ina<false>)->Name("BM_ina_plain")->Arg(kSizes[0])->Arg(kSizes[1])->Arg(kSizes[2])->UseRealTime();
BENCHMARK(BM_ina<true>)->Name("BM_ina_tallied")->Arg(kSizes[0])->Arg(kSizes[1])->Arg(kSizes[2])->UseRealTime();

int main(int argc, char** argv) {
  inagg::bench::RateReporter reporter;
  if (!inagg::bench::run_benchmarks(argc, argv, reporter)) return 1;
  const Geometry g = geometry();
  for (const int64_t s : kSizes) {
    const std::string a = "BM_ina_tallied/" + std::to_string(s) + "/real_time",
                      b = "BM_ina_plain/" + std::to_string(s) + "/real_time";
    std::printf("tally_vs_plain_%lld=%.3f msgs_vs_plain_%lld=%.3f ", static_cast<long long>(s), reporter.ratio(a, b),
                static_cast<long long>(s),
                static_cast<double>(g.messages_of(s)) / static_cast<double>(g.padded(s) / kMessage));
  }
  std::printf("\n");
  return 0;
}
