// The appliance as a whole: builds the ports, the lcores' state and the job ownership view, runs
// the loops and the control tick, and prints their figures.
#include "inagg/dataplane/appliance.hpp"

#include <pthread.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf_dyn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "inagg/control/job_file.hpp"
#include "inagg/control/refused_jobs.hpp"
#include "inagg/util/log.hpp"
#include "job_ownership.hpp"
#include "lcore.hpp"
#include "ports.hpp"

namespace inagg::dataplane {
namespace {

constexpr unsigned kHandoverRingSize = 4096;

void mbuf_free(void*, void* h) { rte_pktmbuf_free(static_cast<rte_mbuf*>(h)); }
void mbuf_ref(void*, void* h) { rte_mbuf_refcnt_update(static_cast<rte_mbuf*>(h), 1); }
agg::PacketRef mbuf_alloc(void* ctx, uint16_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(ctx));
  if (m == nullptr) return {};
  char* p = rte_pktmbuf_append(m, len);
  if (p == nullptr) {
    rte_pktmbuf_free(m);
    return {};
  }
  m->port = kNoPort;  // made here: no ingress port to exclude when flooding
  return {m, reinterpret_cast<uint8_t*>(p), len};
}

// The lcores' clock (their now_ns), in which the station table keeps its sightings.
uint64_t now_ns() {
  return static_cast<uint64_t>(static_cast<double>(rte_rdtsc()) * 1e9 / static_cast<double>(rte_get_tsc_hz()));
}

struct LaunchArg {
  const Datapath* dp;
  LcoreState* l;
};
int lcore_main(void* arg) {
  const LaunchArg a = *static_cast<LaunchArg*>(arg);
  delete static_cast<LaunchArg*>(arg);
  run_lcore_loop(*a.dp, *a.l);
  return 0;
}

struct ControlTick {
  void (*fn)(void*);
  void* arg;
  unsigned ms;
  void run() const {
    while (!Appliance::stop_requested()) {
      fn(arg);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }
};
void* control_thread_main(void* arg) {
  static_cast<const ControlTick*>(arg)->run();
  return nullptr;
}

}  // namespace

struct Appliance::Impl {
  ApplianceConfig cfg;
  PortSet ports;  // declared first: destroyed after the lcores have given their buffers back
  std::vector<std::unique_ptr<LcoreState>> lcores;
  Datapath dp;
  JobOwnership jobs;
  bool single = false;
  // Binding ranks (rank_binding.hpp). Taken by control-side threads only, before jobs' mutex.
  struct Waiting {
    control::JobSpec spec;
    agg::JobStart start;
    int placed;  // the lcore index the state directory had it on, or -1
    std::string why;
  };
  std::mutex binding_mutex;
  std::map<uint32_t, Waiting> waiting;         // added, their ranks not all seen yet
  std::map<uint32_t, control::JobSpec> bound;  // added jobs as the engines have them
  struct Added {
    control::JobSpec spec;  // as registered (its digest is what the ranks compare)
    uint64_t bound_ns;      // when its ranks were bound: a claim of one seen later stops it
  };
  std::map<uint32_t, Added> added;
  control::RefusedJobs unbound{std::chrono::seconds(60)};  // waited, then refused: every rank learns why
  std::chrono::steady_clock::time_point next_bind{};
  std::string remember_path;             // the state directory's `bindings`, or ""
  std::vector<BoundStation> remembered;  // what it held at the start: binds the jobs registered again

