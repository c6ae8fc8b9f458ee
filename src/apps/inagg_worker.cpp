// inagg-worker: one rank of a collective that takes nccl-tests' all_reduce_perf options with their
// meaning; rank 0 prints the job's one table from every rank's figures, as nccl-tests does under
// MPI (nccl_table.hpp), and writes its JSON (-J): option parsing, the sweep's buffers and output
// around client::Rank (include/inagg/client/rank.hpp), which holds the rack plan, the transport,
// the registration, the algorithms (ina, ring, xdp, auto), auto's fall-over and the ranks' gather.
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"
#include "nccl_table.hpp"
#include "reference.hpp"
#include "version.hpp"
#include "worker_cli.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::client;
namespace nccl = apps::nccl;
using apps::CommandLine;
using apps::fill_input;
using apps::parse_command_line;
using apps::Reference;
using apps::Sweep;
using apps::usage;

namespace {

// Runs `work` on a thread of its own while this one keeps the transport running (Rank::serve):
// a rank that computes its --check reference (hundreds of ms for MiBs in an ASan build) must go on
// acknowledging its predecessor, or the predecessor's RC requester gives up on it.
template <class F>
void serving(Rank& w, F&& work) {
  std::future<void> done = std::async(std::launch::async, std::forward<F>(work));
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) w.serve(1);
  done.get();
}

// The sizes of the sweep, as nccl-tests steps them.
std::vector<uint64_t> sweep(const Sweep& o) {
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

// The sweep's buffers: the input, and out of place the output (in place, also the scratch a
// reduce-scatter's or all-gather's input is copied to first).
struct Buffers {
  std::vector<uint8_t> data, result;
};

// The job's collective over a buffer of `bytes` (n shards of bytes / n, whole elements), placed
// as nccl-tests places it:
//   allreduce: the sum of data lands in data (in place) or result;
//   reduce_scatter: the input is data (every shard); out of place this rank's shard of the sum
//     lands at result, in place at data + rank x shard;
//   all_gather: this rank's shard is data out of place (the whole buffer lands at result),
//     data + rank x shard in place (the whole buffer lands at data).
bool run_collective(Rank& w, Buffers& b, control::Collective c, uint64_t bytes, bool in_place) {
  uint8_t *data = b.data.data(), *result = b.result.data();
  if (c == control::Collective::allreduce) return w.allreduce(data, in_place ? data : result, bytes);
  const unsigned n = w.options().geometry.ranks, r = w.options().geometry.rank;
  const uint64_t shard = bytes / w.element() / n * w.element();
  if (c == control::Collective::reduce_scatter) {
    // In place, this rank's shard of the input is the output's place: the input is copied first
    // (the schedule reads every shard of it while the sums arrive).
    if (!in_place) return w.reduce_scatter(data, result, shard);
    std::memcpy(result, data, bytes);
    return w.reduce_scatter(result, data + r * shard, shard);
  }
  if (!in_place) return w.all_gather(data, result, shard);
  std::memcpy(result, data + r * shard, shard);
  return w.all_gather(result, data, shard);
}

}  // namespace

