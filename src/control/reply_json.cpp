#include "inagg/control/reply_json.hpp"

#include <cstdio>
#include <vector>

#include "inagg/util/text.hpp"

namespace inagg::control {
namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// Decimal digits without a leading zero (JSON's form of an unsigned number), at most 64 bits.
bool is_number(std::string_view v) {
  if (v.empty() || v.size() > 20 || (v.size() > 1 && v[0] == '0')) return false;
  for (const char c : v)
    if (c < '0' || c > '9') return false;
  return util::parse_unsigned(v, UINT64_MAX).has_value();
}

// A value as JSON: a number when it is one (a counter, an id), else a string.
std::string json_value(std::string_view v) { return is_number(v) ? std::string(v) : json_quote(v); }

// "name value" lines into the members of an object (no braces); the job's fields when `fields`,
// else the counters: `stats <id>` gives the fields first, then the counters.
bool name_value_members(const std::vector<std::string_view>& lines, bool want_fields, std::string* out,
                        std::string* error) {
  bool first = true;
  for (std::string_view line : lines) {
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0) {
      *error = "a stats line that is not 'name value': '" + std::string(line) + "'";
      return false;
    }
    const std::string_view name = line.substr(0, sp), value = line.substr(sp + 1);
    bool field = false;
#define X(n, text, value) field = field || name == #n;
    INAGG_JOB_FIELDS(X)
#undef X
    if (field != want_fields) continue;
    *out += (first ? "" : ", ") + json_quote(name) + ": " + (name == "error" ? json_quote(value) : json_value(value));
    first = false;
  }
  return true;
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      o += buf;
    } else {
      o += c;
    }
  }
  return o + '"';
}

std::optional<std::string> reply_to_json(Request::Verb verb, bool has_id, std::string_view reply, std::string* error) {
  if (is_error_reply(reply)) {
    std::string_view why = reply.substr(7);  // after "error: "
    while (!why.empty() && why.back() == '\n') why.remove_suffix(1);
    return "{\"ok\": false, \"error\": " + json_quote(why) + "}";
  }
  std::vector<std::string_view> lines = lines_of(reply);
  switch (verb) {
    case Request::Verb::add:
    case Request::Verb::remove: {
      // "ok job <id> added|removed"
      unsigned long long id = 0;
      char what[16] = {};
      const std::string line = lines.empty() ? std::string() : std::string(lines[0]);
      if (lines.size() != 1 || std::sscanf(line.c_str(), "ok job %llu %15s", &id, what) != 2) {
        *error = "an add or remove reply that is not 'ok job ID added|removed': '" + line + "'";
        return std::nullopt;
      }
      return "{\"ok\": true, \"job\": " + std::to_string(id) + ", \"result\": " + json_quote(what) + "}";
    }
    case Request::Verb::list: {
      std::string o = "{\"ok\": true, \"jobs\": [";
      bool first = true;
      for (std::string_view line : lines) {
        if (line == "no jobs") continue;
        // name=value fields, error="..." (quoted, escaped) last.
        const std::optional<JobListLine> parsed = parse_job_list_line(line);
        const size_t err_at = line.find(" error=\"");
        if (!parsed || err_at == std::string_view::npos) {
          *error = "a list line that is not a job: '" + std::string(line) + "'";
          return std::nullopt;
        }
        o += first ? "{" : ", {";
        first = false;
        std::string_view fields = line.substr(0, err_at);
        while (!fields.empty()) {
          const size_t sp = fields.find(' ');
          const std::string_view tok = fields.substr(0, sp);
          const size_t eq = tok.find('=');
          if (eq == std::string_view::npos) {
            *error = "a list field that is not name=value: '" + std::string(tok) + "'";
            return std::nullopt;
          }
          // spec is hex digits: a string, even when they happen to be decimal digits.
          const std::string_view name = tok.substr(0, eq), value = tok.substr(eq + 1);
          o += json_quote(name) + ": " + (name == "spec" ? json_quote(value) : json_value(value)) + ", ";
          if (sp == std::string_view::npos) break;
          fields.remove_prefix(sp + 1);
        }
        o += "\"error\": " + json_quote(parsed->error) + "}";
      }
      return o + "]}";
    }
    case Request::Verb::stats: {
      std::string fields, counters;
      if ((has_id && !name_value_members(lines, true, &fields, error)) ||
          !name_value_members(lines, false, &counters, error))
        return std::nullopt;
      std::string o = "{\"ok\": true, ";
      if (has_id) o += "\"job\": {" + fields + "}, ";
      return o + "\"counters\": {" + counters + "}}";
    }
  }
  *error = "unknown request";
  return std::nullopt;
}

}  // namespace inagg::control
