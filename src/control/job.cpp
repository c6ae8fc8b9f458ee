#include "inagg/control/job.hpp"

namespace inagg::control {

JobSpec channel_spec(const JobSpec& job, unsigned c) {
  JobSpec s = job;
  s.channel = static_cast<uint16_t>(c);
  s.conns.clear();
  for (const ConnectionSpec& conn : job.conns)
    if (conn.channel == c) s.conns.push_back(conn);
  return s;
}

bool check_channels(const JobSpec& job, std::string* error) {
  const std::string name = "job " + std::to_string(job.id) + ": ";
  if (job.channels < 1 || job.channels > kMaxChannels) {
    *error =
        name + "channels must be 1.." + std::to_string(kMaxChannels) + " (got " + std::to_string(job.channels) + ")";
    return false;
  }
  if (job.conns.size() != size_t{job.workers} * job.channels) {
    *error = name + "needs one conn line per worker and channel: " + std::to_string(job.workers) + " workers x " +
             std::to_string(job.channels) + " channels but " + std::to_string(job.conns.size()) + " conn lines";
    return false;
  }
  for (unsigned c = 0; c < job.channels; ++c) {
    uint64_t seen = 0;
    for (const ConnectionSpec& conn : job.conns) {
      if (conn.channel != c) continue;
      if (conn.rank >= job.workers || (seen >> conn.rank & 1)) {
        *error = name + "channel " + std::to_string(c) + " names rank " + std::to_string(conn.rank) +
                 (conn.rank >= job.workers ? " of " + std::to_string(job.workers) + " workers" : " twice") +
                 " (each channel's conn lines are ranks 0.." + std::to_string(job.workers - 1) + ", once each)";
        return false;
      }
      seen |= uint64_t{1} << conn.rank;
    }
  }
  return true;
}

}  // namespace inagg::control
