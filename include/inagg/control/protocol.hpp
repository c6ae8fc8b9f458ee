// The control socket's text protocol: one request per connection, carried in the frames of
// socket.hpp (length-prefixed, and over TCP with a tenant's MAC); one reply.
//
//   request                       reply
//   add\n<job file text>          ok job <id> added
//   remove <id>                   ok job <id> removed
//   list                          id=<id> state=<active|failed|refused> dtype=<..> workers=<n> ...
//                                   spec=<job_digest, 64 hex> error="<why it failed or was refused>"
//                                   (one line per job, every field of INAGG_JOB_FIELDS, spec= only
//                                   when known; "no jobs" when there are none)
//   stats                         <counter> <value>     (engine totals, one line per counter)
//   stats <id>                    <field> <value> per INAGG_JOB_FIELDS field (error only when
//                                   there is one), then the job's counters
//
// Every reply ends with "\n"; one that starts with "error: " is a refusal and says why. Ids are
// decimal (0x-hex is accepted too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::control {

struct Request {
  enum class Verb { add, remove, list, stats };
  Verb verb = Verb::list;
  uint32_t id = 0;  // remove, stats <id>; for add, the job file's id
  bool has_id = false;
  std::string body;  // add: the job file text, verbatim
  JobSpec job;       // add: the body, already parsed (parse_request refuses a bad one)
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
    binding,  // added, waiting until its ranks' addresses are seen on a port (`error` says which)
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
  std::optional<std::string> spec_digest;  // job_digest() of the spec it was added (or refused) with
  std::vector<Counter> counters;           // stats <id>: the job's counters, in the engine's order
  // How long its slots waited for their last rank (agg::SlotCompletionHistogram's buckets): slots
  // per bucket, not cumulative, and the waits' sum. Empty for a job no engine holds.
  std::vector<uint64_t> slot_completion_counts;
  uint64_t slot_completion_sum_ns = 0;
};
std::string_view state_name(JobStatus::State state);  // "active", "failed", "refused", "binding"
// Every state, in the enum's order (the metrics' inagg_job_state shows each; a state added above
// belongs here too).
inline constexpr JobStatus::State kJobStates[] = {JobStatus::State::active, JobStatus::State::failed,
                                                  JobStatus::State::refused, JobStatus::State::binding};

// A job's fields, in the order every form shows them under these names: `list` (name=value),
// `stats <id>` (name value), the appliance's stats print (format_job_summary), DPDK telemetry's
// /inagg/job,<id> (a JSON dict) and the Prometheus job families; each form is generated from this
// list, so a field added here shows everywhere. X(name, text, value): `value` is an expression of
// `j` (a JobStatus), a number or a string.
#define INAGG_JOB_FIELDS(X)                                                                                          \
  X(id, "the job id", uint64_t{j.id})                                                                                \
  X(state, "active, failed, refused or binding (error says why, or what it waits for)",                              \
    std::string(state_name(j.state)))                                                                                \
  X(dtype, "element type of the gradients", std::string(util::dtype_name(j.dtype)))                                  \
  X(workers, "ranks in the ring", uint64_t{j.workers})                                                               \
  X(released_slots, "slots whose sums went out (the release cursor of this generation)", j.released_slots)           \
  X(held_packets, "packets held in collecting or complete slots", j.held_packets)                                    \
  X(retained_packets, "released packets kept for resends", j.retained_packets)                                       \
  X(memory_bytes, "slot memory the job holds", j.memory_bytes)                                                       \
  X(mbuf_quota, "packet buffers the job may hold", j.mbuf_quota)                                                     \
  X(spec, "job_digest() of the spec it was added or refused with, 64 hex digits (empty: not known)", digest_text(j)) \
  X(error, "why the job failed or was refused (empty while it is active)", j.error)

using JobFieldValue = std::variant<uint64_t, std::string>;
std::string digest_text(const JobStatus& j);  // spec_digest, "" when there is none

// Calls f(name, text, value) for every field of `j`, in INAGG_JOB_FIELDS order.
template <class F>
void for_each_job_field(const JobStatus& j, F&& f) {
#define X(name, text, value) f(std::string_view(#name), std::string_view(text), JobFieldValue(value));
  INAGG_JOB_FIELDS(X)
#undef X
}

// Every form leaves out a text field that is empty, but for `list`'s error (its lines end with it).
// `list`: one line per job (every field, `name=value`, error quoted and escaped, last), "no jobs"
// when there are none.
std::string format_job_list(const std::vector<JobStatus>& jobs);
// `stats`: "name value\n" per counter, in the order given.
std::string format_counters(const std::vector<Counter>& counters);
// `stats <id>`: "name value\n" per field (error only when there is one), then its counters.
std::string format_job_stats(const JobStatus& job);
// The appliance's stats print: "job <id>: <state> name value ..." with the counters that are not
// zero, and error "..." last when there is one.
std::string format_job_summary(const JobStatus& job);

// One line of a `list` reply, read back (what a worker waiting for its job needs); nullopt for a
// line that is not a job ("no jobs"). `error` is unescaped.
struct JobListLine {
  uint32_t id = 0;
  std::string state;
  std::optional<std::string> spec_digest;  // 64 hex digits; none from an appliance that shows another form
  std::string error;
};
std::optional<JobListLine> parse_job_list_line(std::string_view line);

}  // namespace inagg::control
