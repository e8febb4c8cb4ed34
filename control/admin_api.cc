// Admin API routes: JSON in and out, one clear "error" line with a fitting status on failure.
#include "control/admin_api.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {
namespace {

using nlohmann::json;

AdminResponse reply(unsigned status, const json& body) {
  // Names from brokers are bytes, not always UTF-8: replace what is not, never throw.
  return AdminResponse{status, "application/json",
                       body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

AdminResponse error(unsigned status, std::string message) {
  return reply(status, json{{"error", std::move(message)}});
}

AdminResponse error(const OpError& e) {
  return error(e.status, e.message);
}

AdminResponse method_not_allowed(const AdminRequest& r, std::string_view allowed) {
  return error(405, "method " + r.method + " is not allowed on " + r.path +
                        " (allowed: " + std::string(allowed) + ")");
}

std::string iso_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  const std::time_t secs = std::time_t(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the compiler imagines; the text is 20 bytes
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

json node_json(const NodeStatus& n) {
  return json{
      {"name", n.spec.name},
      {"address", n.spec.host + ":" + std::to_string(n.spec.port)},
      {"weight", n.spec.weight},
      {"broker_node", n.broker_node},
      {"admin", admin_state_name(n.admin)},
      {"health", health_state_name(n.health)},
      {"health_since", iso_time(n.health_since_unix_ms)},
      {"queues", n.queues},
      {"probes_ok", n.probes_ok},
      {"probes_failed", n.probes_failed},
      {"passive_failures", n.passive_failures},
      {"health_changes", n.health_changes},
      {"last_probe_latency_ms", double(n.last_probe_latency_us) / 1000},
      {"last_probe_error", n.last_probe_error},
  };
}

json queue_json(const QueueStatus& q) {
  json j{{"vhost", q.key.vhost}, {"queue", q.key.queue}};
  if (q.owner) {
    j["node"] = q.pinned.empty() && q.learned.empty() ? q.placed
                : q.pinned.empty()                    ? q.learned
                                                      : q.pinned;
    j["source"] = owner_source_name(q.owner->source);
  } else {
    j["node"] = nullptr;
    j["source"] = nullptr;
  }
  j["pinned"] = q.pinned.empty() ? json(nullptr) : json(q.pinned);
  j["learned"] = q.learned.empty() ? json(nullptr) : json(q.learned);
  j["placed"] = q.placed.empty() ? json(nullptr) : json(q.placed);
  j["backlog"] = q.backlog;
  return j;
}

// A JSON object body, or an error response.
// The body as a JSON object, or the 400 answer that says why it is not one.
tl::expected<json, AdminResponse> parse_body(const AdminRequest& r) {
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return tl::unexpected(error(400, "the request body is not valid JSON"));
  if (!j.is_object()) return tl::unexpected(error(400, "the request body must be a JSON object"));
  return j;
}

// The common case of POST /v1/pins with a batch, {"pins": [{"vhost", "queue", "node"}, ...]},
// read straight into PinRequests without building a document (10,000 pins are 600 KB). Anything
// else, including every malformed body, makes it give up; the document path then answers with
// the precise error, so both paths accept and refuse the same bodies.
class PinBatchReader : public nlohmann::json_sax<json> {
 public:
  explicit PinBatchReader(std::vector<PinRequest>* out) : out_(out) {}

  bool key(string_t& k) override {
    if (depth_ == 1 && !seen_pins_ && k == "pins") {
      seen_pins_ = true;
      in_pins_ = true;
      return true;
    }
    if (depth_ != 3 || !in_pins_) return false;
    const unsigned bit = k == "vhost" ? 1u : k == "queue" ? 2u : k == "node" ? 4u : 0u;
    if (bit == 0 || (fields_ & bit) != 0) return false;  // unknown or repeated member
    fields_ |= bit;
    field_ = bit == 1 ? &pin_.vhost : bit == 2 ? &pin_.queue : &pin_.node;
    return true;
  }
  bool string(string_t& v) override {
    if (depth_ != 3 || field_ == nullptr) return false;
    *field_ = std::move(v);
    field_ = nullptr;
    return true;
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) return ++depth_, true;
    if (depth_ != 2 || !in_pins_) return false;
    depth_ = 3;
    pin_ = PinRequest{};
    fields_ = 0;
    return true;
  }
  bool end_object() override {
    if (depth_ == 3) {
      if (fields_ != 7 || field_ != nullptr) return false;
      out_->push_back(std::move(pin_));
      depth_ = 2;
      return true;
    }
    if (depth_ == 1) return depth_ = 0, seen_pins_;
    return false;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 1 || !in_pins_) return false;
    depth_ = 2;
    return true;
  }
  bool end_array() override {
    if (depth_ != 2) return false;
    depth_ = 1;
    in_pins_ = false;
    return true;
  }
  // Numbers, booleans, nulls and binary values have no place in a well-formed batch.
  bool null() override { return false; }
  bool boolean(bool) override { return false; }
  bool number_integer(number_integer_t) override { return false; }
  bool number_unsigned(number_unsigned_t) override { return false; }
  bool number_float(number_float_t, const string_t&) override { return false; }
  bool binary(binary_t&) override { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  std::vector<PinRequest>* out_;
  PinRequest pin_;
  std::string* field_ = nullptr;
  unsigned fields_ = 0;  // bits: vhost, queue, node seen
  int depth_ = 0;        // 1: the body, 2: the "pins" array, 3: a pin
  bool seen_pins_ = false;
  bool in_pins_ = false;
};

// True when `body` is a well-formed batch, read into *out; false leaves *out empty.
bool read_pin_batch(const std::string& body, std::vector<PinRequest>* out) {
  PinBatchReader reader(out);
  const bool ok = json::sax_parse(body, &reader, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) out->clear();
  return ok;
}

// A required string member of a request object.
Result<std::string> string_member(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return failure(std::string("missing \"") + name + "\"");
  if (!it->is_string()) return failure(std::string("\"") + name + "\" must be a string");
  return it->get<std::string>();
}

const std::string* query(const AdminRequest& r, const char* name) {
  auto it = r.query.find(name);
  return it == r.query.end() ? nullptr : &it->second;
}

}  // namespace

AdminApi::AdminApi(Control& control, Reload reload)
    : control_(control), reload_(std::move(reload)) {}

AdminResponse AdminApi::handle(const AdminRequest& r) {
  const std::string& p = r.path;
  if (p == "/metrics") {
    if (r.method != "GET") return method_not_allowed(r, "GET");
    std::string text = control_.metrics_text();
    if (spill_ != nullptr) text += spill_->metrics_text();
    if (sessions_ != nullptr) text += sessions_->metrics_text();
    return AdminResponse{200, "text/plain; version=0.0.4; charset=utf-8", std::move(text)};
  }
  if (p == "/v1/status") return status(r);
  if (p == "/v1/nodes" || p.starts_with("/v1/nodes/")) return nodes(r);
  if (p == "/v1/queues") return queues(r);
  if (p == "/v1/queue") return queue(r);
  if (p == "/v1/pins") return pins(r);
  if (p == "/v1/settings" || p.starts_with("/v1/settings/")) return settings(r);
  if (p == "/v1/reload") return reload(r);
  if (p == "/v1/spill" || p.starts_with("/v1/spill/")) return spill(r);
  if (p == "/v1/sessions") return sessions(r);
  return error(404, "no endpoint " + p + "; see the Admin API section of doc/operations.md");
}

AdminResponse AdminApi::status(const AdminRequest& r) {
  if (r.method != "GET") return method_not_allowed(r, "GET");
  const Control::Summary s = control_.summary();
  const GatewayConfig& c = control_.config();
  json feed{{"enabled", s.feed_enabled},
            {"polls", s.feed_polls},
            {"failures", s.feed_failures},
            {"last_success", iso_time(s.feed_last_success_unix_ms)},
            {"last_error", s.feed_last_error}};
  json answer{
      {"version", SLUICE_VERSION},
      {"gateway", c.id},
      {"started", iso_time(s.started_unix_ms)},
      {"uptime_s", (unix_ms_now() - s.started_unix_ms) / 1000},
      {"workers", s.workers},
      {"nodes", s.nodes},
      {"nodes_up", s.nodes_up},
      {"queues", s.queues},
      {"queues_max", c.queues_max},
      {"pinned", s.pinned},
      {"learned", s.learned},
      {"placed", s.placed},
      {"placements", s.placements},
      {"queues_with_backlog", s.queues_with_backlog},
      {"placement_policy", placement_policy_name(c.placement)},
      {"log_level", *control_.setting("log_level")},
      {"feed", feed},
  };
  if (sessions_ != nullptr) {
    const SessionTotals t = sessions_->totals();
    answer["sessions"] =
        json{{"active", t.active}, {"prelude", t.prelude},   {"spliced", t.spliced},
             {"spill", t.spill},   {"accepted", t.accepted}, {"refused", t.refused},
             {"parked", t.parked}};
    if (std::optional<DataplaneStatus> d = sessions_->dataplane()) {
      json ports = json::array();
      for (const DataplaneStatus::Port& p : d->ports) {
        ports.push_back(json{{"device", p.device},
                             {"mac", p.mac},
                             {"rx_packets", p.rx_packets},
                             {"tx_packets", p.tx_packets},
                             {"rx_bytes", p.rx_bytes},
                             {"tx_bytes", p.tx_bytes},
                             {"rx_missed", p.rx_missed},
                             {"rx_errors", p.rx_errors},
                             {"tx_errors", p.tx_errors},
                             {"rx_nombuf", p.rx_nombuf}});
      }
      json lcores = json::array();
      for (const DataplaneStatus::Lcore& l : d->lcores) {
        lcores.push_back(json{{"id", l.id},
                              {"flows", l.flows},
                              {"prelude_flows", l.prelude_flows},
                              {"lingering_flows", l.lingering_flows},
                              {"spliced", l.spliced},
                              {"rx_frames", l.rx_frames},
                              {"tx_frames", l.tx_frames},
                              {"tx_dropped", l.tx_dropped}});
      }
      answer["dataplane"] = json{{"engine", d->engine}, {"ports", ports}, {"lcores", lcores}};
    }
  }
  return reply(200, answer);
}

AdminResponse AdminApi::nodes(const AdminRequest& r) {
  if (r.path == "/v1/nodes") {
    if (r.method != "GET") return method_not_allowed(r, "GET");
    json list = json::array();
    for (const NodeStatus& n : control_.nodes())
      list.push_back(node_json(n));
    return reply(200, json{{"nodes", list}});
  }
  std::string_view rest = std::string_view(r.path).substr(std::string_view("/v1/nodes/").size());
  const size_t slash = rest.find('/');
  const std::string name(rest.substr(0, slash));
  const std::string_view tail = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (tail.empty()) {
    if (r.method != "GET") return method_not_allowed(r, "GET");
    std::optional<NodeStatus> n = control_.node(name);
    if (!n) return error(404, "no node named \"" + name + "\"");
    return reply(200, node_json(*n));
  }
  if (tail != "/admin") return error(404, "no endpoint " + r.path);
  if (r.method != "PUT") return method_not_allowed(r, "PUT");
  auto body = parse_body(r);
  if (!body) return body.error();
  Result<std::string> state = string_member(*body, "state");
  if (!state) return error(400, state.error().message + " (e.g. {\"state\": \"drain\"})");
  if (OpResult done = control_.set_admin_state(name, *state); !done) return error(done.error());
  return reply(200, node_json(*control_.node(name)));
}

AdminResponse AdminApi::queues(const AdminRequest& r) {
  if (r.method != "GET") return method_not_allowed(r, "GET");
  std::string vhost;
  if (const std::string* v = query(r, "vhost")) vhost = *v;
  std::optional<OwnerSource> source;
  if (const std::string* s = query(r, "source")) {
    for (OwnerSource o : {OwnerSource::kPinned, OwnerSource::kLearned, OwnerSource::kPlaced}) {
      if (*s == owner_source_name(o)) source = o;
    }
    if (!source) return error(400, "source must be \"pinned\", \"learned\" or \"placed\"");
  }
  size_t limit = kQueuesListMax;
  if (const std::string* l = query(r, "limit")) {
    size_t v = 0;
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), v);
    if (ec != std::errc() || p != l->data() + l->size() || v == 0 || v > kQueuesListMax) {
      return error(400, "limit must be a whole number from 1 to " + std::to_string(kQueuesListMax));
    }
    limit = v;
  }
  size_t total = 0;
  json list = json::array();
  for (const QueueStatus& q : control_.queues(vhost, source, limit, &total))
    list.push_back(queue_json(q));
  const bool truncated = total > list.size();
  return reply(200, json{{"queues", list}, {"total", total}, {"truncated", truncated}});
}