namespace {

// The collective's nccl-tests program, as its preamble, footer and JSON name it.
const char* program_of(control::Collective c) {
  return c == control::Collective::reduce_scatter ? "reduce_scatter_perf"
         : c == control::Collective::all_gather   ? "all_gather_perf"
                                                  : "all_reduce_perf";
}

// nccl-tests' bus bandwidth factor: an allreduce's 2(n-1)/n, a reduce-scatter's and all-gather's
// (n-1)/n (docs/workers.md: what it means through the appliance).
double bus_factor(control::Collective c, unsigned n) {
  return c == control::Collective::allreduce ? nccl::bus_bandwidth(1.0, n) : (n - 1.0) / n;
}

// This rank's line in nccl-tests' "Using devices" list: no GPU (device 0, [0000:00:00]); the
// device information says how the rank reaches the others.
nccl::RankInfo rank_info(const Rank& w) {
  const RankOptions& o = w.options();
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  std::string info = "inagg " + o.mode + " " + util::ip_text(w.plan().ip_of(o.geometry.rank));
  if (const std::string d = w.transport_description(); !d.empty()) info += " (" + d + ")";
  return {static_cast<int>(o.geometry.rank), 0, static_cast<int>(getpid()), 0, host, "0000:00:00", info};
}

// nccl-tests' -J: the file is created anew, never overwritten; where FILE exists, FILE.0, FILE.1,
// ... (the first that does not). Rank 0 only, before anything runs, so that a path that cannot be
// written fails at once. -1 with *error.
int create_results_file(const std::string& path, std::string* created, std::string* error) {
  for (int i = -1; i < 1000; ++i) {
    *created = i < 0 ? path : path + "." + std::to_string(i);
    const int fd = ::open(created->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) {
      *error = "-J/--output_file " + *created + ": cannot create it: " + std::strerror(errno);
      return -1;
    }
  }
  *error = "-J/--output_file " + path + ": it and " + path + ".0 to .999 exist already: give another name";
  return -1;
}

// Every rank's own comment lines: who it is, its path and its tier.
void print_rank(const Rank& w, const CommandLine& cl) {
  const RankOptions& o = cl.o;
  const RackPlan& rack = w.plan();
  const unsigned rank = o.geometry.rank;
  const unsigned n = o.geometry.ranks;
  const util::Dtype dtype = rack.dtype;
  const std::string collective = rack.collective == control::Collective::allreduce
                                     ? ""
                                     : ", " + o.geometry.collective + " chunk " + std::to_string(o.geometry.chunk);
  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s%s, dtype %s, M %u, P %u, window %u%s%s%s%s\n", rank, n,
              util::ip_text(rack.ip_of(rank)).c_str(), util::ip_text(rack.ip_of(rack.successor())).c_str(),
              o.mode.c_str(), collective.c_str(), std::string(nccl::type_name(dtype)).c_str(), rack.message,
              rack.payload, rack.window, cl.rank_from.empty() ? "" : ", rank from ", cl.rank_from.c_str(),
              cl.workers_from.empty() ? "" : ", size from ", cl.workers_from.c_str());
  if (const std::string d = w.transport_description(); !d.empty())
    std::printf("# %s: %s; QPN 0x%x to the successor\n", o.resolved.use_verbs ? "verbs" : "udp", d.c_str(),
                rack.connections.empty() ? 0 : rack.connections[rank].send_qpn);
  if (o.uses_tier()) {
    const XdpPlan& xdp = o.resolved.xdp;
    const unsigned group = xdp.group_of(rank, n);
    std::printf(
        "# XDP tier: head %s (group %u, rank %u in it), results on %s, job %u, %u values per packet, window %u%s\n",
        util::ip_text(xdp.heads[group]).c_str(), group, rank % xdp.size_of_groups(n),
        util::ip_text(xdp.group_address(group)).c_str(), o.job_id, o.xdp_values, o.xdp_window,
        dtype == util::Dtype::int32 ? "" : (", fixed point x" + std::to_string(o.xdp_scale)).c_str());
  }
  if (cl.sweep.corrupt)
    std::printf("# rank %u alters %u elements of its input in every checked iteration (--corrupt-input)\n", rank,
                cl.sweep.corrupt);
}

// Rank 0's comment lines above the table: nccl-tests' own, its list of the ranks (every rank's
// line from the meeting, or rank 0's alone), how the rows aggregate them.
void print_preamble(const Rank& w, const CommandLine& cl, const std::vector<std::string>& rank_lines, bool alone) {
  const RankOptions& o = cl.o;
  const Sweep& sw = cl.sweep;
  const RackPlan& rack = w.plan();
  std::printf("# %s: nccl-tests %s's options, table and JSON (nccl-tests 2.19 format; no NCCL, no GPU)\n",
              apps::version_line("inagg-worker").c_str(), program_of(rack.collective));
  std::printf("# Collective test starting: %s\n", program_of(rack.collective));
  std::printf("# nThread 1 nGpus 1 minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %" PRIu64
              "(%s) warmup iters: %u iters: %u agg iters: 1 validation: %u graph: 0 unalign: 0\n",
              sw.min_bytes, sw.max_bytes, sw.factor > 1 ? sw.factor : sw.step_bytes, sw.factor > 1 ? "factor" : "bytes",
              sw.warmup, sw.iters, sw.check);
  std::printf("#\n# Using devices\n");
  for (const std::string& line : rank_lines) std::printf("%s\n", line.c_str());
  if (!alone)
    std::printf("# Times: %s over the ranks (-a %d); #wrong: summed over the ranks\n",
                cl.average == nccl::Average::rank0  ? "rank 0's"
                : cl.average == nccl::Average::mean ? "the mean"
                : cl.average == nccl::Average::min  ? "the least"
                                                    : "the greatest",
                static_cast<int>(cl.average));
  if (alone)
    std::printf(
        "# mode xdp: the ranks do not meet at rank 0, so this table is rank 0's own figures; every other rank "
        "reports its wrong elements on stderr and in its exit status\n");
  if (rack.collective == control::Collective::allreduce && o.resolved.mode != Mode::ring)
    std::printf(
        "# busbw is nccl-tests' algbw x 2(n-1)/n, a ring's link rate; summed in the network, each rank's link "
        "carries the buffer once each way, so its rate is algbw (docs/workers.md)\n");
}

