#include "inagg/dataplane/telemetry.hpp"

#include <rte_telemetry.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "inagg/dataplane/appliance.hpp"

namespace inagg::dataplane {
namespace {

// Never freed: DPDK's telemetry thread may run a command while the process exits.
struct Gate {
  std::mutex mutex;  // held while a command uses `app`; the datapath never takes it
  Appliance* app = nullptr;
  bool registered = false;
};
Gate& gate() {
  static Gate* g = new Gate;
  return *g;
}

// Runs fn(app) with the gate held, or answers -ENODEV when no appliance is attached.
template <class F>
int with_app(F&& fn) {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  return g.app ? fn(*g.app) : -ENODEV;
}

int tel_engine(const char*, const char*, rte_tel_data* d) {
  return with_app([&](Appliance& app) {
    rte_tel_data_start_dict(d);
    agg::for_each_counter(app.engine_totals(), [&](std::string_view name, std::string_view, uint64_t v) {
      rte_tel_data_add_dict_u64(d, std::string(name).c_str(), v);
    });
    return 0;
  });
}

int tel_jobs(const char*, const char*, rte_tel_data* d) {
  return with_app([&](Appliance& app) {
    rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
    for (const control::JobStatus& j : app.describe_jobs()) rte_tel_data_add_array_int(d, static_cast<int>(j.id));
    return 0;
  });
}

// The job's fields (INAGG_JOB_FIELDS, control/protocol.hpp) and counters, as one JSON dict.
int tel_job(const char*, const char* params, rte_tel_data* d) {
  if (params == nullptr || *params == 0) return -EINVAL;
  char* end = nullptr;
  const unsigned long id = std::strtoul(params, &end, 0);
  if (*end != 0 || id > UINT32_MAX) return -EINVAL;
  return with_app([&](Appliance& app) {
    control::JobStatus job;
    if (!app.describe_job(static_cast<uint32_t>(id), &job)) return -ENOENT;
    rte_tel_data_start_dict(d);
    control::for_each_job_field(job, [&](std::string_view name, std::string_view, const control::JobFieldValue& v) {
      const std::string key(name);
      if (const uint64_t* n = std::get_if<uint64_t>(&v))
        rte_tel_data_add_dict_u64(d, key.c_str(), *n);
      else if (!std::get<std::string>(v).empty())  // as every form: an empty text field is left out
        rte_tel_data_add_dict_string(d, key.c_str(), std::get<std::string>(v).c_str());
    });
    for (const control::Counter& c : job.counters) rte_tel_data_add_dict_u64(d, std::string(c.name).c_str(), c.value);
    return 0;
  });
}

int tel_lcores(const char*, const char*, rte_tel_data* d) {
  return with_app([&](Appliance& app) {
    rte_tel_data_start_dict(d);
    for (auto& [lc, c] : app.lcore_counters()) {
      const std::string p = "lcore" + std::to_string(lc) + ".";
#define X(name, text) rte_tel_data_add_dict_u64(d, (p + #name).c_str(), c.name);
      INAGG_LCORE_COUNTERS(X)
#undef X
    }
    return 0;
  });
}

}  // namespace

void attach_telemetry(Appliance& app) {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.app = &app;
  if (g.registered) return;
  g.registered = true;
  rte_telemetry_register_cmd("/inagg/engine", tel_engine, "Engine counters summed over lcores. No parameters.");
  rte_telemetry_register_cmd("/inagg/jobs", tel_jobs, "Ids of the registered jobs. No parameters.");
  rte_telemetry_register_cmd("/inagg/job", tel_job, "One job's fields and counters. Parameter: job id.");
  rte_telemetry_register_cmd("/inagg/lcores", tel_lcores, "Per-lcore datapath counters. No parameters.");
}

void detach_telemetry() {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.app = nullptr;
}

}  // namespace inagg::dataplane
