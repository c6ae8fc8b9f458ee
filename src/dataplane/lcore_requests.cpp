// Control requests to the datapath lcores, as DPDK's ip_pipeline passes them: a message on the
// lcore's request ring, applied by the lcore between bursts, the same message back on its reply
// ring. The lcore never waits for the control side and never takes a lock; the control side
// waits for the answer (microseconds while the loop runs).
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "lcore.hpp"

namespace inagg::dataplane {
namespace {

constexpr unsigned kRingSize = 64;  // one request in flight per lcore; room to spare

// The lcores' clock (their loops' now_ns: the TSC in ns).
uint64_t now_ns() { return static_cast<uint64_t>(static_cast<double>(rte_rdtsc()) * 1e9 / rte_get_tsc_hz()); }

void apply(LcoreState& l, LcoreRequest& r) {
  switch (r.kind) {
    case LcoreRequest::Kind::add_job:
      r.ok = l.engine->add_job(*r.spec, &r.error, r.start);
      break;
    case LcoreRequest::Kind::remove_job:
      r.ok = l.engine->remove_job(r.id, &r.error);
      break;
    case LcoreRequest::Kind::hold_closed:  // before the job is added: nothing of it forwarded raw meanwhile
      l.engine->hold_closed(*r.spec);
      r.ok = true;
      break;
    case LcoreRequest::Kind::release_closed:  // the add was refused: its QPs are ordinary traffic again
      l.engine->release_closed(r.spec->id, r.linger_ns);
      r.ok = true;
      break;
    case LcoreRequest::Kind::set_owner:
    case LcoreRequest::Kind::clear_owner:
      if (r.kind == LcoreRequest::Kind::set_owner)
        l.engine->route_job(*r.spec, r.owner);
      else
        l.engine->unroute_job(r.spec->id);
      // A lcore that does not own the job keeps its connections closed while it lives (a packet of
      // it that reached this engine anyway is dropped, not forwarded raw), and for linger_ns after
      // it is removed (tombstones; the owner's engine keeps its own).
      if (r.kind == LcoreRequest::Kind::set_owner)
        l.engine->hold_closed(*r.spec);
      else
        l.engine->release_closed(r.spec->id, r.linger_ns);
      r.ok = true;
      break;
    case LcoreRequest::Kind::job_info:  // every channel of the job this lcore has
      for (const agg::JobInfo& info : l.engine->job_infos())
        if (info.id == r.id) r.infos.push_back(info);
      r.ok = !r.infos.empty();
      break;
    case LcoreRequest::Kind::list_jobs:
      r.infos = l.engine->job_infos();
      r.ok = true;
      break;
    case LcoreRequest::Kind::totals:
      r.counters = l.engine->counters();
      r.ok = true;
      break;
    case LcoreRequest::Kind::stations: {
      const uint64_t now = now_ns();
      for (const util::IpAddr& a : r.addresses) r.seen.push_back(l.stations->of_address(a, now));
      for (const Mac& m : r.macs) r.seen.push_back(l.stations->of_mac(m, now));
      r.ok = true;
      break;
    }
    case LcoreRequest::Kind::set_pins:
      r.ok = l.macs->set_pins(r.pins, now_ns());
      l.lookup_cache_ns = 0;
      l.learn_cache_ns = 0;
      if (!r.ok) r.error = "a bound rank's MAC address found no room in the MAC table (--mac-table-size)";
      if (!l.stations->set_pinned(r.addresses, r.macs, now_ns())) {
        r.ok = false;
        r.error = "a bound rank's address or MAC found no room in the station table (--mac-table-size)";
      }
      break;
    case LcoreRequest::Kind::stall_for_test:  // serve_requests stalls once it has answered
      r.ok = true;
      break;
  }
}

}  // namespace

bool create_request_rings(LcoreState& l, std::string* error) {
  const std::string suffix = std::to_string(l.index);
  const int socket = static_cast<int>(rte_socket_id());
  const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
  l.requests = rte_ring_create(("inagg_req_" + suffix).c_str(), kRingSize, socket, flags);
  l.replies = rte_ring_create(("inagg_rsp_" + suffix).c_str(), kRingSize, socket, flags);
  if (l.requests && l.replies) return true;
  *error = std::string("cannot create the lcore request rings: ") + rte_strerror(rte_errno);
  return false;
}

void free_request_rings(LcoreState& l) {
  rte_ring_free(l.requests);
  rte_ring_free(l.replies);
  l.requests = l.replies = nullptr;
}

void serve_requests(LcoreState& l) {
  void* msg;
  while (rte_ring_dequeue(l.requests, &msg) == 0) {
    const bool stall = static_cast<LcoreRequest*>(msg)->kind == LcoreRequest::Kind::stall_for_test;
    apply(l, *static_cast<LcoreRequest*>(msg));
    // Room is certain: one request in flight per lcore, and the caller takes its answer off.
    rte_ring_enqueue(l.replies, msg);
    // A wedged lcore, for the watchdog's tests: no loop iteration begins until a stop.
    while (stall && !g_force_quit.load(std::memory_order_relaxed))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void call_lcore(LcoreState& l, LcoreRequest& r) {
  if (!l.serving.load(std::memory_order_acquire)) {  // no loop runs on l: nothing else touches its engine
    apply(l, r);
    return;
  }
  void* msg = &r;
  if (rte_ring_enqueue(l.requests, msg) != 0) {  // cannot happen with one caller at a time
    r.ok = false;
    r.error = "lcore " + std::to_string(l.lcore_id) + " is not taking requests (its ring is full)";
    return;
  }
  for (;;) {
    if (rte_ring_dequeue(l.replies, &msg) == 0) return;  // ours: one request in flight
    if (!l.serving.load(std::memory_order_acquire)) {
      // The loop returned (stop requested). Whatever it answered is on the reply ring; what it did
      // not see is still on the request ring, which is ours to take now that it is gone.
      if (rte_ring_dequeue(l.replies, &msg) == 0) return;
      if (rte_ring_dequeue(l.requests, &msg) == 0) apply(l, r);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace inagg::dataplane