AdminResponse AdminApi::queue(const AdminRequest& r) {
  if (r.method != "GET") return method_not_allowed(r, "GET");
  const std::string* vhost = query(r, "vhost");
  const std::string* name = query(r, "queue");
  if (vhost == nullptr || name == nullptr) {
    return error(400, "vhost and queue are required: /v1/queue?vhost=%2F&queue=orders");
  }
  QueueStatus q = control_.queue(*vhost, *name);
  if (!q.owner) {
    return error(404, "queue \"" + *name + "\" in vhost \"" + *vhost +
                          "\" has no owner yet (it is placed when a session first names it)");
  }
  return reply(200, queue_json(q));
}

AdminResponse AdminApi::pins(const AdminRequest& r) {
  if (r.method == "DELETE") {
    const std::string* vhost = query(r, "vhost");
    const std::string* name = query(r, "queue");
    if (vhost == nullptr || name == nullptr) {
      return error(400, "vhost and queue are required: /v1/pins?vhost=%2F&queue=orders");
    }
    if (!control_.unpin(*vhost, *name)) {
      return error(404, "queue \"" + *name + "\" in vhost \"" + *vhost + "\" is not pinned");
    }
    return reply(200, queue_json(control_.queue(*vhost, *name)));
  }
  if (r.method != "POST") return method_not_allowed(r, "POST, DELETE");
  std::vector<PinRequest> reqs;
  if (read_pin_batch(r.body, &reqs)) {
    if (OpResult done = control_.pin(reqs); !done) return error(done.error());
    return reply(200, json{{"pinned", reqs.size()}});
  }
  auto body = parse_body(r);
  if (!body) return body.error();
  const json& j = *body;
  // One pin {"vhost", "queue", "node"} or a batch {"pins": [...]}, applied all or nothing.
  const bool batch = j.contains("pins");
  auto read_one = [&](const json& o, const std::string& where) -> std::optional<AdminResponse> {
    if (!o.is_object()) return error(400, where + "each pin must be an object");
    Result<std::string> vhost = string_member(o, "vhost");
    if (!vhost) return error(400, where + vhost.error().message);
    Result<std::string> queue = string_member(o, "queue");
    if (!queue) return error(400, where + queue.error().message);
    Result<std::string> node = string_member(o, "node");
    if (!node) return error(400, where + node.error().message);
    reqs.push_back(PinRequest{*vhost, *queue, *node});
    return std::nullopt;
  };
  if (batch) {
    const json& list = j["pins"];
    if (!list.is_array()) return error(400, "\"pins\" must be an array");
    reqs.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto e = read_one(list[i], "pins[" + std::to_string(i) + "]: ")) return *e;
    }
  } else if (auto e = read_one(j, "")) {
    return *e;
  }
  if (OpResult done = control_.pin(reqs); !done) return error(done.error());
  if (!batch) return reply(200, queue_json(control_.queue(reqs[0].vhost, reqs[0].queue)));
  return reply(200, json{{"pinned", reqs.size()}});
}

