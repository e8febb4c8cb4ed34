// sluicectl's commands over admin_call: one request each, then the answer printed for a person
// (tables, key: value lines) or a script (the API's JSON, pretty).
#include "tools/sluicectl/commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <variant>
#include <vector>

#include "tools/sluicectl/metrics_json.h"
#include "tools/sluicectl/table.h"

namespace sluice::sluicectl {
namespace {

// Ordered, so --json prints the members in the order sluiced sent them.
using Json = nlohmann::ordered_json;
using Lines = std::vector<std::pair<std::string, std::string>>;

// Longest part of an unexpected (non-JSON) answer quoted in an error.
constexpr size_t kQuotedBodyBytesMax = 200;

void out(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

int print_json(const Json& j) {
  out(j.dump(2, ' ', false, Json::error_handler_t::replace));
  out("\n");
  return kExitOk;
}

// A member as text for people: strings as they are, numbers and booleans as JSON writes them,
// missing or null as "" (which the tables show as "-"). Never throws, whatever sluiced sent.
std::string text(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump(-1, ' ', false, Json::error_handler_t::replace);
}

uint64_t count(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

bool flag(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// A member that should be an array, or an empty one.
Json list_of(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : Json::array();
}

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string join_query(const Lines& params) {
  std::string q;
  for (const auto& [name, value] : params) {
    q += q.empty() ? '?' : '&';
    q += name + "=" + control::url_encode(value);
  }
  return q;
}

// The answer of a successful (2xx) call, or the exit code once the error is printed.
tl::expected<control::AdminReply, int> call(const Options& o, std::string_view method,
                                            const std::string& target,
                                            const std::string& body = "") {
  Result<control::AdminReply> r =
      control::admin_call(o.endpoint, method, target, body, o.timeout_ms);
  if (!r) return tl::unexpected(fail(kExitUnreachable, r.error().message));
  control::AdminReply& reply = *r;
  if (reply.status >= 200 && reply.status < 300) return std::move(reply);
  const Json j = Json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return tl::unexpected(fail(kExitDaemonError, j["error"].get<std::string>()));
  }
  std::string quote = reply.body.substr(0, kQuotedBodyBytesMax);
  return tl::unexpected(fail(
      kExitDaemonError, "sluiced answered " + std::string(method) + " " + target + " with HTTP " +
                            std::to_string(reply.status) + ": " + printable(quote)));
}

// The answer as a JSON object, or the exit code once the error is printed.
tl::expected<Json, int> call_json(const Options& o, std::string_view method,
                                  const std::string& target, const Json& body = nullptr) {
  auto r = call(o, method, target, body.is_null() ? "" : body.dump());
  if (!r) return tl::unexpected(r.error());
  Json j = Json::parse(r->body, nullptr, false);
  if (!j.is_object()) {
    return tl::unexpected(fail(kExitDaemonError, "the answer of sluiced to " + std::string(method) +
                                                     " " + target + " is not a JSON object"));
  }
  return j;
}

// Scalars as "prefix.key" lines; an object one level down is flattened the same way.
void flatten(const std::string& prefix, const Json& j, Lines* lines) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      flatten(key, *it, lines);
    } else {
      lines->emplace_back(key, text(j, it.key().c_str()));
    }
  }
}

// Lines for the members named in `order` first, then any other member (one the API gained
// later) in the order sluiced sent them.
template <size_t N>
Lines ordered_lines(const Json& j, const char* const (&order)[N]) {
  Lines lines;
  Json rest = j;
  for (const char* key : order) {
    if (!j.contains(key)) continue;
    lines.emplace_back(key, text(j, key));
    rest.erase(key);
  }
  flatten("", rest, &lines);
  return lines;
}

std::string queue_where(const std::string& vhost, const std::string& queue) {
  return "queue " + in_quotes(queue) + " in vhost " + in_quotes(vhost);
}

// An age for people, two units at most as `kubectl get` shows it: 850ms, 42s, 3m12s, 5h02m,
// 2d03h; "" (shown "-") when the member is missing or not a whole number.
std::string age_text(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return "";
  const int64_t ms = it->get<int64_t>();
  if (ms < 0) return "";
  const int64_t s = ms / 1000;
  char buf[48];
  if (s < 1) {
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
  } else if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s / 3600 % 24));
  }
  return buf;
}

}  // namespace

