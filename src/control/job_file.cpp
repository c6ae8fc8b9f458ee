#include "inagg/control/job_file.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <vector>

#include "inagg/util/text.hpp"

namespace inagg::control {

using util::for_each_content_line;
using util::NumberError;
using util::parse_unsigned;
using util::quote_for_error;
using util::read_small_file;
using util::split_fields;
using util::trim;
namespace {

constexpr uint32_t kMax24 = 0xffffff;
constexpr unsigned kMaxWorkers = 64;  // the engine's rank bitmasks are 64-bit

struct Problem {
  size_t line = 0;  // 0: not tied to a line (a missing key)
  std::string text;
};

enum class Key { id, dtype, workers, message_bytes, payload_bytes, window, replay, conn };

struct KeyInfo {
  Key key;
  std::string_view name;
  bool required;
  std::string_view example;  // a line to suggest when the key is missing or empty
};

constexpr std::array<KeyInfo, 8> kKeys{{
    {Key::id, "id", true, "id = 7"},
    {Key::dtype, "dtype", true, "dtype = fp32"},
    {Key::workers, "workers", true, "workers = 4"},
    {Key::message_bytes, "message_bytes", true, "message_bytes = 65536"},
    {Key::payload_bytes, "payload_bytes", true, "payload_bytes = 1024"},
    {Key::window, "window", true, "window = 8"},
    {Key::replay, "replay", false, "replay = false"},
    {Key::conn, "conn", true, "conn = 0, 10.0.0.1, 0x000011, 10.0.0.2, 0x000012, 0"},
}};

constexpr std::string_view kConnFields = "RANK,SRC_IP,SRC_QPN,DST_IP,DST_QPN,START_PSN";

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t k = 0; k <= b.size(); ++k) row[k] = k;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t k = 1; k <= b.size(); ++k) {
      const size_t up = row[k];
      const char ca = static_cast<char>(std::tolower(static_cast<unsigned char>(a[i - 1])));
      const char cb = static_cast<char>(std::tolower(static_cast<unsigned char>(b[k - 1])));
      row[k] = std::min({row[k] + 1, row[k - 1] + 1, diag + (ca == cb ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_text(std::string_view key) {
  std::string out = "unknown key " + quote_for_error(key);
  const KeyInfo* best = nullptr;
  size_t best_d = 3;  // suggest only close misspellings
  for (const KeyInfo& k : kKeys) {
    const size_t d = edit_distance(key, k.name);
    if (d < best_d) best_d = d, best = &k;
  }
  if (best) out += " (did you mean '" + std::string(best->name) + "'?)";
  out += "; valid keys:";
  for (const KeyInfo& k : kKeys) out += (k.key == Key::id ? " " : ", ") + std::string(k.name);
  return out;
}

// "<what>'<text>' is not a number ..." and friends; `range` is what the caller may write.
std::string number_text(std::string_view what, std::string_view text, NumberError e, std::string_view range) {
  const std::string q = std::string(what) + quote_for_error(text);
  switch (e) {
    case NumberError::negative: return q + " is negative; write a number in " + std::string(range);
    case NumberError::out_of_range: return q + " is out of range; write a number in " + std::string(range);
    default: return q + " is not a number (hex 0x... or decimal)";
  }
}

bool parse_number_field(std::string_view what, std::string_view text, uint64_t min, uint64_t max,
                        std::string_view range, uint64_t* out, std::string* problem) {
  NumberError e = NumberError::none;
  const std::optional<uint64_t> v = parse_unsigned(text, max, &e);
  if (v && *v < min) e = NumberError::out_of_range;
  if (!v || e != NumberError::none) {
    *problem = number_text(what, text, e, range);
    return false;
  }
  *out = *v;
  return true;
}

bool parse_conn(std::string_view value, ConnectionSpec* c, std::string* problem) {
  const std::vector<std::string_view> f = split_fields(value);
  if (f.size() != 6) {
    *problem = "expected 6 comma-separated fields " + std::string(kConnFields) + ", got " + std::to_string(f.size());
    return false;
  }
  static constexpr std::array<std::string_view, 6> kNames = {"RANK", "SRC_IP", "SRC_QPN", "DST_IP", "DST_QPN", "START_PSN"};
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].empty()) {
      *problem = "field " + std::to_string(i + 1) + " (" + std::string(kNames[i]) + ") is empty; write " + std::string(kConnFields);
      return false;
    }
  }
  uint64_t rank = 0, src_qpn = 0, dst_qpn = 0, psn = 0;
  if (!parse_number_field("rank ", f[0], 0, kMaxWorkers - 1, "0..63", &rank, problem)) return false;
  // A GID written as an IPv4-mapped IPv6 address (::ffff:10.0.0.1, as rdma-core and Soft-RoCE show
  // RoCEv2 GIDs) is the IPv4 address: the packets of such a QP are IPv4.
  const std::optional<util::IpAddr> src = util::parse_gid(f[1]), dst = util::parse_gid(f[3]);
  for (const auto& [ip, text] : {std::pair{src, f[1]}, std::pair{dst, f[3]}}) {
    if (!ip) {
      *problem = quote_for_error(text) + " is not an IPv4 or IPv6 address (e.g. 10.0.0.1 or fd00::1)";
      return false;
    }
  }
  if (!parse_number_field("QPN ", f[2], 0, kMax24, "0..0xffffff (QPNs are 24-bit)", &src_qpn, problem) ||
      !parse_number_field("QPN ", f[4], 0, kMax24, "0..0xffffff (QPNs are 24-bit)", &dst_qpn, problem) ||
      !parse_number_field("PSN ", f[5], 0, kMax24, "0..0xffffff (PSNs are 24-bit)", &psn, problem))
    return false;
  if (src->version != dst->version) {
    *problem = "source " + std::string(f[1]) + " and destination " + std::string(f[3]) +
               " are of different IP versions; use IPv4 for both or IPv6 for both";
    return false;
  }
  c->rank = static_cast<unsigned>(rank);
  c->src_ip = *src;
  c->dst_ip = *dst;
  c->src_qpn = static_cast<uint32_t>(src_qpn);
  c->dst_qpn = static_cast<uint32_t>(dst_qpn);
  c->start_psn = static_cast<uint32_t>(psn);
  return true;
}

// Parses one `key = value` into *spec; returns false with *problem (the key is prefixed later).
bool parse_value(Key key, std::string_view value, JobSpec* spec, std::string* problem) {
  constexpr uint64_t kU32 = UINT32_MAX;
  uint64_t v = 0;
  switch (key) {
    case Key::id:
      if (!parse_number_field("", value, 0, kU32, "0..4294967295", &v, problem)) return false;
      spec->id = static_cast<uint32_t>(v);
      return true;
    case Key::dtype: {
      const std::optional<util::Dtype> d = util::parse_dtype(value);
      if (!d) {
        *problem = "unknown dtype " + quote_for_error(value) + "; valid: fp32, fp16, bf16, int32";
        return false;
      }
      spec->dtype = *d;
      return true;
    }
    case Key::workers:
      if (!parse_number_field("", value, 1, kMaxWorkers, "1..64", &v, problem)) return false;
      spec->workers = static_cast<unsigned>(v);
      return true;
    case Key::message_bytes:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->message_bytes = static_cast<uint32_t>(v);
      return true;
    case Key::payload_bytes:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->payload_bytes = static_cast<uint32_t>(v);
      return true;
    case Key::window:
      if (!parse_number_field("", value, 1, kU32, "1..4294967295", &v, problem)) return false;
      spec->window = static_cast<unsigned>(v);
      return true;
    case Key::replay:
      if (value == "true" || value == "false") {
        spec->replay = value == "true";
        return true;
      }
      *problem = quote_for_error(value) + " is not a boolean; write true or false";
      return false;
    case Key::conn: {
      ConnectionSpec c;
      if (!parse_conn(value, &c, problem)) return false;
      spec->conns.push_back(c);
      return true;
    }
  }
  return false;
}

std::optional<JobSpec> parse(std::string_view text, Problem* p) {
  JobSpec spec;
  std::array<size_t, kKeys.size()> seen_on{};  // line a key was set on, 0 = not yet
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 BOM some editors add
  const bool ok = for_each_content_line(text, [&](size_t line_no, std::string_view line) {
    p->line = line_no;
    if (line.front() == '[') {
      p->text = "sections such as " + quote_for_error(line) + " are not used: a job file is one job of `key = value` lines";
      return false;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      p->text = "expected `key = value`, got " + quote_for_error(line);
      return false;
    }
    const std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key.empty()) {
      p->text = "no key before '='; write `key = value`";
      return false;
    }
    const auto it = std::find_if(kKeys.begin(), kKeys.end(), [&](const KeyInfo& k) { return k.name == key; });
    if (it == kKeys.end()) {
      p->text = unknown_key_text(key);
      return false;
    }
    const size_t index = static_cast<size_t>(it - kKeys.begin());
    if (it->key != Key::conn && seen_on[index] != 0) {
      p->text = "duplicate key '" + std::string(key) + "' (first set on line " + std::to_string(seen_on[index]) +
                "); keep one of the two lines";
      return false;
    }
    if (value.empty()) {
      p->text = std::string(key) + ": no value; write e.g. `" + std::string(it->example) + "`";
      return false;
    }
    std::string problem;
    if (!parse_value(it->key, value, &spec, &problem)) {
      p->text = std::string(key) + ": " + problem;
      return false;
    }
    if (seen_on[index] == 0) seen_on[index] = line_no;
    return true;
  });
  if (!ok) return std::nullopt;
  p->line = 0;
  std::vector<std::string_view> missing;
  for (size_t i = 0; i < kKeys.size(); ++i)
    if (kKeys[i].required && seen_on[i] == 0) missing.push_back(kKeys[i].example);
  if (!missing.empty()) {
    p->text = missing.size() == 1 ? "missing required key; add a line like `" : "missing required keys; add lines like `";
    for (size_t i = 0; i < missing.size(); ++i) p->text += (i ? "`, `" : "") + std::string(missing[i]);
    p->text += "`";
    if (seen_on[static_cast<size_t>(Key::conn)] == 0) p->text += " (conn: one line per worker, " + std::string(kConnFields) + ")";
    return std::nullopt;
  }
  return spec;
}

}  // namespace

