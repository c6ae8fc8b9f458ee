#include "inagg/control/refused_jobs.hpp"

#include <algorithm>

#include "inagg/control/job_file.hpp"

namespace inagg::control {

void RefusedJobs::expire() {
  const Clock::time_point now = Clock::now();
  while (!refusals_.empty() && now - refusals_.front().when >= remember_for_) refusals_.pop_front();
}

void RefusedJobs::record(const JobSpec& spec, const std::string& reason) {
  forget(spec.id);
  if (refusals_.size() == kMaxRemembered) refusals_.pop_front();
  refusals_.push_back({spec, reason, Clock::now()});
}

bool RefusedJobs::forget(uint32_t id) {
  expire();
  const auto it = std::find_if(refusals_.begin(), refusals_.end(), [&](const Refusal& r) { return r.spec.id == id; });
  if (it == refusals_.end()) return false;
  refusals_.erase(it);
  return true;
}

void RefusedJobs::add_to(std::vector<JobStatus>* jobs) {
  expire();
  for (const Refusal& r : refusals_) {
    if (std::any_of(jobs->begin(), jobs->end(), [&](const JobStatus& j) { return j.id == r.spec.id; })) continue;
    JobStatus s;
    s.id = r.spec.id;
    s.state = JobStatus::State::refused;
    s.error = r.reason;
    s.dtype = r.spec.dtype;
    s.workers = r.spec.workers;
    s.spec_digest = job_digest(r.spec);
    jobs->push_back(std::move(s));
  }
}

}  // namespace inagg::control