AdminResponse AdminApi::settings(const AdminRequest& r) {
  if (r.path == "/v1/settings") {
    if (r.method != "GET") return method_not_allowed(r, "GET");
    json all = json::object();
    for (const auto& [k, v] : control_.settings())
      all[k] = v;
    return reply(200, json{{"settings", all}});
  }
  const std::string key = r.path.substr(std::string_view("/v1/settings/").size());
  if (r.method == "GET") {
    std::optional<std::string> v = control_.setting(key);
    if (!v) {
      std::string keys;
      for (const auto& [k, value] : control_.settings())
        keys += (keys.empty() ? "" : ", ") + k;
      return error(404, "no setting named \"" + key + "\"; settings are: " + keys);
    }
    return reply(200, json{{"key", key}, {"value", *v}});
  }
  if (r.method != "PUT") return method_not_allowed(r, "GET, PUT");
  auto body = parse_body(r);
  if (!body) return body.error();
  const json& j = *body;
  auto it = j.find("value");
  if (it == j.end()) return error(400, "missing \"value\" (e.g. {\"value\": \"debug\"})");
  // Numbers are accepted as JSON numbers or strings; settings keep their text form.
  std::string value;
  if (it->is_string()) {
    value = it->get<std::string>();
  } else if (it->is_number_unsigned()) {
    value = std::to_string(it->get<uint64_t>());
  } else {
    return error(400, "\"value\" must be a string or a whole number");
  }
  if (OpResult done = control_.set_setting(key, value); !done) return error(done.error());
  return reply(200, json{{"key", key}, {"value", *control_.setting(key)}});
}

