#include "inagg/dataplane/appliance.hpp"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "inagg/dataplane/bridge.hpp"
#include "inagg/dataplane/flow.hpp"
#include "inagg/util/pcap.hpp"
#include "inagg/wire/headers.hpp"

namespace inagg::dataplane {
namespace {

std::atomic<bool> g_force_quit{false};

constexpr uint16_t kMaxBurst = 64;
constexpr unsigned kCommandRingSize = 64;
constexpr unsigned kHandoverRingSize = 4096;

// A control request to one lcore. The control thread enqueues it and waits for `done`.
struct Command {
  enum class Kind : uint8_t { add_job, remove_job, hold_closed, release_closed, set_owner, clear_owner, job_info, list_jobs, totals };
  explicit Command(Kind k) : kind(k) {}
  Kind kind;
  agg::JobSpec spec;
  uint32_t id = 0;
  uint16_t owner = 0;
  bool ok = false;
  std::string error;
  std::vector<agg::JobInfo> infos;
  agg::EngineCounters counters;
  std::atomic<bool> done{false};
};

// (address, QPN) of both directions of every job -> the lcore index that owns it. Each lcore has
// its own copy, updated by commands: nothing shared on the fast path.
struct OwnerKey {
  std::array<uint8_t, 16> addr{};
  uint32_t qpn = 0;
  bool operator==(const OwnerKey&) const = default;
};
struct OwnerKeyHash {
  size_t operator()(const OwnerKey& k) const {
    uint64_t a, b;
    std::memcpy(&a, k.addr.data(), 8);
    std::memcpy(&b, k.addr.data() + 8, 8);
    uint64_t h = (a * 0x9e3779b97f4a7c15ull) ^ (b + 0x632be59bd9b4e019ull) ^ (uint64_t{k.qpn} << 7);
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

OwnerKey key_of(const wire::IpAddr& ip, uint32_t qpn) {
  OwnerKey k;
  std::memcpy(k.addr.data(), ip.bytes.data(), ip.version == wire::IpVersion::v4 ? 4 : 16);
  k.qpn = qpn;
  return k;
}

struct TxBuffer {
  uint16_t n = 0;
  rte_mbuf* pkts[kMaxBurst];
};

}  // namespace

// One per datapath lcore, cache-aligned, touched only by that lcore (but the counters: see header).
struct alignas(64) LcoreState {
  unsigned lcore_id = 0;
  uint16_t index = 0;   // among datapath lcores; also its RX/TX queue id on every port
  uint16_t queue = 0;
  std::unique_ptr<agg::Engine> engine;
  std::unique_ptr<MacTable> macs;
  // One-entry caches in front of the MAC table (valid for 1 ms; invalidated by any learning).
  uint64_t learn_cache_mac = ~0ull, learn_cache_ns = 0;
  uint16_t learn_cache_port = 0xffff;
  uint64_t lookup_cache_mac = ~0ull, lookup_cache_ns = 0;
  uint16_t lookup_cache_port = 0xffff, lookup_cache_out = kFlood;
  std::unordered_map<OwnerKey, uint16_t, OwnerKeyHash> owners;
  rte_ring* commands = nullptr;  // MP/SC: the control thread (and telemetry) -> this lcore
  rte_ring* handover = nullptr;  // MP/SC: other lcores -> this lcore
  std::vector<TxBuffer> tx;      // per port index
  agg::TxList engine_tx{4096};
  util::PcapWriter capture;
  LcoreCounters c;
  // For the engine's ECN threshold (tx_queue_above): DPDK port id -> port index, TX ring sizes.
  const std::vector<int>* index_of_port = nullptr;
  std::vector<uint16_t> tx_ring_size;  // per port index
};

struct Appliance::Impl {
  ApplianceConfig cfg;
  rte_mempool* pool = nullptr;
  std::vector<PortInfo> ports;
  std::vector<uint16_t> port_ids;             // port index -> DPDK port id
  std::vector<int> index_of_port;             // DPDK port id -> port index (-1)
  std::vector<SteeringResult> steering;
  std::vector<uint16_t> tx_ring_size;          // port index -> TX descriptors per queue
  std::vector<std::unique_ptr<LcoreState>> lcores;
  std::mutex control_mutex;
  std::unordered_map<uint32_t, uint16_t> job_owner;  // control thread's view: job -> lcore index
  std::unordered_map<uint32_t, agg::JobSpec> job_specs;
  uint64_t tsc_hz = 0;
  bool started = false, single = false;
  void (*tick)(void*) = nullptr;
  void* tick_arg = nullptr;

