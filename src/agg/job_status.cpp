#include "inagg/agg/job_status.hpp"

#include "inagg/control/job_file.hpp"

namespace inagg::agg {

std::vector<control::Counter> counter_list(const EngineCounters& c) {
  std::vector<control::Counter> out;
  for_each_counter(c, [&](std::string_view name, std::string_view, uint64_t value) { out.push_back({name, value}); });
  return out;
}

control::JobStatus job_status(const JobInfo& info, const control::JobSpec* spec) {
  control::JobStatus s;
  s.id = info.id;
  s.state = info.state == JobState::active ? control::JobStatus::State::active : control::JobStatus::State::failed;
  s.error = info.error;
  if (spec) {
    s.dtype = spec->dtype;
    s.workers = spec->workers;
    s.spec_digest = control::job_digest(*spec);
  }
  s.released_slots = info.released_slots;
  s.held_packets = info.held_packets;
  s.retained_packets = info.retained_packets;
  s.memory_bytes = info.memory_bytes;
  s.mbuf_quota = info.mbuf_quota;
  s.counters = counter_list(info.counters);
  s.slot_completion_counts.assign(info.slot_completion.counts.begin(), info.slot_completion.counts.end());
  s.slot_completion_sum_ns = info.slot_completion.sum_ns;
  return s;
}

}  // namespace inagg::agg