  BindOutcome bind(const control::JobSpec& spec, agg::JobStart start);
  void save_bound();
  bool add_bound(const control::JobSpec& spec, const control::JobSpec& bound_spec, agg::JobStart start, int placed,
                 std::string* error);
  bool remove_bound(uint32_t id, std::string* error);
  void update_pins();
  void stop_claimed(std::vector<uint32_t>* stopped);
  bool room_to_wait(const control::JobSpec& spec, int placed, std::string* error);
  control::JobStatus waiting_status(uint32_t id, const Waiting& w) const;
};

Appliance::Appliance() : impl_(std::make_unique<Impl>()) {}

Appliance::~Appliance() {
  Impl& I = *impl_;
  for (auto& l : I.lcores) {
    l->engine.reset();  // frees the mbufs its jobs hold
    if (l->capture.is_open() && (l->capture.skipped() || l->capture.errors()))
      util::log(util::LogModule::dataplane, util::LogLevel::warning,
                "capture of lcore %u: %" PRIu64 " packets not written past --capture-max-mb, %" PRIu64 " write errors",
                l->lcore_id, l->capture.skipped(), l->capture.errors());
    l->capture.close();
    free_request_rings(*l);
    if (l->handover) {
      rte_mbuf* m;
      while (rte_ring_dequeue(l->handover, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
      rte_ring_free(l->handover);
    }
  }
  I.lcores.clear();
}

void Appliance::request_stop() { g_force_quit.store(true, std::memory_order_relaxed); }
bool Appliance::stop_requested() { return g_force_quit.load(std::memory_order_relaxed); }
bool Appliance::single_lcore() const { return impl_->single; }
const std::vector<PortInfo>& Appliance::ports() const { return impl_->ports.info(); }

Appliance::MbufUse Appliance::mbuf_use() const {
  MbufUse use{};  // summed over the pools (--mempools)
  for (rte_mempool* pool : impl_->ports.pools()) {
    use.in_use += rte_mempool_in_use_count(pool);
    use.total += pool->size;
  }
  return use;
}

Appliance::FlowRuleCounts Appliance::flow_rules() const {
  const SteeringCounters c = impl_->ports.steering().counters();
  return {c.job_rules, c.job_rules_refused, c.job_rules_contended};
}

bool Appliance::init(const ApplianceConfig& cfg, std::string* error) {
  Impl& I = *impl_;
  I.cfg = cfg;
  if (cfg.burst == 0 || cfg.burst > kMaxBurst) {
    *error = "burst must be between 1 and " + std::to_string(kMaxBurst);
    return false;
  }
  if (!I.ports.select(cfg, error)) return false;

  // Datapath lcores: every worker lcore, or the main lcore alone.
  std::vector<unsigned> lcore_ids;
  unsigned lc;
  RTE_LCORE_FOREACH_WORKER(lc) lcore_ids.push_back(lc);
  I.single = lcore_ids.empty();
  if (I.single) lcore_ids.push_back(rte_get_main_lcore());
  const uint16_t nq = static_cast<uint16_t>(lcore_ids.size());
  if (!I.ports.open(cfg, nq, error)) return false;

  for (uint16_t i = 0; i < nq; ++i) {
    auto l = std::make_unique<LcoreState>();
    l->lcore_id = lcore_ids[i];
    l->index = l->queue = i;
    rte_mempool* pool = I.ports.pool_for_socket(static_cast<int>(rte_lcore_to_socket_id(l->lcore_id)));
    agg::BufferOps ops{pool, mbuf_free, mbuf_ref, mbuf_alloc, l.get(), tx_queue_above};
    l->engine = std::make_unique<agg::Engine>(cfg.engine, ops);
    // A random hash key per start: which addresses collide cannot be worked out offline.
    l->macs = std::make_unique<MacTable>(cfg.mac_table_size, cfg.mac_ageing_ns,
                                         (uint64_t{std::random_device{}()} << 32) | std::random_device{}(),
                                         cfg.mac_limit_per_port);
    // An entry per address and per MAC: twice the MAC table's room, the same port limit.
    l->stations = std::make_unique<StationTable>(2 * cfg.mac_table_size, cfg.mac_ageing_ns,
                                                 (uint64_t{std::random_device{}()} << 32) | std::random_device{}(),
                                                 cfg.mac_limit_per_port ? 2 * cfg.mac_limit_per_port : 0);
    l->handover = rte_ring_create(("inagg_ho_" + std::to_string(i)).c_str(), kHandoverRingSize,
                                  static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
    if (!l->handover) {
      *error = std::string("cannot create lcore rings: ") + rte_strerror(rte_errno);
      return false;
    }
    LcoreState& ref = *l;
    I.lcores.push_back(std::move(l));
    if (!create_request_rings(ref, error)) return false;
    ref.tx.resize(I.ports.ids().size());
    if (!cfg.capture_path.empty()) {
      const std::string path = nq == 1 ? cfg.capture_path : cfg.capture_path + "." + std::to_string(ref.lcore_id);
      if (!ref.capture.open(path, error)) return false;
      ref.capture.set_limit(cfg.capture_max_bytes);
    }
  }
  I.dp.burst = cfg.burst;
  I.dp.tsc_hz = rte_get_tsc_hz();
  I.dp.drain_us = cfg.drain_us;
  I.dp.idle_sleep_us = cfg.idle_sleep_us;
  I.dp.port_ids = I.ports.ids();
  I.dp.index_of_port = I.ports.index_of_port();
  for (auto& l : I.lcores) {
    l->index_of_port = &I.dp.index_of_port;
    l->tx_ring_size = I.ports.tx_ring_sizes();
    I.dp.lcores.push_back(l.get());
  }
  I.jobs.set_lcores(I.dp.lcores);
  I.jobs.set_closed_hold(cfg.engine.closed_hold_ns);
  return true;
}

bool Appliance::run(void (*control_tick)(void*), void* arg, unsigned tick_ms, std::string* error) {
  Impl& I = *impl_;
  if (I.cfg.wait_link_ms) I.ports.wait_for_links(I.cfg.wait_link_ms);
  for (auto& l : I.lcores) l->serving.store(true, std::memory_order_release);
  set_live_capture_lcores(&I.dp.lcores);
  const ControlTick tick{control_tick, arg, tick_ms};
  util::log(util::LogModule::dataplane, util::LogLevel::info, "forwarding on %zu ports with %zu datapath lcore(s), %s",
            I.ports.ids().size(), I.lcores.size(),
            I.cfg.idle_sleep_us
                ? ("lab mode (idle sleeps up to " + std::to_string(I.cfg.idle_sleep_us) + " us)").c_str()
                : "busy-polling");
  if (I.single) {
    pthread_t ctl;
    if (int rc =
            rte_ctrl_thread_create(&ctl, "inagg-ctl", nullptr, control_thread_main, const_cast<ControlTick*>(&tick));
        rc != 0) {
      I.lcores[0]->serving.store(false, std::memory_order_release);
      set_live_capture_lcores(nullptr);
      *error = std::string("cannot start the control thread: ") + std::strerror(rc);
      return false;
    }
    run_lcore_loop(I.dp, *I.lcores[0]);
    pthread_join(ctl, nullptr);
    set_live_capture_lcores(nullptr);
    return true;
  }
  bool ok = true;
  for (auto& l : I.lcores) {
    auto* a = new LaunchArg{&I.dp, l.get()};
    if (int rc = rte_eal_remote_launch(lcore_main, a, l->lcore_id); rc != 0) {
      delete a;
      *error = "cannot launch lcore " + std::to_string(l->lcore_id) + ": " + rte_strerror(-rc);
      request_stop();
      ok = false;
      break;
    }
  }
  if (ok) tick.run();
  rte_eal_mp_wait_lcore();
  for (auto& l : I.lcores) l->serving.store(false, std::memory_order_release);  // those never launched
  set_live_capture_lcores(nullptr);
  return ok;
}

// Binds the job's ranks (rank_binding.hpp), then adds it, or keeps it waiting until they are seen.
bool Appliance::add_job(const control::JobSpec& spec, std::string* error, agg::JobStart start,
                        std::optional<unsigned> lcore) {
  Impl& I = *impl_;
  int owner_index = -1;
  if (lcore) {
    std::string have;
    for (size_t i = 0; i < I.lcores.size(); ++i) {
      if (I.lcores[i]->lcore_id == *lcore) owner_index = static_cast<int>(i);
      have += (have.empty() ? "" : ", ") + std::to_string(I.lcores[i]->lcore_id);
    }
    if (owner_index < 0) {
      *error = "job " + std::to_string(spec.id) + " was on lcore " + std::to_string(*lcore) +
               ", which is not a datapath lcore of this appliance (" + have + "; EAL's -l)";
      return false;
    }
  }
  const std::vector<uint16_t>& ids = I.dp.port_ids;
  for (const control::ConnectionSpec& c : spec.conns)
    if (c.port != control::kAnyPort && std::find(ids.begin(), ids.end(), c.port) == ids.end()) {
      std::string have;
      for (uint16_t p : ids) have += (have.empty() ? "" : ", ") + std::to_string(p);
      *error = "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + " names port " +
               std::to_string(c.port) + ", which is not one of this appliance's ports (" + have +
               "); name one of them or leave the port out";
      return false;
    }
  std::lock_guard<std::mutex> lock(I.binding_mutex);
  if (I.waiting.count(spec.id)) {
    *error = "job " + std::to_string(spec.id) +
             " already exists (waiting for its ranks to be seen: " + I.waiting[spec.id].why + ")";
    return false;
  }
  const BindOutcome b = I.bind(spec, start);
  switch (b.kind) {
    case BindOutcome::Kind::refused:
      *error = b.why;
      return false;
    case BindOutcome::Kind::waiting: {
      // An existing id: a failed job is replaced, as the engine replaces one when a job binds at
      // once; a live one stays.
      control::JobStatus old;
      const bool exists = I.jobs.owner_of(spec.id) >= 0,
                 failed = exists && I.jobs.describe(spec.id, &old) && old.state == control::JobStatus::State::failed;
      if (exists && !failed) {
        *error = "job " + std::to_string(spec.id) + " already exists; remove it first (inagg-ctl remove " +
                 std::to_string(spec.id) + ") or give this job another id";
        return false;
      }
      if (!I.jobs.check(spec, error)) return false;
      // Its lcore is chosen now, so that the state directory can keep it, and its room there is
      // reserved from now on: a waiting job counts against the lcore's budgets as a bound one.
      if (failed && !I.remove_bound(spec.id, error)) return false;
      if (owner_index < 0) owner_index = I.jobs.least_loaded();
      if (!I.room_to_wait(spec, owner_index, error)) return false;
      if (failed)
        util::log(util::LogModule::control, util::LogLevel::info,
                  "job %u: the failed job of this id was removed; its new registration waits for its ranks (%s)",
                  spec.id, old.error.c_str());
      // Nothing of it is forwarded raw meanwhile: every lcore drops its packets until it is bound.
      I.jobs.hold(spec);
      I.waiting[spec.id] = {spec, start, owner_index, b.why};
      I.unbound.forget(spec.id);
      util::log(util::LogModule::control, util::LogLevel::info, "job %u waits for its ranks to be seen: %s", spec.id,
                b.why.c_str());
      return true;
    }
    case BindOutcome::Kind::bound:
      break;
  }
  // The engine checks its own budgets; the room the waiting jobs hold is checked here.
  if (!I.waiting.empty() && I.jobs.owner_of(spec.id) < 0) {
    if (owner_index < 0) owner_index = I.jobs.least_loaded();
    if (!I.room_to_wait(spec, owner_index, error)) return false;
  }
  if (!I.add_bound(spec, b.spec, start, owner_index, error)) return false;
  I.unbound.forget(spec.id);
  return true;
}

// How long a rank's address must have been seen before it is bound where it was seen: two
// announcements of a registering rank (ControlClient::register_job), so that a forger's claim made
// just before the rank's own shows as a second port, not as the first.
constexpr uint64_t kSettleNs = 250'000'000;

BindOutcome Appliance::Impl::bind(const control::JobSpec& spec, agg::JobStart start) {
  std::vector<util::IpAddr> addrs;
  for (const control::ConnectionSpec& c : spec.conns) addrs.push_back(c.src_ip);
  const std::vector<std::vector<StationTable::Sighting>> at = jobs.stations(addrs, {});
  Sightings seen;
  seen.of_address = [&](const util::IpAddr& a) {
    const size_t i = std::find(addrs.begin(), addrs.end(), a) - addrs.begin();
    return i < at.size() ? at[i] : std::vector<StationTable::Sighting>{};
  };
  seen.of_mac = [&](const Mac& m) { return jobs.stations({}, {m}).at(0); };
  seen.now_ns = now_ns();
  seen.settle_ns = kSettleNs;
  // The operator's first (the first match wins), then, for a job registered again after a restart,
  // where its ranks were bound before it.
  std::vector<BoundStation> table = cfg.bindings;
  if (start == agg::JobStart::resume) table.insert(table.end(), remembered.begin(), remembered.end());
  BindOutcome b = bind_ranks(spec, table, seen);
  if (b.kind != BindOutcome::Kind::bound) return b;
  // A bound address or MAC stays where its job put it: another job may not place it elsewhere.
  for (const control::ConnectionSpec& c : b.spec.conns)
    for (const auto& [id, other] : bound) {
      if (id == spec.id) continue;
      for (const control::ConnectionSpec& o : other.conns) {
        const bool same_addr = o.src_ip == c.src_ip, same_mac = c.has_mac() && o.has_mac() && o.mac == c.mac;
        if ((same_addr || same_mac) && o.port != c.port) {
          b.kind = BindOutcome::Kind::refused;
          b.why = "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + "'s " +
                  (same_addr ? "address " + util::ip_text(c.src_ip) : "MAC " + mac_text(c.mac)) +
                  " is bound to another port by a job already added; the job is not added";
          return b;
        }
      }
    }
  return b;
}

// The job's rte_flow rules (flow.hpp): both directions of each connection to the job's owner, as the
// lcores' routes send them (Engine::route_job, lcore_requests.cpp), so that none of its packets
// crosses cores. They are an optimisation: until they are in place, and where a PMD refuses them,
// the lcores hand the job's packets on.
bool Appliance::Impl::add_bound(const control::JobSpec& spec, const control::JobSpec& bound_spec, agg::JobStart start,
                                int placed, std::string* error) {
  if (!jobs.add(spec, error, start, placed, &bound_spec)) {
    if (jobs.owner_of(spec.id) < 0 && bound.erase(spec.id)) {  // a failed job it replaced went too
      added.erase(spec.id);
      update_pins();
    }
    return false;
  }
  bound[spec.id] = bound_spec;
  added[spec.id] = {spec, now_ns()};
  update_pins();
  // A job of channels has no address-pair rules: its channels share their ranks' address pairs but
  // not their lcores; RSS by UDP source port spreads them, and what lands elsewhere is handed on.
  if (const int owner = jobs.owner_of(spec.id); owner >= 0 && lcores.size() > 1 && spec.channels == 1)
    ports.steering().steer_job(spec.id, job_pairs(spec.conns, static_cast<uint16_t>(owner)));
  return true;
}

int Appliance::job_lcore(uint32_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->binding_mutex);
    if (auto it = impl_->waiting.find(id); it != impl_->waiting.end() && it->second.placed >= 0)
      return static_cast<int>(impl_->lcores[static_cast<size_t>(it->second.placed)]->lcore_id);
  }
  const int owner = impl_->jobs.owner_of(id);
  return owner < 0 ? -1 : static_cast<int>(impl_->lcores[static_cast<size_t>(owner)]->lcore_id);
}

// Every bound rank's MAC stays on its port in every lcore's MAC table while a job binds it: its
// sums and everything else for it leave by that port, whatever frames claim its address.
// Its address and MAC keep their entries in every lcore's station table, so that a claim of either
// is noted whatever floods came before (stop_claimed).
void Appliance::Impl::update_pins() {
  std::vector<std::pair<Mac, uint16_t>> pins;
  std::vector<util::IpAddr> addresses;
  for (const auto& [id, s] : bound)
    for (const control::ConnectionSpec& c : s.conns) {
      if (c.has_mac() && c.port != control::kAnyPort &&
          std::none_of(pins.begin(), pins.end(), [&](const auto& p) { return p.first == c.mac; }))
        pins.push_back({c.mac, c.port});
      if (c.port != control::kAnyPort && std::find(addresses.begin(), addresses.end(), c.src_ip) == addresses.end())
        addresses.push_back(c.src_ip);
    }
  std::string err;
  if (!jobs.set_pins(pins, addresses, &err))
    util::log(util::LogModule::dataplane, util::LogLevel::error, "%s", err.c_str());
  save_bound();
}

// The bound ranks of every job, and those a waiting job registered again still expects, for the
// next start.
void Appliance::Impl::save_bound() {
  if (remember_path.empty()) return;
  std::vector<BoundStation> all;
  const auto keep = [&](const BoundStation& b) {
    if (std::none_of(all.begin(), all.end(), [&](const BoundStation& o) { return o.address == b.address; }))
      all.push_back(b);
  };
  for (const auto& [id, s] : bound)
    for (const control::ConnectionSpec& c : s.conns)
      if (c.port != control::kAnyPort) keep({c.src_ip, c.port, c.has_mac() ? std::optional<Mac>(c.mac) : std::nullopt});
  for (const auto& [id, w] : waiting)
    if (w.start == agg::JobStart::resume)
      for (const control::ConnectionSpec& c : w.spec.conns)
        for (const BoundStation& b : remembered)
          if (b.address == c.src_ip) keep(b);
  std::string err;
  if (!save_bindings(remember_path, all, &err))
    util::log(util::LogModule::control, util::LogLevel::error,
              "%s: after a restart, its jobs' ranks are bound again as they are seen", err.c_str());
}

// Whether the lcores a job placed on lcore index `placed` would take (its channels', as
// JobOwnership::add places them) have room for it beside their engines' jobs and the other waiting
// jobs placed there, by the engine's own budgets (jobs, slot memory, mbufs): a waiting job holds
// its room from its registration, so that no one can park more jobs than the appliance would run.
bool Appliance::Impl::room_to_wait(const control::JobSpec& spec, int placed, std::string* error) {
  std::vector<JobOwnership::LcoreUse> use = jobs.use();
  const auto reserve = [&](const control::JobSpec& s, int at) {
    for (unsigned c = 0; c < s.channels; ++c) {
      JobOwnership::LcoreUse& u = use[JobOwnership::channel_lcore(static_cast<uint16_t>(at), c, use.size())];
      const agg::Engine::Footprint f = agg::Engine::footprint(control::channel_spec(s, c));
      ++u.jobs;
      u.memory_bytes += f.memory_bytes;
      u.mbufs += f.mbufs;
    }
  };
  for (const auto& [id, w] : waiting)
    if (id != spec.id && w.placed >= 0) reserve(w.spec, w.placed);
  const std::vector<JobOwnership::LcoreUse> before = use;
  reserve(spec, placed);
  const agg::EngineConfig& e = cfg.engine;
  for (size_t i = 0; i < use.size(); ++i) {
    // The engine's own words (engine_admission.cpp), with the lcore and the waiting jobs named.
    const std::string job = "job " + std::to_string(spec.id) + ": ";
    const std::string where =
        " on lcore " + std::to_string(lcores[i]->lcore_id) + " (counting the jobs waiting there for their ranks)";
    if (use[i].jobs > e.max_jobs) {
      *error = job + "the engine already has its maximum of " + std::to_string(e.max_jobs) + " jobs" + where +
               "; remove a job, or raise --max-jobs";
      return false;
    }
    if (use[i].memory_bytes > e.memory_budget_bytes) {
      *error = job + "needs " + std::to_string((use[i].memory_bytes - before[i].memory_bytes) >> 10) +
               " KiB of slot memory but only " +
               std::to_string((e.memory_budget_bytes - std::min(before[i].memory_bytes, e.memory_budget_bytes)) >> 10) +
               " KiB of the budget is free" + where + "; lower window or message_bytes, or raise the memory budget";
      return false;
    }
    if (use[i].mbufs > e.mbuf_budget) {
      *error = job + "needs up to " + std::to_string(use[i].mbufs - before[i].mbufs) +
               " held packet buffers (2 x window x packets per message x workers) but only " +
               std::to_string(e.mbuf_budget - std::min(before[i].mbufs, e.mbuf_budget)) +
               " of the mbuf budget are free" + where;
      return false;
    }
  }
  return true;
}

control::JobStatus Appliance::Impl::waiting_status(uint32_t id, const Waiting& w) const {
  control::JobStatus s;
  s.id = id;
  s.state = control::JobStatus::State::binding;
  s.error = w.why;
  s.dtype = w.spec.dtype;
  s.workers = w.spec.workers;
  // What it holds room for (room_to_wait), as a bound job's figures: a tenant's budget counts it.
  const agg::Engine::Footprint f = agg::Engine::footprint(w.spec);
  s.memory_bytes = f.memory_bytes;
  s.mbuf_quota = f.mbufs;
  s.spec_digest = control::job_digest(w.spec);
  return s;
}

bool Appliance::remember_bindings(const std::string& path, std::string* error) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.binding_mutex);
  if (I.remembered.empty() && ::access(path.c_str(), F_OK) == 0 && !load_bindings(path, &I.remembered, error))
    return false;
  const size_t slash = path.rfind('/');
  if (::access(slash == std::string::npos ? "." : path.substr(0, slash).c_str(), W_OK) != 0) return true;
  I.remember_path = path;  // the directory is there: what the jobs bind is kept from the next change on
  return true;
}

