// inagg's control requests and the state directory's jobs (request_dispatch.hpp).
#include "request_dispatch.hpp"

#include <algorithm>

#include "inagg/agg/engine.hpp"
#include "inagg/agg/job_status.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/dataplane/appliance.hpp"
#include "inagg/util/log.hpp"

namespace inagg::apps {

std::string RequestDispatcher::over_budget(const control::Tenant& tenant, const control::JobSpec& job) {
  if (tenant.every_job() || (!tenant.max_jobs && !tenant.max_memory_bytes && !tenant.max_mbufs)) return "";
  // The engine's own accounting of the tenant's jobs (their ids are its range, which no other
  // tenant shares), and what the engine would reserve for this one.
  control::TenantUse used;
  for (const control::JobStatus& j : app_.describe_jobs()) {
    if (!tenant.owns(j.id) || j.id == job.id || j.state == control::JobStatus::State::refused) continue;
    ++used.jobs;
    used.memory_bytes += j.memory_bytes;
    used.mbufs += j.mbuf_quota;
  }
  const agg::Engine::Footprint f = agg::Engine::footprint(job);
  return control::budget_refusal(tenant, job.id, used, f.memory_bytes, f.mbufs);
}

void RequestDispatcher::forget_saved(uint32_t id) {
  if (std::string err; store_ && !store_->erase(id, &err))
    util::log(util::LogModule::control, util::LogLevel::error,
              "job %u was refused, but %s: it would be registered again at the next start; remove the file by hand", id,
              err.c_str());
}

std::string RequestDispatcher::handle(const control::Request& r, const control::Tenant* tenant) {
  switch (r.verb) {
    case control::Request::Verb::add: {
      std::string err = tenant ? over_budget(*tenant, r.job) : "";
      if (!err.empty() || !app_.add_job(r.job, &err)) {
        refused_.record(r.job, err);
        util::log(util::LogModule::control, util::LogLevel::warning, "job %u refused: %s", r.job.id, err.c_str());
        return control::format_error(err);
      }
      refused_.forget(r.job.id);
      // Kept before the client hears ok: an added job it was told of survives a restart, on its lcore.
      const int lcore = app_.job_lcore(r.job.id);
      if (std::string serr; store_ && (lcore < 0 || !store_->save(r.job, static_cast<unsigned>(lcore), &serr))) {
        if (lcore < 0) serr = "the appliance does not say which lcore took it";
        std::string rerr;
        app_.remove_job(r.job.id, &rerr);
        err = "job " + std::to_string(r.job.id) +
              " not added: its registration cannot be kept in the state directory (" + serr + ")";
        util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
        return control::format_error(err);
      }
      util::log(util::LogModule::control, util::LogLevel::info, "job %u added (%u workers, %u channel%s, %s)", r.job.id,
                r.job.workers, unsigned{r.job.channels}, r.job.channels == 1 ? "" : "s",
                std::string(util::dtype_name(r.job.dtype)).c_str());
      return control::format_job_added(r.job.id);
    }
    case control::Request::Verb::remove: {
      std::string err;
      if (!app_.remove_job(r.id, &err))
        return refused_.forget(r.id) ? control::format_job_removed(r.id) : control::format_error(err);
      refused_.forget(r.id);
      util::log(util::LogModule::control, util::LogLevel::info, "job %u removed", r.id);
      if (std::string serr; store_ && !store_->erase(r.id, &serr)) {
        err = "job " + std::to_string(r.id) + " removed, but " + serr +
              ": it would be registered again at the next start; remove the file by hand";
        util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
        return control::format_error(err);
      }
      return control::format_job_removed(r.id);
    }
    case control::Request::Verb::list: {
      std::vector<control::JobStatus> jobs = app_.describe_jobs();
      refused_.add_to(&jobs);
      return control::format_job_list(jobs);
    }
    case control::Request::Verb::stats: {
      if (!r.has_id) return control::format_counters(agg::counter_list(app_.engine_totals()));
      control::JobStatus job;
      if (!app_.describe_job(r.id, &job))
        return control::format_error("no job " + std::to_string(r.id) + " (list jobs to see which exist)");
      return control::format_job_stats(job);
    }
  }
  return control::format_error("unsupported request");
}

std::string describe_spec(const control::JobSpec& j) {
  return std::string(util::dtype_name(j.dtype)) + ", " + std::to_string(j.workers) + " workers, " +
         std::to_string(j.message_bytes) + "-byte messages of " + std::to_string(j.payload_bytes) +
         "-byte packets, window " + std::to_string(j.window) + (j.replay ? ", replay" : "") +
         (j.tier != control::Tier::flat ? std::string(", ") + control::tier_name(j.tier) : "") +
         (j.collective != control::Collective::allreduce
              ? std::string(", ") + control::collective_name(j.collective) + " in chunks of " + std::to_string(j.chunk)
              : "");
}

size_t register_saved_jobs(dataplane::Appliance& app, const control::JobStore& store,
                           const std::vector<control::SavedJob>& saved,
                           const std::vector<control::JobSpec>& configured) {
  size_t registered = 0;
  for (const control::SavedJob& job : saved) {
    const control::JobSpec& spec = job.spec;
    const std::string path = store.path_of(spec.id);
    if (std::any_of(configured.begin(), configured.end(), [&](const auto& j) { return j.id == spec.id; })) {
      util::log(util::LogModule::control, util::LogLevel::warning,
                "state file %s: job %u is also given by a job file (--job), which wins; the state file is removed",
                path.c_str(), spec.id);
      std::string err;
      if (!store.erase(spec.id, &err)) util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
      continue;
    }
    std::string err;
    if (std::string why; !control::resumable(spec, &why)) {
      // Its packets pass unsummed, which the ranks' tallies show (docs/protocol.md sections 14, 20
      // and 21).
      util::log(util::LogModule::control, util::LogLevel::warning,
                "state file %s: job %u: %s; its ranks see unsummed messages and fail or fall over until it is "
                "registered again; the state file is removed",
                path.c_str(), spec.id, why.c_str());
      if (!store.erase(spec.id, &err)) util::log(util::LogModule::control, util::LogLevel::error, "%s", err.c_str());
      continue;
    }
    // On the lcore it was on (a file of an older inagg names none: where there is room), so what
    // fitted before a restart fits after it, whatever the order of the adds and removes was.
    if (!app.add_job(spec, &err, agg::JobStart::resume, job.lcore)) {
      // Refused alone: the others start. Its file is set aside, not lost; its ranks see unsummed
      // messages until it is registered again, as for any job the appliance does not know.
      std::string aerr;
      const bool aside = store.set_aside(spec.id, &aerr);
      util::log(util::LogModule::control, util::LogLevel::error,
                "state file %s: job %u cannot be registered again: %s; %s", path.c_str(), spec.id, err.c_str(),
                aside
                    ? ("its file is kept as " + path + ".refused (register the job again, or remove the file)").c_str()
                    : aerr.c_str());
      continue;
    }
    ++registered;
    util::log(util::LogModule::control, util::LogLevel::info,
              "job %u registered again from %s on lcore %d (%s); it resumes where its ranks are once they go back",
              spec.id, path.c_str(), app.job_lcore(spec.id), describe_spec(spec).c_str());
  }
  return registered;
}

}  // namespace inagg::apps