AdminResponse AdminApi::reload(const AdminRequest& r) {
  if (r.method != "POST") return method_not_allowed(r, "POST");
  if (!reload_) return error(501, "this server cannot reload its config");
  if (Result<> reloaded = reload_(); !reloaded) return error(400, reloaded.error().message);
  return reply(200, json{{"reloaded", true}});
}

// GET /v1/spill; POST /v1/spill/drain?vhost&queue; POST /v1/spill/purge?vhost&queue&confirm=yes.
AdminResponse AdminApi::spill(const AdminRequest& r) {
  if (spill_ == nullptr) return error(503, "the spill log is not running");
  const GatewayConfig& c = control_.config();
  auto node_name = [&c](std::optional<uint32_t> n) {
    return n && *n < c.nodes.size() ? json(c.nodes[*n].name) : json(nullptr);
  };
  if (r.path == "/v1/spill") {
    if (r.method != "GET") return method_not_allowed(r, "GET");
    const SpillTotals t = spill_->totals();
    json list = json::array();
    for (const SpillQueueInfo& q : spill_->queues()) {
      // The owner as control decides it now; the drainer's node when it is sending.
      QueueStatus s = control_.queue(q.vhost, q.queue);
      json owner = s.owner ? node_name(s.owner->node) : json(nullptr);
      list.push_back(
          json{{"vhost", q.vhost},
               {"queue", q.queue},
               {"messages", q.messages},
               {"bytes", q.bytes},
               {"pending", q.pending},
               {"oldest_age_s",
                q.oldest_age_ms < 0 ? json(nullptr) : json(double(q.oldest_age_ms) / 1000)},
               {"owner", owner},
               {"state", q.state}});
    }
    return reply(200, json{{"dir", t.dir},
                           {"messages", t.messages},
                           {"bytes", t.bytes},
                           {"max_bytes", t.max_bytes},
                           {"queues", list}});
  }
  const std::string action = r.path.substr(std::string_view("/v1/spill/").size());
  if (action != "drain" && action != "purge") {
    return error(404, "no endpoint " + r.path + "; spill actions are drain and purge");
  }
  if (r.method != "POST") return method_not_allowed(r, "POST");
  const std::string* vhost = query(r, "vhost");
  const std::string* name = query(r, "queue");
  if (vhost == nullptr || name == nullptr) {
    return error(400,
                 "vhost and queue are required: /v1/spill/" + action + "?vhost=%2F&queue=orders");
  }
  const std::string where = "queue \"" + *name + "\" in vhost \"" + *vhost + "\"";
  if (action == "drain") {
    if (!spill_->drain_now(*vhost, *name)) return error(404, where + " has no spill backlog");
    log_event(LogLevel::kInfo, "spill_drain_requested", {{"vhost", *vhost}, {"queue", *name}});
    return reply(200, json{{"vhost", *vhost}, {"queue", *name}, {"drain", "requested"}});
  }
  const std::string* confirm = query(r, "confirm");
  if (confirm == nullptr || *confirm != "yes") {
    return error(400, "purge drops the messages for good: add confirm=yes (sluicectl: --yes)");
  }
  std::optional<uint64_t> purged = spill_->purge(*vhost, *name);
  if (!purged) return error(404, where + " has no spill backlog");
  log_event(LogLevel::kWarn, "spill_purged",
            {{"vhost", *vhost}, {"queue", *name}, {"messages", std::to_string(*purged)}});
  return reply(200, json{{"vhost", *vhost}, {"queue", *name}, {"purged", *purged}});
}

