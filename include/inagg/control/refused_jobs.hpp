// Jobs the appliance refused to add, remembered for a while. Only the rank that sends `add` (rank
// 0) reads the refusal in its reply; the others wait for the job to show up in `list`. So `list`
// shows a refused job too, as `state=refused` with the reason, until the id is added or removed or
// `remember_for` has passed, and every rank can stop at once with the same reason.
// The time limit keeps a refusal from one run from stopping the ranks of a later run that
// the appliance would accept; ranks start within seconds of each other, a rerun comes later.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "inagg/control/job.hpp"
#include "inagg/control/protocol.hpp"

namespace inagg::control {

class RefusedJobs {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kDefaultMemory{10};
  static constexpr size_t kMaxRemembered = 64;  // the oldest refusal goes first

  explicit RefusedJobs(Clock::duration remember_for = kDefaultMemory) : remember_for_(remember_for) {}

  // `add` of `spec` was refused with `reason`: replaces an earlier refusal of the same id.
  void record(const JobSpec& spec, const std::string& reason);
  // The id was added, or removed: its refusal no longer stands. True when there was one.
  bool forget(uint32_t id);
  // Appends a `refused` entry for every remembered refusal whose id is not in `jobs` already (a
  // job of that id that exists says more than an older refusal).
  void add_to(std::vector<JobStatus>* jobs);

 private:
  struct Refusal {
    JobSpec spec;
    std::string reason;
    Clock::time_point when;
  };
  void expire();

  Clock::duration remember_for_;
  std::deque<Refusal> refusals_;  // oldest first
};

}  // namespace inagg::control
