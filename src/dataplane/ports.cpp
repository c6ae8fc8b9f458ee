#include "ports.hpp"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "inagg/dataplane/appliance.hpp"
#include "inagg/util/log.hpp"
#include "mbuf_parse.hpp"

namespace inagg::dataplane {
namespace {

std::string port_name(uint16_t p, const rte_eth_dev_info& info) {
  return "port " + std::to_string(p) + " (" + (info.driver_name ? info.driver_name : "?") + ")";
}

// A devarg of a virtual device ("framesz" of "iface=x,framesz=4352"), or `fallback`.
uint32_t devarg_u32(const rte_eth_dev_info& info, const char* key, uint32_t fallback) {
  const rte_devargs* da = info.device ? rte_dev_devargs(info.device) : nullptr;
  if (da == nullptr || da->args == nullptr) return fallback;
  const std::string args = da->args, k = std::string(key) + "=";
  for (size_t at = 0; (at = args.find(k, at)) != std::string::npos; at += k.size()) {
    if (at != 0 && args[at - 1] != ',') continue;
    return static_cast<uint32_t>(std::strtoul(args.c_str() + at + k.size(), nullptr, 0));
  }
  return fallback;
}

// net_af_packet copies each frame slot of its mmap'd ring into one mbuf and refuses an RX queue
// whose buffers are smaller than a slot's data area (framesz - 32), whatever the MTU; it
// truncates frames longer than framesz - 66 without telling. Its framesz defaults to 2048.
constexpr uint32_t kAfPacketSlotOverhead = 32, kAfPacketFrameOverhead = 66, kAfPacketDefaultFramesz = 2048;

bool is_af_packet(const rte_eth_dev_info& info) {
  return info.driver_name && std::strcmp(info.driver_name, "net_af_packet") == 0;
}

}  // namespace

PortSet::~PortSet() {
  steering_.remove_all();
  for (uint16_t p : configured_) rte_eth_dev_stop(p);
  for (uint16_t p : ids_) rte_eth_dev_close(p);  // net_pcap completes its output file here
  for (rte_mempool* p : pools_) rte_mempool_free(p);
}

rte_mempool* PortSet::pool_for_socket(int socket) const {
  for (rte_mempool* p : pools_)
    if (p->socket_id == socket) return p;
  return pool();
}

rte_mempool* PortSet::create_pool(const std::string& name, const ApplianceConfig& cfg, uint32_t data_room, int socket,
                                  std::string* error) {
  rte_mempool* p =
      rte_pktmbuf_pool_create(name.c_str(), cfg.mbufs, std::min<uint32_t>(cfg.mbuf_cache, RTE_MEMPOOL_CACHE_MAX_SIZE),
                              kMbufPrivSize, static_cast<uint16_t>(data_room), socket);
  if (p == nullptr)
    *error = "cannot create the pool " + name + " of " + std::to_string(cfg.mbufs) + " mbufs of " +
             std::to_string(data_room) + " bytes (" + std::to_string(uint64_t{cfg.mbufs} * data_room >> 20) +
             " MiB) on NUMA node " + std::to_string(socket) + ": " + rte_strerror(rte_errno) +
             ". Reserve more hugepages on that node, give EAL more memory (-m / --socket-mem), or lower --mbufs or "
             "--mtu" +
             (cfg.pools == PoolMode::shared ? "" : ", or use fewer pools (--mempools)");
  else
    pools_.push_back(p);
  return p;
}

// Each port's pool: the shared one, the one of its NUMA node, or its own (a port whose node is
// unknown, SOCKET_ID_ANY, counts as the main lcore's).
bool PortSet::create_pools(const ApplianceConfig& cfg, uint32_t data_room, std::string* error) {
  const int main_socket = static_cast<int>(rte_socket_id());
  std::string names;
  for (size_t i = 0; i < ids_.size(); ++i) {
    int socket = rte_eth_dev_socket_id(ids_[i]);
    if (socket < 0) socket = main_socket;
    rte_mempool* p = nullptr;
    switch (cfg.pools) {
      case PoolMode::shared:
        p = pools_.empty() ? create_pool("inagg_pool", cfg, data_room, main_socket, error) : pools_.front();
        break;
      case PoolMode::per_socket:
        p = pool_for_socket(socket);
        if (p == nullptr || p->socket_id != socket)
          p = create_pool("inagg_pool_s" + std::to_string(socket), cfg, data_room, socket, error);
        break;
      case PoolMode::per_port:
        p = create_pool("inagg_pool_p" + std::to_string(ids_[i]), cfg, data_room, socket, error);
        break;
    }
    if (p == nullptr) return false;
    pool_of_port_.push_back(p);
  }
  for (rte_mempool* p : pools_)
    names += std::string(names.empty() ? "" : ", ") + p->name + " (node " + std::to_string(p->socket_id) + ")";
  static constexpr const char* kMode[] = {"shared", "per-socket", "per-port"};
  util::log(util::LogModule::dataplane, util::LogLevel::info, "mempools %s: %zu of %u mbufs of %u bytes: %s",
            kMode[static_cast<int>(cfg.pools)], pools_.size(), cfg.mbufs, data_room, names.c_str());
  return true;
}

bool PortSet::select(const ApplianceConfig& cfg, std::string* error) {
  std::vector<uint16_t> ids = cfg.ports;
  if (ids.empty()) {
    uint16_t p;
    RTE_ETH_FOREACH_DEV(p) ids.push_back(p);
  }
  if (ids.empty()) {
    *error =
        "no DPDK ports: bind NICs to a DPDK driver or pass --vdev=... EAL arguments (e.g. "
        "--vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap)";
    return false;
  }
  for (uint16_t p : ids) {
    if (!rte_eth_dev_is_valid_port(p)) {
      *error = "port " + std::to_string(p) + " does not exist (EAL found " + std::to_string(rte_eth_dev_count_avail()) +
               " ports)";
      return false;
    }
    if (std::find(ids_.begin(), ids_.end(), p) == ids_.end()) ids_.push_back(p);
  }
  return true;
}

std::vector<int> PortSet::index_of_port() const {
  std::vector<int> v(RTE_MAX_ETHPORTS, -1);
  for (size_t i = 0; i < ids_.size(); ++i) v[ids_[i]] = static_cast<int>(i);
  return v;
}

bool PortSet::open(const ApplianceConfig& cfg, uint16_t queues, std::string* error) {
  // Buffers big enough for an MTU-sized frame in one segment (the engine needs contiguous
  // packets; chained ones are linearised when they fit), and for what each driver insists on.
  const uint32_t frame = cfg.mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN + 4 /* VLAN */;
  uint32_t need = frame;
  for (uint16_t p : ids_) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(p, &info) != 0 || !is_af_packet(info)) continue;
    const uint32_t framesz = devarg_u32(info, "framesz", kAfPacketDefaultFramesz);
    need = std::max(need, framesz - std::min(framesz, kAfPacketSlotOverhead));
    if (framesz < frame - RTE_ETHER_CRC_LEN + kAfPacketFrameOverhead)
      util::log(util::LogModule::dataplane, util::LogLevel::warning,
                "%s: framesz=%u carries frames of at most %u bytes, less than --mtu %u needs (%u); longer "
                "frames are cut short: give framesz=%u or more",
                port_name(p, info).c_str(), framesz, framesz - std::min(framesz, kAfPacketFrameOverhead), cfg.mtu,
                frame - RTE_ETHER_CRC_LEN, frame - RTE_ETHER_CRC_LEN + kAfPacketFrameOverhead);
  }
  const uint32_t data_room = std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, need + RTE_PKTMBUF_HEADROOM);
  if (data_room > UINT16_MAX) {
    *error =
        "mtu " + std::to_string(cfg.mtu) + " (or a port's framesz) is too large for an mbuf segment; use at most 9600";
    return false;
  }
  if (!check_mbuf_budget(cfg, queues, error)) return false;
  if (!create_pools(cfg, data_room, error)) return false;
  for (uint16_t p : ids_)
    if (!open_port(cfg, p, queues, error)) return false;
  return true;
}

