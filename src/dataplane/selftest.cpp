// inagg --selftest (include/inagg/dataplane/selftest.hpp): one RoCEv2 probe out of every port, then
// every frame received on any port through the datapath's pre-filter, parser and ICRC check.
#include "inagg/dataplane/selftest.hpp"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "inagg/dataplane/appliance.hpp"
#include "inagg/wire/build.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/opcodes.hpp"
#include "inagg/wire/parse.hpp"
#include "ports.hpp"

namespace inagg::dataplane {
namespace {

constexpr char kMagic[16] = "inagg-selftest";
constexpr size_t kPayload = 32;  // magic, port index (2), 6 zero bytes, nonce (8)
constexpr uint32_t kProbeQp = 0xfffffe;

}  // namespace

size_t build_selftest_probe(std::span<uint8_t> out, uint16_t port_index, uint64_t nonce) {
  wire::RoceFrameSpec s;
  s.src_mac = {0x02, 0x69, 0x6e, 0x61, 0x67, static_cast<uint8_t>(port_index)};
  s.dst_mac = s.src_mac;
  s.src_ip = *util::parse_ip("192.0.2.1");
  s.dst_ip = *util::parse_ip("192.0.2.2");
  s.src_port = static_cast<uint16_t>(0xc000 + (port_index & 0x3fff));
  s.opcode = wire::op::kRc | wire::op::kSendOnly;
  s.dest_qp = kProbeQp;
  uint8_t payload[kPayload] = {};
  std::memcpy(payload, kMagic, sizeof kMagic);
  std::memcpy(payload + 16, &port_index, 2);
  std::memcpy(payload + 24, &nonce, 8);
  if (out.size() < wire::roce_frame_size(s, sizeof payload)) return 0;
  return wire::build_roce_frame(out, s, payload);
}

SelftestFrame classify_selftest_frame(std::span<const uint8_t> frame, uint64_t nonce) {
  SelftestFrame v;
  if (!wire::is_roce_candidate(frame)) return v;  // the datapath's pre-filter: bridged as a plain frame
  wire::Layout l;
  const wire::ParseStatus st = wire::parse_frame(frame, l);
  if (st == wire::ParseStatus::not_ip || st == wire::ParseStatus::not_udp || st == wire::ParseStatus::not_roce)
    return v;
  if (st != wire::ParseStatus::roce) {
    v.kind = SelftestFrame::Kind::roce_malformed;
    return v;
  }
  if (!wire::icrc_verify(frame.data(), l)) {
    v.kind = SelftestFrame::Kind::roce_bad_icrc;
    return v;
  }
  v.kind = SelftestFrame::Kind::roce;
  const uint8_t* p = frame.data() + l.payload;
  if (l.payload_len == kPayload && wire::bth_of(frame.data(), l).dest_qp() == kProbeQp &&
      std::memcmp(p, kMagic, sizeof kMagic) == 0 && std::memcmp(p + 24, &nonce, 8) == 0) {
    uint16_t port = 0;
    std::memcpy(&port, p + 16, 2);
    v.kind = SelftestFrame::Kind::probe;
    v.probe_port = port;
  }
  return v;
}

bool SelftestReport::pass() const {
  return !ports.empty() && std::all_of(ports.begin(), ports.end(), [](const PortSelftest& p) { return p.pass; });
}

std::string SelftestReport::text() const {
  std::string s;
  char buf[512];
  unsigned passed = 0;
  for (const PortSelftest& p : ports) {
    std::string from;
    for (unsigned f : p.probes_from) from += (from.empty() ? "" : ",") + std::to_string(f);
    std::snprintf(buf, sizeof buf, "port %u (%s): link %s", p.port, p.name.c_str(), p.link_up ? "up" : "down");
    s += buf;
    if (p.link_up && p.speed_mbps) s += " " + std::to_string(p.speed_mbps) + " Mbit/s";
    std::snprintf(buf, sizeof buf,
                  ", mtu %u, steering %s; probe %s; received %" PRIu64 " frames, %" PRIu64
                  " RoCEv2 with a valid ICRC (%" PRIu64 " bad ICRC, %" PRIu64
                  " malformed); probes back from %s%s: %s\n",
                  p.mtu, p.steering.c_str(), p.probe_sent ? "sent" : "NOT sent", p.rx_frames, p.roce, p.roce_bad_icrc,
                  p.roce_malformed, from.empty() ? "none" : ("port " + from).c_str(),
                  p.probes_altered ? (" (" + std::to_string(p.probes_altered) + " altered)").c_str() : "",
                  p.pass ? "PASS" : "FAIL");
    s += buf;
    passed += p.pass;
    if (p.pass) continue;
    if (!p.link_up)
      s += "  port " + std::to_string(p.port) + ": the link is down: check the cable, the switch port and the NIC.\n";
    if (!p.probe_sent) s += "  port " + std::to_string(p.port) + ": the PMD did not take the probe for transmission.\n";
    if (p.roce == 0)
      s += "  port " + std::to_string(p.port) + ": no RoCEv2 packet with a valid ICRC arrived in " +
           std::to_string(listen_ms) +
           " ms. A probe only comes back over a loop (a loop cable, or a switch that floods it to another port of "
           "the appliance); run the selftest while RoCE crosses the port (ib_write_bw between workers on either "
           "side), else check the cabling, the switch port's VLAN and MTU, and that the traffic is RoCEv2 (UDP "
           "4791).\n";
    if (p.roce_bad_icrc)
      s += "  port " + std::to_string(p.port) + ": " + std::to_string(p.roce_bad_icrc) +
           " RoCEv2 packets had a bad ICRC: something on the path rewrites them (an offload, a middlebox).\n";
  }
  std::snprintf(buf, sizeof buf, "selftest: %s (%u of %zu ports see RoCEv2)\n", pass() ? "PASS" : "FAIL", passed,
                ports.size());
  return s + buf;
}

bool run_selftest(const ApplianceConfig& cfg, const SelftestConfig& sc, SelftestReport* out, std::string* error) {
  PortSet ports;
  if (!ports.select(cfg, error) || !ports.open(cfg, 1, error)) return false;
  ports.wait_for_links(cfg.wait_link_ms ? cfg.wait_link_ms : 3000);
  const std::vector<uint16_t>& ids = ports.ids();
  const uint64_t nonce = rte_rdtsc() ^ (static_cast<uint64_t>(::getpid()) << 32);
  out->ports.assign(ids.size(), {});
  out->listen_ms = sc.listen_ms;
  std::vector<std::vector<uint8_t>> sent(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    PortSelftest& p = out->ports[i];
    const PortInfo& info = ports.info()[i];
    p.port = ids[i];
    p.name = info.name;
    p.mtu = info.mtu;
    p.steering = info.flow_steered() ? "rte_flow " + info.flow_mode : "software (" + info.flow_reason + ")";
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(ids[i], &link) == 0) {
      p.link_up = link.link_status == RTE_ETH_LINK_UP;
      p.speed_mbps = link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : link.link_speed;
    }
    sent[i].resize(256);
    sent[i].resize(build_selftest_probe(sent[i], static_cast<uint16_t>(i), nonce));
    rte_mbuf* m = rte_pktmbuf_alloc(ports.pool());
    char* d = m ? rte_pktmbuf_append(m, static_cast<uint16_t>(sent[i].size())) : nullptr;
    if (d == nullptr) {
      if (m) rte_pktmbuf_free(m);
      *error = "cannot allocate a packet buffer for the probe";
      return false;
    }
    std::memcpy(d, sent[i].data(), sent[i].size());
    for (int attempt = 0; attempt < 100 && !p.probe_sent; ++attempt) {
      p.probe_sent = rte_eth_tx_burst(ids[i], 0, &m, 1) == 1;
      if (!p.probe_sent) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!p.probe_sent) rte_pktmbuf_free(m);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(sc.listen_ms);
  std::vector<uint8_t> copy(UINT16_MAX);
  rte_mbuf* pkts[32];
  while (std::chrono::steady_clock::now() < deadline && !Appliance::stop_requested()) {
    bool any = false;
    for (size_t i = 0; i < ids.size(); ++i) {
      PortSelftest& p = out->ports[i];
      const uint16_t n = rte_eth_rx_burst(ids[i], 0, pkts, 32);
      any |= n > 0;
      for (uint16_t k = 0; k < n; ++k) {
        rte_mbuf* m = pkts[k];
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        const auto* f = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, len, copy.data()));
        ++p.rx_frames;
        const SelftestFrame v = f ? classify_selftest_frame({f, len}, nonce) : SelftestFrame{};
        switch (v.kind) {
          case SelftestFrame::Kind::other:
            break;
          case SelftestFrame::Kind::roce_bad_icrc:
            ++p.roce_bad_icrc;
            break;
          case SelftestFrame::Kind::roce_malformed:
            ++p.roce_malformed;
            break;
          case SelftestFrame::Kind::probe: {
            const auto from = static_cast<unsigned>(v.probe_port);
            if (from < sent.size() && len == sent[from].size() && std::memcmp(f, sent[from].data(), len) == 0) {
              if (std::find(p.probes_from.begin(), p.probes_from.end(), from) == p.probes_from.end())
                p.probes_from.push_back(from);
            } else {
              ++p.probes_altered;
            }
            ++p.roce;
            break;
          }
          case SelftestFrame::Kind::roce:
            ++p.roce;
            break;
        }
        rte_pktmbuf_free(m);
      }
      p.pass = p.probe_sent && p.roce > 0;
    }
    if (out->pass()) break;  // every port has seen RoCEv2: nothing left to wait for
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (PortSelftest& p : out->ports) std::sort(p.probes_from.begin(), p.probes_from.end());
  return true;
}

}  // namespace inagg::dataplane
