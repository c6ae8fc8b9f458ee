#include "nccl_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
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

std::optional<Measurement> aggregate(const std::vector<std::optional<Measurement>>& ranks, Average how,
                                     unsigned* failed_checks) {
  if (ranks.empty() || !ranks[0]) return std::nullopt;
  Measurement m = *ranks[0];
  m.wrong = 0;
  double sum = 0;
  for (const std::optional<Measurement>& r : ranks) {
    if (!r) continue;
    sum += r->time_us;
    if (how == Average::min) m.time_us = std::min(m.time_us, r->time_us);
    if (how == Average::max) m.time_us = std::max(m.time_us, r->time_us);
    if (!r->checked) continue;
    m.wrong += r->wrong;
    *failed_checks += r->wrong > 0;
  }
  if (how == Average::mean) m.time_us = sum / static_cast<double>(ranks.size());
  return m;
}

void set_bandwidths(Measurement* m, uint64_t bytes, double bus_factor) {
  m->algbw = alg_bandwidth(bytes, m->time_us);
  m->busbw = m->algbw * bus_factor;
}

std::string encode_row(const RankRow& r) {
  std::string t = std::to_string(r.bytes);
  for (const std::optional<Measurement>& m : r.placed) {
    if (!m) {
      t += " - -";
      continue;
    }
    t += format(" %a ", m->time_us) + (m->checked ? std::to_string(m->wrong) : "-");
  }
  return t;
}

std::optional<RankRow> decode_row(const std::string& text) {
  std::istringstream in(text);
  RankRow r;
  std::string bytes, time[2], wrong[2];
  if (!(in >> bytes >> time[0] >> wrong[0] >> time[1] >> wrong[1]) || !(in >> std::ws).eof()) return std::nullopt;
  auto number = [](const std::string& s, uint64_t* out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19) return false;
    *out = std::stoull(s);
    return true;
  };
  if (!number(bytes, &r.bytes)) return std::nullopt;
  for (int p = 0; p < 2; ++p) {
    if (time[p] == "-") {
      if (wrong[p] != "-") return std::nullopt;
      continue;
    }
    char* end = nullptr;
    Measurement m;
    m.time_us = std::strtod(time[p].c_str(), &end);
    if (*end || !std::isfinite(m.time_us) || m.time_us < 0) return std::nullopt;
    m.checked = wrong[p] != "-";
    if (m.checked && !number(wrong[p], &m.wrong)) return std::nullopt;
    r.placed[p] = m;
  }
  return r;
}

std::string rank_line(const RankInfo& r) {
  return format("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s", r.rank, r.group, r.pid, r.hostname.c_str(),
                r.device, r.device_hex.c_str(), r.device_info.c_str());
}

std::optional<RankInfo> parse_rank_line(const std::string& line) {
  // The fields as nccl-tests' parseRankInfo reads them: numbers, a hostname without spaces, the
  // device's hex id in brackets, the rest of the line.
  std::istringstream in(line);
  std::string hash, rank_word, group_word, pid_word, on_word, device_word, hex;
  RankInfo r;
  if (!(in >> hash >> rank_word >> r.rank >> group_word >> r.group >> pid_word >> r.pid >> on_word >> r.hostname >>
        device_word >> r.device >> hex) ||
      hash != "#" || rank_word != "Rank" || group_word != "Group" || pid_word != "Pid" || on_word != "on" ||
      device_word != "device" || hex.size() < 2 || hex.front() != '[' || hex.back() != ']')
    return std::nullopt;
  r.device_hex = hex.substr(1, hex.size() - 2);
  std::getline(in >> std::ws, r.device_info);
  return r;
}

namespace {

// nccl-tests' JSON values: doubles with %lf, booleans as strings, null for what is not there.
std::string json_double(double v) { return v != v ? "\"nan\"" : format("%lf", v); }
std::string json_bool(bool v) { return v ? "\"true\"" : "\"false\""; }

std::string placement_json(const std::optional<Measurement>& m) {
  if (!m) return "null";
  return "{\"time\":" + json_double(m->time_us) + ",\"alg_bw\":" + json_double(m->algbw) +
         ",\"bus_bw\":" + json_double(m->busbw) +
         ",\"nwrong\":" + (m->checked ? json_double(static_cast<double>(m->wrong)) : "null") + "}";
}

std::string json_list(const std::vector<std::string>& items) {
  std::string j = "[";
  for (size_t i = 0; i < items.size(); ++i) j += (i ? "," : "") + control::json_quote(items[i]);
  return j + "]";
}

}  // namespace