int fail(int code, std::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // Other control bytes (from a queue name in the message) are escaped, keeping it one line.
  line = printable(line);
  std::fprintf(stderr, "sluicectl: %s\n", line.c_str());
  return code;
}

int status(const Options& o) {
  auto r = call_json(o, "GET", "/v1/status");
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  // The order a person reads a summary in; members added to the API later follow.
  static constexpr const char* kOrder[] = {"gateway",          "version",
                                           "started",          "uptime_s",
                                           "workers",          "nodes",
                                           "nodes_up",         "queues",
                                           "queues_max",       "pinned",
                                           "learned",          "placed",
                                           "placements",       "queues_with_backlog",
                                           "placement_policy", "log_level"};
  Json rest = j;
  const Json feed = rest.contains("feed") ? rest["feed"] : Json();
  rest.erase("feed");
  const Json session_totals = rest.contains("sessions") ? rest["sessions"] : Json();
  rest.erase("sessions");
  const Json dataplane = rest.contains("dataplane") ? rest["dataplane"] : Json();
  rest.erase("dataplane");
  Lines lines = ordered_lines(rest, kOrder);
  // Present once the gateway runs an engine: one line, counts by state, then since start.
  if (session_totals.is_object()) {
    auto n = [&session_totals](const char* key) {
      return std::to_string(count(session_totals, key));
    };
    lines.emplace_back("sessions", n("active") + " active (" + n("prelude") + " prelude, " +
                                       n("spliced") + " spliced of which " + n("parked") +
                                       " parked, " + n("spill") + " spill), " + n("accepted") +
                                       " accepted, " + n("refused") + " refused");
  }
  // The DPDK engine: one line per port and per lcore.
  if (dataplane.is_object()) {
    lines.emplace_back("engine", text(dataplane, "engine"));
    for (const Json& p : list_of(dataplane, "ports")) {
      lines.emplace_back("port " + text(p, "device"),
                         text(p, "mac") + ", rx " + std::to_string(count(p, "rx_packets")) +
                             " pkts, tx " + std::to_string(count(p, "tx_packets")) +
                             " pkts, missed " + std::to_string(count(p, "rx_missed")) +
                             ", errors " +
                             std::to_string(count(p, "rx_errors") + count(p, "tx_errors")));
    }
    for (const Json& l : list_of(dataplane, "lcores")) {
      lines.emplace_back("lcore " + text(l, "id"),
                         std::to_string(count(l, "flows")) + " flows (" +
                             std::to_string(count(l, "prelude_flows")) + " prelude, " +
                             std::to_string(count(l, "lingering_flows")) + " lingering), " +
                             std::to_string(count(l, "spliced")) + " spliced since start, rx " +
                             std::to_string(count(l, "rx_frames")) + ", tx " +
                             std::to_string(count(l, "tx_frames")));
    }
  }
  if (feed.is_object() && flag(feed, "enabled")) {
    flatten("feed", feed, &lines);
  } else if (!feed.is_null()) {
    lines.emplace_back("feed", "disabled");
  }
  out(key_value_lines(lines));
  return kExitOk;
}

int nodes(const Options& o) {
  auto r = call_json(o, "GET", "/v1/nodes");
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  Table table({"NAME", "ADDRESS", "WEIGHT", "ADMIN", "HEALTH", "QUEUES", "PROBE_MS", "LAST_ERROR"});
  const Json list = list_of(j, "nodes");
  for (const Json& n : list) {
    std::string probe_ms;  // "-" until a probe finished
    auto latency = n.find("last_probe_latency_ms");
    if (count(n, "probes_ok") + count(n, "probes_failed") > 0 && latency != n.end() &&
        latency->is_number()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", latency->get<double>());
      probe_ms = buf;
    }
    table.add({text(n, "name"), text(n, "address"), text(n, "weight"), text(n, "admin"),
               text(n, "health"), text(n, "queues"), probe_ms, text(n, "last_probe_error")});
  }
  out(table.render());
  return kExitOk;
}

