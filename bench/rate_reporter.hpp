// A console reporter that also keeps each benchmark's bytes/s, so a program can print its
// summary line of ratios measured in the same run.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace inagg::bench {

class RateReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> rate;  // benchmark name -> bytes per second

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (!r.error_occurred && r.counters.count("bytes_per_second"))
        rate[r.benchmark_name()] = r.counters.at("bytes_per_second");
    ConsoleReporter::ReportRuns(runs);
  }
  // rate[a] / rate[b], 0 when either is missing.
  double ratio(const std::string& a, const std::string& b) const {
    auto ia = rate.find(a), ib = rate.find(b);
    return ia != rate.end() && ib != rate.end() && ib->second > 0 ? ia->second / ib->second : 0.0;
  }
};

// Initialises Google Benchmark from the command line and runs every selected benchmark into
// `rep`; false when the command line has arguments it does not know.
inline bool run_benchmarks(int argc, char** argv, RateReporter& rep) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return false;
  benchmark::RunSpecifiedBenchmarks(&rep);
  return true;
}

}  // namespace inagg::bench