std::optional<JobSpec> parse_job(std::string_view text, std::string* error) {
  Problem p;
  std::optional<JobSpec> spec = parse(text, &p);
  if (!spec) *error = p.line ? "line " + std::to_string(p.line) + ": " + p.text : p.text;
  return spec;
}

std::optional<JobSpec> load_job_file(const std::string& path, std::string* error, std::string* text_out) {
  std::string text;
  if (!read_small_file(path, "job file", kMaxJobFileBytes, "1 MiB (a 64-worker job is about 5 KiB)", &text, error))
    return std::nullopt;
  Problem p;
  std::optional<JobSpec> spec = parse(text, &p);
  if (!spec) *error = path + (p.line ? ":" + std::to_string(p.line) : std::string()) + ": " + p.text;
  if (spec && text_out) *text_out = std::move(text);
  return spec;
}

std::string format_job(const JobSpec& s) {
  char buf[160];
  std::string out = "# inagg job " + std::to_string(s.id) + "\n";
  out += "id = " + std::to_string(s.id) + "\n";
  out += "dtype = " + std::string(util::dtype_name(s.dtype)) + "\n";
  out += "workers = " + std::to_string(s.workers) + "\n";
  out += "message_bytes = " + std::to_string(s.message_bytes) + "\n";
  out += "payload_bytes = " + std::to_string(s.payload_bytes) + "\n";
  out += "window = " + std::to_string(s.window) + "\n";
  out += std::string("replay = ") + (s.replay ? "true" : "false") + "\n";
  out += "# conn = " + std::string(kConnFields) + "\n";
  for (const ConnectionSpec& c : s.conns) {
    std::snprintf(buf, sizeof buf, "conn = %u, %s, 0x%06x, %s, 0x%06x, 0x%06x\n", c.rank, util::ip_text(c.src_ip).c_str(),
                  c.src_qpn, util::ip_text(c.dst_ip).c_str(), c.dst_qpn, c.start_psn);
    out += buf;
  }
  return out;
}

}  // namespace inagg::control
