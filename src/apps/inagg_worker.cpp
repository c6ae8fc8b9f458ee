// inagg-worker: one rank of an allreduce that takes nccl-tests' all_reduce_perf options with their
// meaning and prints its table (include/inagg/client/nccl_table.hpp): option parsing and output
// around client::Worker (include/inagg/client/worker.hpp), which holds the rack plan, the
// transport, the algorithms (ina, ring, xdp, auto) and auto's fall-over.
#include <boost/program_options.hpp>

#include <unistd.h>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/nccl_table.hpp"
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

// nccl-tests' -c takes a count; inagg-worker's --check used to be a flag. `--check` not followed
// by a number is `--check=1`, so command lines of both kinds parse.
std::vector<std::string> with_check_count(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--check") continue;
    const bool number =
        i + 1 < args.size() && !args[i + 1].empty() && args[i + 1].find_first_not_of("0123456789") == std::string::npos;
    if (!number) args[i] = "--check=1";
  }
  return args;
}

// The first of `names` set in the environment, as a number (MPI launchers: the rank and size
// nccl-tests takes from MPI).
std::optional<unsigned> from_environment(std::initializer_list<const char*> names, std::string* which) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (!v || !*v) continue;
    char* end = nullptr;
    const unsigned long x = std::strtoul(v, &end, 10);
    if (*end || x > 65535) continue;
    *which = n;
    return static_cast<unsigned>(x);
  }
  return std::nullopt;
}

// The sizes of the sweep, as nccl-tests steps them.
std::vector<uint64_t> sweep(const WorkerOptions& o) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = o.min_bytes; s <= o.max_bytes; s = o.factor > 1 ? s * o.factor : s + o.step_bytes) {
    sizes.push_back(s);
    if (sizes.size() > 100000) break;  // a step of 1 byte over gigabytes: enough rows
  }
  return sizes;
}