std::vector<uint32_t> Appliance::check_bindings() {
  Impl& I = *impl_;
  std::vector<uint32_t> refused;
  std::lock_guard<std::mutex> lock(I.binding_mutex);
  if (I.waiting.empty() && I.added.empty()) return refused;
  const auto now = std::chrono::steady_clock::now();
  if (now < I.next_bind) return refused;
  I.next_bind = now + std::chrono::milliseconds(20);
  for (auto it = I.waiting.begin(); it != I.waiting.end();) {
    const Impl::Waiting& w = it->second;
    BindOutcome b = I.bind(w.spec, w.start);
    std::string err;
    if (b.kind == BindOutcome::Kind::waiting) {
      it->second.why = b.why;
      ++it;
      continue;
    }
    if (b.kind == BindOutcome::Kind::bound && I.add_bound(w.spec, b.spec, w.start, w.placed, &err)) {
      util::log(util::LogModule::control, util::LogLevel::info, "job %u: its ranks are bound, it is active", it->first);
    } else {
      if (b.kind == BindOutcome::Kind::refused) err = b.why;
      I.jobs.release(w.spec);
      I.unbound.record(w.spec, err);
      refused.push_back(it->first);
      util::log(util::LogModule::control, util::LogLevel::warning, "job %u refused: %s", it->first, err.c_str());
    }
    it = I.waiting.erase(it);
  }
  I.stop_claimed(&refused);
  return refused;
}

