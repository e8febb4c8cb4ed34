// Summaries of a sluice-load run as text and JSON, and the verdict that sets the exit code.
#include "tools/sluice-load/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace sluice::load {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kPercentiles[] = {50, 90, 99, 99.9};

nlohmann::json latency_json(const Histogram& h) {
  nlohmann::json j;
  j["count"] = h.count();
  j["p50"] = double(h.percentile(50)) / 1e3;
  j["p90"] = double(h.percentile(90)) / 1e3;
  j["p99"] = double(h.percentile(99)) / 1e3;
  j["p99_9"] = double(h.percentile(99.9)) / 1e3;
  j["max"] = double(h.max()) / 1e3;
  j["mean"] = h.mean() / 1e3;
  return j;
}

std::string latency_line(const char* what, const Histogram& h) {
  if (h.count() == 0) return std::string(what) + ": none\n";
  char line[256];
  std::string out = what;
  out += " latency (us):";
  for (double p : kPercentiles) {
    std::snprintf(line, sizeof line, " p%g=%.1f", p, double(h.percentile(p)) / 1e3);
    out += line;
  }
  std::snprintf(line, sizeof line, " max=%.1f (%llu samples)\n", double(h.max()) / 1e3,
                (unsigned long long)h.count());
  return out + line;
}

double per_s(uint64_t n, double s) {
  return s > 0 ? double(n) / s : 0;
}

}  // namespace

Summary summarize(const LoadOptions& o, const Checker& checker, const RunStats& stats,
                  double elapsed_s) {
  Summary s;
  s.totals = checker.totals();
  s.checked = o.consumers() > 0;
  s.stats = &stats;
  s.unconfirmed = o.receipts ? s.totals.sent - s.totals.acknowledged : 0;
  s.errors = stats.errors + s.unconfirmed + checker.unknown();
  if (s.checked) s.errors += s.totals.duplicated + s.totals.out_of_order;
  s.first_error = stats.first_error;
  s.foreign = stats.foreign;
  s.sessions = stats.sessions;
  s.elapsed_s = elapsed_s;
  s.bytes_sent = stats.bytes_sent;
  for (uint32_t q = 0; q < o.queues; ++q)
    s.queues.push_back({o.queue_name(q), checker.queue_totals(q)});
  if (s.checked && s.totals.lost_acknowledged > 0)
    s.failures.push_back(std::to_string(s.totals.lost_acknowledged) +
                         " acknowledged messages were lost");
  if (s.errors > o.max_errors)
    s.failures.push_back(std::to_string(s.errors) + " errors, more than --max-errors " +
                         std::to_string(o.max_errors));
  if (s.totals.sent == 0 && o.producers() > 0) s.failures.push_back("no message was sent");
  return s;
}

std::string format_text(const LoadOptions& o, const Summary& s) {
  const CheckTotals& t = s.totals;
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof buf,
                "messages: sent=%llu acknowledged=%llu received=%llu unconfirmed=%llu\n",
                (unsigned long long)t.sent, (unsigned long long)t.acknowledged,
                (unsigned long long)t.received, (unsigned long long)s.unconfirmed);
  out += buf;
  if (s.checked) {
    std::snprintf(buf, sizeof buf,
                  "check: lost=%llu (acknowledged %llu) duplicated=%llu out_of_order=%llu "
                  "foreign=%llu\n",
                  (unsigned long long)t.lost, (unsigned long long)t.lost_acknowledged,
                  (unsigned long long)t.duplicated, (unsigned long long)t.out_of_order,
                  (unsigned long long)s.foreign);
  } else {
    std::snprintf(buf, sizeof buf, "check: no consumers, loss and order not checked\n");
  }
  out += buf;
  const uint64_t done = o.receipts ? t.acknowledged : t.sent;
  std::snprintf(buf, sizeof buf,
                "throughput: %.0f msg/s %.2f MiB/s over %.2f s; received %.0f msg/s; "
                "sessions %llu (%.0f/s)\n",
                per_s(done, s.elapsed_s), per_s(s.bytes_sent, s.elapsed_s) / kMiB, s.elapsed_s,
                per_s(t.received, s.elapsed_s), (unsigned long long)s.sessions,
                per_s(s.sessions, s.elapsed_s));
  out += buf;
  out += latency_line("receipt", s.stats->receipt_latency_ns);
  out += latency_line("delivery", s.stats->delivery_latency_ns);
  std::snprintf(buf, sizeof buf, "errors: %llu%s%s\n", (unsigned long long)s.errors,
                s.first_error.empty() ? "" : "; first: ", s.first_error.c_str());
  out += buf;
  out += s.failures.empty() ? "result: ok\n" : "result: FAILED:";
  for (size_t i = 0; i < s.failures.size(); ++i)
    out += (i ? "; " : " ") + s.failures[i] + (i + 1 == s.failures.size() ? "\n" : "");
  return out;
}

std::string format_json(const LoadOptions& o, const Summary& s) {
  const CheckTotals& t = s.totals;
  nlohmann::json j;
  j["sent"] = t.sent;
  j["acknowledged"] = t.acknowledged;
  j["received"] = t.received;
  j["unconfirmed"] = s.unconfirmed;
  j["checked"] = s.checked;
  j["lost"] = t.lost;
  j["lost_acknowledged"] = t.lost_acknowledged;
  j["duplicated"] = t.duplicated;
  j["out_of_order"] = t.out_of_order;
  j["foreign"] = s.foreign;
  j["errors"] = s.errors;
  j["first_error"] = s.first_error;
  j["elapsed_s"] = s.elapsed_s;
  const uint64_t done = o.receipts ? t.acknowledged : t.sent;
  j["throughput_msg_s"] = per_s(done, s.elapsed_s);
  j["throughput_mib_s"] = per_s(s.bytes_sent, s.elapsed_s) / kMiB;
  j["received_msg_s"] = per_s(t.received, s.elapsed_s);
  j["sessions"] = s.sessions;
  j["session_rate_s"] = per_s(s.sessions, s.elapsed_s);
  j["latency_us"]["receipt"] = latency_json(s.stats->receipt_latency_ns);
  j["latency_us"]["delivery"] = latency_json(s.stats->delivery_latency_ns);
  j["latency_relative_error_max"] = Histogram::kRelativeErrorMax;
  nlohmann::json queues = nlohmann::json::array();
  for (const Summary::Queue& q : s.queues) {
    queues.push_back({{"name", q.name},
                      {"sent", q.totals.sent},
                      {"acknowledged", q.totals.acknowledged},
                      {"received", q.totals.received},
                      {"duplicated", q.totals.duplicated},
                      {"out_of_order", q.totals.out_of_order},
                      {"lost", q.totals.lost}});
  }
  j["queues"] = queues;
  j["failures"] = s.failures;
  j["result"] = s.failures.empty() ? "ok" : "failed";
  return j.dump() + "\n";
}

std::string format_progress(double t_s, const CheckTotals& t, double rate, uint64_t in_flight,
                            uint64_t errors) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "t=%.1fs sent=%llu acked=%llu received=%llu rate=%.0f/s in_flight=%llu errors=%llu",
                t_s, (unsigned long long)t.sent, (unsigned long long)t.acknowledged,
                (unsigned long long)t.received, rate, (unsigned long long)in_flight,
                (unsigned long long)errors);
  return buf;
}

}  // namespace sluice::load