  bool run_command(LcoreState& l, Command& cmd, std::string* error);
  void apply_command(LcoreState& l, Command& cmd);
  void loop(LcoreState& l);
  void handle_packet(LcoreState& l, rte_mbuf* m, uint64_t now_ns, bool from_handover);
  void route_engine_output(LcoreState& l, uint64_t now_ns);
  void send(LcoreState& l, rte_mbuf* m, uint64_t now_ns);
  void enqueue_tx(LcoreState& l, unsigned port_index, rte_mbuf* m);
  void flush_tx(LcoreState& l);
  void send_burst(LcoreState& l, unsigned port_index);
};

namespace {

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

// Whether this lcore's TX queue towards DPDK port `port` holds at least `threshold` packets: those
// waiting in its TX buffer, plus, where the PMD reports descriptor status, those still in the NIC's
// TX ring (the descriptor `threshold` places before the ring's tail is not done yet). Virtual
// devices report no descriptor status: there only the TX buffer counts.
bool tx_queue_above(void* ctx, uint16_t port, uint32_t threshold);

// A cheap pre-filter so plain frames go straight to the bridge (wire::is_roce_candidate: UDP to
// 4791 after any VLAN tags, or IPv6 with extension headers). The engine parses fully.
bool looks_like_roce(const uint8_t* f, uint32_t len) { return wire::is_roce_candidate({f, len}); }

// The owner key of a RoCEv2 packet: its destination address and QPN, also for one the engine will
// not place (IPv6 extension headers, malformed past the BTH, an IPv4-mapped IPv6 destination): the
// owning lcore's engine must see it to drop and count it.
bool owner_key_of(const uint8_t* f, uint32_t len, OwnerKey* k) {
  wire::Layout l;
  wire::parse_frame({f, len}, l);
  wire::RoceDestination d;
  if (!wire::roce_destination(f, l, &d)) return false;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (d.ip == wire::IpVersion::v4)
    std::memcpy(k->addr.data(), d.addr, 4);
  else if (std::memcmp(d.addr, kMapped, 12) == 0)
    std::memcpy(k->addr.data(), d.addr + 12, 4);  // the IPv4 key an IPv4-mapped address names
  else
    std::memcpy(k->addr.data(), d.addr, 16);
  k->qpn = d.qpn;
  return true;
}

int lcore_main(void* arg);

}  // namespace

Appliance::Appliance() : impl_(std::make_unique<Impl>()) {}

Appliance::~Appliance() {
  stop();
  Impl& I = *impl_;
  for (auto& l : I.lcores) {
    l->engine.reset();  // frees the mbufs its jobs hold
    l->capture.close();
    if (l->commands) rte_ring_free(l->commands);
    if (l->handover) {
      rte_mbuf* m;
      while (rte_ring_dequeue(l->handover, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
      rte_ring_free(l->handover);
    }
  }
  I.lcores.clear();
  // init() may have failed part way: only ports it configured have steering state.
  for (size_t i = 0; i < I.port_ids.size(); ++i) {
    if (i < I.steering.size()) remove_roce_steering(I.port_ids[i], I.steering[i]);
    rte_eth_dev_stop(I.port_ids[i]);
    rte_eth_dev_close(I.port_ids[i]);  // net_pcap completes its output file here
  }
  if (I.pool) rte_mempool_free(I.pool);
}

void Appliance::request_stop() { g_force_quit.store(true, std::memory_order_relaxed); }
bool Appliance::stop_requested() { return g_force_quit.load(std::memory_order_relaxed); }
bool Appliance::single_lcore() const { return impl_->single; }
void Appliance::set_tick(void (*tick)(void*), void* arg) {
  impl_->tick = tick;
  impl_->tick_arg = arg;
}
const std::vector<PortInfo>& Appliance::ports() const { return impl_->ports; }

bool Appliance::init(const ApplianceConfig& cfg, std::string* error) {
  Impl& I = *impl_;
  I.cfg = cfg;
  I.tsc_hz = rte_get_tsc_hz();
  if (cfg.burst == 0 || cfg.burst > kMaxBurst) {
    *error = "burst must be between 1 and " + std::to_string(kMaxBurst);
    return false;
  }

  // Ports.
  std::vector<uint16_t> ids = cfg.ports;
  if (ids.empty()) {
    uint16_t p;
    RTE_ETH_FOREACH_DEV(p) ids.push_back(p);
  }
  if (ids.empty()) {
    *error = "no DPDK ports: bind NICs to a DPDK driver or pass --vdev=... EAL arguments (e.g. --vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap)";
    return false;
  }
  I.index_of_port.assign(RTE_MAX_ETHPORTS, -1);
  for (uint16_t p : ids) {
    if (!rte_eth_dev_is_valid_port(p)) {
      *error = "port " + std::to_string(p) + " does not exist (EAL found " + std::to_string(rte_eth_dev_count_avail()) + " ports)";
      return false;
    }
    I.index_of_port[p] = static_cast<int>(I.port_ids.size());
    I.port_ids.push_back(p);
  }

  // Datapath lcores: every worker lcore, or the main lcore alone.
  std::vector<unsigned> lcore_ids;
  unsigned lc;
  RTE_LCORE_FOREACH_WORKER(lc) lcore_ids.push_back(lc);
  I.single = lcore_ids.empty();
  if (I.single) lcore_ids.push_back(rte_get_main_lcore());
  const uint16_t nq = static_cast<uint16_t>(lcore_ids.size());

  // The pool: buffers big enough for an MTU-sized frame in one segment (the engine needs
  // contiguous packets; chained ones are linearised when they fit).
  const uint32_t frame = cfg.mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN + 4 /* VLAN */;
  const uint32_t data_room = std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, frame + RTE_PKTMBUF_HEADROOM);
  if (data_room > UINT16_MAX) {
    *error = "mtu " + std::to_string(cfg.mtu) + " is too large for an mbuf segment; use at most 9600";
    return false;
  }
  I.pool = rte_pktmbuf_pool_create("inagg_pool", cfg.mbufs, std::min<uint32_t>(cfg.mbuf_cache, RTE_MEMPOOL_CACHE_MAX_SIZE),
                                   0, static_cast<uint16_t>(data_room), static_cast<int>(rte_socket_id()));
  if (I.pool == nullptr) {
    *error = "cannot create a pool of " + std::to_string(cfg.mbufs) + " mbufs of " + std::to_string(data_room) +
             " bytes (" + std::to_string(uint64_t{cfg.mbufs} * data_room >> 20) + " MiB): " + rte_strerror(rte_errno) +
             ". Reserve more hugepages, give EAL more memory (-m / --socket-mem), or lower --mbufs or --mtu";
    return false;
  }
  if (cfg.engine.mbuf_budget * nq >= cfg.mbufs) {
    *error = "the engines' mbuf budget (" + std::to_string(cfg.engine.mbuf_budget) + " x " + std::to_string(nq) +
             " lcores) must leave buffers for forwarding in a pool of " + std::to_string(cfg.mbufs) +
             "; raise --mbufs or lower --mbuf-budget";
    return false;
  }

  for (uint16_t p : I.port_ids) {
    rte_eth_dev_info info{};
    if (int rc = rte_eth_dev_info_get(p, &info); rc != 0) {
      *error = "port " + std::to_string(p) + ": cannot read device info: " + rte_strerror(-rc);
      return false;
    }
    if (nq > info.max_rx_queues || nq > info.max_tx_queues) {
      *error = "port " + std::to_string(p) + " (" + info.driver_name + ") has " + std::to_string(info.max_rx_queues) +
               " RX / " + std::to_string(info.max_tx_queues) + " TX queues but " + std::to_string(nq) +
               " datapath lcores need one each; use fewer lcores (-l) or configure more queues on the device";
      return false;
    }
    rte_eth_conf conf{};
    uint32_t mtu = cfg.mtu;
    if (info.max_mtu && mtu > info.max_mtu) mtu = info.max_mtu;
    conf.rxmode.mtu = mtu;
    if (nq > 1 && info.flow_type_rss_offloads) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
    }
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    if (int rc = rte_eth_dev_configure(p, nq, nq, &conf); rc != 0) {
      // Some virtual devices refuse an MTU: retry with the default and say so.
      conf.rxmode.mtu = 0;
      if (int rc2 = rte_eth_dev_configure(p, nq, nq, &conf); rc2 != 0) {
        *error = "port " + std::to_string(p) + ": configure failed: " + rte_strerror(-rc);
        return false;
      }
      std::fprintf(stderr, "inagg: port %u: MTU %u refused (%s); using the device default\n", p, mtu, rte_strerror(-rc));
    }
    uint16_t rxd = cfg.rx_desc, txd = cfg.tx_desc;
    rte_eth_dev_adjust_nb_rx_tx_desc(p, &rxd, &txd);
    I.tx_ring_size.push_back(txd);
    for (uint16_t q = 0; q < nq; ++q) {
      if (int rc = rte_eth_rx_queue_setup(p, q, rxd, rte_eth_dev_socket_id(p), nullptr, I.pool); rc != 0) {
        *error = "port " + std::to_string(p) + ": RX queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc);
        return false;
      }
      if (int rc = rte_eth_tx_queue_setup(p, q, txd, rte_eth_dev_socket_id(p), nullptr); rc != 0) {
        *error = "port " + std::to_string(p) + ": TX queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc);
        return false;
      }
    }
    if (int rc = rte_eth_dev_start(p); rc != 0) {
      *error = "port " + std::to_string(p) + ": start failed: " + rte_strerror(-rc);
      return false;
    }
    rte_eth_promiscuous_enable(p);  // a switch port sees every frame
    uint16_t actual_mtu = 0;
    rte_eth_dev_get_mtu(p, &actual_mtu);
    PortInfo pi{p, info.driver_name ? info.driver_name : "?", false, "", actual_mtu};
    SteeringResult sr;
    if (cfg.flow_steering) {
      sr = install_roce_steering(p, 0);
      if (sr.mode == SteeringMode::software)
        std::fprintf(stderr, "inagg: port %u (%s): rte_flow steering of UDP 4791 unavailable (%s); classifying in software\n", p,
                     pi.name.c_str(), sr.reason.c_str());
    } else {
      sr.reason = "disabled by --no-flow";
    }
    pi.flow_hardware = sr.mode == SteeringMode::hardware;
    pi.flow_reason = sr.reason;
    I.steering.push_back(sr);
    I.ports.push_back(pi);
  }

  // Lcore state.
  for (uint16_t i = 0; i < nq; ++i) {
    auto l = std::make_unique<LcoreState>();
    l->lcore_id = lcore_ids[i];
    l->index = l->queue = i;
    agg::BufferOps ops{I.pool, mbuf_free, mbuf_ref, mbuf_alloc, l.get(), tx_queue_above};
    l->index_of_port = &I.index_of_port;
    l->tx_ring_size = I.tx_ring_size;
    l->engine = std::make_unique<agg::Engine>(cfg.engine, ops);
    l->macs = std::make_unique<MacTable>(cfg.mac_table_size, cfg.mac_ageing_ns);
    const std::string cname = "inagg_cmd_" + std::to_string(i), hname = "inagg_ho_" + std::to_string(i);
    l->commands = rte_ring_create(cname.c_str(), kCommandRingSize, static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
    l->handover = rte_ring_create(hname.c_str(), kHandoverRingSize, static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
    if (!l->commands || !l->handover) {
      *error = std::string("cannot create lcore rings: ") + rte_strerror(rte_errno);
      return false;
    }
    l->tx.resize(I.port_ids.size());
    if (!cfg.capture_path.empty()) {
      const std::string path = nq == 1 ? cfg.capture_path : cfg.capture_path + "." + std::to_string(l->lcore_id);
      if (!l->capture.open(path, error)) return false;
    }
    I.lcores.push_back(std::move(l));
  }
  return true;
}

namespace {
int lcore_main(void* arg) {
  auto* pair = static_cast<std::pair<Appliance::Impl*, LcoreState*>*>(arg);
  pair->first->loop(*pair->second);
  delete pair;
  return 0;
}
}  // namespace

bool Appliance::start(std::string* error) {
  Impl& I = *impl_;
  if (I.started) return true;
  if (I.cfg.wait_link_ms) {
    // E.g. a net_memif port is down until its peer connects: frames sent before would be dropped.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(I.cfg.wait_link_ms);
    for (;;) {
      std::vector<uint16_t> down;
      for (uint16_t p : I.port_ids) {
        rte_eth_link link{};
        if (rte_eth_link_get_nowait(p, &link) != 0 || link.link_status != RTE_ETH_LINK_UP) down.push_back(p);
      }
      if (down.empty()) break;
      if (std::chrono::steady_clock::now() > deadline || g_force_quit.load()) {
        std::fprintf(stderr, "inagg: port %u still has no link after %u ms; starting anyway\n", down[0], I.cfg.wait_link_ms);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  I.started = true;
  if (I.single) return true;  // run_main_lcore() runs the loop
  for (auto& l : I.lcores) {
    auto* arg = new std::pair<Impl*, LcoreState*>(&I, l.get());
    if (int rc = rte_eal_remote_launch(lcore_main, arg, l->lcore_id); rc != 0) {
      delete arg;
      *error = "cannot launch lcore " + std::to_string(l->lcore_id) + ": " + rte_strerror(-rc);
      return false;
    }
  }
  return true;
}

void Appliance::run_main_lcore() {
  if (impl_->single && !impl_->lcores.empty()) impl_->loop(*impl_->lcores[0]);
}

void Appliance::stop() {
  Impl& I = *impl_;
  if (!I.started) return;
  request_stop();
  if (!I.single) rte_eal_mp_wait_lcore();
  I.started = false;
}

// ---------------------------------------------------------------------------------------------
// The lcore loop.

void Appliance::Impl::loop(LcoreState& l) {
  const uint64_t drain_tsc = tsc_hz * cfg.drain_us / 1'000'000;
  const uint64_t poll_tsc = tsc_hz / 100'000;  // engine timers every 10 us
  const uint64_t tick_tsc = tsc_hz / 100;      // control tick in single-lcore mode
  uint64_t last_drain = rte_rdtsc(), last_poll = last_drain, last_tick = last_drain;
  rte_mbuf* pkts[kMaxBurst];
  const double ns_per_tsc = 1e9 / static_cast<double>(tsc_hz);

  while (!g_force_quit.load(std::memory_order_relaxed)) {
    const uint64_t t0 = rte_rdtsc();
    const uint64_t now_ns = static_cast<uint64_t>(static_cast<double>(t0) * ns_per_tsc);
    bool work = false;

    // Control requests, between bursts.
    void* cmd;
    while (rte_ring_dequeue(l.commands, &cmd) == 0) {
      apply_command(l, *static_cast<Command*>(cmd));
      static_cast<Command*>(cmd)->done.store(true, std::memory_order_release);
    }

    // Packets other lcores handed over (their job is ours).
    unsigned n = rte_ring_dequeue_burst(l.handover, reinterpret_cast<void**>(pkts), cfg.burst, nullptr);
    if (n) {
      work = true;
      l.c.handover_in += n;
      for (unsigned i = 0; i < n; ++i) handle_packet(l, pkts[i], now_ns, true);
    }

    for (uint16_t pi = 0; pi < port_ids.size(); ++pi) {
      n = rte_eth_rx_burst(port_ids[pi], l.queue, pkts, cfg.burst);
      if (n == 0) continue;
      work = true;
      l.c.rx += n;
      // As l3fwd does: start the headers' cache misses for the burst before touching any of them.
      for (unsigned i = 0; i < n; ++i) rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
      for (unsigned i = 0; i < n; ++i) handle_packet(l, pkts[i], now_ns, false);
    }

    if (t0 - last_poll > poll_tsc) {
      l.engine->poll(now_ns, l.engine_tx);
      route_engine_output(l, now_ns);
      last_poll = t0;
    }
    if (t0 - last_drain > drain_tsc) {
      flush_tx(l);
      last_drain = t0;
    }
    if (single && tick && t0 - last_tick > tick_tsc) {
      tick(tick_arg);
      last_tick = t0;
    }
    const uint64_t t1 = rte_rdtsc();
    (work ? l.c.busy_cycles : l.c.idle_cycles) += t1 - t0;
  }
  flush_tx(l);
}

void Appliance::Impl::handle_packet(LcoreState& l, rte_mbuf* m, uint64_t now_ns, bool from_handover) {
  if (m->nb_segs > 1 && rte_pktmbuf_linearize(m) != 0) {
    // The engine cannot look inside it. A RoCEv2 candidate may belong to a registered connection:
    // dropped, never bridged raw (its sender retransmits); anything else is bridged as it is.
    ++l.c.multiseg_linearize_failed;
    if (!from_handover && !looks_like_roce(rte_pktmbuf_mtod(m, uint8_t*), m->data_len)) send(l, m, now_ns);
    else rte_pktmbuf_free(m);
    return;
  }
  uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  if (!from_handover && len >= 14) {
    // Bursts come from few stations: re-learning the same source on the same port within 1 ms
    // changes nothing, so skip it (halves the bridge's per-frame cost on a burst of one flow).
    const uint64_t src = MacTable::key(data + 6);
    if (src != l.learn_cache_mac || m->port != l.learn_cache_port || now_ns - l.learn_cache_ns > 1'000'000) {
      l.macs->learn(data + 6, m->port, now_ns);
      l.learn_cache_mac = src;
      l.learn_cache_port = m->port;
      l.learn_cache_ns = now_ns;
      l.lookup_cache_ns = 0;  // a move may change the cached lookup
    }
  }
  if (!looks_like_roce(data, len)) {
    send(l, m, now_ns);
    return;
  }
  if (!from_handover && lcores.size() > 1) {
    OwnerKey k;
    if (owner_key_of(data, len, &k)) {
      auto it = l.owners.find(k);
      if (it != l.owners.end() && it->second != l.index) {
        if (rte_ring_enqueue(lcores[it->second]->handover, m) == 0) {
          ++l.c.handover_out;
        } else {
          ++l.c.handover_full;
          rte_pktmbuf_free(m);
        }
        return;
      }
    }
  }
  ++l.c.roce;
  l.engine->process({m, data, static_cast<uint16_t>(len), m->port}, now_ns, l.engine_tx);
  route_engine_output(l, now_ns);
}

void Appliance::Impl::route_engine_output(LcoreState& l, uint64_t now_ns) {
  for (size_t i = 0; i < l.engine_tx.size(); ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(l.engine_tx[i].handle);
    if (l.capture.is_open()) l.capture.write(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, now_ns);
    send(l, m, now_ns);
  }
  l.engine_tx.clear();
}

// Bridges one frame: to the learned port, flooded, or dropped when it would go back where it
// came from. Consumes one reference of m.
void Appliance::Impl::send(LcoreState& l, rte_mbuf* m, uint64_t now_ns) {
  const uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  const int in = m->port < index_of_port.size() ? index_of_port[m->port] : -1;
  const uint16_t in_port = in >= 0 ? static_cast<uint16_t>(in) : kNoPort;
  uint16_t out = kFlood;
  if (m->data_len >= 6) {
    const uint64_t dst = MacTable::key(data);
    if (dst == l.lookup_cache_mac && m->port == l.lookup_cache_port && now_ns - l.lookup_cache_ns < 1'000'000) {
      out = l.lookup_cache_out;
    } else {
      out = l.macs->lookup(data, m->port, now_ns);
      l.lookup_cache_mac = dst;
      l.lookup_cache_port = m->port;
      l.lookup_cache_out = out;
      l.lookup_cache_ns = now_ns;
    }
  }
  if (out == kDrop) {
    ++l.c.same_port_drops;
    rte_pktmbuf_free(m);
    return;
  }
  if (out != kFlood) {
    const int oi = out < index_of_port.size() ? index_of_port[out] : -1;
    if (oi >= 0) {
      ++l.c.bridged;
      enqueue_tx(l, static_cast<unsigned>(oi), m);
      return;
    }
  }
  ++l.c.flooded;
  const unsigned nports = static_cast<unsigned>(port_ids.size());
  const unsigned copies = nports - (in_port != kNoPort ? 1 : 0);
  if (copies == 0) {
    rte_pktmbuf_free(m);
    return;
  }
  if (copies > 1) rte_mbuf_refcnt_update(m, static_cast<int16_t>(copies - 1));
  for (unsigned p = 0; p < nports; ++p)
    if (p != in_port) enqueue_tx(l, p, m);
}

void Appliance::Impl::enqueue_tx(LcoreState& l, unsigned pi, rte_mbuf* m) {
  TxBuffer& b = l.tx[pi];
  b.pkts[b.n++] = m;
  if (b.n == cfg.burst) send_burst(l, pi);
}

// Hands a port's TX buffer to the PMD; whatever it does not take is freed and counted.
void Appliance::Impl::send_burst(LcoreState& l, unsigned pi) {
  TxBuffer& b = l.tx[pi];
  const uint16_t sent = rte_eth_tx_burst(port_ids[pi], l.queue, b.pkts, b.n);
  l.c.tx += sent;
  for (uint16_t i = sent; i < b.n; ++i) rte_pktmbuf_free(b.pkts[i]);
  l.c.tx_dropped += b.n - sent;
  b.n = 0;
}

namespace {
bool tx_queue_above(void* ctx, uint16_t port, uint32_t threshold) {
  const LcoreState& l = *static_cast<const LcoreState*>(ctx);
  const int pi = port < l.index_of_port->size() ? (*l.index_of_port)[port] : -1;
  if (pi < 0) return false;
  const uint32_t buffered = l.tx[pi].n;
  if (buffered >= threshold) return true;
  const uint32_t in_ring = threshold - buffered;
  const uint16_t ring = l.tx_ring_size[pi];
  if (in_ring >= ring) return false;
  return rte_eth_tx_descriptor_status(port, l.queue, static_cast<uint16_t>(ring - in_ring)) == RTE_ETH_TX_DESC_FULL;
}
}  // namespace

void Appliance::Impl::flush_tx(LcoreState& l) {
  for (unsigned pi = 0; pi < l.tx.size(); ++pi) {
    if (l.tx[pi].n) send_burst(l, pi);
  }
}

// ---------------------------------------------------------------------------------------------
// Control plane.

void Appliance::Impl::apply_command(LcoreState& l, Command& cmd) {
  switch (cmd.kind) {
    case Command::Kind::add_job:
      cmd.ok = l.engine->add_job(cmd.spec, &cmd.error);
      break;
    case Command::Kind::remove_job:
      cmd.ok = l.engine->remove_job(cmd.id, &cmd.error);
      break;
    case Command::Kind::hold_closed:  // before the job is added: nothing of it forwarded raw meanwhile
      l.engine->hold_closed(cmd.spec);
      cmd.ok = true;
      break;
    case Command::Kind::release_closed:  // the add was refused: its QPs are ordinary traffic again
      l.engine->release_closed(cmd.spec.id, 0);
      cmd.ok = true;
      break;
    case Command::Kind::set_owner:
    case Command::Kind::clear_owner:
      for (const agg::ConnectionSpec& c : cmd.spec.conns) {
        for (const OwnerKey& k : {key_of(c.dst_ip, c.dst_qpn), key_of(c.src_ip, c.src_qpn)}) {
          if (cmd.kind == Command::Kind::set_owner)
            l.owners[k] = cmd.owner;
          else
            l.owners.erase(k);
        }
      }
      // A lcore that does not own the job keeps its connections closed while it lives (a packet of
      // it that reached this engine anyway is dropped, not forwarded raw), and for closed_hold
      // after it is removed (tombstones; the owner's engine keeps its own).
      if (cmd.kind == Command::Kind::set_owner)
        l.engine->hold_closed(cmd.spec);
      else
        l.engine->release_closed(cmd.spec.id, cfg.engine.closed_hold_ns);
      cmd.ok = true;
      break;
    case Command::Kind::job_info: {
      agg::JobInfo info{};
      cmd.ok = l.engine->job_info(cmd.id, &info);
      if (cmd.ok) cmd.infos.push_back(info);
      break;
    }
    case Command::Kind::list_jobs:
      for (uint32_t id : l.engine->job_ids()) {
        agg::JobInfo info{};
        if (l.engine->job_info(id, &info)) cmd.infos.push_back(info);
      }
      cmd.ok = true;
      break;
    case Command::Kind::totals:
      cmd.counters = l.engine->counters();
      cmd.ok = true;
      break;
  }
}

bool Appliance::Impl::run_command(LcoreState& l, Command& cmd, std::string* error) {
  if (!started) {  // the loops are not running yet: apply directly (start-up, single thread)
    apply_command(l, cmd);
    if (!cmd.ok && error) *error = cmd.error;
    return cmd.ok;
  }
  if (single && rte_lcore_id() == l.lcore_id) {  // called from the tick inside our own loop
    apply_command(l, cmd);
    if (!cmd.ok && error) *error = cmd.error;
    return cmd.ok;
  }
  if (rte_ring_enqueue(l.commands, &cmd) != 0) {
    if (error) *error = "lcore " + std::to_string(l.lcore_id) + " is not taking requests (its ring is full)";
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cmd.done.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > deadline || g_force_quit.load()) {
      // The command stays referenced by the ring: never return while it might still be applied.
      while (!cmd.done.load(std::memory_order_acquire) && !g_force_quit.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!cmd.done.load()) {
        if (error) *error = "the appliance is shutting down";
        return false;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (!cmd.ok && error) *error = cmd.error;
  return cmd.ok;
}

bool Appliance::add_job(const agg::JobSpec& spec, std::string* error) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.control_mutex);
  // Each engine checks its own jobs' connections; jobs on other lcores are checked here.
  for (auto& [id, other] : I.job_specs) {
    if (id == spec.id) continue;
    for (const agg::ConnectionSpec& c : spec.conns)
      for (const agg::ConnectionSpec& o : other.conns)
        for (const OwnerKey& k : {key_of(c.dst_ip, c.dst_qpn), key_of(c.src_ip, c.src_qpn)})
          if (k == key_of(o.dst_ip, o.dst_qpn) || k == key_of(o.src_ip, o.src_qpn)) {
            *error = "job " + std::to_string(spec.id) + ": rank " + std::to_string(c.rank) + " uses QPN 0x" +
                     [&] { char b[16]; std::snprintf(b, sizeof b, "%x", k.qpn); return std::string(b); }() +
                     " on an address that already belongs to job " + std::to_string(id);
            return false;
          }
  }
  uint16_t owner = 0;
  if (auto it = I.job_owner.find(spec.id); it != I.job_owner.end()) {
    owner = it->second;  // re-adding (a failed job): same lcore, whose engine decides
  } else {  // the lcore with the fewest jobs
    std::vector<size_t> load(I.lcores.size(), 0);
    for (auto& [id, o] : I.job_owner) ++load[o];
    owner = static_cast<uint16_t>(std::min_element(load.begin(), load.end()) - load.begin());
  }
  const bool existed = I.job_owner.count(spec.id) > 0;
  if (I.lcores.size() > 1 && !existed) {
    // Every lcore holds the job's connections closed before any of them learns its owner: until
    // the owner has it, a packet of the job is dropped wherever it arrives, never forwarded raw.
    for (auto& l : I.lcores) {
      Command hold{Command::Kind::hold_closed};
      hold.spec = spec;
      I.run_command(*l, hold, nullptr);
    }
  }
  Command cmd{Command::Kind::add_job};
  cmd.spec = spec;
  if (!I.run_command(*I.lcores[owner], cmd, error)) {
    if (I.lcores.size() > 1 && !existed) {
      for (auto& l : I.lcores) {
        Command release{Command::Kind::release_closed};
        release.spec = spec;
        I.run_command(*l, release, nullptr);
      }
    }
    return false;
  }
  I.job_owner[spec.id] = owner;
  I.job_specs[spec.id] = spec;
  if (I.lcores.size() > 1) {
    for (auto& l : I.lcores) {
      Command own{Command::Kind::set_owner};
      own.spec = spec;
      own.owner = owner;
      I.run_command(*l, own, nullptr);
    }
  }
  return true;
}

bool Appliance::remove_job(uint32_t id, std::string* error) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.control_mutex);
  auto it = I.job_owner.find(id);
  if (it == I.job_owner.end()) {
    *error = "no job " + std::to_string(id) + " (list jobs to see which exist)";
    return false;
  }
  Command cmd{Command::Kind::remove_job};
  cmd.id = id;
  if (!I.run_command(*I.lcores[it->second], cmd, error)) return false;
  if (I.lcores.size() > 1) {
    for (auto& l : I.lcores) {
      Command own{Command::Kind::clear_owner};
      own.spec = I.job_specs[id];
      I.run_command(*l, own, nullptr);
    }
  }
  I.job_owner.erase(it);
  I.job_specs.erase(id);
  return true;
}

std::vector<agg::JobInfo> Appliance::list_jobs() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.control_mutex);
  std::vector<agg::JobInfo> all;
  for (auto& l : I.lcores) {
    Command cmd{Command::Kind::list_jobs};
    if (I.run_command(*l, cmd, nullptr)) all.insert(all.end(), cmd.infos.begin(), cmd.infos.end());
  }
  return all;
}

bool Appliance::job_info(uint32_t id, agg::JobInfo* out) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.control_mutex);
  auto it = I.job_owner.find(id);
  if (it == I.job_owner.end()) return false;
  Command cmd{Command::Kind::job_info};
  cmd.id = id;
  if (!I.run_command(*I.lcores[it->second], cmd, nullptr) || cmd.infos.empty()) return false;
  *out = cmd.infos[0];
  return true;
}

bool Appliance::job_spec(uint32_t id, agg::JobSpec* out) {
  std::lock_guard<std::mutex> lock(impl_->control_mutex);
  auto it = impl_->job_specs.find(id);
  if (it == impl_->job_specs.end()) return false;
  *out = it->second;
  return true;
}

agg::EngineCounters Appliance::engine_totals() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.control_mutex);
  agg::EngineCounters sum;
  for (auto& l : I.lcores) {
    Command cmd{Command::Kind::totals};
    if (I.run_command(*l, cmd, nullptr)) sum.add(cmd.counters);
  }
  return sum;
}