// The added jobs a rank of which another host claimed since the job was bound: each stops
// (removed, its connections held closed for the closed hold, so that its ranks' packets are
// dropped and every rank stops on its RC budget), listed as refused with the reason for a while.
void Appliance::Impl::stop_claimed(std::vector<uint32_t>* stopped) {
  if (added.empty()) return;
  std::vector<util::IpAddr> addrs;
  std::vector<Mac> macs;
  for (const auto& [id, s] : bound)
    for (const control::ConnectionSpec& c : s.conns) {
      if (std::find(addrs.begin(), addrs.end(), c.src_ip) == addrs.end()) addrs.push_back(c.src_ip);
      if (c.has_mac() && std::find(macs.begin(), macs.end(), c.mac) == macs.end()) macs.push_back(c.mac);
    }
  const std::vector<std::vector<StationTable::Sighting>> at = jobs.stations(addrs, macs);
  Sightings seen;
  seen.of_address = [&](const util::IpAddr& a) {
    const size_t i = std::find(addrs.begin(), addrs.end(), a) - addrs.begin();
    return i < addrs.size() && i < at.size() ? at[i] : std::vector<StationTable::Sighting>{};
  };
  seen.of_mac = [&](const Mac& m) {
    const size_t i = addrs.size() + (std::find(macs.begin(), macs.end(), m) - macs.begin());
    return i < addrs.size() + macs.size() && i < at.size() ? at[i] : std::vector<StationTable::Sighting>{};
  };
  seen.now_ns = now_ns();
  std::vector<std::pair<uint32_t, std::string>> claimed;
  for (const auto& [id, a] : added)
    if (const auto b = bound.find(id); b != bound.end())
      if (std::string why = claimed_since(b->second, seen, a.bound_ns); !why.empty()) claimed.push_back({id, why});
  for (const auto& [id, why] : claimed) {
    const control::JobSpec spec = added.at(id).spec;
    std::string err;
    if (!remove_bound(id, &err)) {
      util::log(util::LogModule::control, util::LogLevel::error, "job %u: %s; but it cannot be removed: %s", id,
                why.c_str(), err.c_str());
      continue;
    }
    unbound.record(spec, why);
    stopped->push_back(id);
    util::log(util::LogModule::control, util::LogLevel::warning, "job %u stopped: %s", id, why.c_str());
  }
}