int node_admin(const Options& o, const std::string& node, const std::string& state) {
  auto r = call_json(o, "PUT", "/v1/nodes/" + control::url_encode(node) + "/admin",
                     Json{{"state", state}});
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out("node " + printable(text(j, "name")) + ": admin state " + printable(text(j, "admin")) + "\n");
  return kExitOk;
}

int queues(const Options& o, const QueuesQuery& query) {
  Lines params;
  if (!query.vhost.empty()) params.emplace_back("vhost", query.vhost);
  if (!query.source.empty()) params.emplace_back("source", query.source);
  if (query.limit != 0) params.emplace_back("limit", std::to_string(query.limit));
  auto r = call_json(o, "GET", "/v1/queues" + join_query(params));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  const Json list = list_of(j, "queues");
  const uint64_t total = count(j, "total");
  if (list.empty() && total == 0) {
    out("no queues\n");
    return kExitOk;
  }
  Table table({"VHOST", "QUEUE", "NODE", "SOURCE"});
  for (const Json& q : list)
    table.add({text(q, "vhost"), text(q, "queue"), text(q, "node"), text(q, "source")});
  out(table.render());
  if (flag(j, "truncated") || total > list.size()) {
    out(std::to_string(list.size()) + " of " + std::to_string(total) +
        " shown (--limit raises the number shown)\n");
  }
  return kExitOk;
}

int spill(const Options& o) {
  auto r = call_json(o, "GET", "/v1/spill");
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  const Json list = list_of(j, "queues");
  out("spill log " + printable(text(j, "dir")) + ": " + std::to_string(count(j, "messages")) +
      " messages, " + std::to_string(count(j, "bytes")) + " of " +
      std::to_string(count(j, "max_bytes")) + " bytes\n");
  if (list.empty()) {
    out("no backlog\n");
    return kExitOk;
  }
  Table table({"VHOST", "QUEUE", "MESSAGES", "BYTES", "OLDEST_S", "OWNER", "STATE"});
  for (const Json& q : list) {
    table.add({text(q, "vhost"), text(q, "queue"), text(q, "messages"), text(q, "bytes"),
               text(q, "oldest_age_s"), text(q, "owner"), text(q, "state")});
  }
  out(table.render());
  return kExitOk;
}

int spill_drain(const Options& o, const std::string& vhost, const std::string& queue) {
  auto r =
      call_json(o, "POST", "/v1/spill/drain" + join_query({{"vhost", vhost}, {"queue", queue}}));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out(printable(queue_where(vhost, queue)) + ": drain requested\n");
  return kExitOk;
}

int spill_purge(const Options& o, const std::string& vhost, const std::string& queue) {
  auto r = call_json(
      o, "POST",
      "/v1/spill/purge" + join_query({{"vhost", vhost}, {"queue", queue}, {"confirm", "yes"}}));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out(printable(queue_where(vhost, queue)) + ": " + std::to_string(count(j, "purged")) +
      " spilled messages dropped\n");
  return kExitOk;
}

