#include "nccl_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "inagg/client/rank.hpp"
#include "inagg/control/reply_json.hpp"

namespace inagg::apps::nccl {

namespace {

template <class... A>
std::string format(const char* fmt, A... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return std::string(buf, n < 0 ? 0 : std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
}

// One placement's columns: time, algbw, busbw, #wrong ("  %7s  %6s  %6s  %6g").
std::string body(const std::optional<Measurement>& m) {
  if (!m) return std::string(33, ' ');
  const std::string t = fixed_width(m->time_us, 7), a = fixed_width(m->algbw, 6), b = fixed_width(m->busbw, 6);
  if (!m->checked) return format("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  return format("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(), static_cast<double>(m->wrong));
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  const std::string s(text);
  if (s.empty() || s.find_first_not_of("0123456789.kKmMgG") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0) return std::nullopt;
  double unit = 1;
  const std::string_view rest(end);
  if (rest.size() > 1) return std::nullopt;
  if (rest == "k" || rest == "K") unit = 1024.0;
  if (rest == "m" || rest == "M") unit = 1024.0 * 1024;
  if (rest == "g" || rest == "G") unit = 1024.0 * 1024 * 1024;
  const double bytes = v * unit;
  if (bytes >= 18446744073709551615.0) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::optional<util::Dtype> parse_type(std::string_view name) { return client::parse_dtype_name(name); }

std::string_view type_name(util::Dtype dtype) {
  switch (dtype) {
    case util::Dtype::fp32:
      return "float";
    case util::Dtype::fp16:
      return "half";
    case util::Dtype::bf16:
      return "bfloat16";
    case util::Dtype::int32:
      return "int32";
  }
  return "unknown";
}

std::string fixed_width(double value, int width) {
  const size_t w = static_cast<size_t>(width);
  std::string s = format("%*.2f", width, value);
  if (s.size() <= w) return s;
  s = format("%*.1f", width, value);
  if (s.size() <= w) return s;
  s = format("%*.0f", width, value);
  if (s.size() <= w) return s;
  // nccl-tests writes this into a buffer of width + 1 bytes, so anything longer is cut.
  s = format(width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return s.substr(0, w);
}

double alg_bandwidth(uint64_t bytes, double time_us) {
  return time_us > 0 ? static_cast<double>(bytes) / 1e9 / (time_us / 1e6) : 0.0;
}

double bus_bandwidth(double algbw, unsigned ranks) {
  return ranks ? algbw * (2.0 * (ranks - 1)) / static_cast<double>(ranks) : 0.0;
}

std::string header() {
  std::string h = "#\n";
  h += format("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
              "", "", "");
  const char* cols = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n";
  h += format(cols, "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong", 0, "");
  h += format(cols, "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0,
              "");
  return h;
}

std::string row(uint64_t bytes, uint64_t count, util::Dtype dtype, std::string_view op,
                const std::optional<Measurement>& out_of_place, const std::optional<Measurement>& in_place) {
  // An allreduce has no root: nccl-tests prints -1.
  const std::string root = format("%6i", -1);
  std::string r = format("%12li  %12li  %8s  %6s  %6s", static_cast<long>(bytes), static_cast<long>(count),
                         std::string(type_name(dtype)).c_str(), std::string(op).c_str(), root.c_str());
  return r + body(out_of_place) + body(in_place) + "\n";
}

std::string footer(unsigned failed_checks, double avg_busbw, std::optional<double> min_busbw,
                   std::string_view program) {
  std::string f = format("# %-20s : %d %s\n", "Out of bounds values", failed_checks, failed_checks ? "FAILED" : "OK");
  f += format("# %-20s : %g %s\n", "Avg bus bandwidth", avg_busbw,
              !min_busbw ? "" : (bandwidth_failed(avg_busbw, min_busbw) ? "FAILED" : "OK"));
  f += "#\n";
  f += format("# Collective test concluded: %s\n", std::string(program).c_str());
  return f;
}

namespace {

std::string placement_json(const std::optional<Measurement>& m) {
  if (!m) return "null";
  return format("{\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %s}", m->time_us, m->algbw,
                m->busbw, m->checked ? std::to_string(m->wrong).c_str() : "null");
}

}  // namespace

std::string results_json(const std::vector<ResultRow>& rows, const RunSummary& summary) {
  std::string j = "{\"program\": " + control::json_quote(summary.program) +
                  ", \"mode\": " + control::json_quote(summary.mode) +
                  format(", \"rank\": %u, \"ranks\": %u, \"results\": [", summary.rank, summary.ranks);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ResultRow& r = rows[i];
    j += (i ? ", " : "") +
         format("{\"size_bytes\": %llu, \"count\": %llu, \"type\": ", static_cast<unsigned long long>(r.bytes),
                static_cast<unsigned long long>(r.count)) +
         control::json_quote(type_name(r.dtype)) + ", \"redop\": " + control::json_quote(r.op) +
         ", \"out_of_place\": " + placement_json(r.out_of_place) + ", \"in_place\": " + placement_json(r.in_place) +
         "}";
  }
  j += format("], \"failed_checks\": %u, \"avg_busbw_gbps\": %.4f}\n", summary.failed_checks, summary.avg_busbw);
  return j;
}

std::string results_csv(const std::vector<ResultRow>& rows) {
  std::string c = "size_bytes,count,type,redop,placement,time_us,algbw_gbps,busbw_gbps,wrong\n";
  for (const ResultRow& r : rows)
    for (const auto& [name, m] : {std::pair{"out_of_place", &r.out_of_place}, std::pair{"in_place", &r.in_place}}) {
      if (!*m) continue;
      const Measurement& v = **m;
      c += format("%llu,%llu,%s,%s,%s,%.3f,%.4f,%.4f,", static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(r.count), std::string(type_name(r.dtype)).c_str(), r.op.c_str(), name,
                  v.time_us, v.algbw, v.busbw) +
           (v.checked ? std::to_string(v.wrong) : "") + "\n";
    }
  return c;
}

}  // namespace inagg::apps::nccl
