// Strict TOML loader for the gateway's config: errors name the file, the line and the dotted key.
#include "control/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <map>
#include <utility>

#include "base/fd.h"
#include "base/names.h"
#include "control/config_reader.h"

static_assert(TOML_EXCEPTIONS, "the config loader reports TOML syntax errors through exceptions");

namespace sluice::control {
namespace {

using config_detail::fail;
using config_detail::Invalid;
using config_detail::is_loopback;
using config_detail::Item;
using config_detail::kNameRule;
using config_detail::line_of;
using config_detail::read_address;
using config_detail::read_drain;
using config_detail::read_spill;
using config_detail::Table;
using config_detail::valid_name;
using config_detail::wrong_type;

// A config file is a few kilobytes; the cap keeps a wrong path (a log, a device) from being read
// whole into memory.
constexpr size_t kConfigBytesMax = 1u << 20;
// sun_path holds 108 bytes including the terminating NUL.
constexpr size_t kUnixSocketPathBytesMax = 107;
// The CONNECTED reply is built in a 1 KiB buffer; 255 leaves room for the fixed headers.
constexpr size_t kServerBytesMax = 255;
constexpr int64_t kLoginCacheMsMax = 86'400'000;  // a day
constexpr int64_t kHeartBeatMsMax = 86'400'000;
constexpr int64_t kUnusedTtlMsMin = 600'000;
constexpr int64_t kUnusedTtlMsMax = 31'536'000'000;  // a year
// AMQP 0-9-1 short string: RabbitMQ refuses longer queue names.
constexpr size_t kQueueNameBytesMax = 255;
constexpr int64_t kSessionsMax = kLimitSessionsMax;
constexpr int64_t kSessionTimeoutMsMax = 86'400'000;  // one day
constexpr int64_t kConnectTimeoutMsMax = kLimitConnectTimeoutMsMax;
constexpr int64_t kIntervalMsMin = 100;
constexpr int64_t kIntervalMsMax = 3'600'000;
constexpr int64_t kTimeoutMsMin = 10;
constexpr int64_t kWorkersMax = 64;
constexpr int64_t kStopGraceMsMax = 3'600'000;
constexpr int64_t kRiseFallMax = 100;

// interval_ms and timeout_ms of a periodic check: a probe must end before the next one starts.
void read_interval_timeout(const Table& t, uint32_t* interval_ms, uint32_t* timeout_ms) {
  if (auto v = t.integer("interval_ms", kIntervalMsMin, kIntervalMsMax)) {
    *interval_ms = uint32_t(*v);
  }
  if (auto v = t.integer("timeout_ms", kTimeoutMsMin, kIntervalMsMax)) *timeout_ms = uint32_t(*v);
  if (*timeout_ms < *interval_ms) return;
  if (t.get("timeout_ms") != nullptr) {
    t.fail_at("timeout_ms", "must be less than interval_ms (" + std::to_string(*interval_ms) + ")");
  }
  t.fail_at("interval_ms", "must be greater than timeout_ms (" + std::to_string(*timeout_ms) +
                               " by default); set timeout_ms lower too");
}

void read_gateway(const Table& root, GatewayConfig* c) {
  std::optional<Table> t = root.table(
      "gateway", {"id", "state_dir", "workers", "stop_grace_ms", "sqpoll", "splice", "engine"});
  if (!t) return;
  if (auto v = t->string("id")) {
    if (!valid_name(*v)) t->fail_at("id", std::string(kNameRule));
    c->id = *v;
  }
  if (auto v = t->path("state_dir")) c->state_dir = *v;
  if (auto v = t->integer("workers", 1, kWorkersMax)) c->workers = uint32_t(*v);
  if (auto v = t->integer("stop_grace_ms", 0, kStopGraceMsMax)) c->stop_grace_ms = uint32_t(*v);
  if (auto v = t->boolean("sqpoll")) c->sqpoll = *v;
  if (auto v = t->string("splice")) {
    if (*v == "inline") {
      c->splice_inline = true;
    } else if (*v == "io_uring") {
      c->splice_inline = false;
    } else {
      t->fail_at("splice", "must be \"inline\" or \"io_uring\"");
    }
  }
  if (auto v = t->string("engine")) {
    if (*v == "uring") {
      c->engine = EngineKind::kUring;
    } else if (*v == "dpdk") {
      c->engine = EngineKind::kDpdk;
    } else {
      t->fail_at("engine", "must be \"uring\" or \"dpdk\"");
    }
  }
}

void read_listen(const Table& root, GatewayConfig* c) {
  std::optional<Table> t = root.table("listen", {"address"});
  if (!t) return;
  if (auto a = read_address(*t, "address")) c->listen = *a;
}

void read_admin(const Table& root, GatewayConfig* c) {
  std::optional<Table> t = root.table("admin", {"socket", "tcp", "log_level"});
  if (!t) return;
  if (auto v = t->path("socket", kUnixSocketPathBytesMax)) c->admin_socket = *v;
  if (auto a = read_address(*t, "tcp")) {
    if (!is_loopback(a->host)) {
      t->fail_at("tcp",
                 "host must be a loopback address (127.x.x.x or localhost): the admin API has no "
                 "authentication; reach it from elsewhere through an SSH tunnel");
    }
    c->admin_tcp = *a;
  }
  if (auto v = t->string("log_level")) {
    std::optional<LogLevel> l = parse_log_level(*v);
    if (!l) t->fail_at("log_level", "must be \"debug\", \"info\", \"warn\" or \"error\"");
    c->log_level = *l;
  }
}

void read_stomp(const Table& root, GatewayConfig* c) {
  std::optional<Table> t =
      root.table("stomp", {"versions", "owned_prefixes", "default_vhost", "server", "login_check",
                           "login_cache_ms", "heartbeat_min_ms", "heartbeat_max_ms"});
  if (!t) return;
  if (auto items = t->strings("versions")) {
    if (items->empty()) {
      t->fail_at("versions", "must name at least one of \"1.0\", \"1.1\", \"1.2\"");
    }
    session::VersionSet set;
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& it = (*items)[i];
      std::string k = t->key("versions") + "[" + std::to_string(i) + "]";
      std::optional<session::Version> v = session::parse_version(it.value);
      if (!v) fail(it.line, k, "must be \"1.0\", \"1.1\" or \"1.2\"");
      if (set.has(*v)) fail(it.line, k, "duplicate version \"" + it.value + "\"; list each once");
      set.add(*v);
    }
    c->session.versions = set;
  }
  if (auto items = t->strings("owned_prefixes")) {
    c->session.owned_prefixes.clear();
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& it = (*items)[i];
      if (it.value.empty()) {
        fail(it.line, t->key("owned_prefixes") + "[" + std::to_string(i) + "]",
             "must not be empty (an empty prefix would claim every destination)");
      }
      c->session.owned_prefixes.push_back(it.value);
    }
  }
  if (auto v = t->string("default_vhost")) {
    if (v->empty() || v->size() > kVhostBytesMax) {
      t->fail_at("default_vhost", "must be 1 to 255 bytes");
    }
    c->session.default_vhost = *v;
  }
  if (auto v = t->header_value("server")) {
    if (v->empty() || v->size() > kServerBytesMax) t->fail_at("server", "must be 1 to 255 bytes");
    c->session.server = *v;
  }
  if (auto v = t->string("login_check")) {
    if (*v == "eager") {
      c->session.login_check = session::LoginCheck::kEager;
    } else if (*v == "deferred") {
      c->session.login_check = session::LoginCheck::kDeferred;
    } else {
      t->fail_at("login_check", "must be \"eager\" or \"deferred\"");
    }
  }
  if (auto v = t->integer("login_cache_ms", 0, kLoginCacheMsMax)) c->login_cache_ms = uint32_t(*v);
  if (auto v = t->integer("heartbeat_max_ms", 0, kHeartBeatMsMax)) {
    c->session.heartbeat_max_ms = uint32_t(*v);
  }
  if (auto v = t->integer("heartbeat_min_ms", 100, kHeartBeatMsMax)) {
    c->session.heartbeat_min_ms = uint32_t(*v);
  }
  if (c->session.heartbeat_max_ms != 0 &&
      c->session.heartbeat_min_ms > c->session.heartbeat_max_ms) {
    t->fail_at(t->get("heartbeat_min_ms") ? "heartbeat_min_ms" : "heartbeat_max_ms",
               "heartbeat_min_ms must not exceed heartbeat_max_ms (0 turns heart-beats off)");
  }
}

