// The appliance's data plane: EAL ports, one run-to-completion loop per worker lcore (l3fwd
// style), the RC engine per lcore for the jobs it owns, the L2 bridge for everything else, and the
// request rings through which the control thread reaches the lcores (ip_pipeline style).
// Sources: src/dataplane/ports.cpp (pool, ports), lcore_loop.cpp (the loop), lcore_requests.cpp
// (requests to the lcores), job_ownership.cpp (which lcore owns which job), appliance.cpp.
// Its configuration is config.hpp's, the lcores' counters counters.hpp's, a port's description
// port_info.hpp's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inagg/agg/engine.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/dataplane/config.hpp"
#include "inagg/dataplane/counters.hpp"
#include "inagg/dataplane/port_info.hpp"

namespace inagg::dataplane {

class Appliance {
 public:
  Appliance();
  ~Appliance();  // stops; closes the ports (a net_pcap output file is complete after it). Before rte_eal_cleanup().
  Appliance(const Appliance&) = delete;
  Appliance& operator=(const Appliance&) = delete;

  // After rte_eal_init(). Sets up the pool, the ports, the lcores' state. Clear error on failure.
  bool init(const ApplianceConfig& cfg, std::string* error);
  // Runs until stop is requested: the datapath loop on every worker lcore, or on this (the main)
  // lcore when there is none; `control_tick` every `tick_ms` on this lcore, or, when this lcore
  // runs the datapath, on a control thread of its own (rte_ctrl_thread_create: off the datapath's
  // cores where EAL left any). The datapath never waits for the control tick: control requests
  // reach it as messages on its lcores' rings. Returns false with *error if it could not start.
  bool run(void (*control_tick)(void*), void* arg, unsigned tick_ms, std::string* error);
  bool single_lcore() const;  // the main lcore runs the datapath

  static void request_stop();  // async-signal-safe
  static bool stop_requested();

  // Control side; any thread, serialised among themselves, applied by the owning lcores between
  // bursts (or here while no loop runs). add_job binds the job's ranks to ports first
  // (rank_binding.hpp): refused when that is ambiguous; a job whose ranks have not all been seen
  // yet waits (state `binding`, its packets dropped) until check_bindings() binds it.
  // `lcore`: the datapath lcore (EAL lcore id) a new job goes to, as the state directory recorded
  // it; refused when that is not one of this appliance's datapath lcores. None: the lcore with the
  // fewest jobs. A re-added id (a failed job) stays where it is.
  bool add_job(const control::JobSpec& spec, std::string* error, agg::JobStart start = agg::JobStart::fresh,
               std::optional<unsigned> lcore = std::nullopt);
  // The EAL lcore id of the lcore that owns job `id` (a job of channels: its channel 0's), or -1 for
  // no job.
  int job_lcore(uint32_t id);
  bool remove_job(uint32_t id, std::string* error);
  // Binds the jobs registered again after a restart (JobStart::resume) by what `path` (the state
  // directory's `bindings`) held at the start, after the operator's table: they go back where their
  // ranks were, before any of them is seen again. Once `path`'s directory exists, the bound ranks
  // are kept there, rewritten whenever a job is bound or removed. Call it before adding any job,
  // and again once the directory is made. False with *error when the file does not read.
  bool remember_bindings(const std::string& path, std::string* error);
  // The control tick's, every 20 ms at most: binds the waiting jobs whose ranks have been seen since
  // (added then), refuses those whose binding became ambiguous, and stops the added jobs a rank of
  // which another host claimed since it was bound (rank_binding.hpp, claimed_since: removed, as
  // `inagg-ctl remove` does, so that every rank stops). Both are listed as refused for a while, with
  // the reason. Returns their ids, whose registrations the caller forgets (the state directory's
  // files).
  std::vector<uint32_t> check_bindings();
  // Jobs as the control protocol describes them (control::JobStatus: the engine's figures and
  // counters, the spec's dtype and workers), by id.
  std::vector<control::JobStatus> describe_jobs();
  bool describe_job(uint32_t id, control::JobStatus* out);
  agg::EngineCounters engine_totals();
  // Lock-free reads of the lcores' counters and the ports.
  std::vector<std::pair<unsigned, LcoreCounters>> lcore_counters() const;
  // Each datapath lcore's loop iterations begun (EAL lcore id, count): it moves while the loop
  // runs, idle or not (the service watchdog's sign of life). A lock-free read.
  std::vector<std::pair<unsigned, uint64_t>> lcore_loops() const;
  // A reload's new binding table (--bindings): the jobs added or bound from now on bind by it;
  // bound jobs stay where they are.
  void set_bindings(std::vector<BoundStation> table);
  // Tests of the service watchdog only: lcore `lcore` (an EAL lcore id) stops its loop, between
  // bursts, until a stop is requested. False with *error when it is not a datapath lcore.
  bool stall_lcore_for_test(unsigned lcore, std::string* error);
  const std::vector<PortInfo>& ports() const;
  uint64_t total_rx() const;
  // Packet buffers of the appliance's pools: in use (held by jobs, queued, in per-lcore caches) and
  // in all. A lock-free read.
  struct MbufUse {
    uint64_t in_use = 0, total = 0;
  };
  MbufUse mbuf_use() const;
  // Per-job rte_flow rules in place, refused by a PMD, and not made because another job's rule
  // holds the address pair (flow.hpp); zero where no port takes per-job rules.
  struct FlowRuleCounts {
    uint64_t in_place = 0, refused = 0, contended = 0;
  };
  FlowRuleCounts flow_rules() const;
  std::string stats_text();  // ports, lcores, jobs: the periodic and final print

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace inagg::dataplane
