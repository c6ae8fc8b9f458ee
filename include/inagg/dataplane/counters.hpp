// The counters each datapath lcore keeps of its own work (LcoreCounters), listed once
// (INAGG_LCORE_COUNTERS) for the stats print, the telemetry commands and the metrics.
#pragma once

#include <cstdint>

namespace inagg::dataplane {

// Per-lcore counters, written only by their lcore. The control thread reads them without a lock
// for display: each is a naturally aligned 64-bit word, so a read sees an old or a new value,
// never a torn one.
#define INAGG_LCORE_COUNTERS(X)                                                                    \
  X(rx, "packets received")                                                                        \
  X(tx, "packets handed to the PMDs")                                                              \
  X(tx_dropped, "packets a PMD did not take, freed")                                               \
  X(bridged, "frames forwarded by the L2 table")                                                   \
  X(flooded, "frames flooded (unknown unicast, broadcast, multicast)")                             \
  X(same_port_drops, "frames whose destination is behind their ingress port")                      \
  X(mac_moves_refused, "frames claiming a rank's sticky MAC from another port, not learned")       \
  X(mac_limit_refused, "frames from a new MAC on a port at its --mac-limit-per-port, not learned") \
  X(roce, "RoCEv2 packets given to an engine")                                                     \
  X(handover_out, "RoCEv2 packets handed to the lcore that owns their job")                        \
  X(handover_in, "packets received from other lcores")                                             \
  X(handover_full, "handovers dropped: the owner's ring was full")                                 \
  X(multiseg_linearize_failed,                                                                     \
    "chained mbufs that could not be made contiguous (RoCEv2 ones dropped, others bridged)")       \
  X(idle_sleeps, "times the loop slept with its queues empty (lab mode, --idle-sleep-us)")         \
  X(busy_cycles, "TSC cycles of loop iterations that moved packets")                               \
  X(idle_cycles, "TSC cycles of loop iterations that found nothing")

struct LcoreCounters {
#define X(name, text) uint64_t name = 0;
  INAGG_LCORE_COUNTERS(X)
#undef X
};

}  // namespace inagg::dataplane