void read_limits(const Table& root, GatewayConfig* c) {
  using session::FrameLimits;
  std::optional<Table> t =
      root.table("limits", {"sessions_max", "sessions_per_source_max", "prelude_sessions_max",
                            "prelude_bytes_max", "frame_bytes_max", "header_count_max",
                            "header_line_bytes_max", "body_bytes_max", "frame_timeout_ms",
                            "prelude_idle_timeout_ms", "connect_timeout_ms", "queues_max",
                            "spill_sessions_max", "pipe_bytes", "pipe_bytes_max", "grown_pipes_max",
                            "park_sessions_above"});
  if (t) {
    constexpr int64_t kBytesCeiling = FrameLimits::kFrameBytesCeiling;
    session::SessionConfig& s = c->session;
    if (auto v = t->integer("sessions_max", 1, kSessionsMax)) c->sessions_max = uint32_t(*v);
    if (auto v = t->integer("sessions_per_source_max", 1, kSessionsMax)) {
      c->sessions_per_source_max = uint32_t(*v);
    }
    if (auto v = t->integer("prelude_sessions_max", 1, kSessionsMax)) {
      c->prelude_sessions_max = uint32_t(*v);
    }
    if (auto v = t->integer("prelude_bytes_max", 64, kBytesCeiling)) {
      s.prelude_bytes_max = uint32_t(*v);
    }
    if (auto v = t->integer("frame_bytes_max", 64, kBytesCeiling)) {
      s.frame_limits.frame_bytes_max = uint32_t(*v);
    }
    if (auto v = t->integer("header_count_max", 1, FrameLimits::kHeaderCountCeiling)) {
      s.frame_limits.header_count_max = uint32_t(*v);
    }
    if (auto v = t->integer("header_line_bytes_max", 16, kBytesCeiling)) {
      s.frame_limits.header_line_bytes_max = uint32_t(*v);
    }
    if (auto v = t->integer("body_bytes_max", 0, kBytesCeiling)) {
      s.frame_limits.body_bytes_max = uint32_t(*v);
    }
    if (auto v = t->integer("frame_timeout_ms", 1, kSessionTimeoutMsMax)) {
      s.frame_timeout_ns = *v * session::kNanosPerMilli;
    }
    if (auto v = t->integer("prelude_idle_timeout_ms", 1, kSessionTimeoutMsMax)) {
      s.prelude_idle_timeout_ns = *v * session::kNanosPerMilli;
    }
    if (auto v = t->integer("connect_timeout_ms", 1, kConnectTimeoutMsMax)) {
      c->connect_timeout_ms = uint32_t(*v);
    }
    if (auto v = t->integer("queues_max", 1, kQueuesMaxCeiling)) c->queues_max = uint32_t(*v);
    if (auto v = t->integer("spill_sessions_max", 0, kSessionsMax)) {
      c->spill_sessions_max = uint32_t(*v);
    }
    if (auto v = t->integer("pipe_bytes", 4096, 1 << 20)) c->pipe_bytes = uint32_t(*v);
    if (auto v = t->integer("pipe_bytes_max", 4096, 1 << 20)) c->pipe_bytes_max = uint32_t(*v);
    if (c->pipe_bytes_max < c->pipe_bytes) {
      // Either key may be the one left at its default.
      t->fail_at(t->get("pipe_bytes_max") ? "pipe_bytes_max" : "pipe_bytes",
                 "limits.pipe_bytes_max (" + std::to_string(c->pipe_bytes_max) +
                     ") must be at least limits.pipe_bytes (" + std::to_string(c->pipe_bytes) +
                     ")");
    }
    if (auto v = t->integer("grown_pipes_max", 0, 65536)) c->grown_pipes_max = uint32_t(*v);
    if (auto v = t->integer("park_sessions_above", 0, kSessionsMax)) {
      c->park_sessions_above = uint32_t(*v);
    }
  }
  // The keys are valid one by one; the session core checks how they combine.
  if (auto valid = c->session.validate(); !valid) {
    fail(t ? t->line() : 0, "limits", valid.error().message);
  }
}

