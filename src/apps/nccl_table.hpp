// nccl-tests compatibility of inagg-worker (beside it: the client library has no use for it): all_reduce_perf's size
// syntax, datatype and op names, and its results table (the header, one row per size with the out-of-place and in-place
// columns, the trailer lines), in nccl-tests' column widths, so scripts and plots made for all_reduce_perf read
// inagg-worker's output unchanged. The format follows nccl-tests 2.x (src/util.cu of github.com/NVIDIA/nccl-tests:
// writeResultHeader, writeBenchmarkLine*, writeResultFooter).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/util/dtype.hpp"

namespace inagg::apps::nccl {

// A size as -b/-e/-i take it: a number with an optional K, M or G (either case; binary units, as
// nccl-tests: 1K = 1024), e.g. "8", "128M", "1.5k". Fractions of a byte are cut, as nccl-tests
// does. nullopt: not a size (negative, a unit other than K/M/G, trailing text).
std::optional<uint64_t> parse_size(std::string_view text);

// A datatype as -d takes it: nccl-tests' names (float, half, bfloat16, int32) and their aliases
// (float32, int, fp16/float16, and inagg's own fp32, fp16, bf16). nullopt: anything else.
std::optional<util::Dtype> parse_type(std::string_view name);
// nccl-tests' name of a dtype, as the table's `type` column prints it.
std::string_view type_name(util::Dtype dtype);
// What parse_type takes, for the error message.
constexpr std::string_view kTypesAccepted = "float (float32, fp32), half (float16, fp16), bfloat16 (bf16), int32 (int)";

// nccl-tests' fixed-width number (getFloatStr): %.2f if it fits `width`, else %.1f, %.0f, then
// %.1e (%.0e below width 7).
std::string fixed_width(double value, int width);

// algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' allreduce bus bandwidth), in GB/s.
double alg_bandwidth(uint64_t bytes, double time_us);
double bus_bandwidth(double algbw, unsigned ranks);

// One placement's measurement of one size.
struct Measurement {
  double time_us = 0;  // mean over the timed iterations
  double algbw = 0, busbw = 0;
  bool checked = false;  // false: -c 0, #wrong prints N/A
  uint64_t wrong = 0;    // elements that differ from the reference
};

// The table's header: "#", the placement titles, the column names and units.
std::string header();
// A row: the size columns, then each placement's columns (nullopt: not run, printed blank as
// nccl-tests prints a placement it does not run), then the newline.
std::string row(uint64_t bytes, uint64_t count, util::Dtype dtype, std::string_view op,
                const std::optional<Measurement>& out_of_place, const std::optional<Measurement>& in_place);
// The trailer: the failed checks ("Out of bounds values : N OK|FAILED"), the mean bus bandwidth of
// every measurement (with OK/FAILED against min_busbw when given: nccl-tests' NCCL_TESTS_MIN_BW,
// which fails below 90% of it), and the closing line.
std::string footer(unsigned failed_checks, double avg_busbw, std::optional<double> min_busbw, std::string_view program);
// Whether footer() calls the bandwidth a failure.
constexpr bool bandwidth_failed(double avg_busbw, std::optional<double> min_busbw) {
  return min_busbw && avg_busbw < *min_busbw * 0.9;
}

// The same results for programs: one row per size, as the table has them.
struct ResultRow {
  uint64_t bytes = 0, count = 0;
  util::Dtype dtype = util::Dtype::fp32;
  std::string op;
  std::optional<Measurement> out_of_place, in_place;
};
struct RunSummary {
  std::string program, mode;
  unsigned rank = 0, ranks = 0;
  unsigned failed_checks = 0;
  double avg_busbw = 0;
};
// JSON: {"program", "mode", "rank", "ranks", "results": [{"size_bytes", "count", "type", "redop",
// "out_of_place": {"time_us", "algbw_gbps", "busbw_gbps", "wrong"} or null, "in_place": ...}],
// "failed_checks", "avg_busbw_gbps"}; "wrong" is null when the size was not checked (-c 0).
std::string results_json(const std::vector<ResultRow>& rows, const RunSummary& summary);
// CSV with a header line: size_bytes,count,type,redop,placement,time_us,algbw_gbps,busbw_gbps,wrong
// (one line per size and placement run; wrong empty when not checked).
std::string results_csv(const std::vector<ResultRow>& rows);

}  // namespace inagg::apps::nccl