// What this rank itself measured and checked, for its own exit status and closing line.
struct OwnTally {
  unsigned sizes = 0, checks = 0, failed_checks = 0;
  uint64_t wrong = 0;
};

// Rank 0's table of the job: each size's row from every rank's figures (indexed by rank; rank 0's
// alone where the ranks do not meet), aggregated as nccl-tests aggregates them under MPI, printed
// as it comes; the footer's counts over those rows; the same rows for -J.
struct JobTable {
  nccl::Average how = nccl::Average::mean;
  double bus_factor = 1;
  util::Dtype dtype = util::Dtype::fp32;
  std::string op;
  bool header_printed = false;
  std::vector<nccl::ResultRow> rows;
  unsigned out_of_bounds = 0, measurements = 0;
  double busbw_sum = 0;

  void print_header() {
    if (header_printed) return;
    std::fputs(nccl::header().c_str(), stdout);
    header_printed = true;
  }
  void add(uint64_t count, const std::vector<nccl::RankRow>& ranks) {
    print_header();
    const uint64_t bytes = ranks[0].bytes;
    std::optional<nccl::Measurement> placed[2];
    for (int p = 0; p < 2; ++p) {
      std::vector<std::optional<nccl::Measurement>> each;
      for (const nccl::RankRow& r : ranks) each.push_back(r.placed[p]);
      placed[p] = nccl::aggregate(each, how, &out_of_bounds);
      if (!placed[p]) continue;
      nccl::set_bandwidths(&*placed[p], bytes, bus_factor);
      busbw_sum += placed[p]->busbw;
      ++measurements;
    }
    std::fputs(nccl::row(bytes, count, dtype, op, placed[0], placed[1]).c_str(), stdout);
    std::fflush(stdout);
    rows.push_back({bytes, count, dtype, op, placed[0], placed[1]});
  }
  double avg_busbw() const { return measurements ? busbw_sum / measurements : 0.0; }
};

// One size's figures of every rank to rank 0 (Rank::gather), decoded and checked to be of rank
// 0's size. False with *error.
bool gather_row(Rank& w, const nccl::RankRow& mine, std::vector<nccl::RankRow>* all, std::string* error) {
  std::vector<std::string> texts;
  if (!w.gather("the figures of " + std::to_string(mine.bytes) + " bytes", nccl::encode_row(mine), &texts)) {
    *error = w.error();
    return false;
  }
  all->clear();
  for (size_t r = 0; r < texts.size(); ++r) {
    std::optional<nccl::RankRow> row = nccl::decode_row(texts[r]);
    if (!row || row->bytes != mine.bytes || row->placed[0].has_value() != mine.placed[0].has_value() ||
        row->placed[1].has_value() != mine.placed[1].has_value()) {
      *error = "rank " + std::to_string(r) + " reported figures that are not of rank 0's " +
               std::to_string(mine.bytes) + " bytes and placements: '" + texts[r].substr(0, 100) +
               "' (are all ranks started with the same -b/-e/-f/-i and --in-place?)";
      return false;
    }
    all->push_back(*row);
  }
  return true;
}

