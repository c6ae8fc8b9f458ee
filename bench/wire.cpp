// Wire-layer benchmarks: CRC-32 / ICRC throughput against zlib's crc32 on the same bytes, and the
// cost of parsing one RoCEv2 packet. Ends with a key=value summary line of ratios from this run.
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"
#include "rate_reporter.hpp"

using namespace inagg::wire;
using inagg::util::parse_ip;

namespace {

std::vector<uint8_t> random_bytes(size_t n) {
  std::mt19937 rng(42);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void BM_zlib_crc32(benchmark::State& state) {
  const auto data = random_bytes(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    uLong c = ::crc32(0, data.data(), static_cast<uInt>(data.size()));
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

template <int Impl>
void BM_inagg_crc32(benchmark::State& state) {
  const auto data = random_bytes(static_cast<size_t>(state.range(0)));
  detail::Crc32Update f = Impl == 0   ? detail::crc32_update_slice8
                          : Impl == 1 ? detail::crc32_update_pclmul()
                                      : detail::crc32_update_vpclmul();
  if (f == nullptr) {
    state.SkipWithError("not supported by this CPU");
    return;
  }
  for (auto _ : state) {
    uint32_t c = f(~0u, data.data(), data.size());
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_crc32_dispatched(benchmark::State& state) {
  const auto data = random_bytes(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    uint32_t c = crc32(data);
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
  state.SetLabel(std::string(crc32_impl_name()));
}

std::vector<uint8_t> write_packet(size_t payload_len, bool v6) {
  RoceFrameSpec s;
  s.src_ip = v6 ? *parse_ip("fd00::1") : *parse_ip("10.0.0.1");
  s.dst_ip = v6 ? *parse_ip("fd00::2") : *parse_ip("10.0.0.2");
  s.opcode = op::kRc | op::kWriteMiddle;
  s.dest_qp = 0x11;
  s.psn = 100;
  const auto payload = random_bytes(payload_len);
  std::vector<uint8_t> out(roce_frame_size(s, payload_len));
  build_roce_frame(out, s, payload);
  return out;
}

// Full ICRC verification of one received packet (what the engine does per input packet).
void BM_icrc_verify(benchmark::State& state) {
  const auto frame = write_packet(static_cast<size_t>(state.range(0)), false);
  Layout l;
  parse_frame(frame, l);
  for (auto _ : state) {
    bool ok = icrc_verify(frame.data(), l);
    benchmark::DoNotOptimize(ok);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(frame.size()));
}

// zlib over the same bytes the ICRC covers (masked copy of the headers + payload), the reference.
void BM_icrc_zlib(benchmark::State& state) {
  const auto frame = write_packet(static_cast<size_t>(state.range(0)), false);
  Layout l;
  parse_frame(frame, l);
  for (auto _ : state) {
    uint8_t hdr[8 + 64];
    const size_t hl = l.payload - l.l3;
    std::memset(hdr, 0xff, 8);
    std::memcpy(hdr + 8, frame.data() + l.l3, hl);
    hdr[8 + 1] = hdr[8 + 8] = hdr[8 + 10] = hdr[8 + 11] = 0xff;
    hdr[8 + 20 + 6] = hdr[8 + 20 + 7] = 0xff;
    hdr[8 + 28 + 4] = 0xff;
    uLong c = ::crc32(0, hdr, static_cast<uInt>(8 + hl));
    c = ::crc32(c, frame.data() + l.payload, static_cast<uInt>(l.padded_payload_len()));
    bool ok = static_cast<uint32_t>(c) == icrc_stored(frame.data(), l);
    benchmark::DoNotOptimize(ok);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(frame.size()));
}

// The per-slot work of the combine method: one header CRC + one combine per packet.
void BM_icrc_header_combine(benchmark::State& state) {
  const auto frame = write_packet(4096, false);
  Layout l;
  parse_frame(frame, l);
  const Crc32Shift shift(l.padded_payload_len());
  const uint32_t payload_crc = icrc_payload_crc(frame.data(), l);
  for (auto _ : state) {
    uint32_t c = icrc_combine(icrc_header_crc(frame.data(), l), payload_crc, shift);
    benchmark::DoNotOptimize(c);
  }
}

void BM_parse_frame(benchmark::State& state) {
  const auto frame = write_packet(1024, state.range(0) == 6);
  for (auto _ : state) {
    Layout l;
    benchmark::DoNotOptimize(parse_frame(frame, l));
    benchmark::DoNotOptimize(l);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

BENCHMARK(BM_zlib_crc32)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK_TEMPLATE(BM_inagg_crc32, 0)->Name("BM_crc32_slice8")->Arg(1024)->Arg(4096);
BENCHMARK_TEMPLATE(BM_inagg_crc32, 1)->Name("BM_crc32_pclmul")->Arg(1024)->Arg(4096);
BENCHMARK_TEMPLATE(BM_inagg_crc32, 2)->Name("BM_crc32_vpclmul")->Arg(1024)->Arg(4096);
BENCHMARK(BM_crc32_dispatched)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_icrc_verify)->Arg(1024)->Arg(4096);
BENCHMARK(BM_icrc_zlib)->Arg(1024)->Arg(4096);
BENCHMARK(BM_icrc_header_combine);
BENCHMARK(BM_parse_frame)->Arg(4)->Arg(6);

}  // namespace

int main(int argc, char** argv) {
  inagg::bench::RateReporter rep;
  if (!inagg::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::printf("icrc_vs_zlib=%.2f crc32_vs_zlib_4k=%.2f crc32_impl=%s\n",
              rep.ratio("BM_icrc_verify/4096", "BM_icrc_zlib/4096"),
              rep.ratio("BM_crc32_dispatched/4096", "BM_zlib_crc32/4096"), std::string(crc32_impl_name()).c_str());
  return 0;
}
