// inagg-worker: one rank of an allreduce that takes nccl-tests' all_reduce_perf options with their
// meaning and prints its table (include/inagg/client/nccl_table.hpp): option parsing, the sweep's
// buffers and output around client::Rank (include/inagg/client/rank.hpp), which holds the rack
// plan, the transport, the registration, the algorithms (ina, ring, xdp, auto) and auto's fall-over.
#include <boost/program_options.hpp>

#include <unistd.h>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

// The comment lines above the table: nccl-tests' own, then the rank, its path and its tier.
void print_preamble(const Rank& w, const CommandLine& cl) {
  const RankOptions& o = cl.o;
  const Sweep& sw = cl.sweep;
  const RackPlan& rack = w.plan();
  const unsigned rank = o.geometry.rank;
  const std::string& rank_from = cl.rank_from;
  const std::string& workers_from = cl.workers_from;
  const unsigned n = o.geometry.ranks;
  const util::Dtype dtype = rack.dtype;
  const char* perf = rack.collective == control::Collective::reduce_scatter ? "reduce_scatter_perf"
                     : rack.collective == control::Collective::all_gather   ? "all_gather_perf"
                                                                            : "all_reduce_perf";
  std::printf("# Collective test starting: inagg-worker (nccl-tests %s's options and table)\n", perf);
  std::printf("# nThread 1 nGpus 1 minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %" PRIu64
              "(%s) warmup iters: %u iters: %u agg iters: 1 validation: %u graph: 0 unalign: 0\n",
              sw.min_bytes, sw.max_bytes, sw.factor > 1 ? sw.factor : sw.step_bytes, sw.factor > 1 ? "factor" : "bytes",
              sw.warmup, sw.iters, sw.check);
  std::printf("#\n");
  const std::string collective = rack.collective == control::Collective::allreduce
                                     ? ""
                                     : ", " + o.geometry.collective + " chunk " + std::to_string(o.geometry.chunk);
  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s%s, dtype %s, M %u, P %u, window %u%s%s%s%s\n", rank, n,
              util::ip_text(rack.ip_of(rank)).c_str(), util::ip_text(rack.ip_of(rack.successor())).c_str(),
              o.mode.c_str(), collective.c_str(), std::string(nccl::type_name(dtype)).c_str(), rack.message,
              rack.payload, rack.window, rank_from.empty() ? "" : ", rank from ", rank_from.c_str(),
              workers_from.empty() ? "" : ", size from ", workers_from.c_str());
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
  if (sw.corrupt)
    std::printf("# rank %u alters %u elements of its input in every checked iteration (--corrupt-input)\n", rank,
                sw.corrupt);
}

// The table: a row per size, out of place then in place, each timed and then checked against the
// reference. Returns false when an allreduce failed (w.error() says why); counts failed checks and
// the bus bandwidths for the footer.
bool run_sweep(Rank& w, Buffers& buf, const Sweep& o, unsigned* failed_checks, double* busbw_sum,
               unsigned* measurements, std::vector<nccl::ResultRow>* rows) {
  const RankOptions& ro = w.options();
  const unsigned n = ro.geometry.ranks, rank = ro.geometry.rank;
  const util::Dtype dtype = w.dtype();
  const size_t es = util::dtype_size(dtype);
  std::fputs(nccl::header().c_str(), stdout);
  for (const uint64_t size : sweep(o)) {
    const uint64_t count = size / es, bytes = count * es;
    if (count == 0) {
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
    std::optional<nccl::Measurement> placed[2];
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
      m.algbw = nccl::alg_bandwidth(bytes, m.time_us);
      // nccl-tests' bus bandwidths: an allreduce's 2(n-1)/n, a reduce-scatter's and all-gather's (n-1)/n.
      m.busbw = rotated ? m.algbw * (n - 1) / n : nccl::bus_bandwidth(m.algbw, n);
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
      if (m.wrong) ++*failed_checks;
      *busbw_sum += m.busbw;
      ++*measurements;
      placed[in_place] = m;
    }
    // (nccl-tests' count of a reduce-scatter or all-gather: the elements of one rank's shard.)
    const uint64_t shown = rotated ? shard / es : count;
    std::fputs(nccl::row(bytes, shown, dtype, o.op, placed[0], placed[1]).c_str(), stdout);
    std::fflush(stdout);
    rows->push_back({bytes, shown, dtype, o.op, placed[0], placed[1]});
  }
  return true;
}

int run(int argc, char** argv) {
  CommandLine cl;
  if (const int rc = parse_command_line(argc, argv, &cl); rc >= 0) return rc;
  const RankOptions& o = cl.o;
  const unsigned rank = o.geometry.rank;
  // The results file is opened before anything else, so that a path that cannot be written fails at once.
  std::ofstream results;
  if (!cl.output_file.empty()) {
    results.open(cl.output_file, std::ios::trunc);
    if (!results)
      return usage("--output-file " + cl.output_file + ": cannot open it for writing: " + std::strerror(errno));
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
  Buffers buf{std::vector<uint8_t>(cl.sweep.max_bytes), std::vector<uint8_t>(cl.sweep.max_bytes)};

  print_preamble(w, cl);
  double busbw_sum = 0;
  unsigned measurements = 0, failed_checks = 0;
  std::vector<nccl::ResultRow> rows;
  if (!run_sweep(w, buf, cl.sweep, &failed_checks, &busbw_sum, &measurements, &rows)) return fatal(w.error());
  if (!w.finish()) return fatal(w.error());
  std::optional<double> min_bw;
  if (const char* e = std::getenv("NCCL_TESTS_MIN_BW")) min_bw = std::atof(e);
  const double avg = measurements ? busbw_sum / measurements : 0.0;
  std::fputs(nccl::footer(failed_checks, avg, min_bw, "inagg-worker").c_str(), stdout);
  if (results.is_open()) {
    results << (cl.output_file.ends_with(".csv")
                    ? nccl::results_csv(rows)
                    : nccl::results_json(rows, {"inagg-worker", o.mode, rank, o.geometry.ranks, failed_checks, avg}));
    results.close();
    if (!results) return fatal("--output-file " + cl.output_file + ": the results could not be written");
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
