#include "inagg/client/plan.hpp"

#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "inagg/control/job_file.hpp"

namespace inagg::client {

std::string RackPlan::job_text() const {
  char buf[256];
  std::string t;
  const bool exchanged = connections.size() == workers;
  if (exchanged)
    std::snprintf(buf, sizeof buf, "# %u workers, connections as the ranks exchanged them\n", workers);
  else
    std::snprintf(buf, sizeof buf, "# inagg-worker --print-job: %u workers, rank r at %s + r + 1\n", workers,
                  util::ip_text(ip_base).c_str());
  t += buf;
  std::snprintf(buf, sizeof buf, "id = %u\ndtype = %s\nworkers = %u\n", job_id,
                std::string(util::dtype_name(dtype)).c_str(), workers);
  t += buf;
  std::snprintf(buf, sizeof buf, "message_bytes = %u\npayload_bytes = %u\nwindow = %u\n", message, payload, window);
  t += buf;
  if (collective != control::Collective::allreduce) {
    std::snprintf(buf, sizeof buf, "collective = %s\nchunk = %u\n", control::collective_name(collective), chunk);
    t += buf;
  }
  if (channels > 1) {
    std::snprintf(buf, sizeof buf, "channels = %u\n", channels);
    t += buf;
  }
  // This rank's own conn lines report its MAC, for the appliance to check against its frames.
  std::string own_mac;
  if (mac) {
    std::snprintf(buf, sizeof buf, ",any,%02x:%02x:%02x:%02x:%02x:%02x", (*mac)[0], (*mac)[1], (*mac)[2], (*mac)[3],
                  (*mac)[4], (*mac)[5]);
    own_mac = buf;
  }
  // Channel by channel, as the job file reads them; channel ch's QPNs and first PSN kChannelQpnStep
  // x ch above channel 0's (the exchanged connections' or the plan's own).
  for (unsigned ch = 0; ch < channels; ++ch) {
    if (channels > 1) {
      std::snprintf(buf, sizeof buf, "# channel %u\n", ch);
      t += buf;
    }
    const uint32_t step = kChannelQpnStep * ch;
    for (unsigned r = 0; r < workers; ++r) {
      const unsigned s = (r + 1) % workers;
      const RankConnection c = exchanged ? connections[r] : RankConnection{ip_of(r), send_qpn(r), 0, start_psn(r)};
      const RankConnection succ = exchanged ? connections[s] : RankConnection{ip_of(s), 0, recv_qpn(s), 0};
      std::snprintf(buf, sizeof buf, "conn = %u,%s,0x%x,%s,0x%x,0x%x%s\n", r, util::ip_text(c.ip).c_str(),
                    c.send_qpn + step, util::ip_text(succ.ip).c_str(), succ.recv_qpn + step,
                    (c.start_psn + step) & 0xffffff, r == rank ? own_mac.c_str() : "");
      t += buf;
    }
  }
  return t;
}

UdpRcConfig RackPlan::rc_config(bool ring, double ack_timeout_ms, unsigned retry, uint64_t send_bytes,
                                uint64_t receive_bytes) const {
  UdpRcConfig c;
  c.local = ip_of(rank);
  c.tos = 2;  // ECT(0)
  RcConfig& rq = c.send;
  rq.local_qpn = ring ? ring_send_qpn(rank) : send_qpn(rank);
  rq.remote_qpn = ring ? ring_recv_qpn(successor()) : recv_qpn(successor());
  rq.remote_ip = ip_of(successor());
  rq.send_start_psn = start_psn(rank);
  rq.mtu_payload = payload;
  rq.window = window;
  rq.ack_timeout_ns = static_cast<uint64_t>(ack_timeout_ms * 1e6);
  rq.retry_count = retry;
  rq.max_queued_bytes = max_queued_bytes;
  rq.cwnd_min_bytes = cwnd_min_bytes;
  rq.rto_min_ns = static_cast<uint64_t>(rto_min_ms * 1e6);
  RcConfig& rs = c.receive;
  rs = rq;
  rs.local_qpn = ring ? ring_recv_qpn(rank) : recv_qpn(rank);
  rs.remote_qpn = ring ? ring_send_qpn(predecessor()) : send_qpn(predecessor());
  rs.remote_ip = ip_of(predecessor());
  rs.recv_start_psn = start_psn(predecessor());
  c.send_bytes = send_bytes;
  c.receive_bytes = receive_bytes;
  if (!ring) add_channels(&c, channels);
  return c;
}

void RackPlan::add_channels(UdpRcConfig* c, unsigned channels) {
  c->channels.clear();
  for (unsigned ch = 1; ch < channels; ++ch) {
    const uint32_t step = kChannelQpnStep * ch;
    RcConfig send = c->send, receive = c->receive;
    send.local_qpn += step;
    send.remote_qpn += step;
    send.send_start_psn = (send.send_start_psn + step) & 0xffffff;
    receive.local_qpn += step;
    receive.remote_qpn += step;
    receive.recv_start_psn = (receive.recv_start_psn + step) & 0xffffff;
    send.src_port = receive.src_port = channel_port(ch);
    c->channels.push_back({send, receive});
  }
}

uint32_t payload_for_mtu(uint32_t link_mtu, uint32_t message) {
  for (uint32_t p = 4096; p >= 256; p /= 2)
    if (p + kRoceNicHeadroom <= link_mtu && message % p == 0) return p;
  return 0;
}

std::optional<std::array<uint8_t, 6>> interface_mac(const util::IpAddr& ip) {
  const util::IpAddr v4 = util::gid_address(ip);
  if (v4.version != util::IpVersion::v4) return std::nullopt;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::string name;  // the interface that holds the address, then its link-layer address
  for (const ifaddrs* a = list; a && name.empty(); a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET &&
        std::memcmp(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, v4.bytes.data(), 4) == 0)
      name = a->ifa_name;
  std::optional<std::array<uint8_t, 6>> mac;
  for (const ifaddrs* a = list; a && !name.empty() && !mac; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_PACKET || name != a->ifa_name) continue;
    const auto* ll = reinterpret_cast<const sockaddr_ll*>(a->ifa_addr);
    std::array<uint8_t, 6> m{};
    if (ll->sll_halen != 6) continue;
    std::memcpy(m.data(), ll->sll_addr, 6);
    if ((m[0] | m[1] | m[2] | m[3] | m[4] | m[5]) != 0) mac = m;
  }
  ::freeifaddrs(list);
  return mac;
}