bool PortSet::open_port(const ApplianceConfig& cfg, uint16_t p, uint16_t nq, std::string* error) {
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(p, &info); rc != 0) {
    *error = "port " + std::to_string(p) + ": cannot read device info: " + rte_strerror(-rc);
    return false;
  }
  const std::string name = port_name(p, info);
  if (nq > info.max_rx_queues || nq > info.max_tx_queues) {
    *error = name + " has " + std::to_string(info.max_rx_queues) + " RX / " + std::to_string(info.max_tx_queues) +
             " TX queues but " + std::to_string(nq) +
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
  uint32_t kernel_mtu = 0;  // net_af_packet: the interface's own MTU is the one that counts
  if (is_af_packet(info)) {
    ifreq ifr{};
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && info.if_index && if_indextoname(info.if_index, ifr.ifr_name) && ::ioctl(s, SIOCGIFMTU, &ifr) == 0)
      kernel_mtu = static_cast<uint32_t>(ifr.ifr_mtu);
    if (s >= 0) ::close(s);
  }
  if (int rc = rte_eth_dev_configure(p, nq, nq, &conf); rc != 0) {
    // Some virtual devices refuse an MTU: retry with the default and say so.
    conf.rxmode.mtu = 0;
    if (int rc2 = rte_eth_dev_configure(p, nq, nq, &conf); rc2 != 0) {
      *error = name + ": configure failed: " + rte_strerror(-rc) +
               " (with the device's default MTU too: " + rte_strerror(-rc2) + "); check the device's EAL arguments";
      return false;
    }
    if (kernel_mtu)  // ethdev checks the MTU against the 1518-byte frames this driver claims, which it does not enforce
      util::log(util::LogModule::dataplane, util::LogLevel::info,
                "%s: DPDK keeps its default MTU here; the interface's MTU (%u) and framesz decide which frames pass",
                name.c_str(), kernel_mtu);
    else
      util::log(util::LogModule::dataplane, util::LogLevel::warning,
                "%s: MTU %u refused (%s); using the device default", name.c_str(), mtu, rte_strerror(-rc));
  }
  configured_.push_back(p);
  uint16_t rxd = cfg.rx_desc, txd = cfg.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(p, &rxd, &txd);
  tx_ring_size_.push_back(txd);
  rte_mempool* pool = pool_of_port_[static_cast<size_t>(std::find(ids_.begin(), ids_.end(), p) - ids_.begin())];
  const uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
  for (uint16_t q = 0; q < nq; ++q) {
    if (int rc = rte_eth_rx_queue_setup(p, q, rxd, rte_eth_dev_socket_id(p), nullptr, pool); rc != 0) {
      *error = name + ": RX queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc) +
               ". The packet buffers hold " + std::to_string(room) + " bytes (sized for --mtu " +
               std::to_string(cfg.mtu) +
               "); a driver that needs larger buffers says so above: raise --mtu to match the device's frames, or "
               "lower the device's frame size; with too few buffers raise --mbufs or lower --rx-desc";
      return false;
    }
    if (int rc = rte_eth_tx_queue_setup(p, q, txd, rte_eth_dev_socket_id(p), nullptr); rc != 0) {
      *error = name + ": TX queue " + std::to_string(q) + " setup failed: " + rte_strerror(-rc) +
               "; try a smaller --tx-desc";
      return false;
    }
  }
  if (int rc = rte_eth_dev_start(p); rc != 0) {
    *error = name + ": start failed: " + rte_strerror(-rc) + "; check the device (link, driver messages above)";
    return false;
  }
  rte_eth_promiscuous_enable(p);  // a switch port sees every frame
  uint16_t actual_mtu = 0;
  rte_eth_dev_get_mtu(p, &actual_mtu);
  PortInfo pi{p, info.driver_name ? info.driver_name : "?", "", kernel_mtu ? kernel_mtu : actual_mtu};
  const PortSteering ps =
      cfg.flow_steering ? steering_.add_port(p, nq) : steering_.add_unsteered_port(p, "disabled by --no-flow");
  if (cfg.flow_steering && ps.mode == SteeringMode::software)
    util::log(util::LogModule::dataplane, util::LogLevel::notice,
              "port %u (%s): rte_flow steering of UDP 4791 unavailable (%s); classifying in software", p,
              pi.name.c_str(), ps.reason.c_str());
  else if (cfg.flow_steering && !ps.reason.empty())  // steered, but not the best way
    util::log(util::LogModule::dataplane, util::LogLevel::notice,
              "port %u (%s): rte_flow steers UDP 4791 by %s%s (refused: %s)", p, pi.name.c_str(),
              ps.mode == SteeringMode::rss ? "RSS over the datapath queues" : "one rule to queue 0",
              ps.job_rules ? "" : ", without per-job rules", ps.reason.c_str());
  pi.flow_mode = steering_mode_name(ps.mode);
  pi.flow_reason = ps.reason;
  info_.push_back(pi);
  return true;
}

