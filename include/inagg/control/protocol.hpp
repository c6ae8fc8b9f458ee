// The control socket's text protocol: one request per connection. The client writes the request
// and shuts down its write side; the server writes one reply and closes.
//
//   request                       reply
//   add\n<job file text>          ok job <id> added
//   remove <id>                   ok job <id> removed
//   list                          id=<id> state=<active|failed|refused> dtype=<..> workers=<n>
//                                   released=<slots> held=<packets> spec=<job_digest, 8 hex>
//                                   error="<why it failed or was refused>"   (one line per job;
//                                   "no jobs" when there are none; spec= only when known)
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

#include "inagg/control/job.hpp"

namespace inagg::control {

struct Request {
  enum class Verb { add, remove, list, stats };
  Verb verb = Verb::list;
  uint32_t id = 0;      // remove, stats <id>; for add, the job file's id
  bool has_id = false;
  std::string body;     // add: the job file text, verbatim
  JobSpec job;          // add: the body, already parsed (parse_request refuses a bad one)
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

// One counter as `stats` prints it ("name value"). The names are the engine's (its X-macro list);
// control only formats them, so it needs no engine internals.
struct Counter {
  std::string_view name;
  uint64_t value = 0;
};

// One job as `list` and `stats <id>` show it: filled by whoever owns the job (the appliance, from
// its engine's JobInfo and the spec it added the job with).
struct JobStatus {
  enum class State : uint8_t {
    active,
    failed,   // aborted by the engine; `error` says why
    refused,  // the appliance refused to add it (`error` is the refusal); held for a while, so every
              // rank waiting for the job learns of it (RefusedJobs, refused_jobs.hpp)
  };
  uint32_t id = 0;
  State state = State::active;
  std::string error;
  util::Dtype dtype = util::Dtype::fp32;
  unsigned workers = 0;
  uint64_t released_slots = 0;    // the job's release cursor (current generation)
  uint64_t held_packets = 0;      // packets in collecting/complete slots
  uint64_t retained_packets = 0;  // released packets kept for resend
  uint64_t memory_bytes = 0;
  uint64_t mbuf_quota = 0;
  std::optional<uint32_t> spec_digest;  // job_digest() of the spec it was added (or refused) with
  std::vector<Counter> counters;  // stats <id>: the job's counters, in the engine's order
};
std::string_view state_name(JobStatus::State state);  // "active", "failed", "refused"

// `list`: one line per job, "no jobs" when there are none.
std::string format_job_list(const std::vector<JobStatus>& jobs);
// `stats`: "name value\n" per counter, in the order given.
std::string format_counters(const std::vector<Counter>& counters);
// `stats <id>`: the job's state figures, then its counters.
std::string format_job_stats(const JobStatus& job);

// One line of a `list` reply, read back (what a worker waiting for its job needs); nullopt for a
// line that is not a job ("no jobs"). `error` is unescaped.
struct JobListLine {
  uint32_t id = 0;
  std::string state;
  std::optional<uint32_t> spec_digest;
  std::string error;
};
std::optional<JobListLine> parse_job_list_line(std::string_view line);

}  // namespace inagg::control
