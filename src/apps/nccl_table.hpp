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
// (docs/workers.md says what busbw means through the appliance.)
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
// every (aggregated) measurement (with OK/FAILED against min_busbw when given: nccl-tests' NCCL_TESTS_MIN_BW,
// which fails below 90% of it), and the closing line naming the collective's nccl-tests program (all_reduce_perf).
std::string footer(unsigned failed_checks, double avg_busbw, std::optional<double> min_busbw, std::string_view program);
// Whether footer() calls the bandwidth a failure.
constexpr bool bandwidth_failed(double avg_busbw, std::optional<double> min_busbw) {
  return min_busbw && avg_busbw < *min_busbw * 0.9;
}

// One table per job, as nccl-tests prints it under MPI: rank 0's, each row's time aggregated over
// the ranks (-a), #wrong summed over them.

// -a/--average: how a row's time (and so its bandwidths) is taken from every rank's.
enum class Average { rank0 = 0, mean = 1, min = 2, max = 3 };
// One placement of one size from every rank's figures, indexed by rank (all run it or none): the
// time by `how`, #wrong the sum over the ranks (checked when rank 0's was); the bandwidths are
// left to the caller (bandwidths()). *failed_checks grows by the ranks that saw wrong elements,
// as nccl-tests counts its "Out of bounds values" (each rank's failed checks, summed).
std::optional<Measurement> aggregate(const std::vector<std::optional<Measurement>>& ranks, Average how,
                                     unsigned* failed_checks);
// algbw = bytes / time, busbw = algbw x bus_factor (nccl-tests': an allreduce's 2(n-1)/n, a
// reduce-scatter's and all-gather's (n-1)/n).
void set_bandwidths(Measurement* m, uint64_t bytes, double bus_factor);

// One rank's figures of one size, as it sends them to rank 0: one line of text (times in hex
// floating point, so that rank 0 aggregates exactly what the rank measured).
struct RankRow {
  uint64_t bytes = 0;
  std::optional<Measurement> placed[2];  // out of place, in place
};
std::string encode_row(const RankRow& r);
std::optional<RankRow> decode_row(const std::string& text);

// nccl-tests' per-rank line: "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" (util.cu,
// writeDeviceReport). Here the device is none (0, [0000:00:00]) and device_info says how the rank
// reaches the others.
struct RankInfo {
  int rank = 0, group = 0, pid = 0, device = 0;
  std::string hostname, device_hex = "0000:00:00", device_info;
};
std::string rank_line(const RankInfo& r);  // without the newline
std::optional<RankInfo> parse_rank_line(const std::string& line);

// The results for programs: one row per size, as the table has them.
struct ResultRow {
  uint64_t bytes = 0, count = 0;
  util::Dtype dtype = util::Dtype::fp32;
  std::string op;
  std::optional<Measurement> out_of_place, in_place;
};

// -J/--output_file FILE.json: nccl-tests' JSON (util.cu, version 3): {"version", "start_time",
// "args", "env", "nccl_version", "config": {..., "devices": [...]}, "results": [{"size", "count",
// "type", "redop", "root", "out_of_place": {"time", "alg_bw", "bus_bw", "nwrong"}, "in_place",
// "actual_iterations", "experiment_name"}], "out_of_bounds": {"count", "okay"},
// "average_bus_bandwidth": {"bandwidth", "okay"}, "errors", "end_time"}, written compactly as
// nccl-tests writes it: doubles with six decimals, booleans as the strings "true"/"false", root
// as its column ("    -1"), nwrong null when unchecked.
struct JsonRun {
  std::string start_time, end_time;  // "YYYY-MM-DD HH:MM:SS", local time
  std::vector<std::string> args, env;
  uint64_t min_bytes = 0, max_bytes = 0, step_bytes = 0;
  unsigned step_factor = 1, warmup_iters = 0, iterations = 0, validation = 0;
  std::vector<RankInfo> devices;
  std::vector<ResultRow> rows;
  std::string experiment_name;  // the collective's nccl-tests program (all_reduce_perf)
  unsigned out_of_bounds = 0;
  double avg_busbw = 0;
  std::optional<double> min_busbw;  // NCCL_TESTS_MIN_BW
  std::vector<std::string> errors;
};
std::string results_json(const JsonRun& run);
// FILE.csv: inagg's own, for spreadsheets: a header line,
// size_bytes,count,type,redop,placement,time_us,algbw_gbps,busbw_gbps,wrong, then one line per size
// and placement run (wrong empty when not checked).
std::string results_csv(const std::vector<ResultRow>& rows);
// The environment as the JSON lists it ("NAME=value"), the values of names that hold a secret
// (SECRET, KEY, TOKEN or PASSWORD in the name, as $INAGG_EXCHANGE_SECRET) replaced by "(not written)".
std::vector<std::string> environment_for_json(char** envp);
// "YYYY-MM-DD HH:MM:SS" of now, local time (nccl-tests' start_time and end_time).
std::string now_text();

}  // namespace inagg::apps::nccl
