// Control's node registry: node views, admin state, health probes and passive reports.
#include <chrono>

#include "control/control.h"
#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {

// ---- nodes ------------------------------------------------------------------------------------

std::optional<NodeIndex> Control::node_index(std::string_view name) const {
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    if (config_.nodes[i].name == name) return NodeIndex(i);
  }
  return std::nullopt;
}

std::string Control::node_names() const {
  std::string s;
  for (const NodeSpec& n : config_.nodes)
    s += (s.empty() ? "" : ", ") + n.name;
  return s;
}

std::string Control::node_name_or_empty(NodeIndex i) const {
  return i == kNoNode ? std::string() : config_.nodes[i].name;
}

NodeStatus Control::status_of(NodeIndex i) const {
  const NodeRuntime& n = *nodes_[i];
  NodeStatus s;
  s.spec = config_.nodes[i];
  s.broker_node = config_.broker_node_names[i];
  s.admin = n.admin;
  s.health = n.tracker.state();
  s.queues = table_.queues_per_node()[i];
  s.probes_ok = n.probes_ok;
  s.probes_failed = n.probes_failed;
  s.passive_failures = n.passive_failures;
  s.health_changes = n.health_changes;
  s.last_probe_latency_us = n.last_latency_us;
  s.last_probe_error = n.last_error;
  s.health_since_unix_ms = n.health_since_unix_ms;
  return s;
}

std::vector<NodeStatus> Control::nodes() const {
  std::vector<NodeStatus> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    out.push_back(status_of(NodeIndex(i)));
  return out;
}

std::optional<NodeStatus> Control::node(std::string_view name) const {
  std::optional<NodeIndex> i = node_index(name);
  if (!i) return std::nullopt;
  return status_of(*i);
}

OpResult Control::set_admin_state(std::string_view name, std::string_view state) {
  std::optional<NodeIndex> i = node_index(name);
  if (!i) {
    return refuse(404, "no node named \"" + std::string(name) + "\"; nodes are: " + node_names());
  }
  std::optional<AdminState> a = parse_admin_state(state);
  if (!a) {
    return refuse(400, "admin state must be \"up\", \"drain\" or \"maintenance\", not \"" +
                           std::string(state) + "\"");
  }
  NodeRuntime& n = *nodes_[*i];
  if (n.admin == *a) return {};
  log_event(LogLevel::kInfo, "node_admin_state",
            {{"node", config_.nodes[*i].name},
             {"from", admin_state_name(n.admin)},
             {"to", admin_state_name(*a)}});
  n.admin = *a;
  ++counters_->admin_changes;
  broadcast_node(*i);
  return {};
}

// ---- health -----------------------------------------------------------------------------------

ProbeSettings Control::probe_settings() const {
  ProbeSettings p;
  p.kind = config_.health.probe;
  p.timeout_ms = config_.health.timeout_ms;
  p.login = config_.health.login;
  p.passcode = secrets_.health_passcode;
  p.vhost = config_.session.default_vhost;
  return p;
}

void Control::schedule_probe(NodeIndex i, uint32_t delay_ms) {
  NodeRuntime& n = *nodes_[i];
  n.timer.expires_after(std::chrono::milliseconds(delay_ms));
  std::weak_ptr<int> alive = alive_;
  n.timer.async_wait([this, alive, i](boost::system::error_code ec) {
    if (!ec && !alive.expired()) run_probe(i);
  });
}

void Control::run_probe(NodeIndex i) {
  NodeRuntime& n = *nodes_[i];
  n.probe_started = std::chrono::steady_clock::now();
  const uint64_t generation = n.generation;
  std::weak_ptr<int> alive = alive_;
  start_probe(io_, config_.nodes[i].host, config_.nodes[i].port, probe_settings(),
              [this, alive, i, generation](const ProbeResult& r) {
                if (alive.expired() || !running_) return;
                // A reload that changed the node's address started a new probe cycle.
                if (nodes_[i]->generation != generation) return;
                on_probe(i, r);
              });
}

void Control::on_probe(NodeIndex i, const ProbeResult& r) {
  NodeRuntime& n = *nodes_[i];
  n.last_latency_us = r.latency_us;
  n.latency.observe(double(r.latency_us) / 1e6);
  bool changed;
  if (r.ok) {
    ++n.probes_ok;
    n.last_error.clear();
    changed = n.tracker.on_success();
  } else {
    ++n.probes_failed;
    if (r.error != n.last_error) {
      log_event(LogLevel::kDebug, "probe_failed",
                {{"node", config_.nodes[i].name}, {"error", r.error}});
    }
    n.last_error = r.error;
    changed = n.tracker.on_failure();
  }
  if (changed) on_health_change(i, r.ok ? "probe succeeded" : r.error);
  // HAProxy's inter: the next probe starts one interval after this one started.
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - n.probe_started)
                           .count();
  const int64_t wait = int64_t(config_.health.interval_ms) - elapsed;
  schedule_probe(i, uint32_t(std::max<int64_t>(wait, 0)));
}

void Control::on_passive_failure(NodeIndex i) {
  if (i >= nodes_.size()) return;
  NodeRuntime& n = *nodes_[i];
  ++n.passive_failures;
  if (n.tracker.on_failure()) on_health_change(i, "connections from workers failed");
}

void Control::on_health_change(NodeIndex i, std::string_view reason) {
  NodeRuntime& n = *nodes_[i];
  ++n.health_changes;
  n.health_since_unix_ms = unix_ms_now();
  const bool up = n.tracker.state() == HealthState::kUp;
  log_event(up ? LogLevel::kInfo : LogLevel::kWarn, up ? "node_up" : "node_down",
            {{"node", config_.nodes[i].name}, {"reason", reason}});
  broadcast_node(i);
}

}  // namespace sluice::control
