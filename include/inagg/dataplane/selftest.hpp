// inagg --selftest: does the appliance see RoCE on its ports? On the configured ports (set up as
// the appliance sets them up: the pool, the MTU, rte_flow steering where the PMD has it), it sends
// one RoCEv2 probe out of each port, then listens on every port for a while and passes every frame
// through the datapath's own pre-filter, parser and ICRC check, reporting per port: link, MTU,
// steering, whether the PMD took the probe, frames and RoCEv2 packets received (ICRC valid or
// not, malformed), and whose probes came back (byte for byte). A port passes when it sent its probe
// and received at least one RoCEv2 packet with a valid ICRC: a probe (over a loop cable, a switch
// that floods it back to another port of the appliance, a net_ring) or live RoCE from the fabric
// (run it while ib_write_bw or a job runs). docs/deploy.md, section 6.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inagg/dataplane/config.hpp"

namespace inagg::dataplane {

// The probe: Ethernet 02:69:6e:61:67:PP to itself (a loop returns it; a switch floods it as
// unknown unicast), IPv4 192.0.2.1 -> 192.0.2.2 (TEST-NET-1: no host has them), UDP 0xc000+PP ->
// 4791, BTH RC SEND_ONLY to QP 0xfffffe, PSN 0, a payload of "inagg-selftest", the port index and
// the run's nonce, the ICRC. Returns the frame length (0 if `out` is too small).
size_t build_selftest_probe(std::span<uint8_t> out, uint16_t port_index, uint64_t nonce);

// What the datapath makes of one received frame.
struct SelftestFrame {
  enum class Kind : uint8_t { other, roce, roce_bad_icrc, roce_malformed, probe } kind = Kind::other;
  int probe_port = -1;  // Kind::probe: the port index that sent it (this run's nonce)
};
SelftestFrame classify_selftest_frame(std::span<const uint8_t> frame, uint64_t nonce);

struct SelftestConfig {
  uint32_t listen_ms = 1000;  // how long to listen after the probes went out
};

struct PortSelftest {
  uint16_t port = 0;
  std::string name;  // the PMD
  bool link_up = false;
  uint32_t speed_mbps = 0, mtu = 0;
  std::string steering;  // "rte_flow" or "software (why)"
  bool probe_sent = false;
  uint64_t rx_frames = 0, roce = 0, roce_bad_icrc = 0, roce_malformed = 0;
  std::vector<unsigned> probes_from;  // port indexes whose probe arrived here intact
  uint64_t probes_altered = 0;        // probes that arrived with other bytes than were sent
  bool pass = false;
};

struct SelftestReport {
  std::vector<PortSelftest> ports;
  uint32_t listen_ms = 0;
  bool pass() const;
  std::string text() const;  // one line per port, the verdict, hints for a failed port
};

// After rte_eal_init(): opens the ports of `cfg` with one queue pair, probes and listens. False
// with *error when the ports cannot be set up (the same errors as start-up).
bool run_selftest(const ApplianceConfig& cfg, const SelftestConfig& s, SelftestReport* out, std::string* error);

}  // namespace inagg::dataplane