std::string results_json(const JsonRun& run) {
  using control::json_quote;
  auto size = [](uint64_t v) { return std::to_string(v); };
  std::string j = "{\"version\":3,\"start_time\":" + json_quote(run.start_time) + ",\"args\":" + json_list(run.args) +
                  ",\"env\":" + json_list(run.env) + ",\"nccl_version\":0";
  j += ",\"config\":{\"nthreads\":1,\"ngpus\":1,\"minimum_bytes\":" + size(run.min_bytes) +
       ",\"maximum_bytes\":" + size(run.max_bytes) +
       (run.step_factor > 1 ? ",\"step_factor\":" + size(run.step_factor) : ",\"step_bytes\":" + size(run.step_bytes)) +
       ",\"warmup_iters\":" + size(run.warmup_iters) + ",\"iterations\":" + size(run.iterations) +
       ",\"aggregated_iterations\":1,\"validation\":" + size(run.validation) +
       ",\"graph\":0,\"blocking_collectives\":" + json_bool(false) + ",\"per_iter_timing\":" + json_bool(false) +
       ",\"per_iter_skip\":0,\"parallel_init\":" + json_bool(false) + ",\"devices\":[";
  for (size_t i = 0; i < run.devices.size(); ++i) {
    const RankInfo& d = run.devices[i];
    j += std::string(i ? "," : "") + "{\"rank\":" + std::to_string(d.rank) + ",\"group\":" + std::to_string(d.group) +
         ",\"pid\":" + std::to_string(d.pid) + ",\"hostname\":" + json_quote(d.hostname) +
         ",\"device\":" + std::to_string(d.device) + ",\"device_hex\":" + json_quote(d.device_hex) +
         ",\"device_info\":" + json_quote(d.device_info) + "}";
  }
  j += "]},\"results\":[";
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const ResultRow& r = run.rows[i];
    j += std::string(i ? "," : "") + "{\"size\":" + size(r.bytes) + ",\"count\":" + size(r.count) +
         ",\"type\":" + json_quote(type_name(r.dtype)) + ",\"redop\":" + json_quote(r.op) +
         ",\"root\":" + json_quote(format("%6i", -1)) + ",\"out_of_place\":" + placement_json(r.out_of_place) +
         ",\"in_place\":" + placement_json(r.in_place) + ",\"actual_iterations\":" + size(run.iterations) +
         ",\"experiment_name\":" + json_quote(run.experiment_name) + "}";
  }
  j += "],\"out_of_bounds\":{\"count\":" + std::to_string(run.out_of_bounds) +
       ",\"okay\":" + json_bool(run.out_of_bounds == 0) + "}";
  j += ",\"average_bus_bandwidth\":{\"bandwidth\":" + json_double(run.avg_busbw) +
       ",\"okay\":" + (run.min_busbw ? json_bool(!bandwidth_failed(run.avg_busbw, run.min_busbw)) : "\"unchecked\"") +
       "}";
  j += ",\"errors\":" + json_list(run.errors) + ",\"end_time\":" + json_quote(run.end_time) + "}\n";
  return j;
}

std::vector<std::string> environment_for_json(char** envp) {
  std::vector<std::string> env;
  for (char** e = envp; e && *e; ++e) {
    std::string v(*e);
    const size_t eq = v.find('=');
    std::string name = v.substr(0, eq);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const char* secret : {"SECRET", "KEY", "TOKEN", "PASSWORD"})
      if (eq != std::string::npos && name.find(secret) != std::string::npos) {
        v = v.substr(0, eq + 1) + "(not written)";
        break;
      }
    env.push_back(std::move(v));
  }
  return env;
}

std::string now_text() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local));
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
