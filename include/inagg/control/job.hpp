// The description of one aggregation job (docs/protocol.md section 2, "the job contract"): what a job file says,
// what the control socket's `add` carries and what the engine is given. Here, in control, so that
// every module that describes or registers jobs (the appliance, inagg-ctl, the workers) shares it
// without depending on the engine.
#pragma once

#include <cstdint>
#include <vector>

#include "inagg/util/dtype.hpp"
#include "inagg/util/ip_addr.hpp"

namespace inagg::control {

// ConnectionSpec::port when the registration names none.
inline constexpr uint16_t kAnyPort = 0xffff;

// One rank's connection: it RDMA-WRITEs from (src_ip, src_qpn) to (dst_ip, dst_qpn), its
// successor's receive QP, starting at start_psn. `port`, when named: the appliance port (DPDK port
// id) the rank's host is behind, so its packets from any other port are dropped from the first
// one on (IP source guard); kAnyPort: pinned by its first packet that fits.
struct ConnectionSpec {
  unsigned rank = 0;
  util::IpAddr src_ip, dst_ip;
  uint32_t src_qpn = 0, dst_qpn = 0;
  uint32_t start_psn = 0;
  uint16_t port = kAnyPort;
};

struct JobSpec {
  uint32_t id = 0;
  util::Dtype dtype = util::Dtype::fp32;
  unsigned workers = 0;               // n, 1..64
  uint32_t message_bytes = 0;         // M, a multiple of payload_bytes
  uint32_t payload_bytes = 0;         // P, the path MTU payload, a multiple of 4
  unsigned window = 0;                // W messages outstanding per QP
  bool replay = false;                // a FIRST/ONLY at start_psn after all is released restarts the job
  std::vector<ConnectionSpec> conns;  // one per rank
};

}  // namespace inagg::control