std::vector<std::pair<unsigned, LcoreCounters>> Appliance::lcore_counters() const {
  std::vector<std::pair<unsigned, LcoreCounters>> v;
  for (auto& l : impl_->lcores) v.push_back({l->lcore_id, l->c});
  return v;
}

uint64_t Appliance::total_rx() const {
  uint64_t n = 0;
  for (auto& l : impl_->lcores) n += l->c.rx;
  return n;
}

std::string Appliance::stats_text() {
  std::string s;
  char buf[512];
  for (const PortInfo& p : impl_->ports) {
    rte_eth_stats st{};
    rte_eth_stats_get(p.port, &st);
    std::snprintf(buf, sizeof buf,
                  "port %u (%s, mtu %u, steering %s): rx %" PRIu64 " tx %" PRIu64 " rx_missed %" PRIu64 " rx_nombuf %" PRIu64
                  " rx_errors %" PRIu64 " tx_errors %" PRIu64 "\n",
                  p.port, p.name.c_str(), p.mtu, p.flow_hardware ? "rte_flow" : "software", st.ipackets, st.opackets,
                  st.imissed, st.rx_nombuf, st.ierrors, st.oerrors);
    s += buf;
  }
  for (auto& [lc, c] : lcore_counters()) {
    const double busy = c.busy_cycles + c.idle_cycles ? 100.0 * c.busy_cycles / (c.busy_cycles + c.idle_cycles) : 0;
    std::snprintf(buf, sizeof buf, "lcore %u: busy %.1f%%", lc, busy);
    s += buf;
#define X(name, text) s += " " #name " " + std::to_string(c.name);
    INAGG_LCORE_COUNTERS(X)
#undef X
    s += "\n";
  }
  for (const agg::JobInfo& j : list_jobs()) {
    std::snprintf(buf, sizeof buf, "job %u: %s released %" PRIu64 " held %zu retained %zu memory %zu KiB", j.id,
                  j.state == agg::JobState::active ? "active" : "FAILED", j.released_slots, j.held_packets,
                  j.retained_packets, j.memory_bytes >> 10);
    s += buf;
    agg::for_each_counter(j.counters, [&](std::string_view name, std::string_view, uint64_t v) {
      if (v) s += " " + std::string(name) + " " + std::to_string(v);
    });
    if (!j.error.empty()) s += " error \"" + j.error + "\"";
    s += "\n";
  }
  return s;
}

}  // namespace inagg::dataplane