void read_health(const Table& root, GatewayConfig* c) {
  std::optional<Table> t = root.table(
      "health", {"probe", "interval_ms", "timeout_ms", "rise", "fall", "login", "passcode_file"});
  if (!t) return;
  HealthConfig& h = c->health;
  if (auto v = t->string("probe")) {
    if (*v == "tcp") {
      h.probe = ProbeKind::kTcp;
    } else if (*v == "stomp") {
      h.probe = ProbeKind::kStomp;
    } else {
      t->fail_at("probe", "must be \"tcp\" or \"stomp\"");
    }
  }
  read_interval_timeout(*t, &h.interval_ms, &h.timeout_ms);
  if (auto v = t->integer("rise", 1, kRiseFallMax)) h.rise = uint32_t(*v);
  if (auto v = t->integer("fall", 1, kRiseFallMax)) h.fall = uint32_t(*v);
  if (auto v = t->header_value("login")) h.login = *v;
  if (auto v = t->string("passcode_file")) {
    if (v->find('\0') != std::string::npos) t->fail_at("passcode_file", "must not contain NUL");
    h.passcode_file = *v;
  }
  if (h.probe == ProbeKind::kStomp && h.passcode_file.empty()) {
    t->fail_at("passcode_file",
               "required when probe = \"stomp\": the path of a file holding the probe's passcode");
  }
}