bool Appliance::remove_job(uint32_t id, std::string* error) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.binding_mutex);
  if (auto it = I.waiting.find(id); it != I.waiting.end()) {
    I.jobs.release(it->second.spec);
    I.waiting.erase(it);
    return true;
  }
  return I.remove_bound(id, error);
}

bool Appliance::Impl::remove_bound(uint32_t id, std::string* error) {
  if (!jobs.remove(id, error)) return false;
  bound.erase(id);
  added.erase(id);
  update_pins();
  ports.steering().unsteer_job(id);
  return true;
}
std::vector<control::JobStatus> Appliance::describe_jobs() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.binding_mutex);  // before the jobs' (the order everywhere)
  std::vector<control::JobStatus> all = I.jobs.describe_all();
  for (const auto& [id, w] : I.waiting) all.push_back(I.waiting_status(id, w));
  I.unbound.add_to(&all);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return all;
}

bool Appliance::describe_job(uint32_t id, control::JobStatus* out) {
  Impl& I = *impl_;
  {
    std::lock_guard<std::mutex> lock(I.binding_mutex);
    if (auto it = I.waiting.find(id); it != I.waiting.end()) {
      *out = I.waiting_status(id, it->second);
      return true;
    }
  }
  return I.jobs.describe(id, out);
}
agg::EngineCounters Appliance::engine_totals() { return impl_->jobs.totals(); }

