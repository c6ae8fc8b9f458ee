// The appliance's DPDK telemetry commands (dpdk-telemetry.py): /inagg/engine, /inagg/jobs,
// /inagg/job,<id>, /inagg/lcores. DPDK cannot unregister a command and calls it on its own thread,
// so the commands reach the appliance only through a gate that outlives it: after
// detach_telemetry() returns, no command touches the appliance (they answer -ENODEV).
#pragma once

namespace inagg::dataplane {

class Appliance;

// Registers the commands (once per process) and lets them reach `app`.
void attach_telemetry(Appliance& app);
// Waits for a command in progress to finish; later ones find no appliance.
void detach_telemetry();

}  // namespace inagg::dataplane