void read_placement(const Table& root, GatewayConfig* c) {
  std::optional<Table> t =
      root.table("placement", {"policy", "placements_per_source_per_minute", "unused_ttl_ms"});
  if (!t) return;
  if (auto v = t->string("policy")) {
    if (std::optional<PlacementPolicy> p = parse_placement_policy(*v)) {
      c->placement = *p;
    } else {
      t->fail_at("policy", "must be \"rendezvous\" or \"least-queues\"");
    }
  }
  if (auto v = t->integer("placements_per_source_per_minute", 0, 1'000'000)) {
    c->placements_per_source_per_minute = uint32_t(*v);
  }
  if (auto v = t->integer("unused_ttl_ms", 0, kUnusedTtlMsMax)) {
    if (*v != 0 && *v < kUnusedTtlMsMin) {
      t->fail_at("unused_ttl_ms",
                 "must be 0 (never) or at least 600000 (10 minutes): a session "
                 "reports its use of a queue once a minute");
    }
    c->placement_unused_ttl_ms = uint64_t(*v);
  }
}

void read_nodes(const Table& root, GatewayConfig* c) {
  const toml::node* n = root.get("nodes");
  constexpr std::string_view kHowTo =
      "at least one [[nodes]] table with name and address is required";
  if (n == nullptr) fail(0, "nodes", std::string(kHowTo));
  const toml::array* a = n->as_array();
  if (a == nullptr) wrong_type(*n, "nodes", "an array of tables (write each node as [[nodes]])");
  if (a->empty()) fail(line_of(*n), "nodes", std::string(kHowTo));
  if (a->size() > kNodesMax) {
    fail(line_of(*a->get(kNodesMax)), "nodes",
         "at most " + std::to_string(kNodesMax) + " nodes are supported");
  }
  std::map<std::string, size_t, std::less<>> names;
  std::map<std::string, size_t, std::less<>> broker_names;
  for (size_t i = 0; i < a->size(); ++i) {
    std::string path = "nodes[" + std::to_string(i) + "]";
    const toml::node& e = *a->get(i);
    const toml::table* tt = e.as_table();
    if (tt == nullptr) wrong_type(e, path, "a table");
    Table t(*tt, path, "[[nodes]]", {"name", "address", "weight", "broker_node"});
    NodeSpec spec;
    std::optional<std::string> name = t.string("name");
    if (!name) t.fail_at("name", "required: the node's unique name, e.g. \"rabbit1\"");
    if (!valid_name(*name)) t.fail_at("name", std::string(kNameRule));
    if (auto it = names.find(*name); it != names.end()) {
      t.fail_at("name", "duplicate node name \"" + *name + "\" (also nodes[" +
                            std::to_string(it->second) + "]); node names must be unique");
    }
    names.emplace(*name, i);
    spec.name = *name;
    std::optional<ListenAddress> addr = read_address(t, "address");
    if (!addr) {
      t.fail_at("address", "required: the node's STOMP HOST:PORT, e.g. \"10.0.0.1:61613\"");
    }
    spec.host = addr->host;
    spec.port = addr->port;
    if (auto v = t.integer("weight", 1, kWeightMax)) spec.weight = uint32_t(*v);
    std::string broker_node = t.header_value("broker_node").value_or("");
    if (!broker_node.empty()) {
      if (auto it = broker_names.find(broker_node); it != broker_names.end()) {
        t.fail_at("broker_node", "duplicate broker node \"" + broker_node + "\" (also nodes[" +
                                     std::to_string(it->second) + "]); each must be unique");
      }
      broker_names.emplace(broker_node, i);
    }
    c->nodes.push_back(std::move(spec));
    c->broker_node_names.push_back(std::move(broker_node));
  }
}