std::optional<uint32_t> interface_mtu(const util::IpAddr& ip, std::string* name) {
  if (ip.version != util::IpVersion::v4) return std::nullopt;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<uint32_t> mtu;
  for (const ifaddrs* a = list; a && !mtu; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (std::memcmp(&sin->sin_addr, ip.bytes.data(), 4) != 0) continue;
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    ifreq r{};
    std::strncpy(r.ifr_name, a->ifa_name, IFNAMSIZ - 1);
    if (::ioctl(fd, SIOCGIFMTU, &r) == 0 && r.ifr_mtu > 0) {
      mtu = static_cast<uint32_t>(r.ifr_mtu);
      if (name) *name = a->ifa_name;
    }
    ::close(fd);
  }
  ::freeifaddrs(list);
  return mtu;
}

XaggConfig XdpPlan::xagg_config(const RackPlan& rack) const {
  const unsigned group = group_of(rack.rank, rack.workers);
  XaggConfig xc;
  xc.local = rack.ip_of(rack.rank);
  xc.head = heads[group];
  xc.group = group_address(group);
  xc.port = port;
  xc.job = rack.job_id;
  xc.rank = rack.rank % size_of_groups(rack.workers);
  xc.values = values;
  xc.window = window;
  xc.total_weight = rack.workers;
  xc.timeout_ns = static_cast<uint64_t>(timeout_ms * 1e6);
  xc.key = key;
  return xc;
}

}  // namespace inagg::client
