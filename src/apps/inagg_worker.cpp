// inagg-worker: one rank of an allreduce that takes nccl-tests' all_reduce_perf options with their
// meaning and prints its table (include/inagg/client/nccl_table.hpp): option parsing and output
// around client::Worker (include/inagg/client/worker.hpp), which holds the rack plan, the
// transport, the algorithms (ina, ring, xdp, auto) and auto's fall-over.
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
#include "inagg/client/nccl_table.hpp"
#include "inagg/client/reference.hpp"
#include "inagg/client/worker.hpp"
#include "version.hpp"
#include "worker_cli.hpp"

namespace po = boost::program_options;
using namespace inagg;
using namespace inagg::client;
using apps::CommandLine;
using apps::parse_command_line;
using apps::usage;

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

// The comment lines above the table: nccl-tests' own, then the rank, its path and its tier.
void print_preamble(const Worker& w, const CommandLine& cl) {
  const WorkerOptions& o = cl.o;
  const std::string& rank_from = cl.rank_from;
  const std::string& workers_from = cl.workers_from;
  const unsigned n = o.workers;
  const util::Dtype dtype = o.rack.dtype;
  const char* perf = o.rack.collective == control::Collective::reduce_scatter ? "reduce_scatter_perf"
                     : o.rack.collective == control::Collective::all_gather   ? "all_gather_perf"
                                                                              : "all_reduce_perf";
  std::printf("# Collective test starting: inagg-worker (nccl-tests %s's options and table)\n", perf);
  std::printf("# nThread 1 nGpus 1 minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %" PRIu64
              "(%s) warmup iters: %u iters: %u agg iters: 1 validation: %u graph: 0 unalign: 0\n",
              o.min_bytes, o.max_bytes, o.factor > 1 ? o.factor : o.step_bytes, o.factor > 1 ? "factor" : "bytes",
              o.warmup, o.iters, o.check);
  std::printf("#\n");
  const std::string collective = o.rack.collective == control::Collective::allreduce
                                     ? ""
                                     : ", " + o.collective_name + " chunk " + std::to_string(o.chunk);
  std::printf("# inagg-worker rank %u of %u (%s -> %s), mode %s%s, dtype %s, M %u, P %u, window %u%s%s%s%s\n", o.rank,
              n, util::ip_text(o.rack.ip_of(o.rank)).c_str(), util::ip_text(o.rack.ip_of(o.rack.successor())).c_str(),
              o.mode_name.c_str(), collective.c_str(), std::string(nccl::type_name(dtype)).c_str(), o.message,
              o.payload, o.window, rank_from.empty() ? "" : ", rank from ", rank_from.c_str(),
              workers_from.empty() ? "" : ", size from ", workers_from.c_str());
  if (const std::string d = w.transport_description(); !d.empty())
    std::printf("# %s: %s; QPN 0x%x to the successor\n", o.use_verbs ? "verbs" : "udp", d.c_str(),
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
}

// The table: a row per size, out of place then in place, each timed and then checked against the
// reference. Returns false when an allreduce failed (w.error() says why); counts failed checks and
// the bus bandwidths for the footer.
bool run_sweep(Worker& w, const WorkerOptions& o, unsigned* failed_checks, double* busbw_sum, unsigned* measurements,
               std::vector<nccl::ResultRow>* rows) {
  const unsigned n = o.workers;
  const util::Dtype dtype = o.rack.dtype;
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
    const control::Collective coll = o.rack.collective;
    const bool rotated = coll != control::Collective::allreduce;
    const uint64_t shard = rotated ? count / n * es : bytes;
    if (rotated && shard * n != bytes) {
      std::printf("# %" PRIu64 " bytes: not %u shards of whole %s elements, skipped\n", size, n,
                  std::string(nccl::type_name(dtype)).c_str());
      continue;
    }
    const bool gather = coll == control::Collective::all_gather;
    auto input_at = [&](bool in_place) { return gather && in_place ? w.data() + o.rank * shard : w.data(); };
    // The reference of this size, made once from the seed (every rank computes every rank's input).
    std::optional<Reference> ref;
    if (o.check)
      ref.emplace(Reference::Config{dtype, n, o.seed, o.mode == Mode::ring, o.xdp_scale, o.rack_of, coll}, bytes);
    // Filling (and, the first time, making the reference) takes each rank a different time: the
    // ranks meet after it, before the allreduce that follows.
    const std::string size_name = std::to_string(bytes) + " bytes";
    auto fill = [&](const char* before, bool in_place = false) {
      serving(w, [&] { fill_input(dtype, o.seed, o.rank, input_at(in_place), gather ? shard : bytes); });
      return w.barrier(std::string(before) + " of " + size_name);
    };
    if (!fill("the first allreduce")) return false;
    for (unsigned it = 0; it < o.warmup; ++it)
      if (!w.allreduce(bytes, false)) return false;
    std::optional<nccl::Measurement> placed[2];
    for (const bool in_place : {false, true}) {
      if (in_place && !o.in_place) continue;
      nccl::Measurement m;
      double total_us = 0;
      for (unsigned it = 0; it < o.iters; ++it) {
        // In place, the last sum replaced the input (out of place, it is intact).
        if (in_place && !fill("an in-place allreduce", true)) return false;
        const uint64_t t0 = now_ns();
        if (!w.allreduce(bytes, in_place)) return false;
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
        if (!w.allreduce(bytes, in_place)) return false;
        const uint8_t* got = in_place ? w.data() : w.result();
        const std::vector<uint8_t>* sum = nullptr;
        serving(w, [&] { sum = &ref->sum(w.last_tier()); });
        // A reduce-scatter's rank holds its shard of the sum (in place, at its place in the buffer).
        const uint64_t from = coll == control::Collective::reduce_scatter ? o.rank * shard : 0;
        const uint64_t len = coll == control::Collective::reduce_scatter ? shard : bytes;
        const uint64_t got_from = in_place ? from : 0;  // out of place, the shard is all of result()
        for (size_t i = from; i < from + len; i += es) {
          if (std::memcmp(sum->data() + i, got + got_from + (i - from), es) == 0) continue;
          if (m.wrong < 3)
            std::fprintf(stderr, "rank %u: %s, %" PRIu64 " bytes: element %zu differs from the reference sum\n", o.rank,
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
  const WorkerOptions& o = cl.o;
  // The results file is opened before anything else, so that a path that cannot be written fails at once.
  std::ofstream results;
  if (!cl.output_file.empty()) {
    results.open(cl.output_file, std::ios::trunc);
    if (!results)
      return usage("--output-file " + cl.output_file + ": cannot open it for writing: " + std::strerror(errno));
  }
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

  print_preamble(w, cl);
  double busbw_sum = 0;
  unsigned measurements = 0, failed_checks = 0;
  std::vector<nccl::ResultRow> rows;
  if (!run_sweep(w, o, &failed_checks, &busbw_sum, &measurements, &rows)) return fatal(w.error());
  if (!w.finish()) return fatal(w.error());
  std::optional<double> min_bw;
  if (const char* e = std::getenv("NCCL_TESTS_MIN_BW")) min_bw = std::atof(e);
  const double avg = measurements ? busbw_sum / measurements : 0.0;
  std::fputs(nccl::footer(failed_checks, avg, min_bw, "inagg-worker").c_str(), stdout);
  if (results.is_open()) {
    results << (cl.output_file.ends_with(".csv")
                    ? nccl::results_csv(rows)
                    : nccl::results_json(rows, {"inagg-worker", o.mode_name, o.rank, o.workers, failed_checks, avg}));
    results.close();
    if (!results) return fatal("--output-file " + cl.output_file + ": the results could not be written");
  }
  if (const std::optional<TransportCounters> c = w.transport_counters(); c && o.use_verbs)
    std::printf("# rank %u: verbs: %" PRIu64 " messages written, %" PRIu64
                " received (packets and retransmissions: the device's counters, rdma statistic)\n",
                o.rank, c->messages_written, c->messages_received);
  else if (c)
    std::printf("# rank %u: sent %" PRIu64 " packets (%" PRIu64 " resent), %" PRIu64 " timeouts, %" PRIu64
                " NAKs received; received %" PRIu64 " in order, %" PRIu64 " duplicates, %" PRIu64
                " bad ICRC; refused %" PRIu64 " from another address, %" PRIu64 " with another rkey, %" PRIu64
                " to another QP, %" PRIu64 " before its receive side opened\n",
                o.rank, c->packets_sent, c->retransmitted, c->timeouts, c->naks_received, c->accepted, c->duplicates,
                c->bad_icrc, c->rx_refused_source, c->rx_refused_rkey, c->rx_refused_qpn, c->rx_refused_early);
  if (const XaggCounters* x = w.tier_counters()) {
    std::printf("# rank %u: XDP tier: %" PRIu64 " chunks, %" PRIu64 " DATA sent (%" PRIu64 " repeats), %" PRIu64
                " results (%" PRIu64 " ignored, %" PRIu64 " with a bad MAC), %" PRIu64 " values saturated%s\n",
                o.rank, x->chunks, x->sent, x->repeats, x->results, x->results_ignored, x->bad_mac, w.saturated(),
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
