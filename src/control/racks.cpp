#include "inagg/control/racks.hpp"

#include <algorithm>
#include <set>

#include "inagg/control/job_file.hpp"
#include "inagg/util/text.hpp"

namespace inagg::control {

std::optional<std::vector<unsigned>> parse_rack_list(std::string_view text, std::string* error) {
  std::vector<unsigned> racks;
  for (const std::string_view f : util::split_fields(text)) {
    const std::optional<uint64_t> v = util::parse_unsigned(f, 65535);
    if (!v) {
      *error = "'" + std::string(f) + "' is not a rack number (e.g. --racks 0,0,1,1)";
      return std::nullopt;
    }
    racks.push_back(static_cast<unsigned>(*v));
  }
  return racks;
}

std::optional<RackParts> split_across_racks(const JobSpec& job_in, const std::vector<unsigned>& rack_of,
                                            std::string* error) {
  JobSpec job = job_in;
  std::sort(job.conns.begin(), job.conns.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  const size_t n = job.conns.size();
  if (job.tier != Tier::flat) {
    *error = "the job to split must be the whole ring (tier flat)";
    return std::nullopt;
  }
  if (job.collective != Collective::allreduce) {
    *error = std::string("a ") + collective_name(job.collective) +
             " runs on one appliance: only an allreduce can be split across racks yet";
    return std::nullopt;
  }
  if (job.channels != 1) {
    *error = "a job of " + std::to_string(job.channels) +
             " channels runs on one appliance: only a job of one channel can be split across racks yet";
    return std::nullopt;
  }
  if (n == 0 || n != job.workers) {
    *error = "the job needs one conn line per worker before it can be split";
    return std::nullopt;
  }
  if (rack_of.size() != n) {
    *error = "give the rack of every rank: " + std::to_string(n) + " ranks but " + std::to_string(rack_of.size()) +
             " racks named";
    return std::nullopt;
  }
  // Blocks of consecutive ranks, one per rack.
  std::vector<std::pair<size_t, size_t>> blocks;  // first and last rank
  std::set<unsigned> seen;
  for (size_t r = 0; r < n; ++r) {
    if (r > 0 && rack_of[r] == rack_of[r - 1]) {
      blocks.back().second = r;
      continue;
    }
    if (!seen.insert(rack_of[r]).second) {
      *error = "rank " + std::to_string(r) + " sits in rack " + std::to_string(rack_of[r]) +
               ", whose other ranks are not next to it in the ring: order the ring so that each rack's ranks are "
               "consecutive";
      return std::nullopt;
    }
    blocks.push_back({r, r});
  }
  RackParts parts;
  if (blocks.size() == 1) {
    parts.leaves.push_back(job);
    return parts;
  }
  auto renumbered = [&](const std::vector<size_t>& ranks, Tier tier) {
    JobSpec p = job;
    p.tier = tier;
    p.conns.clear();
    for (size_t i = 0; i < ranks.size(); ++i) {
      ConnectionSpec c = job.conns[ranks[i]];
      c.rank = static_cast<unsigned>(i);
      c.port = kAnyPort;
      p.conns.push_back(c);
    }
    p.workers = static_cast<unsigned>(ranks.size());
    return p;
  };
  std::vector<size_t> uplinks;
  for (const auto& [first, last] : blocks) {
    std::vector<size_t> ranks{(first + n - 1) % n};  // the downlink
    for (size_t r = first; r <= last; ++r) ranks.push_back(r);
    parts.leaves.push_back(renumbered(ranks, Tier::leaf));
    uplinks.push_back(last);
  }
  parts.spine = renumbered(uplinks, Tier::spine);
  return parts;
}

}  // namespace inagg::control