int sessions(const Options& o, uint32_t limit) {
  Lines params;
  if (limit != 0) params.emplace_back("limit", std::to_string(limit));
  auto r = call_json(o, "GET", "/v1/sessions" + join_query(params));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  const Json list = list_of(j, "sessions");
  const uint64_t total = count(j, "total");
  // Workers too busy to answer in time: their sessions are missing, and the answer says so.
  const Json unanswered = list_of(j, "unanswered_workers");
  std::string missing;
  if (!unanswered.empty()) {
    std::string ids;
    for (const Json& w : unanswered)
      ids += (ids.empty() ? "" : ", ") + w.dump();
    missing = std::string(unanswered.size() == 1 ? "worker " : "workers ") + ids +
              " did not answer in time: " + (unanswered.size() == 1 ? "its" : "their") +
              " sessions are not listed or counted\n";
  }
  if (list.empty() && total == 0) {
    out("no sessions\n" + missing);
    return kExitOk;
  }
  Table table({"WORKER", "ID", "CLIENT", "VHOST", "QUEUE", "OWNER", "STATE", "IN", "OUT", "AGE"});
  for (const Json& s : list) {
    // A parked session is spliced and idle, its descriptors held by the engine's ring.
    const std::string state = text(s, "state") + (flag(s, "parked") ? "/parked" : "");
    table.add({text(s, "worker"), text(s, "id"), text(s, "client"), text(s, "vhost"),
               text(s, "queue"), text(s, "owner"), state, text(s, "bytes_in"), text(s, "bytes_out"),
               age_text(s, "age_ms")});
  }
  out(table.render());
  if (flag(j, "truncated") || total > list.size()) {
    out(std::to_string(list.size()) + " of " + std::to_string(total) +
        " shown (--limit raises the number shown)\n");
  }
  out(missing);
  return kExitOk;
}

int queue_show(const Options& o, const std::string& vhost, const std::string& queue) {
  auto r = call_json(o, "GET", "/v1/queue" + join_query({{"vhost", vhost}, {"queue", queue}}));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  static constexpr const char* kOrder[] = {"vhost",  "queue",   "node",   "source",
                                           "pinned", "learned", "placed", "backlog"};
  out(key_value_lines(ordered_lines(j, kOrder)));
  return kExitOk;
}

int queue_pin(const Options& o, const std::string& vhost, const std::string& queue,
              const std::string& node) {
  auto r =
      call_json(o, "POST", "/v1/pins", Json{{"vhost", vhost}, {"queue", queue}, {"node", node}});
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out(printable(queue_where(vhost, queue)) + ": pinned to " + printable(text(j, "pinned")) + "\n");
  return kExitOk;
}

int queue_unpin(const Options& o, const std::string& vhost, const std::string& queue) {
  auto r = call_json(o, "DELETE", "/v1/pins" + join_query({{"vhost", vhost}, {"queue", queue}}));
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  const std::string node = text(j, "node");
  const std::string now = node.empty() ? "no owner until a session names it"
                                       : "now owned by " + node + " (" + text(j, "source") + ")";
  out(printable(queue_where(vhost, queue) + ": unpinned; " + now) + "\n");
  return kExitOk;
}

int set_setting(const Options& o, const std::string& key, const std::string& value) {
  auto r = call_json(o, "PUT", "/v1/settings/" + control::url_encode(key), Json{{"value", value}});
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out(printable(text(j, "key")) + " set to " + printable(text(j, "value")) + "\n");
  return kExitOk;
}

int get_setting(const Options& o, const std::optional<std::string>& key) {
  const std::string target = key ? "/v1/settings/" + control::url_encode(*key) : "/v1/settings";
  auto r = call_json(o, "GET", target);
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  Lines lines;
  if (key) {
    lines.emplace_back(text(j, "key"), text(j, "value"));
  } else {
    auto all = j.find("settings");
    if (all != j.end() && all->is_object()) flatten("", *all, &lines);
  }
  out(key_value_lines(lines));
  return kExitOk;
}

int metrics(const Options& o) {
  auto r = call(o, "GET", "/metrics");
  if (!r) return r.error();
  const std::string& body = r->body;
  if (!o.json) {
    out(body);
    return kExitOk;
  }
  auto j = metrics_to_json(body);
  if (!j)
    return fail(kExitDaemonError, "cannot read the metrics sluiced sent: " + j.error().message);
  return print_json(*j);
}

int reload(const Options& o) {
  auto r = call_json(o, "POST", "/v1/reload");
  if (!r) return r.error();
  const Json& j = *r;
  if (o.json) return print_json(j);
  out("config reloaded\n");
  return kExitOk;
}

}  // namespace sluice::sluicectl
