// Control's counters and gauges in Prometheus' text exposition format (version 0.0.4).
#include <cstdio>

#include "control/control.h"
#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {
namespace {

// Label values escape backslash, quote and newline (the format's rule).
std::string label(std::string_view v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      s += '\\';
      s += c;
    } else if (c == '\n') {
      s += "\\n";
    } else {
      s += c;
    }
  }
  return s;
}

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(std::string_view name, std::string_view labels, double v) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    char buf[40];
    std::snprintf(buf, sizeof buf, " %.17g\n", v);
    out_ += buf;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string node_label(const NodeSpec& n) {
  return "node=\"" + label(n.name) + "\"";
}

// The steps below take Control's private runtime types (its nodes, workers and counters) as
// deduced parameters: those types are Control's own and have no name outside it.

// Each family lists every node in config order, so a family's samples stay together.
void node_families(Exposition& e, const GatewayConfig& config, const auto& nodes,
                   const OwnershipTable& table) {
  e.family("sluice_node_up", "gauge", "1 when the node's health state is up, 0 when down.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    e.sample("sluice_node_up", node_label(config.nodes[i]),
             nodes[i]->tracker.state() == HealthState::kUp ? 1 : 0);
  }
  e.family("sluice_node_admin_state", "gauge",
           "1 for the node's current admin state (up, drain, maintenance), 0 for the others.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (AdminState a : {AdminState::kUp, AdminState::kDrain, AdminState::kMaintenance}) {
      e.sample("sluice_node_admin_state",
               node_label(config.nodes[i]) + ",state=\"" + std::string(admin_state_name(a)) + "\"",
               nodes[i]->admin == a ? 1 : 0);
    }
  }
  e.family("sluice_node_health_changes_total", "counter", "Health state changes of the node.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    e.sample("sluice_node_health_changes_total", node_label(config.nodes[i]),
             double(nodes[i]->health_changes));
  }
  e.family("sluice_node_passive_failures_total", "counter",
           "Connections to the node that workers reported as failed.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    e.sample("sluice_node_passive_failures_total", node_label(config.nodes[i]),
             double(nodes[i]->passive_failures));
  }
  e.family("sluice_node_queues", "gauge", "Queues the node owns (winning source).");
  for (size_t i = 0; i < nodes.size(); ++i)
    e.sample("sluice_node_queues", node_label(config.nodes[i]), table.queues_per_node()[i]);
}

// Probe results, and the probe latency histogram: its buckets are kept apart and rendered
// cumulative, as the format wants.
void probe_families(Exposition& e, const GatewayConfig& config, const auto& nodes) {
  e.family("sluice_health_probes_total", "counter", "Health probes by node and result.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    e.sample("sluice_health_probes_total", node_label(config.nodes[i]) + ",result=\"ok\"",
             double(nodes[i]->probes_ok));
    e.sample("sluice_health_probes_total", node_label(config.nodes[i]) + ",result=\"failed\"",
             double(nodes[i]->probes_failed));
  }
  e.family("sluice_health_probe_latency_seconds", "histogram",
           "Time a health probe took, to success or failure.");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string node = node_label(config.nodes[i]);
    const LatencyHistogram& h = nodes[i]->latency;
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h.kBounds.size(); ++b) {
      cumulative += h.buckets[b];
      char le[32];
      std::snprintf(le, sizeof le, "%g", h.kBounds[b]);
      e.sample("sluice_health_probe_latency_seconds_bucket", node + ",le=\"" + le + "\"",
               double(cumulative));
    }
    e.sample("sluice_health_probe_latency_seconds_bucket", node + ",le=\"+Inf\"", double(h.count));
    e.sample("sluice_health_probe_latency_seconds_sum", node, h.sum);
    e.sample("sluice_health_probe_latency_seconds_count", node, double(h.count));
  }
}

void ownership_families(Exposition& e, const GatewayConfig& config, const OwnershipTable& table,
                        size_t queues_with_backlog, const auto& counters) {
  e.family("sluice_ownership_queues", "gauge", "Queues in the ownership table.");
  e.sample("sluice_ownership_queues", "", double(table.size()));
  e.family("sluice_ownership_entries", "gauge",
           "Ownership entries by source (a queue may have several sources).");
  for (OwnerSource s : {OwnerSource::kPinned, OwnerSource::kLearned, OwnerSource::kPlaced}) {
    e.sample("sluice_ownership_entries", "source=\"" + std::string(owner_source_name(s)) + "\"",
             double(table.count(s)));
  }
  e.family("sluice_queues_with_backlog", "gauge",
           "Queues whose spilled messages wait for delivery (their new sessions spill too).");
  e.sample("sluice_queues_with_backlog", "", double(queues_with_backlog));
  e.family("sluice_ownership_queues_max", "gauge", "limits.queues_max.");
  e.sample("sluice_ownership_queues_max", "", config.queues_max);
  e.family("sluice_placements_total", "counter", "Queues placed by the placement policy.");
  e.sample("sluice_placements_total", "", double(counters.placements));
  e.family("sluice_placements_forgotten_total", "counter",
           "Placements no session used and no feed confirmed for placement.unused_ttl_ms.");
  e.sample("sluice_placements_forgotten_total", "", double(counters.placements_forgotten));
  e.family("sluice_placements_refused_total", "counter",
           "Placements not recorded because the table was full (limits.queues_max).");
  e.sample("sluice_placements_refused_total", "", double(counters.placements_refused));
  e.family("sluice_pins_applied_total", "counter", "Pins applied (admin API and config).");
  e.sample("sluice_pins_applied_total", "", double(counters.pins_applied));
}

