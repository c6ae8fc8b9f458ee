// inagg-worker's command line (worker_cli.hpp).
#include "worker_cli.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "inagg/control/racks.hpp"
#include "nccl_table.hpp"
#include "version.hpp"

namespace po = boost::program_options;

namespace inagg::apps {

using namespace inagg::client;

namespace {

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

}  // namespace

const RankOptionNames& option_names() {
  static const RankOptionNames names = [] {
    RankOptionNames n;
    n.ranks = "--workers";
    n.rank = "--rank";
    n.dtype = "--dtype";
    n.message = "--message";
    n.payload = "--payload";
    n.window = "--window";
    n.collective = "--collective";
    n.chunk = "--chunk";
    n.channels = "--channels";
    n.mode = "--mode";
    n.transport = "--transport";
    n.ip_base = "--ip-base";
    n.ack_timeout_ms = "--ack-timeout-ms";
    n.timeout_s = "--timeout (-T)";
    n.exchange = "--exchange";
    n.exchange_port = "--exchange-port";
    n.exchange_secret_file = "--exchange-secret-file";
    n.insecure_exchange = "--insecure-exchange";
    n.qp_timeout = "--qp-timeout";
    n.control = "--register";
    n.control_secret_file = "--control-secret-file";
    n.job_id = "--job-id";
    n.xdp_heads = "--xdp-heads";
    n.xdp_mcast = "--xdp-mcast";
    n.xdp_key_file = "--xdp-key-file";
    n.xdp_scale = "--xdp-scale";
    n.xdp_timeout_ms = "--xdp-timeout-ms";
    n.racks = "--racks";
    return n;
  }();
  return names;
}

int usage(const std::string& why) {
  std::cerr << "inagg-worker: " << why << "\n";
  return 2;
}

int parse_command_line(int argc, char** argv, CommandLine* cl) {
  RankOptions& o = cl->o;
  Sweep& sw = cl->sweep;
  o.geometry.dtype = "float";  // nccl-tests' name of the default
  std::string& rank_from = cl->rank_from;
  std::string& workers_from = cl->workers_from;
  std::string minbytes = "32M", maxbytes = "32M", stepbytes = "1M", old_dtype, payload = "auto", racks;
  unsigned ngpus = 1, nthreads = 1, agg_iters = 1, run_cycles = 1, cudagraph = 0, cputime = 0;
  int root = 0, blocking = 0, parallel_init = 0, average = 1, stream_null = 0, local_register = 0;
  po::options_description nccl("nccl-tests all_reduce_perf options, with its meaning");
  nccl.add_options()("minbytes,b", po::value<std::string>(&minbytes)->default_value(minbytes),
                     "smallest size, bytes (K, M, G suffixes: binary)")(
      "maxbytes,e", po::value<std::string>(&maxbytes)->default_value(maxbytes), "largest size")(
      "stepbytes,i", po::value<std::string>(&stepbytes)->default_value(stepbytes),
      "increment between sizes when --stepfactor is not above 1")(
      "stepfactor,f", po::value<unsigned>(&sw.factor)->default_value(sw.factor), "size multiplier between rows (>1)")(
      "iters,n", po::value<unsigned>(&sw.iters)->default_value(sw.iters), "timed iterations per size and placement")(
      "warmup_iters,w", po::value<unsigned>(&sw.warmup)->default_value(sw.warmup),
      "untimed iterations per size (--warmup is taken too)")(
      "check,c", po::value<unsigned>(&sw.check)->default_value(sw.check),
      "checked iterations per size and placement, after the timed ones: every element against the reference "
      "(the appliance's rank-ordered sum for ina, the ring's hop order for ring, the fixed-point sum for xdp); 0: "
      "none, #wrong shows N/A; a bare --check means 1")(
      "datatype,d", po::value<std::string>(&o.geometry.dtype)->default_value(o.geometry.dtype),
      "float (float32, fp32), half (float16, fp16), bfloat16 (bf16) or int32 (int); --dtype is taken too")(
      "op,o", po::value<std::string>(&sw.op)->default_value(sw.op), "reduction: sum (the only one the appliance does)")(
      "ngpus,g", po::value<unsigned>(&ngpus)->default_value(1), "GPUs per thread: 1 (one rank per process)")(
      "nthreads,t", po::value<unsigned>(&nthreads)->default_value(1), "threads per process: 1")(
      "agg_iters,m", po::value<unsigned>(&agg_iters)->default_value(1), "operations per iteration: 1")(
      "run_cycles,N", po::value<unsigned>(&run_cycles)->default_value(1), "cycles of the sweep: 1")(
      "root,r", po::value<int>(&root)->default_value(0), "taken and ignored: an allreduce has no root (prints -1)")(
      "blocking,z", po::value<int>(&blocking)->default_value(0),
      "taken and ignored: every allreduce here completes before the next")(
      "parallel_init,p", po::value<int>(&parallel_init)->default_value(0), "taken and ignored")(
      "average,a", po::value<int>(&average)->default_value(1),
      "how rank 0's table takes each row's time (and so algbw, busbw) from every rank's: 0 rank 0's, 1 the mean, 2 "
      "the least, 3 the greatest; #wrong is always the sum over the ranks")(
      "stream_null,y", po::value<int>(&stream_null)->default_value(0),
      "taken and ignored: there is no CUDA stream here")(
      "local_register,R", po::value<int>(&local_register)->default_value(0),
      "taken and ignored: the transport registers its own regions (no NCCL buffer registration here)")(
      "output_file,J", po::value<std::string>(&cl->output_file)->value_name("FILE"),
      "rank 0 also writes the results to FILE, created anew (FILE.0, FILE.1, ... where it exists): nccl-tests' "
      "JSON when the name ends in .json, inagg's CSV (a line per size and placement) when in .csv; --output-file "
      "is taken too")("cudagraph,G", po::value<unsigned>(&cudagraph)->default_value(0), "0 (no CUDA here)")(
      "report_cputime,C", po::value<unsigned>(&cputime)->default_value(0), "0 (times are wall-clock)")(
      "timeout,T", po::value<double>(&o.timeout_s)->default_value(o.timeout_s),
      "give up after this many seconds (0: no limit)");
  po::options_description own("inagg-worker's own options");
  own.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "rank", po::value<unsigned>(&o.geometry.rank), "this worker's rank, 0..N-1")(
      "workers", po::value<unsigned>(&o.geometry.ranks), "number of workers N (2..64)")(
      "ip-base", po::value<std::string>(&o.ip_base)->default_value(o.ip_base),
      "rank r uses IPv4 address ip-base + r + 1")("dtype", po::value<std::string>(&old_dtype), "same as --datatype")(
      "in-place", po::value<bool>(&sw.in_place)->default_value(sw.in_place),
      "0: run the out-of-place placement only (the in-place columns stay blank)")(
      "mode", po::value<std::string>(&o.mode)->default_value(o.mode),
      "ina (through the appliance), ring (ring allreduce), xdp (the XDP tier), auto (ina, falling over to xdp)")(
      "collective", po::value<std::string>(&o.geometry.collective)->default_value(o.geometry.collective),
      "allreduce, or (mode ina) reduce_scatter or all_gather in one pass through the appliance (rotated chunks; the "
      "sizes are the whole buffer, as reduce_scatter_perf and all_gather_perf give them)")(
      "chunk", po::value<uint32_t>(&o.geometry.chunk)->default_value(o.geometry.chunk),
      "reduce_scatter/all_gather: messages per chunk of the rotated schedule")(
      "channels", po::value<unsigned>(&o.geometry.channels)->default_value(o.geometry.channels),
      "RC connections to the successor, 1..16 (ina, auto: the software transport on the rack plan): message m goes "
      "on channel m mod C, each channel a job of its own on the appliance's lcores (docs/protocol.md section 22); "
      "every rank must give the same C")(
      "payload", po::value<std::string>(&payload)->default_value(payload),
      "path MTU payload P, bytes; auto: as an RDMA NIC chooses it, the largest of 4096, 2048, 1024, 512, 256 up to "
      "the MTU of the interface holding this rank's address less 96 bytes of headers, that divides --message (4096 on "
      "the virtual rack's MTU 4200 links, 1024 on 1500); as if the MTU were 1500 when no interface here holds it "
      "(--print-job outside the rank's namespace). An explicit P must fit that MTU (P + 64 bytes). Every rank must use "
      "the same P: give it when links differ")(
      "message", po::value<uint32_t>(&o.geometry.message)->default_value(o.geometry.message),
      "RDMA WRITE message size M (multiple of P); a size's tail is padded")(
      "window", po::value<unsigned>(&o.geometry.window)->default_value(o.geometry.window), "messages in flight per QP")(
      "ack-timeout-ms", po::value<double>(&o.ack_timeout_ms)->default_value(o.ack_timeout_ms),
      "RC ACK timeout: the retransmission timeout's ceiling (it follows the round trip below that); (--retry + 1) "
      "x this is how long a rank waits for an ACK while the appliance holds its packets for a rank that is not "
      "sending")(
      "rto-min-ms", po::value<double>(&o.rto_min_ms)->default_value(o.rto_min_ms),
      "the retransmission timeout's floor (it follows the round trip above that; at --ack-timeout-ms or more it is "
      "fixed there)")(
      "max-queued-kib", po::value<size_t>(&o.max_queued_kib)->default_value(o.max_queued_kib),
      "stop sending while this many KiB of the worker's packets wait in the local qdisc (a rate-limited link): a "
      "go-back-N would send them again anyway; 0: no limit")(
      "cwnd-min-kib", po::value<size_t>(&o.cwnd_min_kib)->default_value(o.cwnd_min_kib),
      "the congestion window's floor, KiB: a NAK halves the packets in flight, a timeout cuts them to this, and "
      "they grow back as TCP Reno's window does, since go-back-N resends all of them; 0: no congestion window (the "
      "message window alone)")("retry", po::value<unsigned>(&o.retry)->default_value(o.retry), "RC retry count")(
      "seed", po::value<uint32_t>(&sw.seed)->default_value(sw.seed), "seed of the inputs")(
      "job-id", po::value<uint32_t>(&o.job_id)->default_value(o.job_id), "the appliance job id (ina mode)")(
      "transport", po::value<std::string>(&o.transport)->default_value(o.transport),
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
      "ina/ring/auto: rank 0 listens on this TCP port (at its --ip-base address) for the ranks' meeting (verbs, "
      "--exchange: their QP numbers)")(
      "exchange", po::bool_switch(&o.exchange),
      "udp: join the ranks' TCP exchange, as verbs ranks do, instead of the rack plan's fixed QPNs: a ring in which "
      "some ranks are RDMA NICs (--transport verbs). Needs CAP_NET_RAW: a NIC's ICRC covers its IP ID, which only a "
      "raw socket shows")(
      "exchange-secret-file", po::value<std::string>(&o.exchange_secret_file)->value_name("FILE"),
      "ina/ring/auto: the job's shared secret for the ranks' meeting at rank 0 (the exchange, or the meeting on the "
      "rack plan), the same on every rank (the file's first line, at least 16 characters, mode 0600); "
      "$INAGG_EXCHANGE_SECRET takes precedence. One of the two is needed")(
      "insecure-exchange", po::bool_switch(&o.insecure_exchange),
      "a lab network of your own only: the ranks meet without a secret (not authenticated: any host that reaches rank "
      "0's --exchange-port can join the job as a rank or answer as rank 0); every rank warns on stderr")(
      "register", po::value<std::string>(&o.control),
      "ina mode: rank 0 adds the job through this inagg control socket (a path, or tcp://HOST:PORT: the appliance's "
      "--control-tcp), and every rank waits until the job is active before sending")(
      "control-secret-file", po::value<std::string>(&o.control_secret_file)->value_name("FILE"),
      "--register tcp://: the file with this tenant's credential, one line: SECRET (tenant admin) or TENANT SECRET "
      "(mode 0600); $INAGG_CONTROL_SECRET takes precedence")(
      "print-job", "print the appliance job file for these parameters and exit")(
      "output-file", po::value<std::string>(&cl->output_file)->value_name("FILE"), "same as -J/--output_file")(
      "rank-figures", po::bool_switch(&cl->rank_figures),
      "every rank also prints its own figures of each size, as a comment line '# rank R: ' and a row: what rank 0's "
      "table aggregates (-a), to find a slow rank")("xdp-heads",
                                                    po::value<std::string>(&o.xdp_heads)->value_name("IP[,IP..]"),
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
      "xdp-key-file", po::value<std::string>(&o.xdp_key_file)->value_name("FILE"),
      "xdp/auto: the job's MAC key, the file the heads' key_file names (made by inagg-xdp key; mode 0600); "
      "$INAGG_XDP_KEY takes precedence")(
      "xdp-scale", po::value<double>(&o.xdp_scale)->default_value(o.xdp_scale),
      "xdp/auto: fixed point for fp32/fp16/bf16: int32 = round(value * scale), clipped so that n values cannot "
      "overflow")("xdp-port", po::value<unsigned>(&o.xdp_port)->default_value(o.xdp_port),
                  "xdp/auto: the tier's UDP port")(
      "racks", po::value<std::string>(&racks)->value_name("R0,R1,.."),
      "ina: the rack of every rank when a leaf appliance per rack and a spine sum the job (as given to inagg-ctl "
      "split): -c's reference then sums each rack's ranks first, as the leaves do, and the racks' partials after")(
      "corrupt-input", po::value<unsigned>(&sw.corrupt)->default_value(0),
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
  if (vm.count("dtype")) {
    if (!vm["datatype"].defaulted() && o.geometry.dtype != old_dtype)
      return usage("--dtype and --datatype (-d) disagree; give one");
    o.geometry.dtype = old_dtype;
  }
  if (o.geometry.dtype == "all" || sw.op == "all")
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
  } sizes[] = {{"minbytes", &minbytes, &sw.min_bytes},
               {"maxbytes", &maxbytes, &sw.max_bytes},
               {"stepbytes", &stepbytes, &sw.step_bytes}};
  for (const auto& s : sizes) {
    const std::optional<uint64_t> v = nccl::parse_size(*s.text);
    if (!v)
      return usage(std::string("invalid size '") + *s.text + "' for --" + s.name +
                   ": a number of bytes with an "
                   "optional K, M or G (e.g. 8, 128M)");
    *s.out = *v;
  }
  if (payload == "auto") {
    o.geometry.payload = 0;
  } else {
    const std::optional<uint64_t> p = nccl::parse_size(payload);
    if (!p || *p == 0 || *p > 65536)
      return usage(
          "--payload must be auto or a number of bytes (256, 512, 1024, 2048 or 4096 as RoCE's path MTUs); got '" +
          payload + "'");
    o.geometry.payload = static_cast<uint32_t>(*p);
  }
  if (o.timeout_s == 0) o.timeout_s = 1e7;  // nccl-tests' -T 0: no limit
  if (!vm.count("rank"))
    if (const auto r = from_environment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, &rank_from)) {
      o.geometry.rank = *r;
      vm.insert({"rank", po::variable_value(*r, false)});
    }
  if (!vm.count("workers"))
    if (const auto n = from_environment({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, &workers_from))
      o.geometry.ranks = *n;
  o.rank_given = vm.count("rank") > 0;
  if (!nccl::parse_type(o.geometry.dtype))
    return usage("--datatype (-d) must be " + std::string(nccl::kTypesAccepted) + "; got '" + o.geometry.dtype + "'");
  if (const std::string e = o.validate_job(option_names()); !e.empty()) return usage(e);
  // The rank's regions carry the sweep's largest size: every size goes in one piece.
  o.geometry.chunk_bytes = o.chunk_bytes_for(sw.max_bytes);
  if (!racks.empty()) {
    std::string why;
    const std::optional<std::vector<unsigned>> r = control::parse_rack_list(racks, &why);
    if (!r) return usage("--racks: " + why);
    o.rack_of = *r;
    if (o.rack_of.size() != o.geometry.ranks)
      return usage("--racks names " + std::to_string(o.rack_of.size()) + " racks for " +
                   std::to_string(o.geometry.ranks) + " workers: give every rank's");
  }
  if (vm.count("print-job") && (o.transport == "verbs" || o.exchange))
    return usage(
        "--print-job with --transport verbs or --exchange: the QPNs are the device's, known only once the ranks have "
        "exchanged "
        "them; rank 0 registers them itself (--register)");
  if (vm.count("print-job")) {
    std::fputs(o.resolved.rack.job_text().c_str(), stdout);
    return 0;
  }
  if (sw.op != "sum")
    return usage("--op (-o) '" + sw.op + "' is not supported: the appliance and the XDP tier only sum (-o sum)");
  if (sw.max_bytes < sw.min_bytes)
    return usage("--maxbytes (-e) " + std::to_string(sw.max_bytes) + " is below --minbytes (-b) " +
                 std::to_string(sw.min_bytes));
  if (sw.factor < 2 && sw.step_bytes == 0)
    return usage("the sizes never grow: give --stepfactor (-f) >= 2 or --stepbytes (-i) > 0");
  if (sw.factor >= 2 && sw.min_bytes == 0) return usage("with --stepfactor (-f), --minbytes (-b) must be above 0");
  if (sw.iters == 0) return usage("--iters (-n) must be at least 1");
  if (sw.max_bytes > (64ull << 30)) return usage("--maxbytes (-e) above 64G is not supported");
  if (const std::string e = o.validate(option_names()); !e.empty()) return usage(e);
  if (o.geometry.collective != "allreduce" && sw.max_bytes / util::dtype_size(o.resolved.dtype) / o.geometry.ranks == 0)
    return usage("--collective " + o.geometry.collective + ": --maxbytes (-e) holds less than one element per rank");
  if (average < 0 || average > 3)
    return usage("-a/--average must be 0 (rank 0's times), 1 (the mean), 2 (the least) or 3 (the greatest); got " +
                 std::to_string(average));
  cl->average = static_cast<nccl::Average>(average);
  if (const std::string& f = cl->output_file; !f.empty()) {
    // nccl-tests takes the extension in any case, and writes nothing for another one: refused here.
    std::string ext = f.substr(f.find_last_of("./") == std::string::npos ? f.size() : f.find_last_of("./"));
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (ext != ".json" && ext != ".csv")
      return usage("-J/--output_file " + f + ": the name must end in .json (nccl-tests' JSON) or .csv");
    cl->output_file_csv = ext == ".csv";
  }

  // The buffers hold several times -e: input, output, the transport's two regions, and with -c
  // every rank's input and the sum for the reference. Refused up front when the host cannot hold
  // them, rather than failing on the way (or being killed for it).
  const double need = static_cast<double>(sw.max_bytes) * (4 + (sw.check ? o.geometry.ranks + 2 : 0));
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > have)
    return usage("-e/--maxbytes " + std::to_string(sw.max_bytes) + " needs about " +
                 std::to_string(static_cast<uint64_t>(need / (1 << 20))) + " MiB of buffers (" +
                 (sw.check ? "with -c, every rank's input for the reference" : "input, output, transport regions") +
                 ") but this host has " + std::to_string(static_cast<uint64_t>(have / (1 << 20))) + " MiB: lower -e" +
                 (sw.check ? " or give -c 0" : ""));
  return -1;
}

}  // namespace inagg::apps
