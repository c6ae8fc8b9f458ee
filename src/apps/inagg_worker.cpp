// inagg-worker: one rank of an allreduce over the software RoCEv2 RC transport, in the style of
// nccl-tests' all_reduce_perf. Mode `ina` (the only one so far): each rank RDMA-WRITEs its buffer,
// message by message, to its successor through the appliance, which sums the n streams; every
// rank receives the full sum in one pass (design.md §1). `--print-job` prints the job file the
// appliance needs for the same parameters (register it with inagg-ctl add).
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
#include "inagg/worker/rc.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::worker;

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
      ("rank", po::value<unsigned>(&o.rank), "this worker's rank, 0..N-1")
      ("workers,n", po::value<unsigned>(&o.workers), "number of workers N (2..64)")
      ("ip-base", po::value<std::string>(&o.ip_base)->default_value(o.ip_base), "rank r uses IPv4 address ip-base + r + 1")
      ("dtype,d", po::value<std::string>(&o.dtype_name)->default_value(o.dtype_name), "fp32, fp16, bf16 or int32")
      ("minbytes,b", po::value<uint64_t>(&o.min_bytes)->default_value(o.min_bytes), "smallest allreduce size")
      ("maxbytes,e", po::value<uint64_t>(&o.max_bytes)->default_value(o.max_bytes), "largest allreduce size")
      ("stepfactor,f", po::value<unsigned>(&o.factor)->default_value(o.factor), "size multiplier between rows")
      ("iters", po::value<unsigned>(&o.iters)->default_value(o.iters), "timed iterations per size")
      ("warmup", po::value<unsigned>(&o.warmup)->default_value(o.warmup), "untimed iterations per size")
      ("check", "verify every element against the rank-ordered reference sum")
      ("mode", po::value<std::string>(&o.mode)->default_value(o.mode), "ina (through the appliance); ring is not implemented yet")
      ("payload", po::value<uint32_t>(&o.payload)->default_value(o.payload), "path MTU payload P, bytes")
      ("message", po::value<uint32_t>(&o.message)->default_value(o.message), "RDMA WRITE message size M (multiple of P); a size's tail is padded")
      ("window", po::value<unsigned>(&o.window)->default_value(o.window), "messages in flight per QP")
      ("ack-timeout-ms", po::value<double>(&o.ack_timeout_ms)->default_value(o.ack_timeout_ms), "RC ACK timeout")
      ("retry", po::value<unsigned>(&o.retry)->default_value(o.retry), "RC retry count")
      ("seed", po::value<uint32_t>(&o.seed)->default_value(o.seed), "seed of the --check inputs")
      ("timeout", po::value<double>(&o.timeout_s)->default_value(o.timeout_s), "give up after this many seconds")
      ("job-id", po::value<uint32_t>(&o.job_id)->default_value(o.job_id), "the appliance job id (ina mode)")
      ("register", po::value<std::string>(&o.register_socket), "ina mode: rank 0 adds the job through this inagg control socket, and every rank waits until the job is active before sending")
      ("print-job", "print the appliance job file for these parameters and exit");
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
  if (o.mode != "ina" && o.mode != "ring") {
    std::cerr << "inagg-worker: --mode must be ina (through the appliance) or ring (the classic ring allreduce)\n";
    return 2;
  }
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes || o.factor < 2) {
    std::cerr << "inagg-worker: need 0 < minbytes <= maxbytes and stepfactor >= 2\n";
    return 2;
  }

  const unsigned n = o.workers, succ = (o.rank + 1) % n, pred = (o.rank + n - 1) % n;
  const bool ring = o.mode == "ring";
  const uint64_t deadline = now_ns() + static_cast<uint64_t>(o.timeout_s * 1e9);

  RoceSocket sock;
  std::string err;
  if (!sock.open(ip_of(o, o.rank), 2 /* ECT(0) */, &err)) {
    std::cerr << "inagg-worker: " << err << "\n";
    return 2;
  }
  const size_t es = agg::dtype_size(o.dtype);
  const uint64_t max_padded = (o.max_bytes + o.message - 1) / o.message * o.message;
  // ring: the buffer in n chunks of whole elements, each padded to whole messages; every step has
  // its own staging area in the receive region, so a step never overwrites one not yet consumed.
  auto chunk_of = [&](uint64_t bytes) { return ((bytes / es + n - 1) / n) * es; };
  auto padded = [&](uint64_t b) { return std::max<uint64_t>(o.message, (b + o.message - 1) / o.message * o.message); };
  const uint64_t recv_len = ring ? 2ull * (n - 1) * padded(chunk_of(o.max_bytes)) : max_padded;
  std::vector<uint8_t> send(ring ? padded(chunk_of(o.max_bytes)) * n : max_padded, 0), recv(recv_len, 0),
      data(max_padded + padded(chunk_of(o.max_bytes)) * n, 0), want(max_padded);
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

  // Job registration (ina): rank 0 adds it; everyone waits until it is active, because before
  // that the appliance would switch the packets unaggregated. This comes after the buffers are
  // allocated, so no rank starts sending while another is still setting up.
  if (!ring && !o.register_socket.empty()) {
    std::string reply, e;
    if (o.rank == 0) {
      if (!control::send_request(o.register_socket, "add\n" + job_text(o), &reply, &e)) {
        std::cerr << "inagg-worker: " << e << "\n";
        return 2;
      }
      if (reply.rfind("error:", 0) == 0 && reply.find("already exists") == std::string::npos) {
        std::cerr << "inagg-worker: the appliance refused the job: " << reply;
        return 2;
      }
    }
    const std::string want = "id=" + std::to_string(o.job_id) + " state=active";
    while (true) {
      if (control::send_request(o.register_socket, "list\n", &reply, &e) && reply.find(want) != std::string::npos) break;
      if (now_ns() > deadline) {
        std::cerr << "inagg-worker: job " << o.job_id << " never became active on " << o.register_socket << "\n";
        return 1;
      }
      ::poll(nullptr, 0, 20);
    }
  }

  // Runs the transport until `done()`; false (after saying why) on failure or timeout.
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
  auto pump = [&](auto done) {
    while (!done()) {
      const uint64_t t = now_ns();
      if (req.failed() || !rsp.error().empty() || t > deadline) {
        std::cerr << "inagg-worker: rank " << o.rank << ": "
                  << (req.failed() ? req.error() : !rsp.error().empty() ? rsp.error() : "timed out") << "\n";
        return false;
      }
      req.progress(t);
      rsp.progress(t);
      ::poll(&pfd, 1, 1);
      drain_socket(t);
    }
    return true;
  };
  // Writes `len` bytes (padded to whole messages) to the successor at offset `off` of its region
  // and waits until `expect` more messages have arrived from the predecessor. Counted from the
  // start, not from now: in ring mode the predecessor may be a step ahead, its message already in.
  uint64_t expected_msgs = 0;
  auto exchange = [&](const uint8_t* src, uint64_t len, uint64_t off, uint64_t expect) {
    expected_msgs += expect;
    for (uint64_t m = 0; m * o.message < len; ++m)
      req.post_write(src + m * o.message, o.message, kVa + off + m * o.message, kRkey, static_cast<uint32_t>(m));
    return pump([&] { return req.idle() && rsp.messages() >= expected_msgs; });
  };

  // One allreduce of `bytes` (whole elements) in data[]: the result ends in data[].
  auto allreduce = [&](uint64_t bytes) -> bool {
    if (!ring) {
      const uint64_t msgs = padded(bytes) / o.message;
      std::memcpy(send.data(), data.data(), bytes);
      std::memset(send.data() + bytes, 0, msgs * o.message - bytes);  // the padded tail sums to zero
      if (!exchange(send.data(), msgs * o.message, 0, msgs)) return false;
      std::memcpy(data.data(), recv.data(), bytes);
      return true;
    }
    // ring: reduce-scatter (n-1 steps), then all-gather (n-1 steps). Chunk c is reduced in the
    // order c, c+1, ..., c+n-1.
    const uint64_t chunk = chunk_of(bytes), pc = padded(chunk), msgs = pc / o.message;
    for (unsigned step = 0; step < 2 * (n - 1); ++step) {
      const bool gather = step >= n - 1;
      const unsigned k = gather ? step - (n - 1) : step;
      const unsigned send_c = (o.rank + (gather ? 1 : 0) + n - k) % n, recv_c = (o.rank + (gather ? 0 : n - 1) + n - k) % n;
      std::memset(send.data(), 0, pc);
      std::memcpy(send.data(), data.data() + send_c * chunk, chunk);
      if (!exchange(send.data(), pc, step * pc, msgs)) return false;
      uint8_t* dst = data.data() + recv_c * chunk;
      const uint8_t* got = recv.data() + step * pc;
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

  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s, dtype %s, M %u, P %u, window %u\n", o.rank, n,
              wire::ip_text(ip_of(o, o.rank)).c_str(), wire::ip_text(ip_of(o, succ)).c_str(), o.mode.c_str(), o.dtype_name.c_str(),
              o.message, o.payload, o.window);
  std::printf("#%11s %12s %6s %10s %8s %8s %8s\n", "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong");
  double busbw_sum = 0;
  unsigned rows = 0;
  uint64_t wrong_total = 0;
  for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const uint64_t bytes = size / es * es;
    if (bytes == 0) continue;
    double total_us = 0;
    for (unsigned it = 0; it < o.warmup + o.iters; ++it) {
      fill(o, o.rank, data.data(), bytes);
      const uint64_t t0 = now_ns();
      if (!allreduce(bytes)) return 1;
      if (it >= o.warmup) total_us += static_cast<double>(now_ns() - t0) / 1e3;
    }
    uint64_t wrong = 0;
    if (o.check) {
      std::vector<std::vector<uint8_t>> inputs(n, std::vector<uint8_t>(bytes));
      for (unsigned r = 0; r < n; ++r) fill(o, r, inputs[r].data(), bytes);
      const uint64_t chunk = chunk_of(bytes);
      for (uint64_t c0 = 0; c0 < bytes; c0 += (ring ? chunk : bytes)) {
        const uint64_t len = std::min<uint64_t>(ring ? chunk : bytes, bytes - c0);
        const unsigned first = ring ? static_cast<unsigned>(c0 / chunk) : 0;  // ring: chunk c starts at rank c
        if (ring) {
          // A ring rounds at every hop (fp16/bf16 accumulate in their own type): the reference does too.
          std::memcpy(want.data() + c0, inputs[first].data() + c0, len);
          for (unsigned k = 1; k < n; ++k) agg::scalar::add_into(o.dtype, want.data() + c0, inputs[(first + k) % n].data() + c0, len);
        } else {  // ina: the appliance's rank-ordered sum, halves accumulated in fp32 and rounded once
          std::vector<const uint8_t*> srcs;
          for (unsigned k = 0; k < n; ++k) srcs.push_back(inputs[(first + k) % n].data() + c0);
          agg::scalar::sum_ranked(o.dtype, want.data() + c0, srcs.data(), n, len);
        }
      }
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
  // until it has been quiet for a few of its ACK timeouts (an RDMA app's final barrier).
  for (uint64_t quiet_since = now_ns(); now_ns() - quiet_since < 4 * rq.ack_timeout_ns && now_ns() < deadline;) {
    const uint64_t t = now_ns();
    req.progress(t);
    rsp.progress(t);
    ::poll(&pfd, 1, 1);
    if (drain_socket(t)) quiet_since = t;
  }
  const RcCounters& c = req.counters();
  std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? busbw_sum / rows : 0.0);
  std::printf("# rank %u: sent %" PRIu64 " packets (%" PRIu64 " resent), %" PRIu64 " timeouts, %" PRIu64
              " NAKs received; received %" PRIu64 " in order, %" PRIu64 " duplicates, %" PRIu64 " bad ICRC\n",
              o.rank, c.packets_sent, c.retransmitted, c.timeouts, c.naks_received, rsp.counters().accepted,
              rsp.counters().duplicates, rsp.counters().bad_icrc);
  return wrong_total ? 1 : 0;
}
