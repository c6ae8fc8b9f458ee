// inagg's jobs as the control thread keeps them: the control requests (add, remove, list, stats)
// carried out on the running appliance, with every add and remove kept in the state directory
// (--state-dir), and the state directory's jobs registered again at start-up.
#pragma once

#include <string>
#include <vector>

#include "inagg/control/job.hpp"
#include "inagg/control/job_store.hpp"
#include "inagg/control/protocol.hpp"
#include "inagg/control/refused_jobs.hpp"
#include "inagg/control/socket.hpp"

namespace inagg::dataplane {
class Appliance;
}  // namespace inagg::dataplane

namespace inagg::apps {

// Answers the control socket's requests on the control thread. `store` is the state directory
// (null without one): an added job is kept there, with its lcore, before the client hears ok, a
// removed one goes.
class RequestDispatcher {
 public:
  RequestDispatcher(dataplane::Appliance& app, control::JobStore* store) : app_(app), store_(store) {}

  // The reply to one request: what the control socket sends back. `tenant`: who asks over TCP (an
  // add is then kept within its budgets: control::budget_refusal); null on the local socket.
  std::string handle(const control::Request& r, const control::Tenant* tenant = nullptr);
  // A job the appliance refused after it was added (its ranks' binding turned out ambiguous), or
  // stopped because another host claimed a rank's place (Appliance::check_bindings): its state file
  // goes, so that no restart registers it again.
  void forget_saved(uint32_t id);

 private:
  // Why `tenant` may not add `job` now: over one of its budgets ("" when it may).
  std::string over_budget(const control::Tenant& tenant, const control::JobSpec& job);

  dataplane::Appliance& app_;
  control::JobStore* store_;
  // Refused adds, shown by `list` for a while so that every rank of the job learns of the refusal.
  control::RefusedJobs refused_;
};

// A job in a few words for the log and --check-config: dtype, workers, sizes, window, replay.
std::string describe_spec(const control::JobSpec& j);

// The jobs of the state directory, registered again before the loops forward anything: resumed
// (agg::JobStart::resume), their ranks having gone on meanwhile, each on the lcore it was on. A job
// a job file registers too is the job file's (its state file goes). A job that cannot be
// registered again (it no longer fits its lcore, its lcore is gone, it clashes) is refused alone,
// with the reason in the log, and its file set aside (JobStore::set_aside); the others start.
// Returns how many were registered.
size_t register_saved_jobs(dataplane::Appliance& app, const control::JobStore& store,
                           const std::vector<control::SavedJob>& saved,
                           const std::vector<control::JobSpec>& configured);

}  // namespace inagg::apps