// GET /v1/sessions?limit=N: the dataplane's sessions, oldest first per worker.
AdminResponse AdminApi::sessions(const AdminRequest& r) {
  if (sessions_ == nullptr) return error(503, "the dataplane's sessions are not available");
  if (r.method != "GET") return method_not_allowed(r, "GET");
  size_t limit = kSessionsListDefault;
  if (const std::string* l = query(r, "limit")) {
    size_t v = 0;
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), v);
    if (ec != std::errc() || p != l->data() + l->size() || v == 0 || v > kSessionsListMax) {
      return error(400, "limit must be a whole number from 1 to " +
                            std::to_string(kSessionsListMax) + ", not \"" + *l + "\"");
    }
    limit = v;
  }
  size_t total = 0;
  std::vector<uint32_t> unanswered;
  std::vector<SessionInfo> found = sessions_->sessions(limit, &total, &unanswered);
  // The engine promises at most `limit`; the answer keeps the promise whatever it returned.
  if (found.size() > limit) found.resize(limit);
  total = std::max(total, found.size());
  json list = json::array();
  for (const SessionInfo& s : found) {
    list.push_back(json{{"worker", s.worker},
                        {"id", s.id},
                        {"client", s.client},
                        {"vhost", s.vhost},
                        {"queue", s.queue},
                        {"owner", s.owner},
                        {"state", s.state},
                        {"parked", s.parked},
                        {"bytes_in", s.bytes_in},
                        {"bytes_out", s.bytes_out},
                        {"age_ms", s.age_ms}});
  }
  const bool truncated = total > list.size();
  // A worker too busy to answer in time is named rather than left out silently: its sessions
  // are in neither the list nor the total.
  return reply(200, json{{"total", total},
                         {"truncated", truncated},
                         {"unanswered_workers", unanswered},
                         {"sessions", list}});
}

}  // namespace sluice::control
