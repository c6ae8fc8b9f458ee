// The engine's job figures and counters in the control protocol's terms (control::JobStatus,
// control::Counter), for `list` and `stats` replies: control formats them without knowing the
// engine.
#pragma once

#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/control/protocol.hpp"

namespace inagg::agg {

// Every counter of `c`, in INAGG_ENGINE_COUNTERS order.
std::vector<control::Counter> counter_list(const EngineCounters& c);

// `spec`: the spec the job was added with, for its dtype and worker count (nullptr: unknown).
control::JobStatus job_status(const JobInfo& info, const control::JobSpec* spec = nullptr);

}  // namespace inagg::agg
