// What both of the plugin's networks share: the settings read from the environment once, NCCL's
// logger, and the few blocking-with-a-deadline socket steps of the ranks' meeting.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>

#include "inagg/util/dtype.hpp"
#include "plugin_api.hpp"

namespace inagg::ncclnet {

// The plugin's settings, the torch backend's variables where they mean the same (docs/gpu.md):
//   INAGG_CONTROL              the appliance's control socket (a path or tcp://HOST:PORT)
//   INAGG_CONTROL_SECRET_FILE  tcp://: the tenant's credential ($INAGG_CONTROL_SECRET first)
//   INAGG_ADDRESS / INAGG_IFNAME  this rank's IPv4 address, or the interface that holds it
//   INAGG_DTYPE                what the appliance sums: fp32 (default), fp16, bf16, int32
//   INAGG_JOB_ID               the allreduce's job id (+1 the reduce-scatter's, +2 the all-gather's);
//                              default: drawn by rank 0 for each communicator
//   INAGG_PAYLOAD, INAGG_MESSAGE, INAGG_CHUNK_BYTES  the geometry (client::RankGeometry)
//   INAGG_TIMEOUT_S            set-up deadline and the stall that fails a collective (60)
struct PluginEnv {
  std::string control, control_secret_file;
  std::optional<in_addr> address;
  std::string why_no_address;  // when address is empty: which variable to set
  std::string dtype_name = "fp32";
  util::Dtype dtype = util::Dtype::fp32;
  std::string why_bad_dtype;
  uint32_t job_id = 0, payload = 0, message = 65536;
  uint64_t chunk_bytes = 8u << 20;
  double timeout_s = 60;
};
// Read once, at the first init.
const PluginEnv& plugin_env();

// NCCL's logger as init gave it (stderr until then). Sentences start with "inagg: ".
void set_logger(Logger log);
[[gnu::format(printf, 2, 3)]] void log_line(LogLevel level, const char* fmt, ...);

// The meeting's sockets: a TCP listener on `address` (port chosen by the kernel), a connection to
// one, a line written or read by a deadline (ns on the monotonic clock). -1 / false with *why.
int listen_tcp(in_addr address, uint16_t* port, std::string* why);
int connect_tcp(in_addr address, uint16_t port, uint64_t deadline_ns, std::string* why);
int accept_tcp(int listen_fd, uint64_t deadline_ns, std::string* why);
bool write_all(int fd, const std::string& text, uint64_t deadline_ns, std::string* why);
bool read_line(int fd, std::string* line, uint64_t deadline_ns, std::string* why);

}  // namespace inagg::ncclnet