std::vector<std::pair<unsigned, LcoreCounters>> Appliance::lcore_counters() const {
  std::vector<std::pair<unsigned, LcoreCounters>> v;
  for (auto& l : impl_->lcores) v.push_back({l->lcore_id, l->c});
  return v;
}

std::vector<std::pair<unsigned, uint64_t>> Appliance::lcore_loops() const {
  std::vector<std::pair<unsigned, uint64_t>> v;
  for (auto& l : impl_->lcores) v.push_back({l->lcore_id, l->loops.load(std::memory_order_acquire)});
  return v;
}

void Appliance::set_bindings(std::vector<BoundStation> table) {
  std::lock_guard<std::mutex> lock(impl_->binding_mutex);  // bind() reads it under this mutex
  impl_->cfg.bindings = std::move(table);
}

bool Appliance::stall_lcore_for_test(unsigned lcore, std::string* error) {
  for (auto& l : impl_->lcores)
    if (l->lcore_id == lcore) {
      LcoreRequest r(LcoreRequest::Kind::stall_for_test);
      call_lcore(*l, r);
      return true;
    }
  *error = "lcore " + std::to_string(lcore) + " is not a datapath lcore";
  return false;
}

uint64_t Appliance::total_rx() const {
  uint64_t n = 0;
  for (auto& l : impl_->lcores) n += l->c.rx;
  return n;
}

std::string Appliance::stats_text() {
  std::string s = impl_->ports.stats_text();
  char buf[64];
  for (auto& [lc, c] : lcore_counters()) {
    const double busy = c.busy_cycles + c.idle_cycles ? 100.0 * c.busy_cycles / (c.busy_cycles + c.idle_cycles) : 0;
    std::snprintf(buf, sizeof buf, "lcore %u: busy %.1f%%", lc, busy);
    s += buf;
#define X(name, text) s += " " #name " " + std::to_string(c.name);
    INAGG_LCORE_COUNTERS(X)
#undef X
    s += "\n";
  }
  // The engine's counters over all jobs and none (a malformed packet no job can be named for counts
  // here only); the non-zero ones, like a job's line.
  s += "engine:";
  agg::for_each_counter(engine_totals(), [&](std::string_view name, std::string_view, uint64_t v) {
    if (v != 0) s += " " + std::string(name) + " " + std::to_string(v);
  });
  s += "\n";
  for (const control::JobStatus& j : describe_jobs()) s += control::format_job_summary(j);
  return s;
}

}  // namespace inagg::dataplane
