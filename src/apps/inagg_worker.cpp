// inagg-worker: one rank of an allreduce, in the style of nccl-tests' all_reduce_perf: option
// parsing and output around client::Worker (include/inagg/client/worker.hpp), which holds the rack
// plan, the transport, the algorithms (ina, ring, xdp, auto) and auto's fall-over.
#include <boost/program_options.hpp>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <future>
#include <iostream>
#include <string>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/reference.hpp"
#include "inagg/client/worker.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::client;

namespace {

// Runs `work` on a thread of its own while this one keeps the transport running (Worker::serve):
// a rank that computes its --check reference (hundreds of ms for MiBs in an ASan build) must go on
// acknowledging its predecessor, or the predecessor's RC requester gives up on it.
template <class F>
void serving(Worker& w, F&& work) {
  std::future<void> done = std::async(std::launch::async, std::forward<F>(work));
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) w.serve(1);
  done.get();
}

}  // namespace

int main(int argc, char** argv) {
  WorkerOptions o;
  po::options_description d("Usage: inagg-worker --rank R --workers N [options]\n\nOptions");
  d.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "rank", po::value<unsigned>(&o.rank), "this worker's rank, 0..N-1")("workers,n", po::value<unsigned>(&o.workers),
                                                                          "number of workers N (2..64)")(
      "ip-base", po::value<std::string>(&o.ip_base)->default_value(o.ip_base),
      "rank r uses IPv4 address ip-base + r + 1")(
      "dtype,d", po::value<std::string>(&o.dtype_name)->default_value(o.dtype_name), "fp32, fp16, bf16 or int32")(
      "minbytes,b", po::value<uint64_t>(&o.min_bytes)->default_value(o.min_bytes), "smallest allreduce size")(
      "maxbytes,e", po::value<uint64_t>(&o.max_bytes)->default_value(o.max_bytes), "largest allreduce size")(
      "stepfactor,f", po::value<unsigned>(&o.factor)->default_value(o.factor), "size multiplier between rows")(
      "iters", po::value<unsigned>(&o.iters)->default_value(o.iters), "timed iterations per size")(
      "warmup", po::value<unsigned>(&o.warmup)->default_value(o.warmup), "untimed iterations per size")(
      "check",
      "verify every element of every iteration against the reference: the rank-ordered sum (ina), the ring's hop order "
      "(ring), the fixed-point sum (xdp)")(
      "mode", po::value<std::string>(&o.mode_name)->default_value(o.mode_name),
      "ina (through the appliance), ring (ring allreduce), xdp (the XDP tier), auto (ina, falling over to xdp)")(
      "payload", po::value<uint32_t>(&o.payload)->default_value(o.payload), "path MTU payload P, bytes")(
      "message", po::value<uint32_t>(&o.message)->default_value(o.message),
      "RDMA WRITE message size M (multiple of P); a size's tail is padded")(
      "window", po::value<unsigned>(&o.window)->default_value(o.window), "messages in flight per QP")(
      "ack-timeout-ms", po::value<double>(&o.ack_timeout_ms)->default_value(o.ack_timeout_ms), "RC ACK timeout")(
      "retry", po::value<unsigned>(&o.retry)->default_value(o.retry), "RC retry count")(
      "seed", po::value<uint32_t>(&o.seed)->default_value(o.seed), "seed of the --check inputs")(
      "timeout", po::value<double>(&o.timeout_s)->default_value(o.timeout_s), "give up after this many seconds")(
      "job-id", po::value<uint32_t>(&o.job_id)->default_value(o.job_id), "the appliance job id (ina mode)")(
      "register", po::value<std::string>(&o.register_socket),
      "ina mode: rank 0 adds the job through this inagg control socket, and every rank waits until the job is active "
      "before sending")("print-job", "print the appliance job file for these parameters and exit")(
      "xdp-heads", po::value<std::string>(&o.xdp_heads)->value_name("IP[,IP..]"),
      "xdp/auto: the head of each group (group g = rank / group size)")(
      "xdp-group-size", po::value<unsigned>(&o.xdp_group_size)->default_value(0),
      "xdp/auto: ranks per head (0: all ranks under one head)")(
      "xdp-mcast", po::value<std::string>(&o.xdp_mcast)->default_value(o.xdp_mcast),
      "xdp/auto: multicast address of group 0's results; group g uses this + g")(
      "xdp-values", po::value<unsigned>(&o.xdp_values)->default_value(o.xdp_values),
      "xdp/auto: int32 values per packet (the heads' values)")(
      "xdp-window", po::value<unsigned>(&o.xdp_window)->default_value(o.xdp_window),
      "xdp/auto: chunks in flight (the heads' window)")(
      "xdp-timeout-ms", po::value<double>(&o.xdp_timeout_ms)->default_value(o.xdp_timeout_ms),
      "xdp/auto: send a chunk again when its result is this late")(
      "xdp-scale", po::value<double>(&o.xdp_scale)->default_value(o.xdp_scale),
      "xdp/auto: fixed point for fp32/fp16/bf16: int32 = round(value * scale), clipped so that n values cannot "
      "overflow")("xdp-port", po::value<unsigned>(&o.xdp_port)->default_value(o.xdp_port),
                  "xdp/auto: the tier's UDP port");
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
  o.check = vm.count("check") > 0;
  o.rank_given = vm.count("rank") > 0;
  if (const std::string e = check_job_options(o); !e.empty()) {
    std::cerr << "inagg-worker: " << e << "\n";
    return 2;
  }
  if (vm.count("print-job")) {
    std::fputs(o.rack.job_text().c_str(), stdout);
    return 0;
  }
  if (const std::string e = check_run_options(o); !e.empty()) {
    std::cerr << "inagg-worker: " << e << "\n";
    return 2;
  }

  Worker w(o);
  auto fatal = [&](const std::string& why) {
    std::cerr << "inagg-worker: rank " << o.rank << ": " << why << "\n";
    return 1;
  };
  w.on_note = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };
  std::string err;
  if (!w.open(&err)) {
    std::cerr << "inagg-worker: " << err << "\n";
    return 2;
  }
  if (const int rc = w.register_job(); rc != 0) {
    std::cerr << "inagg-worker: " << w.error() << "\n";
    return rc;
  }

  const unsigned n = o.workers;
  const size_t es = util::dtype_size(o.rack.dtype);
  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s, dtype %s, M %u, P %u, window %u\n", o.rank, n,
              util::ip_text(o.rack.ip_of(o.rank)).c_str(), util::ip_text(o.rack.ip_of(o.rack.successor())).c_str(),
              o.mode_name.c_str(), o.dtype_name.c_str(), o.message, o.payload, o.window);
  if (o.uses_tier()) {
    const unsigned group = o.xdp.group_of(o.rank, n);
    std::printf(
        "# XDP tier: head %s (group %u, rank %u in it), results on %s, job %u, %u values per packet, window %u%s\n",
        util::ip_text(o.xdp.heads[group]).c_str(), group, o.rank % o.xdp.size_of_groups(n),
        util::ip_text(o.xdp.group_address(group)).c_str(), o.job_id, o.xdp_values, o.xdp_window,
        o.rack.dtype == util::Dtype::int32 ? "" : (", fixed point x" + std::to_string(o.xdp_scale)).c_str());
  }
  std::printf("#%11s %12s %6s %10s %8s %8s %8s\n", "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong");
  double busbw_sum = 0;
  unsigned rows = 0;
  uint64_t wrong_total = 0;
  for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const uint64_t bytes = size / es * es;
    if (bytes == 0) continue;
    // --check: every iteration against the reference of the tier that summed it.
    Reference ref({o.rack.dtype, n, o.seed, o.mode == Mode::ring, o.xdp_scale}, bytes);
    double total_us = 0;
    uint64_t wrong = 0;
    for (unsigned it = 0; it < o.warmup + o.iters; ++it) {
      serving(w, [&] { fill_input(o.rack.dtype, o.seed, o.rank, w.data(), bytes); });
      const uint64_t t0 = now_ns();
      if (!w.allreduce(bytes)) return fatal(w.error());
      if (it >= o.warmup) total_us += static_cast<double>(now_ns() - t0) / 1e3;
      if (!o.check) continue;
      const std::vector<uint8_t>* sum = nullptr;
      serving(w, [&] { sum = &ref.sum(w.last_tier()); });
      const std::vector<uint8_t>& want = *sum;
      for (size_t i = 0; i < bytes; i += es) {
        if (std::memcmp(want.data() + i, w.data() + i, es) != 0) {
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
  if (!w.finish()) return fatal(w.error());
  std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? busbw_sum / rows : 0.0);
  if (const std::optional<TransportCounters> c = w.transport_counters())
    std::printf("# rank %u: sent %" PRIu64 " packets (%" PRIu64 " resent), %" PRIu64 " timeouts, %" PRIu64
                " NAKs received; received %" PRIu64 " in order, %" PRIu64 " duplicates, %" PRIu64 " bad ICRC\n",
                o.rank, c->packets_sent, c->retransmitted, c->timeouts, c->naks_received, c->accepted, c->duplicates,
                c->bad_icrc);
  if (const XaggCounters* x = w.tier_counters()) {
    std::printf("# rank %u: XDP tier: %" PRIu64 " chunks, %" PRIu64 " DATA sent (%" PRIu64 " repeats), %" PRIu64
                " results (%" PRIu64 " ignored), %" PRIu64 " values saturated%s\n",
                o.rank, x->chunks, x->sent, x->repeats, x->results, x->results_ignored, w.saturated(),
                w.tier() == Tier::xdp ? "" : " (not used: the appliance aggregated throughout)");
    if (w.saturated())
      std::fprintf(stderr,
                   "inagg-worker: rank %u: %" PRIu64
                   " values did not fit the fixed point and were clipped; lower --xdp-scale\n",
                   o.rank, w.saturated());
  }
  return wrong_total ? 1 : 0;
}
