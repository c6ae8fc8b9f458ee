// inagg-worker: one rank of an allreduce, in the style of nccl-tests' all_reduce_perf.
//   ina   each rank RDMA-WRITEs its buffer, message by message, over the software RoCEv2 RC
//         transport to its successor through the appliance, which sums the n streams; every rank
//         receives the full sum in one pass (design.md §1). `--print-job` prints the appliance's
//         job file for the same parameters.
//   ring  the classic ring allreduce over the same transport (the appliance only switches it).
//   xdp   the XDP tier (ALEPH): chunks of fixed-point int32 to the group's head, results back
//         multicast (include/inagg/client/xagg_client.hpp).
//   auto  ina while the appliance aggregates, the XDP tier from the moment it does not; the
//         README's "Fall-over" section says how it decides and why no gradient is lost or doubled.
#include <poll.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "inagg/agg/kernels.hpp"
#include "inagg/control/socket.hpp"
#include "inagg/client/rc.hpp"
#include "inagg/client/xagg_client.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::client;

namespace {

struct Options {
  unsigned rank = 0, workers = 0;
  std::string ip_base = "10.77.0.0";
  std::string dtype_name = "fp32";
  agg::Dtype dtype = agg::Dtype::fp32;
  uint64_t min_bytes = 1024, max_bytes = 1 << 20;
  unsigned factor = 2;
  unsigned iters = 5, warmup = 1;
  bool check = false;
  std::string mode = "ina";
  uint32_t payload = 1024, message = 65536;
  unsigned window = 2;
  double ack_timeout_ms = 50;
  unsigned retry = 7;
  uint32_t seed = 1;
  double timeout_s = 60;
  uint32_t job_id = 1;
  std::string register_socket;  // "" = the job is registered by someone else
  // The XDP tier (modes xdp and auto).
  std::string xdp_heads;        // comma-separated: the head of group g is the g-th
  unsigned xdp_group_size = 0;  // ranks per group (0: all in one)
  std::string xdp_mcast = "239.77.0.1";  // group g's results go to this address + g
  unsigned xdp_values = 256, xdp_window = 8, xdp_port = 4792;
  double xdp_timeout_ms = 20;
  double xdp_scale = 1048576;   // fixed point: 2^20 per unit
};

wire::IpAddr ip_of(const Options& o, unsigned rank) {
  wire::IpAddr base = *wire::parse_ip(o.ip_base);
  return wire::IpAddr::v4(base.v4_host_order() + rank + 1);
}
// ina mode's QPs are the ones the job registers; ring mode uses others, which the appliance
// does not know and so switches untouched.
uint32_t send_qpn(unsigned rank) { return 0x100 + rank; }
uint32_t recv_qpn(unsigned rank) { return 0x200 + rank; }
uint32_t ring_send_qpn(unsigned rank) { return 0x300 + rank; }
uint32_t ring_recv_qpn(unsigned rank) { return 0x400 + rank; }
uint32_t start_psn(unsigned rank) { return (0xfff000u + 101u * rank) & 0xffffff; }

std::string job_text(const Options& o) {
  char buf[256];
  std::string t;
  std::snprintf(buf, sizeof buf, "# inagg-worker --print-job: %u workers, rank r at %s + r + 1\nid = %u\ndtype = %s\nworkers = %u\n",
                o.workers, o.ip_base.c_str(), o.job_id, o.dtype_name.c_str(), o.workers);
  t += buf;
  std::snprintf(buf, sizeof buf, "message_bytes = %u\npayload_bytes = %u\nwindow = %u\n", o.message, o.payload, o.window);
  t += buf;
  for (unsigned r = 0; r < o.workers; ++r) {
    const unsigned s = (r + 1) % o.workers;
    std::snprintf(buf, sizeof buf, "conn = %u,%s,0x%x,%s,0x%x,0x%x\n", r, wire::ip_text(ip_of(o, r)).c_str(), send_qpn(r),
                  wire::ip_text(ip_of(o, s)).c_str(), recv_qpn(s), start_psn(r));
    t += buf;
  }
  return t;
}

// Rank r's input: deterministic from (seed, rank), so every rank can compute the reference sum.
void fill(const Options& o, unsigned rank, uint8_t* buf, size_t bytes) {
  std::mt19937 rng(o.seed * 7919u + rank);
  const size_t es = agg::dtype_size(o.dtype);
  for (size_t i = 0; i + es <= bytes; i += es) {
    switch (o.dtype) {
      case agg::Dtype::fp32: {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(buf + i, &f, 4);
        break;
      }
      case agg::Dtype::int32: {
        const uint32_t x = rng();
        std::memcpy(buf + i, &x, 4);
        break;
      }
      case agg::Dtype::fp16:
      case agg::Dtype::bf16: {
        const float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        const uint16_t h = o.dtype == agg::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
        std::memcpy(buf + i, &h, 2);
        break;
      }
    }
  }
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description d("Usage: inagg-worker --rank R --workers N [options]\n\nOptions");
  d.add_options()
      ("help,h", "show this help")
      ("version", "print the version and exit")
      ("rank", po::value<unsigned>(&o.rank), "this worker's rank, 0..N-1")
      ("workers,n", po::value<unsigned>(&o.workers), "number of workers N (2..64)")
      ("ip-base", po::value<std::string>(&o.ip_base)->default_value(o.ip_base), "rank r uses IPv4 address ip-base + r + 1")
      ("dtype,d", po::value<std::string>(&o.dtype_name)->default_value(o.dtype_name), "fp32, fp16, bf16 or int32")
      ("minbytes,b", po::value<uint64_t>(&o.min_bytes)->default_value(o.min_bytes), "smallest allreduce size")
      ("maxbytes,e", po::value<uint64_t>(&o.max_bytes)->default_value(o.max_bytes), "largest allreduce size")
      ("stepfactor,f", po::value<unsigned>(&o.factor)->default_value(o.factor), "size multiplier between rows")
      ("iters", po::value<unsigned>(&o.iters)->default_value(o.iters), "timed iterations per size")
      ("warmup", po::value<unsigned>(&o.warmup)->default_value(o.warmup), "untimed iterations per size")
      ("check", "verify every element of every iteration against the reference: the rank-ordered sum (ina), the ring's hop order (ring), the fixed-point sum (xdp)")
      ("mode", po::value<std::string>(&o.mode)->default_value(o.mode), "ina (through the appliance), ring (ring allreduce), xdp (the XDP tier), auto (ina, falling over to xdp)")
      ("payload", po::value<uint32_t>(&o.payload)->default_value(o.payload), "path MTU payload P, bytes")
      ("message", po::value<uint32_t>(&o.message)->default_value(o.message), "RDMA WRITE message size M (multiple of P); a size's tail is padded")
      ("window", po::value<unsigned>(&o.window)->default_value(o.window), "messages in flight per QP")
      ("ack-timeout-ms", po::value<double>(&o.ack_timeout_ms)->default_value(o.ack_timeout_ms), "RC ACK timeout")
      ("retry", po::value<unsigned>(&o.retry)->default_value(o.retry), "RC retry count")
      ("seed", po::value<uint32_t>(&o.seed)->default_value(o.seed), "seed of the --check inputs")
      ("timeout", po::value<double>(&o.timeout_s)->default_value(o.timeout_s), "give up after this many seconds")
      ("job-id", po::value<uint32_t>(&o.job_id)->default_value(o.job_id), "the appliance job id (ina mode)")
      ("register", po::value<std::string>(&o.register_socket), "ina mode: rank 0 adds the job through this inagg control socket, and every rank waits until the job is active before sending")
      ("print-job", "print the appliance job file for these parameters and exit")
      ("xdp-heads", po::value<std::string>(&o.xdp_heads)->value_name("IP[,IP..]"), "xdp/auto: the head of each group (group g = rank / group size)")
      ("xdp-group-size", po::value<unsigned>(&o.xdp_group_size)->default_value(0), "xdp/auto: ranks per head (0: all ranks under one head)")
      ("xdp-mcast", po::value<std::string>(&o.xdp_mcast)->default_value(o.xdp_mcast), "xdp/auto: multicast address of group 0's results; group g uses this + g")
      ("xdp-values", po::value<unsigned>(&o.xdp_values)->default_value(o.xdp_values), "xdp/auto: int32 values per packet (the heads' values)")
      ("xdp-window", po::value<unsigned>(&o.xdp_window)->default_value(o.xdp_window), "xdp/auto: chunks in flight (the heads' window)")
      ("xdp-timeout-ms", po::value<double>(&o.xdp_timeout_ms)->default_value(o.xdp_timeout_ms), "xdp/auto: send a chunk again when its result is this late")
      ("xdp-scale", po::value<double>(&o.xdp_scale)->default_value(o.xdp_scale), "xdp/auto: fixed point for fp32/fp16/bf16: int32 = round(value * scale), clipped so that n values cannot overflow")
      ("xdp-port", po::value<unsigned>(&o.xdp_port)->default_value(o.xdp_port), "xdp/auto: the tier's UDP port");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "inagg-worker: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg-worker") << "\n";
    return 0;
  }
  auto dt = agg::parse_dtype(o.dtype_name);
  if (!dt) {
    std::cerr << "inagg-worker: --dtype must be fp32, fp16, bf16 or int32\n";
    return 2;
  }
  o.dtype = *dt;
  o.check = vm.count("check") > 0;
  if (o.workers < 2 || o.workers > 64 || !vm.count("workers")) {
    std::cerr << "inagg-worker: --workers must be between 2 and 64\n";
    return 2;
  }
  if (!wire::parse_ip(o.ip_base) || wire::parse_ip(o.ip_base)->version != wire::IpVersion::v4) {
    std::cerr << "inagg-worker: --ip-base must be an IPv4 address\n";
    return 2;
  }
  if (o.payload == 0 || o.payload % 4 || o.message % o.payload) {
    std::cerr << "inagg-worker: --message must be a multiple of --payload, and --payload a multiple of 4\n";
    return 2;
  }
  if (vm.count("print-job")) {
    std::fputs(job_text(o).c_str(), stdout);
    return 0;
  }
  if (!vm.count("rank") || o.rank >= o.workers) {
    std::cerr << "inagg-worker: --rank must be given and below --workers\n";
    return 2;
  }
  if (o.mode != "ina" && o.mode != "ring" && o.mode != "xdp" && o.mode != "auto") {
    std::cerr << "inagg-worker: --mode must be ina (through the appliance), ring (the classic ring allreduce), xdp (the XDP "
                 "tier) or auto (ina, falling over to xdp)\n";
    return 2;
  }
  const bool use_xdp = o.mode == "xdp" || o.mode == "auto";
  std::vector<wire::IpAddr> heads;
  for (size_t start = 0; use_xdp && start <= o.xdp_heads.size();) {
    const size_t comma = std::min(o.xdp_heads.find(',', start), o.xdp_heads.size());
    const std::optional<wire::IpAddr> h = wire::parse_ip(o.xdp_heads.substr(start, comma - start));
    if (!h || h->version != wire::IpVersion::v4) {
      std::cerr << "inagg-worker: --xdp-heads must list the heads' IPv4 addresses, comma-separated\n";
      return 2;
    }
    heads.push_back(*h);
    start = comma + 1;
  }
  const unsigned group_size = o.xdp_group_size ? o.xdp_group_size : o.workers;
  const std::optional<wire::IpAddr> mcast = wire::parse_ip(o.xdp_mcast);
  if (use_xdp) {
    if (heads.size() != (o.workers + group_size - 1) / group_size) {
      std::cerr << "inagg-worker: " << o.workers << " workers in groups of " << group_size << " need "
                << (o.workers + group_size - 1) / group_size << " --xdp-heads, got " << heads.size() << "\n";
      return 2;
    }
    if (!mcast || mcast->version != wire::IpVersion::v4 || (mcast->bytes[0] & 0xf0) != 0xe0) {
      std::cerr << "inagg-worker: --xdp-mcast must be an IPv4 multicast address (e.g. 239.77.0.1)\n";
      return 2;
    }
    if (o.job_id > 255 || o.xdp_scale <= 0 || o.xdp_timeout_ms <= 0 || o.xdp_port == 0 || o.xdp_port > 65535) {
      std::cerr << "inagg-worker: the XDP tier needs --job-id 0..255, --xdp-scale > 0, --xdp-timeout-ms > 0 and a UDP port\n";
      return 2;
    }
  }
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes || o.factor < 2) {
    std::cerr << "inagg-worker: need 0 < minbytes <= maxbytes and stepfactor >= 2\n";
    return 2;
  }

  const unsigned n = o.workers, succ = (o.rank + 1) % n, pred = (o.rank + n - 1) % n;
  const bool ring = o.mode == "ring", tallied = o.mode == "auto";
  const uint64_t deadline = now_ns() + static_cast<uint64_t>(o.timeout_s * 1e9);

  RoceSocket sock;
  std::string err;
  if (o.mode != "xdp" && !sock.open(ip_of(o, o.rank), 2 /* ECT(0) */, &err)) {
    std::cerr << "inagg-worker: " << err << "\n";
    return 2;
  }
  XaggClient xagg;
  const unsigned group = o.rank / group_size;
  if (use_xdp) {
    XaggConfig xc;
    xc.local = ip_of(o, o.rank);
    xc.head = heads[group];
    xc.group = wire::IpAddr::v4(mcast->v4_host_order() + group);
    xc.port = static_cast<uint16_t>(o.xdp_port);
    xc.job = o.job_id;
    xc.rank = o.rank % group_size;
    xc.values = o.xdp_values;
    xc.window = o.xdp_window;
    xc.total_weight = n;
    xc.timeout_ns = static_cast<uint64_t>(o.xdp_timeout_ms * 1e6);
    if (!xagg.open(xc, &err)) {
      std::cerr << "inagg-worker: " << err << "\n";
      return 2;
    }
  }
  const size_t es = agg::dtype_size(o.dtype);
  // auto: the last element of every message is a tally, 1 from every rank: the appliance sums it
  // to n, a message that crossed no appliance arrives with 1. Each allreduce ends with one more
  // message (zeros and the tally), the commit: once it arrives summed, every rank has every
  // message of the allreduce, so no rank can later need it again from another tier.
  const uint64_t data_per_msg = tallied ? o.message - es : o.message;
  auto msgs_of = [&](uint64_t bytes) { return std::max<uint64_t>(1, (bytes + data_per_msg - 1) / data_per_msg); };
  const uint64_t max_padded = (msgs_of(o.max_bytes) + (tallied ? 1 : 0)) * o.message;
  // ring: the buffer in n chunks of whole elements, each padded to whole messages; every step has
  // its own staging area in the receive region, so a step never overwrites one not yet consumed.
  // The areas sit at a stride fixed for the whole run (the largest size's padded chunk), not at
  // the current size's: the predecessor may be up to n-1 steps ahead, already in the next size,
  // and with a stride that grew its writes would land on a step we have not read yet.
  auto chunk_of = [&](uint64_t bytes) { return ((bytes / es + n - 1) / n) * es; };
  auto padded = [&](uint64_t b) { return std::max<uint64_t>(o.message, (b + o.message - 1) / o.message * o.message); };
  const uint64_t stage_stride = padded(chunk_of(o.max_bytes));
  const uint64_t recv_len = ring ? 2ull * (n - 1) * stage_stride : max_padded;
  std::vector<uint8_t> send(ring ? padded(chunk_of(o.max_bytes)) * n : max_padded, 0), recv(recv_len, 0),
      data(max_padded + padded(chunk_of(o.max_bytes)) * n, 0);
  std::vector<int32_t> fixed(use_xdp ? o.max_bytes / es + 4 : 0);
  constexpr uint64_t kVa = 0x7f0000000000ull;
  constexpr uint32_t kRkey = 0x1234;
  RcConfig rq;
  rq.local_qpn = ring ? ring_send_qpn(o.rank) : send_qpn(o.rank);
  rq.remote_qpn = ring ? ring_recv_qpn(succ) : recv_qpn(succ);
  rq.remote_ip = ip_of(o, succ);
  rq.send_start_psn = start_psn(o.rank);
  rq.mtu_payload = o.payload;
  rq.window = o.window;
  rq.ack_timeout_ns = static_cast<uint64_t>(o.ack_timeout_ms * 1e6);
  rq.retry_count = o.retry;
  RcConfig rs = rq;
  rs.local_qpn = ring ? ring_recv_qpn(o.rank) : recv_qpn(o.rank);
  rs.remote_qpn = ring ? ring_send_qpn(pred) : send_qpn(pred);
  rs.remote_ip = ip_of(o, pred);
  rs.recv_start_psn = start_psn(pred);
  RcRequester req(sock, rq);
  RcResponder rsp(sock, rs, recv.data(), recv.size(), kVa, kRkey);

  // Which tier the next allreduce starts on; auto moves from appliance to xdp once, for good
  // (the next job tries the appliance again).
  enum class Tier { appliance, xdp };
  Tier tier = o.mode == "xdp" ? Tier::xdp : Tier::appliance;
  std::string fallover_reason;

  // Job registration (ina, auto): rank 0 adds it; everyone waits until it is active, because
  // before that the appliance would switch the packets unaggregated. This comes after the buffers
  // are allocated, so no rank starts sending while another is still setting up. In auto mode an
  // appliance that cannot be reached, or a job that does not become active within 5 s, means
  // the XDP tier from the start.
  if ((o.mode == "ina" || tallied) && !o.register_socket.empty()) {
    std::string reply, e;
    const uint64_t wait_until = tallied ? std::min<uint64_t>(deadline, now_ns() + 5'000'000'000ull) : deadline;
    if (o.rank == 0) {
      if (!control::send_request(o.register_socket, "add\n" + job_text(o), &reply, &e)) {
        if (!tallied) {
          std::cerr << "inagg-worker: " << e << "\n";
          return 2;
        }
        fallover_reason = "the appliance cannot be reached: " + e;
      } else if (reply.rfind("error:", 0) == 0 && reply.find("already exists") == std::string::npos) {
        if (!tallied) {
          std::cerr << "inagg-worker: the appliance refused the job: " << reply;
          return 2;
        }
        fallover_reason = "the appliance refused the job: " + reply.substr(0, reply.find('\n'));
      }
    }
    const std::string want_line = "id=" + std::to_string(o.job_id) + " state=active";
    while (fallover_reason.empty()) {
      if (control::send_request(o.register_socket, "list\n", &reply, &e) && reply.find(want_line) != std::string::npos) break;
      if (now_ns() > wait_until) {
        if (!tallied) {
          std::cerr << "inagg-worker: job " << o.job_id << " never became active on " << o.register_socket << "\n";
          return 1;
        }
        fallover_reason = "job " + std::to_string(o.job_id) + " is not active on " + o.register_socket;
      }
      ::poll(nullptr, 0, 20);
    }
  }

  Datagram dg;
  pollfd pfd{sock.fd(), POLLIN, 0};
  // Dispatches every waiting datagram to the requester (ACK/NAK) or the responder (data); true
  // when there was any.
  auto drain_socket = [&](uint64_t t) {
    bool any = false;
    while (sock.receive(&dg)) {
      any = true;
      if (!dg.roce) continue;
      const uint32_t qpn = wire::bth_of(dg.frame.data(), dg.layout).dest_qp();
      if (qpn == rq.local_qpn) req.on_ack(dg, t);
      else if (qpn == rs.local_qpn) rsp.on_data(dg, t);
    }
    return any;
  };
  // Runs the transport until `done()`; "" then, or why it stopped: the requester gave up, the
  // responder saw a broken stream, the deadline passed, or (auto) nothing arrived at all for
  // twice the requester's retry budget: a predecessor that fell over stops sending while our own
  // writes may all be acknowledged, so only silence tells.
  const uint64_t stall_ns = tallied ? 2 * (rq.retry_count + 1) * rq.ack_timeout_ns : 0;
  auto pump = [&](auto done) -> std::string {
    uint64_t last_rx = now_ns();
    while (!done()) {
      const uint64_t t = now_ns();
      if (req.failed()) return req.error();
      if (!rsp.error().empty()) return rsp.error();
      if (t > deadline) return "timed out";
      if (stall_ns && t - last_rx > stall_ns)
        return "nothing arrived for " + std::to_string(stall_ns / 1'000'000) + " ms (the predecessor stopped sending)";
      req.progress(t);
      rsp.progress(t);
      ::poll(&pfd, 1, 1);
      if (drain_socket(t)) last_rx = t;
    }
    return "";
  };
  // Writes `len` bytes (padded to whole messages) to the successor at offset `off` of its region
  // and waits until `expect` more messages have arrived from the predecessor. Counted from the
  // start, not from now: in ring mode the predecessor may be up to n-1 steps ahead (it sends step
  // j once step j-1 arrived from its own predecessor, which round the ring needs our step j-n+1),
  // its messages already in.
  uint64_t expected_msgs = 0;
  auto exchange = [&](const uint8_t* src, uint64_t len, uint64_t off, uint64_t expect) {
    expected_msgs += expect;
    for (uint64_t m = 0; m * o.message < len; ++m)
      req.post_write(src + m * o.message, o.message, kVa + off + m * o.message, kRkey, static_cast<uint32_t>(m));
    return pump([&] { return req.idle() && rsp.messages() >= expected_msgs; });
  };
  auto fatal = [&](const std::string& why) {
    std::cerr << "inagg-worker: rank " << o.rank << ": " << why << "\n";
    return false;
  };

  // ina: the buffer in whole messages, the padded tail summing to zero.
  auto ina = [&](uint64_t bytes) {
    const uint64_t msgs = padded(bytes) / o.message;
    std::memcpy(send.data(), data.data(), bytes);
    std::memset(send.data() + bytes, 0, msgs * o.message - bytes);
    if (const std::string why = exchange(send.data(), msgs * o.message, 0, msgs); !why.empty()) return fatal(why);
    std::memcpy(data.data(), recv.data(), bytes);
    return true;
  };

  // auto's appliance path: data messages with a tally, then the commit message. True when both
  // arrived summed; otherwise *why, and *have_data says whether every data message had arrived
  // summed (the sum is then in held[]).
  // A small whole number as one element of the job's dtype (exact in each of them up to 64).
  auto element = [&](unsigned v, uint8_t* out) {
    const float f = static_cast<float>(v);
    const int32_t i = static_cast<int32_t>(v);
    const uint16_t h = o.dtype == agg::Dtype::fp16 ? agg::scalar::fp32_to_fp16(f) : agg::scalar::fp32_to_bf16(f);
    if (o.dtype == agg::Dtype::fp32) std::memcpy(out, &f, 4);
    else if (o.dtype == agg::Dtype::int32) std::memcpy(out, &i, 4);
    else std::memcpy(out, &h, 2);
  };
  uint8_t tally_one[4] = {}, tally_n[4] = {};
  element(1, tally_one);
  element(n, tally_n);
  auto tally_of = [&](uint64_t m, std::string* why) {
    const uint8_t* t = recv.data() + m * o.message + data_per_msg;
    if (std::memcmp(t, tally_n, es) == 0) return true;
    *why = "message " + std::to_string(m) + " arrived without the appliance's sum (tally " +
           (std::memcmp(t, tally_one, es) == 0 ? std::string("1") : std::string("garbled")) + ", want " + std::to_string(n) +
           "): no appliance aggregates on this path";
    return false;
  };
  // The sums are copied out of recv[] as soon as the data messages are in and checked: once our
  // commit is out, a predecessor whose path no longer aggregates may already be writing its next
  // allreduce's messages, unsummed, over the same offsets.
  std::vector<uint8_t> held(tallied ? o.max_bytes : 0);
  auto appliance_tallied = [&](uint64_t bytes, std::string* why, bool* have_data) {
    const uint64_t msgs = msgs_of(bytes);
    *have_data = false;
    std::memset(send.data(), 0, (msgs + 1) * o.message);
    for (uint64_t m = 0; m <= msgs; ++m) {
      if (m < msgs) std::memcpy(send.data() + m * o.message, data.data() + m * data_per_msg, std::min(data_per_msg, bytes - m * data_per_msg));
      std::memcpy(send.data() + m * o.message + data_per_msg, tally_one, es);
    }
    if (*why = exchange(send.data(), msgs * o.message, 0, msgs); !why->empty()) return false;
    for (uint64_t m = 0; m < msgs; ++m)
      if (!tally_of(m, why)) return false;
    for (uint64_t m = 0; m * data_per_msg < bytes; ++m)
      std::memcpy(held.data() + m * data_per_msg, recv.data() + m * o.message, std::min(data_per_msg, bytes - m * data_per_msg));
    *have_data = true;
    if (*why = exchange(send.data() + msgs * o.message, o.message, msgs * o.message, 1); !why->empty()) return false;
    return tally_of(msgs, why);
  };
  auto appliance_result = [&](uint64_t bytes) { std::memcpy(data.data(), held.data(), bytes); };

  // The XDP tier: fixed point in, int32 sums, back out. int32 travels as it is.
  uint64_t saturated = 0;
  auto xdp = [&](uint64_t bytes) {
    const size_t count = bytes / es;
    if (o.dtype == agg::Dtype::int32) std::memcpy(fixed.data(), data.data(), bytes);
    else saturated += to_fixed(o.dtype, data.data(), count, o.xdp_scale, n, fixed.data());
    std::string why;
    if (!xagg.allreduce(fixed.data(), count, deadline, &why)) return fatal(why);
    if (o.dtype == agg::Dtype::int32) std::memcpy(data.data(), fixed.data(), bytes);
    else from_fixed(o.dtype, fixed.data(), count, o.xdp_scale, data.data());
    return true;
  };

  // auto: the fall-over. Every rank gets here sooner or later (a message without the sum, its
  // requester giving up, an appliance that cannot be reached) and contributes h, the number of
  // allreduces whose data it holds summed, to an agreement sum on the XDP tier. Ranks differ by
  // at most one (nobody sends allreduce k+1 before its commit of k arrived, which needs every
  // rank to hold k), and nobody finished allreduce k before every rank held its data. So if every
  // h is the same, allreduces below h are done everywhere and the tier takes over from h;
  // otherwise allreduce floor(H/n) is held by some and not by others, finished by nobody, and is
  // done again on the tier by all. Returns the allreduce the tier takes over from.
  uint64_t index = 0;  // allreduces started in this job
  auto fall_over = [&](bool have_data, std::optional<uint64_t>* resume) {
    tier = Tier::xdp;
    const uint64_t h = index + (have_data ? 1 : 0);
    int32_t agree[4] = {1, static_cast<int32_t>(h), 0, 0};
    std::string why;
    if (!xagg.allreduce(agree, 4, deadline, &why)) return fatal("fall-over agreement on the XDP tier: " + why);
    const uint64_t sum = static_cast<uint32_t>(agree[1]);
    *resume = sum == n * h ? h : sum / n;
    std::printf("# rank %u: falling over to the XDP tier at allreduce %" PRIu64 " (%s); the tier takes over from allreduce %" PRIu64 "\n",
                o.rank, index, fallover_reason.c_str(), **resume);
    std::fflush(stdout);
    if (**resume != index && **resume != index + 1)
      return fatal("fall-over agreement: the ranks resume at allreduce " + std::to_string(**resume) + ", this rank is at " +
                   std::to_string(index) + " (a rank that does not follow the protocol?)");
    return true;
  };

  // One allreduce of `bytes` (whole elements) in data[]: the result ends in data[]. Sets
  // `last_tier` to the tier whose sums it holds.
  Tier last_tier = tier;
  auto allreduce = [&](uint64_t bytes) -> bool {
    if (o.mode == "ina") return ina(bytes);
    if (o.mode == "xdp") return xdp(bytes);
    if (tallied) {
      bool have_data = false;
      if (tier == Tier::appliance) {
        if (fallover_reason.empty() && appliance_tallied(bytes, &fallover_reason, &have_data)) {
          appliance_result(bytes);
          last_tier = Tier::appliance;
          return true;
        }
        std::optional<uint64_t> resume;
        if (!fall_over(have_data, &resume)) return false;
        if (*resume == index + 1) {  // every rank holds this allreduce's appliance sums
          if (!have_data) return fatal("fall-over agreement: resume after this allreduce, but this rank lacks its sums");
          appliance_result(bytes);
          last_tier = Tier::appliance;
          return true;
        }
      }
      last_tier = Tier::xdp;
      return xdp(bytes);
    }
    // ring: reduce-scatter (n-1 steps), then all-gather (n-1 steps). Chunk c is reduced in the
    // order c, c+1, ..., c+n-1.
    const uint64_t chunk = chunk_of(bytes), pc = padded(chunk), msgs = pc / o.message;
    for (unsigned step = 0; step < 2 * (n - 1); ++step) {
      const bool gather = step >= n - 1;
      const unsigned j = gather ? step - (n - 1) : step;
      const unsigned send_c = (o.rank + (gather ? 1 : 0) + n - j) % n, recv_c = (o.rank + (gather ? 0 : n - 1) + n - j) % n;
      std::memset(send.data(), 0, pc);
      std::memcpy(send.data(), data.data() + send_c * chunk, chunk);
      if (const std::string why = exchange(send.data(), pc, step * stage_stride, msgs); !why.empty()) return fatal(why);
      uint8_t* dst = data.data() + recv_c * chunk;
      const uint8_t* got = recv.data() + step * stage_stride;
      if (gather) {
        std::memcpy(dst, got, chunk);
      } else {
        // acc = received (ranks c..r-1) + ours (r): rank order along the ring.
        const uint8_t* srcs[2] = {got, dst};
        agg::sum_ranked(o.dtype, dst, srcs, 2, chunk);
      }
    }
    return true;
  };
  if (o.mode == "xdp") last_tier = Tier::xdp;

  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s, dtype %s, M %u, P %u, window %u\n", o.rank, n,
              wire::ip_text(ip_of(o, o.rank)).c_str(), wire::ip_text(ip_of(o, succ)).c_str(), o.mode.c_str(), o.dtype_name.c_str(),
              o.message, o.payload, o.window);
  if (use_xdp)
    std::printf("# XDP tier: head %s (group %u, rank %u in it), results on %s, job %u, %u values per packet, window %u%s\n",
                wire::ip_text(heads[group]).c_str(), group, o.rank % group_size,
                wire::ip_text(wire::IpAddr::v4(mcast->v4_host_order() + group)).c_str(), o.job_id, o.xdp_values, o.xdp_window,
                o.dtype == agg::Dtype::int32 ? "" : (", fixed point x" + std::to_string(o.xdp_scale)).c_str());
  std::printf("#%11s %12s %6s %10s %8s %8s %8s\n", "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong");
  double busbw_sum = 0;
  unsigned rows = 0;
  uint64_t wrong_total = 0;
  for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const uint64_t bytes = size / es * es;
    if (bytes == 0) continue;
    // --check: every iteration against the reference of the tier that summed it, each reference
    // computed once per size, when first needed.
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<uint8_t> want_sum, want_tier;
    auto reference = [&](Tier t) -> const std::vector<uint8_t>& {
      if (inputs.empty()) {
        inputs.assign(n, std::vector<uint8_t>(bytes));
        for (unsigned r = 0; r < n; ++r) fill(o, r, inputs[r].data(), bytes);
      }
      if (t == Tier::xdp && !ring) {
        if (want_tier.empty()) {
          // The tier's sum: every rank's input in fixed point (int32 as it is), added by a plain
          // wrapping int32 loop, back to the dtype.
          const size_t count = bytes / es;
          std::vector<int32_t> q(count), acc(count, 0);
          for (unsigned r = 0; r < n; ++r) {
            if (o.dtype == agg::Dtype::int32) std::memcpy(q.data(), inputs[r].data(), bytes);
            else to_fixed(o.dtype, inputs[r].data(), count, o.xdp_scale, n, q.data());
            for (size_t i = 0; i < count; ++i) acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(q[i]));
          }
          want_tier.resize(bytes);
          if (o.dtype == agg::Dtype::int32) std::memcpy(want_tier.data(), acc.data(), bytes);
          else from_fixed(o.dtype, acc.data(), count, o.xdp_scale, want_tier.data());
        }
        return want_tier;
      }
      if (want_sum.empty()) {
        want_sum.resize(bytes);
        const uint64_t chunk = chunk_of(bytes);
        for (uint64_t c0 = 0; c0 < bytes; c0 += (ring ? chunk : bytes)) {
          const uint64_t len = std::min<uint64_t>(ring ? chunk : bytes, bytes - c0);
          const unsigned first = ring ? static_cast<unsigned>(c0 / chunk) : 0;  // ring: chunk c starts at rank c
          if (ring) {
            // A ring rounds at every hop (fp16/bf16 accumulate in their own type): the reference does too.
            std::memcpy(want_sum.data() + c0, inputs[first].data() + c0, len);
            for (unsigned j = 1; j < n; ++j) agg::scalar::add_into(o.dtype, want_sum.data() + c0, inputs[(first + j) % n].data() + c0, len);
          } else {  // ina: the appliance's rank-ordered sum, halves accumulated in fp32 and rounded once
            std::vector<const uint8_t*> srcs;
            for (unsigned j = 0; j < n; ++j) srcs.push_back(inputs[(first + j) % n].data() + c0);
            agg::scalar::sum_ranked(o.dtype, want_sum.data() + c0, srcs.data(), n, len);
          }
        }
      }
      return want_sum;
    };
    double total_us = 0;
    uint64_t wrong = 0;
    for (unsigned it = 0; it < o.warmup + o.iters; ++it) {
      fill(o, o.rank, data.data(), bytes);
      const uint64_t t0 = now_ns();
      if (!allreduce(bytes)) return 1;
      ++index;
      if (it >= o.warmup) total_us += static_cast<double>(now_ns() - t0) / 1e3;
      if (!o.check) continue;
      const std::vector<uint8_t>& want = reference(last_tier);
      for (size_t i = 0; i < bytes; i += es) {
        if (std::memcmp(want.data() + i, data.data() + i, es) != 0) {
          if (wrong < 3) std::fprintf(stderr, "rank %u: element %zu differs from the reference sum\n", o.rank, i / es);
          ++wrong;
        }
      }
    }
    wrong_total += wrong;
    const double us = total_us / o.iters;
    const double algbw = static_cast<double>(bytes) / (us * 1e3);  // GB/s
    const double busbw = algbw * 2.0 * (n - 1) / n;
    busbw_sum += busbw;
    ++rows;
    std::printf(" %11" PRIu64 " %12" PRIu64 " %6s %10.1f %8.3f %8.3f %8" PRIu64 "\n", bytes, bytes / es,
                o.dtype_name.c_str(), us, algbw, busbw, o.check ? wrong : 0);
    std::fflush(stdout);
  }
  // Linger: our predecessor may have lost our last ACK and be retransmitting; keep answering
  // until it has been quiet for a few of its ACK timeouts (an RDMA app's final barrier). The XDP
  // tier needs none: its heads answer repeats from their retained results.
  for (uint64_t quiet_since = now_ns(); tier == Tier::appliance && now_ns() - quiet_since < 4 * rq.ack_timeout_ns && now_ns() < deadline;) {
    const uint64_t t = now_ns();
    req.progress(t);
    rsp.progress(t);
    ::poll(&pfd, 1, 1);
    if (drain_socket(t)) quiet_since = t;
  }
  // auto: a rank that finished on the appliance still meets the tier once, at its first chunk.
  // A rank that fell over during the last allreduce (its commit lost with the appliance) waits
  // there in its agreement; with every rank's h it learns that everybody holds everything.
  if (tallied && tier == Tier::appliance) {
    int32_t agree[4] = {1, static_cast<int32_t>(index), 0, 0};
    std::string why;
    if (!xagg.allreduce(agree, 4, deadline, &why)) {
      fatal("the job's closing agreement on the XDP tier (auto mode needs its heads up, as the fall-back it is): " + why);
      return 1;
    }
    if (static_cast<uint32_t>(agree[1]) != n * index) {
      fatal("closing agreement: the ranks hold " + std::to_string(static_cast<uint32_t>(agree[1])) + " allreduces in all, not " +
            std::to_string(n * index));
      return 1;
    }
  }
  const RcCounters& c = req.counters();
  std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? busbw_sum / rows : 0.0);
  if (o.mode != "xdp")
    std::printf("# rank %u: sent %" PRIu64 " packets (%" PRIu64 " resent), %" PRIu64 " timeouts, %" PRIu64
                " NAKs received; received %" PRIu64 " in order, %" PRIu64 " duplicates, %" PRIu64 " bad ICRC\n",
                o.rank, c.packets_sent, c.retransmitted, c.timeouts, c.naks_received, rsp.counters().accepted,
                rsp.counters().duplicates, rsp.counters().bad_icrc);
  if (use_xdp) {
    const XaggCounters& x = xagg.counters();
    std::printf("# rank %u: XDP tier: %" PRIu64 " chunks, %" PRIu64 " DATA sent (%" PRIu64 " repeats), %" PRIu64
                " results (%" PRIu64 " ignored), %" PRIu64 " values saturated%s\n",
                o.rank, x.chunks, x.sent, x.repeats, x.results, x.results_ignored, saturated,
                tier == Tier::xdp ? "" : " (not used: the appliance aggregated throughout)");
    if (saturated)
      std::fprintf(stderr, "inagg-worker: rank %u: %" PRIu64 " values did not fit the fixed point and were clipped; lower --xdp-scale\n",
                   o.rank, saturated);
  }
  return wrong_total ? 1 : 0;
}
