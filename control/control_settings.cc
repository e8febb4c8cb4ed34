// Control's run-time settings (admin API get/set) and the config reload (SIGHUP).
#include <charconv>

#include "control/control.h"
#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {
namespace {

constexpr std::string_view kSettingKeys[] = {
    "log_level",
    "placement.policy",
    "health.probe",
    "health.interval_ms",
    "health.timeout_ms",
    "health.rise",
    "health.fall",
    "feed.rabbitmq.interval_ms",
    "feed.rabbitmq.timeout_ms",
    "limits.sessions_max",
    "limits.sessions_per_source_max",
    "limits.prelude_sessions_max",
    "limits.connect_timeout_ms",
    "spill.max_bytes",
    "spill.queue_messages_max",
    "spill.queue_bytes_max",
    "drain.rate_per_second",
};

// The live settings (Control::LiveSettings): their keys, the config file's ranges, and where
// each is in a LiveSettings.
using Live = Control::LiveSettings;
struct LiveKey {
  std::string_view key;
  uint64_t min;
  uint64_t max;
  uint64_t Live::*field;
};
constexpr LiveKey kLiveKeys[] = {
    {"limits.sessions_max", 1, kLimitSessionsMax, &Live::sessions_max},
    {"limits.sessions_per_source_max", 1, kLimitSessionsMax, &Live::sessions_per_source_max},
    {"limits.prelude_sessions_max", 1, kLimitSessionsMax, &Live::prelude_sessions_max},
    {"limits.connect_timeout_ms", 1, kLimitConnectTimeoutMsMax, &Live::connect_timeout_ms},
    {"spill.max_bytes", 1, SpillConfig::kBytesCeiling, &Live::spill_max_bytes},
    {"spill.queue_messages_max", 1, SpillConfig::kMessagesCeiling, &Live::spill_queue_messages_max},
    {"spill.queue_bytes_max", 1, SpillConfig::kBytesCeiling, &Live::spill_queue_bytes_max},
    {"drain.rate_per_second", 0, DrainConfig::kRateMax, &Live::drain_rate_per_second},
};

const LiveKey* live_key(std::string_view key) {
  for (const LiveKey& k : kLiveKeys)
    if (k.key == key) return &k;
  return nullptr;
}

Live live_of(const GatewayConfig& c) {
  return Live{c.sessions_max,          c.sessions_per_source_max, c.prelude_sessions_max,
              c.connect_timeout_ms,    c.spill.max_bytes,         c.spill.queue_messages_max,
              c.spill.queue_bytes_max, c.drain.rate_per_second};
}

// Only values within kLiveKeys' ranges reach here, so the narrowing casts keep them.
void set_live(GatewayConfig& c, const Live& l) {
  c.sessions_max = uint32_t(l.sessions_max);
  c.sessions_per_source_max = uint32_t(l.sessions_per_source_max);
  c.prelude_sessions_max = uint32_t(l.prelude_sessions_max);
  c.connect_timeout_ms = uint32_t(l.connect_timeout_ms);
  c.spill.max_bytes = l.spill_max_bytes;
  c.spill.queue_messages_max = l.spill_queue_messages_max;
  c.spill.queue_bytes_max = l.spill_queue_bytes_max;
  c.drain.rate_per_second = uint32_t(l.drain_rate_per_second);
}

// A whole decimal number that fits in T, and nothing else.
template <typename T>
std::optional<T> parse_whole(std::string_view s) {
  T v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string keys_list() {
  std::string s;
  for (std::string_view k : kSettingKeys)
    s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Control::settings() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view k : kSettingKeys)
    out.emplace_back(std::string(k), *setting(k));
  return out;
}

std::optional<std::string> Control::setting(std::string_view key) const {
  const HealthConfig& h = config_.health;
  if (key == "log_level") return std::string(log_level_name(log_level()));
  if (key == "placement.policy") return std::string(placement_policy_name(config_.placement));
  if (key == "health.probe") return std::string(probe_kind_name(h.probe));
  if (key == "health.interval_ms") return std::to_string(h.interval_ms);
  if (key == "health.timeout_ms") return std::to_string(h.timeout_ms);
  if (key == "health.rise") return std::to_string(h.rise);
  if (key == "health.fall") return std::to_string(h.fall);
  if (key == "feed.rabbitmq.interval_ms") return std::to_string(config_.rabbitmq_feed.interval_ms);
  if (key == "feed.rabbitmq.timeout_ms") return std::to_string(config_.rabbitmq_feed.timeout_ms);
  if (const LiveKey* k = live_key(key)) return std::to_string(live_of(config_).*(k->field));
  return std::nullopt;
}

Result<> Control::apply_live(std::string_view key, uint64_t value) {
  if (key == "spill.max_bytes" && value / 2 < config_.spill.segment_bytes) {
    return failure("spill.max_bytes must be at least two segments: 2 x spill.segment_bytes = " +
                   std::to_string(2 * config_.spill.segment_bytes));
  }
  Live l = live_of(config_);
  l.*(live_key(key)->field) = value;
  if (live_hook_) {
    if (Result<> applied = live_hook_(l); !applied) return applied;
  }
  set_live(config_, l);
  return {};
}

OpResult Control::set_setting(std::string_view key, std::string_view value) {
  const std::string k(key);
  if (!setting(key)) {
    return refuse(404, "no setting named \"" + k + "\"; settings are: " + keys_list());
  }
  auto bad = [&](const std::string& why) { return refuse(400, k + ": " + why); };
  if (key == "log_level") {
    std::optional<LogLevel> l = parse_log_level(value);
    if (!l) return bad("must be \"debug\", \"info\", \"warn\" or \"error\"");
    set_log_level(*l);
    config_.log_level = *l;
  } else if (key == "placement.policy") {
    std::optional<PlacementPolicy> p = parse_placement_policy(value);
    if (!p) return bad("must be \"rendezvous\" or \"least-queues\"");
    config_.placement = *p;
  } else if (key == "health.probe") {
    if (value == "tcp") {
      config_.health.probe = ProbeKind::kTcp;
    } else if (value == "stomp") {
      if (config_.health.passcode_file.empty()) {
        return bad("the stomp probe needs health.passcode_file in the config file");
      }
      config_.health.probe = ProbeKind::kStomp;
    } else {
      return bad("must be \"tcp\" or \"stomp\"");
    }
  } else if (key.starts_with("health.")) {
    std::optional<uint32_t> v = parse_whole<uint32_t>(value);
    if (!v) return bad("must be a whole number, not \"" + std::string(value) + "\"");
    HealthConfig h = config_.health;
    if (key == "health.interval_ms") h.interval_ms = *v;
    if (key == "health.timeout_ms") h.timeout_ms = *v;
    if (key == "health.rise") h.rise = *v;
    if (key == "health.fall") h.fall = *v;
    if (Result<> r = check_health_params(h.interval_ms, h.timeout_ms, h.rise, h.fall); !r) {
      return refuse(400, r.error().message);
    }
    config_.health = h;
    for (auto& n : nodes_)
      n->tracker.set_params(h.rise, h.fall);
  } else if (const LiveKey* live = live_key(key)) {
    std::optional<uint64_t> v = parse_whole<uint64_t>(value);
    if (!v || *v < live->min || *v > live->max) {
      return bad("must be a whole number from " + std::to_string(live->min) + " to " +
                 std::to_string(live->max) + ", not \"" + std::string(value) + "\"");
    }
    if (Result<> r = apply_live(key, *v); !r) return refuse(400, r.error().message);
  } else {  // feed.rabbitmq.*
    std::optional<uint32_t> v = parse_whole<uint32_t>(value);
    if (!v) return bad("must be a whole number, not \"" + std::string(value) + "\"");
    uint32_t interval = config_.rabbitmq_feed.interval_ms;
    uint32_t timeout = config_.rabbitmq_feed.timeout_ms;
    (key == "feed.rabbitmq.interval_ms" ? interval : timeout) = *v;
    // The same ranges as the health checks' interval and timeout.
    Result<> checked = check_health_params(interval, timeout, 1, 1);
    std::string why = checked ? std::string() : checked.error().message;
    for (size_t at = why.find("health."); at != std::string::npos; at = why.find("health.")) {
      why.replace(at, 7, "feed.rabbitmq.");
    }
    if (!why.empty()) return refuse(400, why);
    config_.rabbitmq_feed.interval_ms = interval;
    config_.rabbitmq_feed.timeout_ms = timeout;
  }
  ++counters_->settings_changes;
  log_event(LogLevel::kInfo, "setting_changed", {{"key", k}, {"value", *setting(key)}});
  return {};
}

void Control::reload_failed(std::string_view why) {
  ++counters_->reload_failures;
  log_event(LogLevel::kError, "config_reload_refused", {{"error", why}});
}

void Control::apply_nodes(const GatewayConfig& next) {
  bool placement_changed = false;
  const size_t old_count = config_.nodes.size();
  for (size_t j = 0; j < next.nodes.size(); ++j) {
    const NodeSpec& spec = next.nodes[j];
    const std::string& broker = next.broker_node_names[j];
    std::optional<NodeIndex> i = node_index(spec.name);
    if (!i) {
      config_.nodes.push_back(spec);
      config_.broker_node_names.push_back(broker);
      nodes_.push_back(
          std::make_unique<NodeRuntime>(io_, config_.health.rise, config_.health.fall));
      placement_changed = true;
      log_event(LogLevel::kInfo, "node_added",
                {{"node", spec.name},
                 {"address", spec.host + ":" + std::to_string(spec.port)},
                 {"weight", std::to_string(spec.weight)}});
      continue;
    }
    NodeSpec& cur = config_.nodes[*i];
    if (cur.weight != spec.weight) placement_changed = true;
    if (cur.host != spec.host || cur.port != spec.port) {
      log_event(LogLevel::kInfo, "node_address_changed",
                {{"node", spec.name},
                 {"from", cur.host + ":" + std::to_string(cur.port)},
                 {"to", spec.host + ":" + std::to_string(spec.port)}});
      ++nodes_[*i]->generation;
      if (running_) schedule_probe(*i, 0);
    }
    cur = spec;
    config_.broker_node_names[*i] = broker;
  }
  broker_nodes_.clear();
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    if (!config_.broker_node_names[i].empty()) {
      broker_nodes_[config_.broker_node_names[i]] = NodeIndex(i);
    }
  }
  if (!placement_changed) return;
  table_.add_nodes(config_.nodes.size());
  placements_.push_back(std::make_unique<Placement>(config_.nodes));
  Delta d;
  d.kind = Delta::kNodes;
  broadcast(d);
  for (size_t i = old_count; i < config_.nodes.size(); ++i) {
    broadcast_node(NodeIndex(i));
    if (running_) schedule_probe(NodeIndex(i), 0);
  }
}