void read_feed(const Table& root, GatewayConfig* c) {
  std::optional<Table> feed = root.table("feed", {"rabbitmq"});
  if (!feed) return;
  std::optional<Table> t = feed->table(
      "rabbitmq", {"enabled", "urls", "login", "passcode_file", "interval_ms", "timeout_ms"});
  if (!t) return;
  RabbitFeedConfig& f = c->rabbitmq_feed;
  if (auto v = t->boolean("enabled")) f.enabled = *v;
  if (auto items = t->strings("urls")) {
    for (size_t i = 0; i < items->size(); ++i) {
      const Item& it = (*items)[i];
      constexpr std::string_view kScheme = "http://";
      bool ok = it.value.starts_with(kScheme) && it.value.size() > kScheme.size() &&
                std::none_of(it.value.begin(), it.value.end(),
                             [](unsigned char ch) { return ch <= ' ' || ch == 0x7f; });
      if (!ok) {
        fail(it.line, t->key("urls") + "[" + std::to_string(i) + "]",
             "must be an http:// URL without spaces, e.g. \"http://127.0.0.1:15672\" (https is "
             "not supported)");
      }
      f.urls.push_back(it.value);
    }
  }
  if (auto v = t->header_value("login")) {
    // HTTP basic authentication separates user and password with the first colon.
    if (v->find(':') != std::string::npos) t->fail_at("login", "must not contain ':'");
    f.login = *v;
  }
  if (auto v = t->string("passcode_file")) {
    if (v->find('\0') != std::string::npos) t->fail_at("passcode_file", "must not contain NUL");
    f.passcode_file = *v;
  }
  read_interval_timeout(*t, &f.interval_ms, &f.timeout_ms);
  if (!f.enabled) return;
  if (f.urls.empty()) {
    t->fail_at("urls",
               "required when enabled = true: the management API base URLs, e.g. "
               "[\"http://127.0.0.1:15672\"]");
  }
  if (f.passcode_file.empty()) {
    t->fail_at("passcode_file",
               "required when enabled = true: the path of a file holding the API password");
  }
}

void read_pins(const Table& root, GatewayConfig* c) {
  const toml::node* n = root.get("pins");
  if (n == nullptr) return;
  const toml::array* a = n->as_array();
  if (a == nullptr) wrong_type(*n, "pins", "an array of tables (write each pin as [[pins]])");
  std::map<std::pair<std::string, std::string>, size_t> seen;
  for (size_t i = 0; i < a->size(); ++i) {
    std::string path = "pins[" + std::to_string(i) + "]";
    const toml::node& e = *a->get(i);
    const toml::table* tt = e.as_table();
    if (tt == nullptr) wrong_type(e, path, "a table");
    Table t(*tt, path, "[[pins]]", {"vhost", "queue", "node"});
    PinSpec pin;
    pin.vhost = t.string("vhost").value_or(c->session.default_vhost);
    if (pin.vhost.empty() || pin.vhost.size() > kVhostBytesMax) {
      t.fail_at("vhost", "must be 1 to " + std::to_string(kVhostBytesMax) + " bytes long");
    }
    std::optional<std::string> queue = t.string("queue");
    if (!queue) t.fail_at("queue", "required: the queue's name, e.g. \"orders\"");
    if (queue->empty() || queue->size() > kQueueNameBytesMax) {
      t.fail_at("queue", "must be 1 to " + std::to_string(kQueueNameBytesMax) + " bytes long");
    }
    pin.queue = *queue;
    std::optional<std::string> node = t.string("node");
    if (!node) t.fail_at("node", "required: the name of the node the queue is pinned to");
    if (std::none_of(c->nodes.begin(), c->nodes.end(),
                     [&](const NodeSpec& s) { return s.name == *node; })) {
      t.fail_at("node", "no node named \"" + *node + "\" in [[nodes]]");
    }
    pin.node = *node;
    auto [it, fresh] = seen.emplace(std::make_pair(pin.vhost, pin.queue), i);
    if (!fresh) {
      t.fail_at("queue", "queue \"" + pin.queue + "\" in vhost \"" + pin.vhost +
                             "\" is already pinned by pins[" + std::to_string(it->second) + "]");
    }
    c->pins.push_back(std::move(pin));
  }
}