// The sweep: a row per size, out of place then in place, each timed and then checked against the
// reference; `done(row, count)` takes each size's figures (false: stop, with *error set by it).
// Returns false when a collective failed (w.error() says why).
bool run_sweep(Rank& w, Buffers& buf, const Sweep& o, OwnTally* own,
               const std::function<bool(const nccl::RankRow&, uint64_t count)>& done) {
  const RankOptions& ro = w.options();
  const unsigned n = ro.geometry.ranks, rank = ro.geometry.rank;
  const util::Dtype dtype = w.dtype();
  const size_t es = util::dtype_size(dtype);
  for (const uint64_t size : sweep(o)) {
    const uint64_t count = size / es, bytes = count * es;
    if (count == 0) {
      if (rank == 0)
        std::printf("# %" PRIu64 " bytes: less than one %s element, skipped\n", size,
                    std::string(nccl::type_name(dtype)).c_str());
      continue;
    }
    // A reduce-scatter or all-gather: n shards of whole elements; this rank's input (all-gather)
    // or output (reduce-scatter) is its shard, where nccl-tests places it.
    const control::Collective coll = w.plan().collective;
    const bool rotated = coll != control::Collective::allreduce;
    const uint64_t shard = rotated ? count / n * es : bytes;
    if (rotated && shard * n != bytes) {
      if (rank == 0)
        std::printf("# %" PRIu64 " bytes: not %u shards of whole %s elements, skipped\n", size, n,
                    std::string(nccl::type_name(dtype)).c_str());
      continue;
    }
    const bool gather = coll == control::Collective::all_gather;
    auto input_at = [&](bool in_place) {
      return gather && in_place ? buf.data.data() + rank * shard : buf.data.data();
    };
    // The reference of this size, made once from the seed (every rank computes every rank's input).
    std::optional<Reference> ref;
    if (o.check)
      ref.emplace(Reference::Config{dtype, n, o.seed, ro.resolved.mode == Mode::ring, ro.xdp_scale, ro.rack_of, coll},
                  bytes);
    // Filling (and, the first time, making the reference) takes each rank a different time: the
    // ranks meet after it, before the allreduce that follows.
    const std::string size_name = std::to_string(bytes) + " bytes";
    auto fill = [&](const char* before, bool in_place = false) {
      serving(w, [&] { fill_input(dtype, o.seed, rank, input_at(in_place), gather ? shard : bytes); });
      return w.barrier(std::string(before) + " of " + size_name);
    };
    if (!fill("the first allreduce")) return false;
    for (unsigned it = 0; it < o.warmup; ++it)
      if (!run_collective(w, buf, coll, bytes, false)) return false;
    nccl::RankRow row;
    row.bytes = bytes;
    for (const bool in_place : {false, true}) {
      if (in_place && !o.in_place) continue;
      nccl::Measurement m;
      double total_us = 0;
      for (unsigned it = 0; it < o.iters; ++it) {
        // In place, the last sum replaced the input (out of place, it is intact).
        if (in_place && !fill("an in-place allreduce", true)) return false;
        const uint64_t t0 = now_ns();
        if (!run_collective(w, buf, coll, bytes, in_place)) return false;
        total_us += static_cast<double>(now_ns() - t0) / 1e3;
      }
      m.time_us = total_us / o.iters;
      // Checked iterations, as nccl-tests': fresh inputs, one allreduce, every element against the
      // reference of the tier that summed it; the first one with wrong elements ends them.
      m.checked = o.check > 0;
      for (unsigned c = 0; c < o.check && m.wrong == 0; ++c) {
        if (!fill("a checked allreduce", in_place)) return false;
        corrupt(dtype, input_at(in_place), (gather ? shard : bytes) / es, o.corrupt);
        if (!run_collective(w, buf, coll, bytes, in_place)) return false;
        const uint8_t* got = in_place ? buf.data.data() : buf.result.data();
        const std::vector<uint8_t>* sum = nullptr;
        serving(w, [&] { sum = &ref->sum(w.last_tier()); });
        // A reduce-scatter's rank holds its shard of the sum (in place, at its place in the buffer).
        const uint64_t from = coll == control::Collective::reduce_scatter ? rank * shard : 0;
        const uint64_t len = coll == control::Collective::reduce_scatter ? shard : bytes;
        const uint64_t got_from = in_place ? from : 0;  // out of place, the shard is all of result()
        for (size_t i = from; i < from + len; i += es) {
          if (std::memcmp(sum->data() + i, got + got_from + (i - from), es) == 0) continue;
          if (m.wrong < 3)
            std::fprintf(stderr, "rank %u: %s, %" PRIu64 " bytes: element %zu differs from the reference sum\n", rank,
                         in_place ? "in place" : "out of place", bytes, i / es);
          ++m.wrong;
        }
      }
      own->checks += m.checked;
      own->failed_checks += m.wrong > 0;
      own->wrong += m.wrong;
      row.placed[in_place] = m;
    }
    ++own->sizes;
    // (nccl-tests' count of a reduce-scatter or all-gather: the elements of one rank's shard.)
    if (!done(row, rotated ? shard / es : count)) return false;
  }
  return true;
}