void PortSet::wait_for_links(uint32_t ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    std::vector<uint16_t> down;
    for (uint16_t p : ids_) {
      rte_eth_link link{};
      if (rte_eth_link_get_nowait(p, &link) != 0 || link.link_status != RTE_ETH_LINK_UP) down.push_back(p);
    }
    if (down.empty()) return;
    if (std::chrono::steady_clock::now() > deadline || Appliance::stop_requested()) {
      util::log(util::LogModule::dataplane, util::LogLevel::warning,
                "port %u still has no link after %u ms; starting anyway", down[0], ms);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string PortSet::stats_text() const {
  std::string s;
  char buf[512];
  for (const PortInfo& p : info_) {
    rte_eth_stats st{};
    rte_eth_stats_get(p.port, &st);
    std::snprintf(buf, sizeof buf,
                  "port %u (%s, mtu %u, steering %s): rx %" PRIu64 " tx %" PRIu64 " rx_missed %" PRIu64
                  " rx_nombuf %" PRIu64 " rx_errors %" PRIu64 " tx_errors %" PRIu64 "\n",
                  p.port, p.name.c_str(), p.mtu, p.flow_steered() ? ("rte_flow " + p.flow_mode).c_str() : "software",
                  st.ipackets, st.opackets, st.imissed, st.rx_nombuf, st.ierrors, st.oerrors);
    s += buf;
  }
  return s;
}

}  // namespace inagg::dataplane