GatewayConfig read_config(const toml::table& doc) {
  Table root(doc, "", "the top level",
             {"gateway", "listen", "admin", "stomp", "limits", "health", "placement", "nodes",
              "feed", "pins", "spill", "drain", "dpdk"});
  GatewayConfig c;
  read_gateway(root, &c);
  read_listen(root, &c);
  read_admin(root, &c);
  read_stomp(root, &c);
  read_limits(root, &c);
  read_health(root, &c);
  read_placement(root, &c);
  read_nodes(root, &c);
  read_feed(root, &c);
  read_pins(root, &c);
  read_spill(root, &c);
  read_drain(root, &c);
  read_dpdk(root, &c);
  return c;
}

}  // namespace

Result<GatewayConfig> parse_config(std::string_view text, const std::string& path) {
  try {
    toml::table doc = toml::parse(text, std::string_view(path));
    return read_config(doc);
  } catch (const Invalid& e) {
    return failure_in(path, e.line, e.key, e.message);
  } catch (const toml::parse_error& e) {
    return failure_in(path, e.source().begin.line, "", std::string(e.description()));
  } catch (const std::exception& e) {
    return failure_in(path, 0, "", std::string("cannot load the config: ") + e.what());
  }
}

Result<GatewayConfig> load_config(const std::string& path) {
  auto cannot_read = [&path](int err) {
    return failure_in(path, 0, "", std::string("cannot read the config file: ") + strerror(err));
  };
  const std::string too_large =
      "the config file is larger than " + std::to_string(kConfigBytesMax) + " bytes";
  base::Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO must not block
  if (!f.valid()) return cannot_read(errno);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) return cannot_read(errno);
  if (!S_ISREG(st.st_mode)) {
    return failure_in(path, 0, "", "the config path is not a regular file");
  }
  if (size_t(st.st_size) > kConfigBytesMax) return failure_in(path, 0, "", too_large);
  // One byte over the cap tells a file that grew since fstat from one that did not.
  std::string text(kConfigBytesMax + 1, '\0');
  size_t n = 0;
  while (n < text.size()) {
    ssize_t r = ::read(f.get(), text.data() + n, text.size() - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return cannot_read(errno);
    if (r == 0) break;
    n += size_t(r);
  }
  if (n > kConfigBytesMax) return failure_in(path, 0, "", too_large);
  text.resize(n);
  return parse_config(text, path);
}

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

std::optional<LogLevel> parse_log_level(std::string_view s) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (s == log_level_name(l)) return l;
  }
  return std::nullopt;
}

std::string_view placement_policy_name(PlacementPolicy p) {
  switch (p) {
    case PlacementPolicy::kRendezvous:
      return "rendezvous";
    case PlacementPolicy::kLeastQueues:
      return "least-queues";
  }
  return "unknown";
}

std::optional<PlacementPolicy> parse_placement_policy(std::string_view s) {
  for (PlacementPolicy p : {PlacementPolicy::kRendezvous, PlacementPolicy::kLeastQueues}) {
    if (s == placement_policy_name(p)) return p;
  }
  return std::nullopt;
}

std::string_view probe_kind_name(ProbeKind k) {
  return k == ProbeKind::kTcp ? "tcp" : "stomp";
}

Result<> check_health_params(uint32_t interval_ms, uint32_t timeout_ms, uint32_t rise,
                             uint32_t fall) {
  auto range = [](std::string_view key, uint32_t v, int64_t lo, int64_t hi) -> Result<> {
    if (int64_t(v) >= lo && int64_t(v) <= hi) return {};
    return failure(std::string(key) + ": must be between " + std::to_string(lo) + " and " +
                   std::to_string(hi));
  };
  for (Result<> r :
       {range("health.interval_ms", interval_ms, kIntervalMsMin, kIntervalMsMax),
        range("health.timeout_ms", timeout_ms, kTimeoutMsMin, kIntervalMsMax),
        range("health.rise", rise, 1, kRiseFallMax), range("health.fall", fall, 1, kRiseFallMax)}) {
    if (!r) return r;
  }
  if (timeout_ms >= interval_ms) {
    return failure("health.timeout_ms: must be less than health.interval_ms (" +
                   std::to_string(interval_ms) + ")");
  }
  return {};
}

}  // namespace sluice::control