Result<std::vector<std::string>> Control::reload(GatewayConfig next, Secrets secrets) {
  for (const NodeSpec& n : config_.nodes) {
    bool kept = std::any_of(next.nodes.begin(), next.nodes.end(),
                            [&](const NodeSpec& m) { return m.name == n.name; });
    if (!kept) {
      return failure("nodes: node \"" + n.name +
                     "\" is not in the new config; removing a node needs a restart (its queues "
                     "would move); the running config stays");
    }
  }
  std::vector<std::string> restart;
  auto differs = [&](bool changed, const char* key) {
    if (changed) restart.emplace_back(key);
  };
  differs(next.id != config_.id, "gateway.id");
  differs(next.state_dir != config_.state_dir, "gateway.state_dir");
  differs(next.workers != config_.workers, "gateway.workers");
  differs(next.listen.host != config_.listen.host || next.listen.port != config_.listen.port,
          "listen.address");
  differs(next.admin_socket != config_.admin_socket, "admin.socket");
  differs(next.admin_tcp.has_value() != config_.admin_tcp.has_value() ||
              (next.admin_tcp && (next.admin_tcp->host != config_.admin_tcp->host ||
                                  next.admin_tcp->port != config_.admin_tcp->port)),
          "admin.tcp");
  differs(!(next.session == config_.session), "stomp and limits (session settings)");
  differs(next.queues_max != config_.queues_max, "limits.queues_max");
  const SpillConfig& ns = next.spill;
  const SpillConfig& os = config_.spill;
  differs(ns.dir != os.dir || ns.segment_bytes != os.segment_bytes || ns.on_full != os.on_full ||
              ns.users_file != os.users_file || ns.allow_anonymous != os.allow_anonymous,
          "spill (other than max_bytes, queue_messages_max and queue_bytes_max)");
  const DrainConfig& nd = next.drain;
  const DrainConfig& od = config_.drain;
  differs(nd.login != od.login || nd.passcode_file != od.passcode_file || nd.window != od.window ||
              nd.backoff_base_ms != od.backoff_base_ms || nd.backoff_max_ms != od.backoff_max_ms ||
              nd.connect_timeout_ms != od.connect_timeout_ms ||
              nd.receipt_timeout_ms != od.receipt_timeout_ms,
          "drain (other than rate_per_second)");

  // The live settings, one by one: one that cannot apply now (a session limit above what the
  // engine sized its memory for) waits for a restart, the others apply.
  const Live wanted = live_of(next);
  for (const LiveKey& k : kLiveKeys) {
    const uint64_t v = wanted.*(k.field);
    if (v == live_of(config_).*(k.field)) continue;
    if (Result<> r = apply_live(k.key, v); !r) restart.push_back(std::move(r.error().message));
  }
  apply_nodes(next);
  const std::vector<PinSpec> old_pins = config_.pins;
  config_.pins = next.pins;
  config_.log_level = next.log_level;
  set_log_level(next.log_level);
  config_.placement = next.placement;
  config_.health = next.health;
  for (auto& n : nodes_)
    n->tracker.set_params(config_.health.rise, config_.health.fall);
  const bool feed_was_enabled = config_.rabbitmq_feed.enabled;
  config_.rabbitmq_feed = next.rabbitmq_feed;
  secrets_ = std::move(secrets);
  if (running_ && config_.rabbitmq_feed.enabled && !feed_was_enabled) schedule_feed(0);
  apply_config_pins(old_pins, config_.pins);
  ++counters_->reloads;
  log_event(LogLevel::kInfo, "config_reloaded",
            {{"nodes", std::to_string(config_.nodes.size())},
             {"pins", std::to_string(config_.pins.size())},
             {"restart_needed", std::to_string(restart.size())}});
  for (const std::string& k : restart) {
    log_event(LogLevel::kWarn, "config_change_needs_restart", {{"key", k}});
  }
  return restart;
}

}  // namespace sluice::control
