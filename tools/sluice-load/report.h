// sluice-load's results: the summary of a run (counts, check results, throughput, latency), its
// text and JSON forms, the pass/fail verdict, and the live progress line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/sluice-load/checker.h"
#include "tools/sluice-load/client.h"
#include "tools/sluice-load/options.h"

namespace sluice::load {

struct Summary {
  CheckTotals totals;
  bool checked = false;      // consumers ran: loss, duplicates and order were checked
  uint64_t unconfirmed = 0;  // SENDs whose RECEIPT never came
  uint64_t errors = 0;       // protocol and transport errors, unconfirmed, duplicates, disorder
  std::string first_error;
  uint64_t foreign = 0;
  uint64_t sessions = 0;
  double elapsed_s = 0;  // producing start -> every receipt in and every message delivered
  uint64_t bytes_sent = 0;
  const RunStats* stats = nullptr;
  struct Queue {
    std::string name;
    CheckTotals totals;
  };
  std::vector<Queue> queues;
  std::vector<std::string> failures;  // why the run failed; empty: it passed
};

Summary summarize(const LoadOptions& o, const Checker& checker, const RunStats& stats,
                  double elapsed_s);
std::string format_text(const LoadOptions& o, const Summary& s);
std::string format_json(const LoadOptions& o, const Summary& s);
// "t=3.0s sent=... acked=... received=... rate=.../s in_flight=... errors=..."
std::string format_progress(double t_s, const CheckTotals& t, double rate, uint64_t in_flight,
                            uint64_t errors);

}  // namespace sluice::load
