// The console report as usual, plus the mean of each benchmark's counters and time per
// iteration over its repetitions, so that a benchmark can print ratios against the reference it
// measured in the same run.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace sluice::bench {

class MeanReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, as the default reporter does with --benchmark_color=auto.
  MeanReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.iterations == 0) continue;
      // Each repetition counts once; with --benchmark_report_aggregates_only only the "mean"
      // aggregate arrives, and it is used when no single run did.
      const bool mean = r.run_type == Run::RT_Aggregate && r.aggregate_name == "mean";
      if (r.run_type != Run::RT_Iteration && !mean) continue;
      auto& into = mean ? aggregates_ : runs_;
      const std::string& name = r.run_name.function_name;
      add(into[{name, kTimeKey}],
          r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit) * 1e9);
      for (const auto& [counter, value] : r.counters)
        add(into[{name, counter}], value.value);
    }
  }

  // Mean of a counter (e.g. "bytes_per_second") of the named benchmark; negative if it did not
  // run (filtered out or failed).
  double counter(const std::string& benchmark, const std::string& name) const {
    return mean_of({benchmark, name});
  }
  // Mean real time of one iteration, in nanoseconds; negative if it did not run.
  double ns_per_iteration(const std::string& benchmark) const {
    return mean_of({benchmark, kTimeKey});
  }

 private:
  struct Sum {
    double total = 0;
    int count = 0;
  };
  using Key = std::pair<std::string, std::string>;
  static constexpr const char* kTimeKey = "\x01real_time_ns";

  static void add(Sum& s, double v) {
    s.total += v;
    s.count += 1;
  }
  double mean_of(const Key& k) const {
    for (const auto* m : {&runs_, &aggregates_}) {
      auto it = m->find(k);
      if (it != m->end()) return it->second.total / it->second.count;
    }
    return -1;
  }

  std::map<Key, Sum> runs_;
  std::map<Key, Sum> aggregates_;
};

}  // namespace sluice::bench