void feed_families(Exposition& e, const auto& counters) {
  e.family("sluice_feed_polls_total", "counter", "Polls of a broker feed.");
  e.sample("sluice_feed_polls_total", "feed=\"rabbitmq\"", double(counters.feed_polls));
  e.family("sluice_feed_poll_failures_total", "counter", "Failed polls of a broker feed.");
  e.sample("sluice_feed_poll_failures_total", "feed=\"rabbitmq\"", double(counters.feed_failures));
  e.family("sluice_feed_last_success_time_seconds", "gauge",
           "Unix time of the last successful poll (0: none yet).");
  e.sample("sluice_feed_last_success_time_seconds", "feed=\"rabbitmq\"",
           double(counters.feed_last_success_unix_ms) / 1000);
  e.family("sluice_feed_poll_latency_seconds", "gauge", "Time the last poll took.");
  e.sample("sluice_feed_poll_latency_seconds", "feed=\"rabbitmq\"",
           double(counters.feed_latency_us) / 1e6);
  e.family("sluice_feed_queues", "gauge",
           "Queues of the last successful poll, by what became of them.");
  e.sample("sluice_feed_queues", "feed=\"rabbitmq\",result=\"learned\"",
           double(counters.feed_queues));
  e.sample("sluice_feed_queues", "feed=\"rabbitmq\",result=\"unmapped_node\"",
           double(counters.feed_unmapped));
  e.sample("sluice_feed_queues", "feed=\"rabbitmq\",result=\"no_owner\"",
           double(counters.feed_skipped));
  e.sample("sluice_feed_queues", "feed=\"rabbitmq\",result=\"refused\"",
           double(counters.feed_refused));
}

void worker_families(Exposition& e, const auto& workers) {
  e.family("sluice_worker_messages_sent_total", "counter", "Messages control sent to a worker.");
  for (const auto& w : workers) {
    e.sample("sluice_worker_messages_sent_total", "worker=\"" + w->label() + "\"", double(w->sent));
  }
  e.family("sluice_worker_outbox_messages", "gauge",
           "Messages waiting for room in a worker's ring.");
  for (const auto& w : workers) {
    e.sample("sluice_worker_outbox_messages", "worker=\"" + w->label() + "\"",
             double(w->outbox.size()));
  }
  e.family("sluice_worker_ring_full_total", "counter", "Pushes refused by a full ring.");
  for (const auto& w : workers) {
    const std::string wl = "worker=\"" + w->label() + "\"";
    e.sample("sluice_worker_ring_full_total", wl + ",direction=\"to_worker\"",
             double(w->channel->to_worker.full_count()));
    e.sample("sluice_worker_ring_full_total", wl + ",direction=\"to_control\"",
             double(w->channel->to_control.full_count()));
  }
}

// State saves, reloads, run-time changes and log lines: what the operators did and what it cost.
void operation_families(Exposition& e, const auto& counters) {
  e.family("sluice_state_saves_total", "counter", "Writes of the state file by result.");
  e.sample("sluice_state_saves_total", "result=\"ok\"", double(counters.saves));
  e.sample("sluice_state_saves_total", "result=\"failed\"", double(counters.save_failures));
  e.family("sluice_config_reloads_total", "counter", "Config reloads by result.");
  e.sample("sluice_config_reloads_total", "result=\"ok\"", double(counters.reloads));
  e.sample("sluice_config_reloads_total", "result=\"refused\"", double(counters.reload_failures));
  e.family("sluice_admin_changes_total", "counter",
           "Node admin state changes and setting changes made at run time.");
  e.sample("sluice_admin_changes_total", "kind=\"node_admin_state\"",
           double(counters.admin_changes));
  e.sample("sluice_admin_changes_total", "kind=\"setting\"", double(counters.settings_changes));
  e.family("sluice_log_lines_total", "counter", "Log lines written, by level.");
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    e.sample("sluice_log_lines_total", "level=\"" + std::string(log_level_name(l)) + "\"",
             double(log_lines(l)));
  }
}

}  // namespace

std::string Control::metrics_text() const {
  Exposition e;
  e.family("sluice_build_info", "gauge", "Version of the running gateway.");
  e.sample("sluice_build_info", "version=\"" SLUICE_VERSION "\"", 1);
  e.family("sluice_start_time_seconds", "gauge", "Unix time the gateway started.");
  e.sample("sluice_start_time_seconds", "", double(counters_->started_unix_ms) / 1000);
  node_families(e, config_, nodes_, table_);
  probe_families(e, config_, nodes_);
  ownership_families(e, config_, table_, backlog_.size(), *counters_);
  feed_families(e, *counters_);
  worker_families(e, workers_);
  operation_families(e, *counters_);
  return e.take();
}

}  // namespace sluice::control