int run(int argc, char** argv) {
  CommandLine cl;
  if (const int rc = parse_command_line(argc, argv, &cl); rc >= 0) return rc;
  const RankOptions& o = cl.o;
  const unsigned rank = o.geometry.rank;
  const std::string start_time = nccl::now_text();
  // The results file: rank 0's, created before anything runs, so that a path that cannot be
  // written fails at once. nccl-tests announces it first.
  int results_fd = -1;
  std::string results_path;
  if (rank == 0 && !cl.output_file.empty()) {
    std::string why;
    results_fd = create_results_file(cl.output_file, &results_path, &why);
    if (results_fd < 0) return usage(why);
    std::printf("# Writing %s output to %s\n", cl.output_file_csv ? "CSV" : "JSON", results_path.c_str());
  }
  Rank w(o);
  auto fatal = [&](const std::string& why) {
    std::cerr << "inagg-worker: rank " << rank << ": " << why << "\n";
    return 1;
  };
  w.on_note = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };
  if (const int rc = w.start(); rc != 0) {
    std::cerr << "inagg-worker: " << w.error() << "\n";
    return rc;
  }
  // Where the ranks meet at rank 0 (all modes but xdp), rank 0 prints the job's one table: every
  // rank's figures reach it over the meeting's connections. ina and ring gather each size's as it
  // is done (the ranks meet between sizes anyway); auto after finish(), where no rank can be in
  // the tier's fall-over agreement, and only while the job stayed on the appliance (the meeting's
  // connections cross it). Otherwise rank 0's own figures.
  const bool alone = !w.can_gather();
  const bool deferred = !alone && o.resolved.mode == Mode::automatic;
  std::vector<std::string> rank_lines;
  if (alone) {
    if (rank == 0) rank_lines.push_back(nccl::rank_line(rank_info(w)));
  } else if (!w.gather("the ranks' devices", nccl::rank_line(rank_info(w)), &rank_lines)) {
    return fatal(w.error());
  }
  std::vector<nccl::RankInfo> devices;
  for (size_t r = 0; r < rank_lines.size(); ++r) {
    std::optional<nccl::RankInfo> d = nccl::parse_rank_line(rank_lines[r]);
    if (!d || d->rank != static_cast<int>(r))
      return fatal("rank " + std::to_string(r) + " sent a device line that is not its own: '" +
                   rank_lines[r].substr(0, 100) + "'");
    devices.push_back(*d);
  }
  Buffers buf{std::vector<uint8_t>(cl.sweep.max_bytes), std::vector<uint8_t>(cl.sweep.max_bytes)};
  const control::Collective coll = w.plan().collective;
  JobTable table;
  table.how = cl.average;
  table.bus_factor = bus_factor(coll, o.geometry.ranks);
  table.dtype = w.dtype();
  table.op = cl.sweep.op;
  if (rank == 0) print_preamble(w, cl, rank_lines, alone);
  print_rank(w, cl);
  if (rank == 0 && !deferred) table.print_header();

  OwnTally own;
  std::vector<std::pair<nccl::RankRow, uint64_t>> held;  // auto: the rows, gathered after finish()
  std::string report_error;
  auto done = [&](const nccl::RankRow& row, uint64_t count) {
    if (cl.rank_figures) {
      // This rank's own row, as a comment: what rank 0's table aggregates (-a).
      std::optional<nccl::Measurement> placed[2] = {row.placed[0], row.placed[1]};
      for (std::optional<nccl::Measurement>& m : placed)
        if (m) nccl::set_bandwidths(&*m, row.bytes, table.bus_factor);
      std::printf("# rank %u: %s", rank,
                  nccl::row(row.bytes, count, w.dtype(), cl.sweep.op, placed[0], placed[1]).c_str());
      std::fflush(stdout);
    }
    if (deferred) {
      held.emplace_back(row, count);
      return true;
    }
    std::vector<nccl::RankRow> all{row};
    if (!alone && !gather_row(w, row, &all, &report_error)) return false;
    if (rank == 0) table.add(count, all);
    return true;
  };
  if (!run_sweep(w, buf, cl.sweep, &own, done)) return fatal(report_error.empty() ? w.error() : report_error);
  if (!w.finish()) return fatal(w.error());
  if (deferred) {
    const bool met = w.tier() == Tier::appliance;
    if (rank == 0 && !met)
      std::printf(
          "# mode auto fell over to the XDP tier, whose ranks do not meet at rank 0: this table is rank 0's own "
          "figures; every other rank reports its wrong elements on stderr and in its exit status\n");
    for (const auto& [row, count] : held) {
      std::vector<nccl::RankRow> all{row};
      if (met && !gather_row(w, row, &all, &report_error)) return fatal(report_error);
      if (rank == 0) table.add(count, all);
    }
  }
  std::optional<double> min_bw;
  if (const char* e = std::getenv("NCCL_TESTS_MIN_BW")) min_bw = std::atof(e);
  if (rank == 0) {
    table.print_header();
    std::fputs(nccl::footer(table.out_of_bounds, table.avg_busbw(), min_bw, program_of(coll)).c_str(), stdout);
  } else {
    std::printf("# rank %u: %u sizes, %u checked placements, %" PRIu64
                " wrong elements (rank 0 prints the job's table)\n",
                rank, own.sizes, own.checks, own.wrong);
  }
  if (results_fd >= 0) {
    std::string text;
    if (cl.output_file_csv) {
      text = nccl::results_csv(table.rows);
    } else {
      nccl::JsonRun run;
      run.start_time = start_time;
      run.end_time = nccl::now_text();
      run.args.assign(argv, argv + argc);
      run.env = nccl::environment_for_json(environ);
      run.min_bytes = cl.sweep.min_bytes;
      run.max_bytes = cl.sweep.max_bytes;
      run.step_bytes = cl.sweep.step_bytes;
      run.step_factor = cl.sweep.factor;
      run.warmup_iters = cl.sweep.warmup;
      run.iterations = cl.sweep.iters;
      run.validation = cl.sweep.check;
      run.devices = devices;
      run.rows = table.rows;
      run.experiment_name = program_of(coll);
      run.out_of_bounds = table.out_of_bounds;
      run.avg_busbw = table.avg_busbw();
      run.min_busbw = min_bw;
      text = nccl::results_json(run);
    }
    FILE* f = ::fdopen(results_fd, "w");
    const bool written = f && std::fputs(text.c_str(), f) >= 0;
    if ((f ? std::fclose(f) : ::close(results_fd)) != 0 || !written)
      return fatal("-J/--output_file " + results_path + ": the results could not be written: " + std::strerror(errno));
  }
  if (const std::optional<TransportCounters> c = w.transport_counters(); c && o.resolved.use_verbs)
    std::printf("# rank %u: verbs: %" PRIu64 " messages written, %" PRIu64
                " received (packets and retransmissions: the device's counters, rdma statistic)\n",
                rank, c->messages_written, c->messages_received);
  else if (c)
    std::printf("# rank %u: sent %" PRIu64 " packets (%" PRIu64 " resent), %" PRIu64 " timeouts, %" PRIu64
                " NAKs received; received %" PRIu64 " in order, %" PRIu64 " duplicates, %" PRIu64
                " bad ICRC; refused %" PRIu64 " from another address, %" PRIu64 " with another rkey, %" PRIu64
                " to another QP, %" PRIu64 " before its receive side opened\n",
                rank, c->packets_sent, c->retransmitted, c->timeouts, c->naks_received, c->accepted, c->duplicates,
                c->bad_icrc, c->rx_refused_source, c->rx_refused_rkey, c->rx_refused_qpn, c->rx_refused_early);
  if (const XaggCounters* x = w.tier_counters()) {
    std::printf("# rank %u: XDP tier: %" PRIu64 " chunks, %" PRIu64 " DATA sent (%" PRIu64 " repeats), %" PRIu64
                " results (%" PRIu64 " ignored, %" PRIu64 " with a bad MAC), %" PRIu64 " values saturated%s\n",
                rank, x->chunks, x->sent, x->repeats, x->results, x->results_ignored, x->bad_mac, w.saturated(),
                w.tier() == Tier::xdp ? "" : " (not used: the appliance aggregated throughout)");
    if (w.saturated())
      std::fprintf(stderr,
                   "inagg-worker: rank %u: %" PRIu64
                   " values did not fit the fixed point and were clipped; lower --xdp-scale\n",
                   rank, w.saturated());
  }
  // Rank 0 fails the job as nccl-tests does (any rank's wrong elements, the bandwidth below
  // NCCL_TESTS_MIN_BW); every other rank fails on its own wrong elements.
  if (rank != 0) return own.failed_checks ? 1 : 0;
  return table.out_of_bounds || nccl::bandwidth_failed(table.avg_busbw(), min_bw) ? 1 : 0;
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
