// A job whose ranks sit in several racks (docs/protocol.md section 21): one job description and the
// rack of every rank give each appliance its part, a leaf's per rack and the spine's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::control {

struct RackParts {
  // One per rack, in ring order: the rack's connections from its downlink (the previous rack's last
  // rank writing to its first) to its uplink (its last rank writing to the next rack's first),
  // renumbered from 0; Tier::leaf. With a single rack: the job itself, flat.
  std::vector<JobSpec> leaves;
  // The racks' uplinks, one "rank" each, in ring order; Tier::spine. Absent with a single rack.
  std::optional<JobSpec> spine;
};

// "0,0,1,1": the rack of each rank, as `--racks` gives it. On failure sets *error to
// "'x' is not a rack number (e.g. --racks 0,0,1,1)".
std::optional<std::vector<unsigned>> parse_rack_list(std::string_view text, std::string* error);

// `job` is a flat ring; rack_of[r] names rank r's rack. Each rack's ranks must be consecutive in
// ring order (a rack's ranks r..s, no rack twice). Ports are left unnamed: port ids are each
// appliance's own. On failure sets *error to what to change.
std::optional<RackParts> split_across_racks(const JobSpec& job, const std::vector<unsigned>& rack_of,
                                            std::string* error);

}  // namespace inagg::control
