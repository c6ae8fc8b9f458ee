// systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram of "KEY=VALUE"
// lines to the unix socket that $NOTIFY_SOCKET names (an abstract socket when it starts with '@').
// A unit of Type=notify is "started" when READY=1 arrives, so that units ordered after it, and
// `systemctl start`, wait until the ports are up and forwarding.
#pragma once

#include <string_view>

namespace inagg::util {

// Sends `state` (e.g. "READY=1\nSTATUS=forwarding on 2 ports") when $NOTIFY_SOCKET is set; returns
// false when it is unset or the datagram could not be sent (a service manager that went away is
// no reason to stop forwarding, so callers only log that).
bool notify_service_manager(std::string_view state);

}  // namespace inagg::util
