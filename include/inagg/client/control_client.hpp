// A job's ranks and the appliance's control socket (control/protocol.hpp): rank 0 adds the job,
// and every rank waits until it is active before sending, because until then the appliance would
// switch the packets unaggregated. Registration is the client's job; the appliance never guesses.
// A refusal reaches every rank: rank 0 reads it in the reply to its `add`, the others in `list`
// (state=refused, control::RefusedJobs), so all of them stop at once with the same reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "inagg/control/protocol.hpp"

namespace inagg::client {

struct Registration {
  enum class Outcome {
    active,       // the job is active: send
    unreachable,  // rank 0 could not reach the control socket; `reason` says why
    refused,      // the appliance refused the job; `reason` is its reply ("error: ...\n")
    not_active,   // the job did not become active before the deadline
  };
  Outcome outcome = Outcome::active;
  std::string reason;
};

class ControlClient {
 public:
  // `socket_path`: a Unix socket path, or tcp://HOST:PORT (the appliance's --control-tcp), whose
  // every request then carries `secret`.
  explicit ControlClient(std::string socket_path, int request_timeout_ms = 5000, std::string secret = "")
      : path_(std::move(socket_path)), timeout_ms_(request_timeout_ms), secret_(std::move(secret)) {}

  const std::string& socket_path() const { return path_; }

  // One request; false with *error when the socket cannot be reached or does not answer.
  bool request(const std::string& text, std::string* reply, std::string* error) const;

  // The job's line in `list`; nullopt when it is not listed or (with *error set) the socket
  // cannot be reached.
  std::optional<control::JobListLine> job_state(uint32_t id, std::string* error) const;
  // Job `id`'s slots_released (its stats); 0 when it has none, or the request fails.
  uint64_t slots_released(uint32_t id) const;

  // Rank 0 (`add_job`) adds `job_text` (a refusal that the job already exists is no refusal);
  // then every rank polls `list` every `poll_ms` until job `id` is active, was refused, or
  // deadline_ns passes. An active job `id` whose spec digest (control::job_digest) is not that of
  // `job_text` is refused here, on every rank: it is another job with the same id. While the job
  // waits for its ranks to be seen (state `binding`: the appliance binds each rank to the port its
  // address is seen on, docs/binding.md), rank `announce_rank` (when given) sends a datagram from
  // its address to its successor's every 100 ms, so that it is seen: a rank that has sent nothing
  // through the appliance yet (one that meets no other) would otherwise wait for ever.
  Registration register_job(bool add_job, const std::string& job_text, uint32_t id, uint64_t deadline_ns,
                            int poll_ms = 20, std::optional<unsigned> announce_rank = std::nullopt) const;

 private:
  std::string path_;
  int timeout_ms_;
  std::string secret_;
};

}  // namespace inagg::client