// --corrupt-input: alters the first `k` elements of this rank's input (after the reference was
// made from the seed), so that every rank's check must count them: floats become 64 (inputs are in
// [-1, 1)), int32 get their lowest bit flipped.
void corrupt(util::Dtype dtype, uint8_t* buf, uint64_t count, unsigned k) {
  const size_t es = util::dtype_size(dtype);
  for (uint64_t i = 0; i < std::min<uint64_t>(k, count); ++i) {
    uint8_t* e = buf + i * es;
    if (dtype == util::Dtype::int32) {
      e[0] ^= 1;
    } else if (dtype == util::Dtype::fp32) {
      const float v = 64.0f;
      std::memcpy(e, &v, 4);
    } else {
      const uint16_t v = dtype == util::Dtype::fp16 ? 0x5400 : 0x4280;  // 64.0 in fp16, bf16
      std::memcpy(e, &v, 2);
    }
  }
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  WorkerOptions o;
  std::string minbytes = "32M", maxbytes = "32M", stepbytes = "1M", old_dtype;
  unsigned ngpus = 1, nthreads = 1, agg_iters = 1, run_cycles = 1, cudagraph = 0, cputime = 0;
  int root = 0, blocking = 0, parallel_init = 0, average = 1;
  po::options_description nccl("nccl-tests all_reduce_perf options, with its meaning");
  nccl.add_options()("minbytes,b", po::value<std::string>(&minbytes)->default_value(minbytes),
                     "smallest size, bytes (K, M, G suffixes: binary)")(
      "maxbytes,e", po::value<std::string>(&maxbytes)->default_value(maxbytes), "largest size")(
      "stepbytes,i", po::value<std::string>(&stepbytes)->default_value(stepbytes),
      "increment between sizes when --stepfactor is not above 1")(
      "stepfactor,f", po::value<unsigned>(&o.factor)->default_value(o.factor), "size multiplier between rows (>1)")(
      "iters,n", po::value<unsigned>(&o.iters)->default_value(o.iters), "timed iterations per size and placement")(
      "warmup_iters,w", po::value<unsigned>(&o.warmup)->default_value(o.warmup),
      "untimed iterations per size (--warmup is taken too)")(
      "check,c", po::value<unsigned>(&o.check)->default_value(o.check),
      "checked iterations per size and placement, after the timed ones: every element against the reference "
      "(the appliance's rank-ordered sum for ina, the ring's hop order for ring, the fixed-point sum for xdp); 0: "
      "none, #wrong shows N/A; a bare --check means 1")(
      "datatype,d", po::value<std::string>(&o.dtype_name)->default_value(o.dtype_name),
      "float (float32, fp32), half (float16, fp16), bfloat16 (bf16) or int32 (int); --dtype is taken too")(
      "op,o", po::value<std::string>(&o.op)->default_value(o.op), "reduction: sum (the only one the appliance does)")(
      "ngpus,g", po::value<unsigned>(&ngpus)->default_value(1), "GPUs per thread: 1 (one rank per process)")(
      "nthreads,t", po::value<unsigned>(&nthreads)->default_value(1), "threads per process: 1")(
      "agg_iters,m", po::value<unsigned>(&agg_iters)->default_value(1), "operations per iteration: 1")(
      "run_cycles,N", po::value<unsigned>(&run_cycles)->default_value(1), "cycles of the sweep: 1")(
      "root,r", po::value<int>(&root)->default_value(0), "taken and ignored: an allreduce has no root (prints -1)")(
      "blocking,z", po::value<int>(&blocking)->default_value(0),
      "taken and ignored: every allreduce here completes before the next")(
      "parallel_init,p", po::value<int>(&parallel_init)->default_value(0), "taken and ignored")(
      "average,a", po::value<int>(&average)->default_value(1),
      "taken and ignored: each rank prints its own times and its own #wrong")(
      "cudagraph,G", po::value<unsigned>(&cudagraph)->default_value(0), "0 (no CUDA here)")(
      "report_cputime,C", po::value<unsigned>(&cputime)->default_value(0), "0 (times are wall-clock)")(
      "timeout,T", po::value<double>(&o.timeout_s)->default_value(o.timeout_s),
      "give up after this many seconds (0: no limit)");
  po::options_description own("inagg-worker's own options");
  own.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "rank", po::value<unsigned>(&o.rank), "this worker's rank, 0..N-1")("workers", po::value<unsigned>(&o.workers),
                                                                          "number of workers N (2..64)")(
      "ip-base", po::value<std::string>(&o.ip_base)->default_value(o.ip_base),
      "rank r uses IPv4 address ip-base + r + 1")("dtype", po::value<std::string>(&old_dtype), "same as --datatype")(
      "in-place", po::value<bool>(&o.in_place)->default_value(o.in_place),
      "0: run the out-of-place placement only (the in-place columns stay blank)")(
      "mode", po::value<std::string>(&o.mode_name)->default_value(o.mode_name),
      "ina (through the appliance), ring (ring allreduce), xdp (the XDP tier), auto (ina, falling over to xdp)")(
      "payload", po::value<uint32_t>(&o.payload)->default_value(o.payload), "path MTU payload P, bytes")(
      "message", po::value<uint32_t>(&o.message)->default_value(o.message),
      "RDMA WRITE message size M (multiple of P); a size's tail is padded")(
      "window", po::value<unsigned>(&o.window)->default_value(o.window), "messages in flight per QP")(
      "ack-timeout-ms", po::value<double>(&o.ack_timeout_ms)->default_value(o.ack_timeout_ms),
      "RC ACK timeout: the retransmission timeout's ceiling (it follows the round trip below that)")(
      "rto-min-ms", po::value<double>(&o.rto_min_ms)->default_value(o.rto_min_ms),
      "the retransmission timeout's floor (it follows the round trip above that; at --ack-timeout-ms or more it is "
      "fixed there)")(
      "max-queued-kib", po::value<size_t>(&o.max_queued_kib)->default_value(o.max_queued_kib),
      "stop sending while this many KiB of the worker's packets wait in the local qdisc (a rate-limited link): a "
      "go-back-N would send them again anyway; 0: no limit")(
      "retry", po::value<unsigned>(&o.retry)->default_value(o.retry), "RC retry count")(
      "seed", po::value<uint32_t>(&o.seed)->default_value(o.seed), "seed of the inputs")(
      "job-id", po::value<uint32_t>(&o.job_id)->default_value(o.job_id), "the appliance job id (ina mode)")(
      "transport", po::value<std::string>(&o.transport_name)->default_value(o.transport_name),
      "ina/ring: udp (the software RoCE endpoint over a kernel UDP socket) or verbs (rdma-core: an RDMA NIC or "
      "Soft-RoCE; the ranks exchange their QPs over TCP with rank 0 first)")(
      "ib-dev", po::value<std::string>(&o.verbs.device)->value_name("DEV"),
      "verbs: the RDMA device (ibv_devices; default: the first); -d is --datatype, as in nccl-tests")(
      "ib-port", po::value<unsigned>(&o.verbs.port)->default_value(o.verbs.port),
      "verbs: the device's port (-i is nccl-tests' --stepbytes)")(
      "gid-index,x", po::value<int>(&o.verbs.gid_index)->default_value(-1),
      "verbs: the GID index (show_gids; default -1: the port's first RoCEv2 GID with an IPv4 address)")(
      "qp-timeout", po::value<unsigned>(&o.verbs.qp_timeout)->default_value(o.verbs.qp_timeout),
      "verbs: the QPs' local ACK timeout, 4.096 us x 2^t (docs/protocol.md: >= 18)")(
      "exchange-port", po::value<unsigned>(&o.exchange_port)->default_value(o.exchange_port),
      "verbs: rank 0 listens on this TCP port (at its --ip-base address) for the other ranks' QP numbers")(
      "register", po::value<std::string>(&o.register_socket),
      "ina mode: rank 0 adds the job through this inagg control socket (a path, or tcp://HOST:PORT: the appliance's "
      "--control-tcp), and every rank waits until the job is active before sending")(
      "control-secret-file", po::value<std::string>(&o.control_secret_file)->value_name("FILE"),
      "--register tcp://: the file holding the appliance's shared secret (mode 0600)")(
      "print-job", "print the appliance job file for these parameters and exit")(
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
                  "xdp/auto: the tier's UDP port")(
      "corrupt-input", po::value<unsigned>(&o.corrupt)->default_value(0),
      "testing the check only: alter this many elements of this rank's input in the checked iterations, after the "
      "reference was made, so that every rank's #wrong must count them");
  po::options_description d(
      "Usage: inagg-worker --rank R --workers N [options]\n"
      "(--rank and --workers default to an MPI launcher's OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or "
      "SLURM_PROCID/NTASKS)");
  d.add(nccl).add(own);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(with_check_count(argc, argv)).options(d).run(), vm);
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
  auto usage = [](const std::string& why) {
    std::cerr << "inagg-worker: " << why << "\n";
    return 2;
  };
  if (vm.count("dtype")) {
    if (!vm["datatype"].defaulted() && o.dtype_name != old_dtype)
      return usage("--dtype and --datatype (-d) disagree; give one");
    o.dtype_name = old_dtype;
  }
  if (o.dtype_name == "all" || o.op == "all")
    return usage(
        "-d all and -o all are not supported: the appliance runs a job of one datatype and sums; run "
        "inagg-worker once per datatype");
  if (ngpus != 1 || nthreads != 1)
    return usage(
        "-g/--ngpus and -t/--nthreads must be 1: inagg-worker is one rank per process (run one process per "
        "rank, e.g. under mpirun)");
  if (agg_iters != 1 || run_cycles != 1 || cudagraph != 0 || cputime != 0)
    return usage(
        "-m/--agg_iters and -N/--run_cycles must be 1, -G/--cudagraph and -C/--report_cputime 0: the others "
        "are not supported");
  const struct {
    const char* name;
    std::string* text;
    uint64_t* out;
  } sizes[] = {{"minbytes", &minbytes, &o.min_bytes},
               {"maxbytes", &maxbytes, &o.max_bytes},
               {"stepbytes", &stepbytes, &o.step_bytes}};
  for (const auto& s : sizes) {
    const std::optional<uint64_t> v = nccl::parse_size(*s.text);
    if (!v)
      return usage(std::string("invalid size '") + *s.text + "' for --" + s.name +
                   ": a number of bytes with an "
                   "optional K, M or G (e.g. 8, 128M)");
    *s.out = *v;
  }
  if (o.timeout_s == 0) o.timeout_s = 1e7;  // nccl-tests' -T 0: no limit
  std::string rank_from, workers_from;
  if (!vm.count("rank"))
    if (const auto r = from_environment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, &rank_from)) {
      o.rank = *r;
      vm.insert({"rank", po::variable_value(*r, false)});
    }
  if (!vm.count("workers"))
    if (const auto n = from_environment({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, &workers_from))
      o.workers = *n;
  o.rank_given = vm.count("rank") > 0;
  if (!nccl::parse_type(o.dtype_name))
    return usage("--datatype (-d) must be " + std::string(nccl::kTypesAccepted) + "; got '" + o.dtype_name + "'");
  if (const std::string e = check_job_options(o); !e.empty()) return usage(e);
  if (vm.count("print-job") && o.transport_name == "verbs")
    return usage(
        "--print-job with --transport verbs: the QPNs are the device's, known only once the ranks have exchanged "
        "them; rank 0 registers them itself (--register)");
  if (vm.count("print-job")) {
    std::fputs(o.rack.job_text().c_str(), stdout);
    return 0;
  }
  if (const std::string e = check_run_options(o); !e.empty()) return usage(e);

  // The buffers hold several times -e: input, output, the transport's two regions, and with -c
  // every rank's input and the sum for the reference. Refused up front when the host cannot hold
  // them, rather than failing on the way (or being killed for it).
  const double need = static_cast<double>(o.max_bytes) * (4 + (o.check ? o.workers + 2 : 0));
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > have)
    return usage("-e/--maxbytes " + std::to_string(o.max_bytes) + " needs about " +
                 std::to_string(static_cast<uint64_t>(need / (1 << 20))) + " MiB of buffers (" +
                 (o.check ? "with -c, every rank's input for the reference" : "input, output, transport regions") +
                 ") but this host has " + std::to_string(static_cast<uint64_t>(have / (1 << 20))) + " MiB: lower -e" +
                 (o.check ? " or give -c 0" : ""));
  Worker w(o, o.use_verbs ? open_verbs_transport : open_udp_transport);
  auto fatal = [&](const std::string& why) {
    std::cerr << "inagg-worker: rank " << o.rank << ": " << why << "\n";
    return 1;
  };
  w.on_note = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };
  std::string err;
  if (!w.open(&err)) return usage(err);
  if (const int rc = w.register_job(); rc != 0) {
    std::cerr << "inagg-worker: " << w.error() << "\n";
    return rc;
  }

  const unsigned n = o.workers;
  const util::Dtype dtype = o.rack.dtype;
  const size_t es = util::dtype_size(dtype);
  std::printf("# Collective test starting: inagg-worker (nccl-tests all_reduce_perf's options and table)\n");
  std::printf("# nThread 1 nGpus 1 minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %" PRIu64
              "(%s) warmup iters: %u iters: %u agg iters: 1 validation: %u graph: 0 unalign: 0\n",
              o.min_bytes, o.max_bytes, o.factor > 1 ? o.factor : o.step_bytes, o.factor > 1 ? "factor" : "bytes",
              o.warmup, o.iters, o.check);
  std::printf("#\n");
  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s, dtype %s, M %u, P %u, window %u%s%s%s%s\n", o.rank, n,
              util::ip_text(o.rack.ip_of(o.rank)).c_str(), util::ip_text(o.rack.ip_of(o.rack.successor())).c_str(),
              o.mode_name.c_str(), std::string(nccl::type_name(dtype)).c_str(), o.message, o.payload, o.window,
              rank_from.empty() ? "" : ", rank from ", rank_from.c_str(), workers_from.empty() ? "" : ", size from ",
              workers_from.c_str());
  if (const std::string d = w.transport_description(); !d.empty())
    std::printf("# verbs: %s; QPN 0x%x to the successor\n", d.c_str(),
                w.options().rack.connections.empty() ? 0 : w.options().rack.connections[o.rank].send_qpn);
  if (o.uses_tier()) {
    const unsigned group = o.xdp.group_of(o.rank, n);
    std::printf(
        "# XDP tier: head %s (group %u, rank %u in it), results on %s, job %u, %u values per packet, window %u%s\n",
        util::ip_text(o.xdp.heads[group]).c_str(), group, o.rank % o.xdp.size_of_groups(n),
        util::ip_text(o.xdp.group_address(group)).c_str(), o.job_id, o.xdp_values, o.xdp_window,
        dtype == util::Dtype::int32 ? "" : (", fixed point x" + std::to_string(o.xdp_scale)).c_str());
  }
  if (o.corrupt)
    std::printf("# rank %u alters %u elements of its input in every checked iteration (--corrupt-input)\n", o.rank,
                o.corrupt);
  std::fputs(nccl::header().c_str(), stdout);
  double busbw_sum = 0;
  unsigned measurements = 0, failed_checks = 0;
  for (const uint64_t size : sweep(o)) {
    const uint64_t count = size / es, bytes = count * es;
    if (count == 0) {
      std::printf("# %" PRIu64 " bytes: less than one %s element, skipped\n", size,
                  std::string(nccl::type_name(dtype)).c_str());
      continue;
    }
    // The reference of this size, made once from the seed (every rank computes every rank's input).
    std::optional<Reference> ref;
    if (o.check) ref.emplace(Reference::Config{dtype, n, o.seed, o.mode == Mode::ring, o.xdp_scale}, bytes);
    auto fill = [&] { serving(w, [&] { fill_input(dtype, o.seed, o.rank, w.data(), bytes); }); };
    fill();
    for (unsigned it = 0; it < o.warmup; ++it)
      if (!w.allreduce(bytes, false)) return fatal(w.error());
    std::optional<nccl::Measurement> placed[2];
    for (const bool in_place : {false, true}) {
      if (in_place && !o.in_place) continue;
      nccl::Measurement m;
      double total_us = 0;
      for (unsigned it = 0; it < o.iters; ++it) {
        if (in_place) fill();  // the last sum replaced the input (out of place, it is intact)
        const uint64_t t0 = now_ns();
        if (!w.allreduce(bytes, in_place)) return fatal(w.error());
        total_us += static_cast<double>(now_ns() - t0) / 1e3;
      }
      m.time_us = total_us / o.iters;
      m.algbw = nccl::alg_bandwidth(bytes, m.time_us);
      m.busbw = nccl::bus_bandwidth(m.algbw, n);
      // Checked iterations, as nccl-tests': fresh inputs, one allreduce, every element against the
      // reference of the tier that summed it; the first one with wrong elements ends them.
      m.checked = o.check > 0;
      for (unsigned c = 0; c < o.check && m.wrong == 0; ++c) {
        fill();
        corrupt(dtype, w.data(), count, o.corrupt);
        if (!w.allreduce(bytes, in_place)) return fatal(w.error());
        const uint8_t* got = in_place ? w.data() : w.result();
        const std::vector<uint8_t>* sum = nullptr;
        serving(w, [&] { sum = &ref->sum(w.last_tier()); });
        for (size_t i = 0; i < bytes; i += es) {
          if (std::memcmp(sum->data() + i, got + i, es) == 0) continue;
          if (m.wrong < 3)
            std::fprintf(stderr, "rank %u: %s, %" PRIu64 " bytes: element %zu differs from the reference sum\n", o.rank,
                         in_place ? "in place" : "out of place", bytes, i / es);
          ++m.wrong;
        }
      }
      if (m.wrong) ++failed_checks;
      busbw_sum += m.busbw;
      ++measurements;
      placed[in_place] = m;
    }
    std::fputs(nccl::row(bytes, count, dtype, o.op, placed[0], placed[1]).c_str(), stdout);
    std::fflush(stdout);
  }
  if (!w.finish()) return fatal(w.error());
  std::optional<double> min_bw;
  if (const char* e = std::getenv("NCCL_TESTS_MIN_BW")) min_bw = std::atof(e);
  const double avg = measurements ? busbw_sum / measurements : 0.0;
  std::fputs(nccl::footer(failed_checks, avg, min_bw, "inagg-worker").c_str(), stdout);
  if (const std::optional<TransportCounters> c = w.transport_counters(); c && o.use_verbs)
    std::printf("# rank %u: verbs: %" PRIu64 " messages written, %" PRIu64
                " received (packets and retransmissions: the device's counters, rdma statistic)\n",
                o.rank, c->messages_written, c->messages_received);
  else if (c)
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
  return failed_checks || nccl::bandwidth_failed(avg, min_bw) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    // The buffers: input, output, the transport's two regions and, with -c, every rank's input for
    // the reference: several times --maxbytes.
    std::cerr << "inagg-worker: out of memory for the buffers of this --maxbytes (-e): the worker holds several "
                 "times it (input, output, transport regions, and with -c every rank's input for the reference); "
                 "lower -e\n";
    return 2;
  }
}
