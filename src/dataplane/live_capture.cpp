// Live capture (rte_pdump), made safe to end while traffic flows.
//
// When dpdk-dumpcap stops, DPDK 22.11's rte_pdump takes its RX and TX callbacks off the ports
// (rte_eth_remove_rx_callback / _tx_callback) and answers at once, while an lcore may still be
// inside one of those callbacks copying a burst into dumpcap's pool; dumpcap then frees that pool
// and the appliance crashes in the copy. (Later DPDK releases make rte_pdump wait for its callbacks.)
// The ethdev API leaves that wait to whoever removes a callback, so inagg defines both removal
// functions itself: each calls DPDK's and returns only when every running datapath lcore has
// started a new loop iteration since, i.e. no lcore is still inside the removed callback.
// rte_pdump (a shared library) resolves these names to the executable's definitions first.
#include "inagg/dataplane/live_capture.hpp"

#include <dlfcn.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_pdump.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "inagg/util/log.hpp"
#include "lcore.hpp"

namespace inagg::dataplane {
namespace {

std::atomic<const std::vector<LcoreState*>*> g_lcores{nullptr};

// Every lcore that is serving at the call has begun a loop iteration since (or stopped serving).
void wait_for_lcores_to_pass_a_burst() {
  const std::vector<LcoreState*>* lcores = g_lcores.load(std::memory_order_acquire);
  if (!lcores) return;
  std::vector<uint64_t> seen;
  seen.reserve(lcores->size());
  for (const LcoreState* l : *lcores) seen.push_back(l->loops.load(std::memory_order_acquire));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (size_t i = 0; i < lcores->size(); ++i) {
    const LcoreState& l = *(*lcores)[i];
    while (l.serving.load(std::memory_order_acquire) && l.loops.load(std::memory_order_acquire) == seen[i]) {
      if (std::chrono::steady_clock::now() > deadline) {
        util::log(util::LogModule::dataplane, util::LogLevel::warning,
                  "live capture: lcore %u did not finish its burst within 1 s of a capture ending", l.lcore_id);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  }
}

template <typename Fn>
Fn dpdk_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

void set_live_capture_lcores(const std::vector<LcoreState*>* lcores) {
  g_lcores.store(lcores, std::memory_order_release);
}

bool start_live_capture(std::string* error) {
  if (rte_pdump_init() == 0) return true;
  *error = rte_strerror(rte_errno);
  return false;
}

void stop_live_capture() { rte_pdump_uninit(); }

}  // namespace inagg::dataplane

extern "C" int rte_eth_remove_rx_callback(uint16_t port_id, uint16_t queue_id,
                                          const struct rte_eth_rxtx_callback* user_cb) {
  using Fn = int (*)(uint16_t, uint16_t, const struct rte_eth_rxtx_callback*);
  static const Fn dpdk = inagg::dataplane::dpdk_definition<Fn>("rte_eth_remove_rx_callback");
  if (!dpdk) return -ENOTSUP;
  const int rc = dpdk(port_id, queue_id, user_cb);
  if (rc == 0) inagg::dataplane::wait_for_lcores_to_pass_a_burst();
  return rc;
}

extern "C" int rte_eth_remove_tx_callback(uint16_t port_id, uint16_t queue_id,
                                          const struct rte_eth_rxtx_callback* user_cb) {
  using Fn = int (*)(uint16_t, uint16_t, const struct rte_eth_rxtx_callback*);
  static const Fn dpdk = inagg::dataplane::dpdk_definition<Fn>("rte_eth_remove_tx_callback");
  if (!dpdk) return -ENOTSUP;
  const int rc = dpdk(port_id, queue_id, user_cb);
  if (rc == 0) inagg::dataplane::wait_for_lcores_to_pass_a_burst();
  return rc;
}
