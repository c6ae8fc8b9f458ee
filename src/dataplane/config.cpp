// The checks on an ApplianceConfig that start-up and inagg --check-config share (config.hpp).
#include "inagg/dataplane/config.hpp"

namespace inagg::dataplane {

bool check_mbuf_budget(const ApplianceConfig& cfg, unsigned datapath_lcores, std::string* error) {
  if (uint64_t{cfg.engine.mbuf_budget} * datapath_lcores < cfg.mbufs) return true;
  *error = "the engines' mbuf budget (" + std::to_string(cfg.engine.mbuf_budget) + " x " +
           std::to_string(datapath_lcores) + " lcores) must leave buffers for forwarding in a pool of " +
           std::to_string(cfg.mbufs) + "; raise --mbufs or lower --mbuf-budget";
  return false;
}

bool check_job_lcores(const ApplianceConfig& cfg, unsigned datapath_lcores, std::string* error) {
  const unsigned n = cfg.job_lcores;
  if (n < 1 || n > datapath_lcores) {
    *error = "--job-lcores " + std::to_string(n) + " needs that many datapath lcores, and there " +
             (datapath_lcores == 1 ? std::string("is 1") : "are " + std::to_string(datapath_lcores)) +
             " (every worker lcore of EAL's -l/--lcores runs the datapath; the main lcore alone when there is none): "
             "give EAL more lcores or lower --job-lcores";
    return false;
  }
  if ((n & (n - 1)) != 0 || n > agg::JobShards::kMaxShards) {
    *error = "--job-lcores " + std::to_string(n) + " must be 1, 2, 4 or 8 (a job's slots are " +
             "sharded by the low bits of their PSNs)";
    return false;
  }
  return true;
}

}  // namespace inagg::dataplane
