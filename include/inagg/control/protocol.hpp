// The control socket's text protocol: one request per connection. The client writes the request
// and shuts down its write side; the server writes one reply and closes.
//
//   request                       reply
//   add\n<job file text>          ok job <id> added
//   remove <id>                   ok job <id> removed
//   list                          id=<id> state=<active|failed> dtype=<..> workers=<n> released=<slots>
//                                   held=<packets> error="<why it failed>"     (one line per job;
//                                   "no jobs" when there are none)
//   stats                         <counter> <value>     (engine totals, one line per counter)
//   stats <id>                    id, state, released_slots, held_packets, retained_packets,
//                                   memory_bytes, mbuf_quota, then the job's counters
//
// Every reply ends with "\n"; one that starts with "error: " is a refusal and says why. Ids are
// decimal (0x-hex is accepted too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/agg/engine.hpp"

namespace inagg::control {

struct Request {
  enum class Verb { add, remove, list, stats };
  Verb verb = Verb::list;
  uint32_t id = 0;      // remove, stats <id>; for add, the job file's id
  bool has_id = false;
  std::string body;     // add: the job file text, verbatim
  agg::JobSpec job;     // add: the body, already parsed (parse_request refuses a bad one)
};

// Parses a whole request. A malformed one (unknown verb, bad or missing id, extra arguments, a body
// where none belongs, an add whose job text does not parse) returns nullopt and sets *error to the
// reason without the "error: " prefix.
std::optional<Request> parse_request(std::string_view text, std::string* error);

// The request text for `r` (what inagg-ctl sends); parse_request reads it back. For add only
// `body` is used.
std::string format_request(const Request& r);

// Replies.
std::string format_error(std::string_view reason);  // "error: <reason>\n", newlines in reason flattened
std::string format_job_added(uint32_t id);          // "ok job <id> added\n"
std::string format_job_removed(uint32_t id);        // "ok job <id> removed\n"
bool is_error_reply(std::string_view reply);

// One job as `list` shows it. agg::JobInfo has no dtype or worker count, so the caller adds them
// from the spec it added the job with.
struct JobListEntry {
  agg::JobInfo info;
  agg::Dtype dtype = agg::Dtype::fp32;
  unsigned workers = 0;
};
std::string format_job_list(const std::vector<JobListEntry>& jobs);

// "name value\n" per counter, in INAGG_ENGINE_COUNTERS order.
std::string format_counters(const agg::EngineCounters& counters);
// `stats <id>`: the job's state figures, then its counters.
std::string format_job_stats(const agg::JobInfo& info);

}  // namespace inagg::control
