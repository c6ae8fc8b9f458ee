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

}  // namespace inagg::dataplane
