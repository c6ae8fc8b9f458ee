#include "inagg/control/protocol.hpp"

#include <cstdio>

#include "inagg/control/job_file.hpp"
#include "inagg/util/text.hpp"

namespace inagg::control {
using util::NumberError;
using util::parse_unsigned;
using util::quote_for_error;

namespace {

constexpr std::string_view kValidVerbs = "add, remove, list, stats";

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (true) {
    i = s.find_first_not_of(" \t\r", i);
    if (i == std::string_view::npos) break;
    size_t end = s.find_first_of(" \t\r", i);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

bool parse_id(std::string_view verb, std::string_view text, uint32_t* id, std::string* error) {
  NumberError e = NumberError::none;
  const std::optional<uint64_t> v = parse_unsigned(text, UINT32_MAX, &e);
  if (v) {
    *id = static_cast<uint32_t>(*v);
    return true;
  }
  const std::string q = std::string(verb) + ": job id " + quote_for_error(text);
  if (e == NumberError::out_of_range || e == NumberError::negative)
    *error = q + " is out of range; job ids are 0..4294967295";
  else
    *error = q + " is not a number; write a decimal job id, e.g. '" + std::string(verb) + " 7'";
  return false;
}

std::string escape_quoted(std::string_view s) {
  std::string out;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

std::optional<Request> parse_request(std::string_view text, std::string* error) {
  const size_t nl = text.find('\n');
  const std::string_view first = text.substr(0, nl);
  const std::string_view body = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  const std::vector<std::string_view> words = split_words(first);
  if (words.empty()) {
    *error = "empty request; send one of: add (then a job file), remove <id>, list, stats [<id>]";
    return std::nullopt;
  }
  const std::string_view verb = words[0];
  const size_t nargs = words.size() - 1;
  Request r;
  if (verb == "add") {
    r.verb = Request::Verb::add;
    if (nargs != 0) {
      *error = "add takes no arguments; send the job file text on the lines after 'add'";
      return std::nullopt;
    }
    if (is_blank(body)) {
      *error = "add needs a job file: send its text on the lines after 'add'";
      return std::nullopt;
    }
    std::string why;
    std::optional<JobSpec> job = parse_job(body, &why);
    if (!job) {
      *error = "job file: " + why;
      return std::nullopt;
    }
    r.body = std::string(body);
    r.job = std::move(*job);
    r.id = r.job.id;
    r.has_id = true;
    return r;
  }
  if (verb == "remove") {
    r.verb = Request::Verb::remove;
    if (nargs != 1) {
      *error = nargs == 0 ? "remove needs a job id, e.g. 'remove 7'"
                          : "remove takes one job id, got " + std::to_string(nargs) + " arguments";
      return std::nullopt;
    }
  } else if (verb == "list") {
    r.verb = Request::Verb::list;
    if (nargs != 0) {
      *error = "list takes no arguments, got " + std::to_string(nargs);
      return std::nullopt;
    }
  } else if (verb == "stats") {
    r.verb = Request::Verb::stats;
    if (nargs > 1) {
      *error = "stats takes at most one job id, got " + std::to_string(nargs) + " arguments";
      return std::nullopt;
    }
  } else {
    *error = "unknown request " + quote_for_error(verb) + "; valid: " + std::string(kValidVerbs);
    return std::nullopt;
  }
  if (nargs == 1) {
    if (!parse_id(verb, words[1], &r.id, error)) return std::nullopt;
    r.has_id = true;
  }
  if (!is_blank(body)) {
    *error = std::string(verb) + " takes nothing after its first line";
    return std::nullopt;
  }
  return r;
}

std::string format_request(const Request& r) {
  switch (r.verb) {
    case Request::Verb::add:
      return "add\n" + r.body;
    case Request::Verb::remove:
      return "remove " + std::to_string(r.id) + "\n";
    case Request::Verb::list:
      return "list\n";
    case Request::Verb::stats:
      return r.has_id ? "stats " + std::to_string(r.id) + "\n" : "stats\n";
  }
  return {};
}

std::string format_error(std::string_view reason) {
  std::string out = "error: ";
  for (char c : reason) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out + "\n";
}

std::string format_job_added(uint32_t id) { return "ok job " + std::to_string(id) + " added\n"; }
std::string format_job_removed(uint32_t id) { return "ok job " + std::to_string(id) + " removed\n"; }

bool is_error_reply(std::string_view reply) { return reply.substr(0, 6) == "error:"; }

std::string_view state_name(JobStatus::State state) {
  switch (state) {
    case JobStatus::State::active:
      return "active";
    case JobStatus::State::failed:
      return "failed";
    case JobStatus::State::refused:
      return "refused";
    case JobStatus::State::binding:
      return "binding";
  }
  return "unknown";
}

namespace {

// Numbers as they are; strings bare (state, dtype: single words), or quoted and escaped (error).
std::string value_text(std::string_view name, const JobFieldValue& v, bool quote_error) {
  if (const uint64_t* n = std::get_if<uint64_t>(&v)) return std::to_string(*n);
  const std::string& s = std::get<std::string>(v);
  return quote_error && name == "error" ? "\"" + escape_quoted(s) + "\"" : s;
}

}  // namespace

std::string format_job_list(const std::vector<JobStatus>& jobs) {
  if (jobs.empty()) return "no jobs\n";
  std::string out;
  for (const JobStatus& j : jobs) {
    std::string line;
    for_each_job_field(j, [&](std::string_view name, std::string_view, const JobFieldValue& v) {
      if (name != "error" && std::holds_alternative<std::string>(v) && std::get<std::string>(v).empty()) return;
      if (!line.empty()) line += ' ';
      line.append(name).append("=").append(value_text(name, v, true));
    });
    out += line + "\n";
  }
  return out;
}

std::string format_counters(const std::vector<Counter>& counters) {
  std::string out;
  for (const Counter& c : counters) {
    out += c.name;
    out += ' ';
    out += std::to_string(c.value);
    out += '\n';
  }
  return out;
}

std::string digest_text(const JobStatus& j) { return j.spec_digest.value_or(""); }

std::string format_job_stats(const JobStatus& job) {
  std::string out;
  for_each_job_field(job, [&](std::string_view name, std::string_view, const JobFieldValue& v) {
    if (std::holds_alternative<std::string>(v) && std::get<std::string>(v).empty()) return;
    std::string text = value_text(name, v, false);
    for (char& c : text)
      if (c == '\n' || c == '\r') c = ' ';  // one line per field
    out.append(name).append(" ").append(text).append("\n");
  });
  return out + format_counters(job.counters);
}

std::string format_job_summary(const JobStatus& job) {
  std::string out = "job " + std::to_string(job.id) + ":", error;
  for_each_job_field(job, [&](std::string_view name, std::string_view, const JobFieldValue& v) {
    if (name == "id") return;
    if (name == "state") {
      out.append(" ").append(value_text(name, v, false));
    } else if (name == "error") {
      if (!std::get<std::string>(v).empty()) error = " error " + value_text(name, v, true);
    } else if (std::holds_alternative<std::string>(v) && std::get<std::string>(v).empty()) {
      return;
    } else {
      out.append(" ").append(name).append(" ").append(value_text(name, v, false));
    }
  });
  for (const Counter& c : job.counters)
    if (c.value) out.append(" ").append(c.name).append(" ").append(std::to_string(c.value));
  return out + error + "\n";
}

std::optional<JobListLine> parse_job_list_line(std::string_view line) {
  if (line.substr(0, 3) != "id=") return std::nullopt;
  JobListLine j;
  const size_t sp = line.find(' ');  // at 3 or later: the line starts with "id="
  const std::optional<uint64_t> id =
      util::parse_unsigned(line.substr(3, sp == std::string_view::npos ? sp : sp - 3), UINT32_MAX);
  if (!id) return std::nullopt;
  j.id = static_cast<uint32_t>(*id);
  // error="..." is the line's last field (the only one with spaces); the others come before it.
  const size_t er = line.find(" error=\"");
  const std::string_view fields = line.substr(0, er);
  auto field = [&](std::string_view key) -> std::string_view {
    const size_t at = fields.find(" " + std::string(key) + "=");
    if (at == std::string_view::npos) return {};
    const std::string_view rest = fields.substr(at + key.size() + 2);
    return rest.substr(0, rest.find(' '));
  };
  j.state = std::string(field("state"));
  // Only the SHA-256 form is compared: an older appliance's shorter digest is as good as none.
  if (const std::string_view d = field("spec");
      d.size() == kJobDigestHexDigits && d.find_first_not_of("0123456789abcdef") == std::string_view::npos)
    j.spec_digest = std::string(d);
  if (er == std::string_view::npos) return j;
  // escape_quoted() wrote \" \\ \n and \xNN in it.
  for (size_t i = er + 8; i < line.size() && line[i] != '"'; ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      j.error += line[i];
      continue;
    }
    const char e = line[++i];
    if (e == 'n') {
      j.error += '\n';
    } else if (const auto x = util::parse_unsigned("0x" + std::string(line.substr(i + 1, 2)), 255); e == 'x' && x) {
      j.error += static_cast<char>(*x);
      i += 2;
    } else {
      j.error += e;
    }
  }
  return j;
}

}  // namespace inagg::control
