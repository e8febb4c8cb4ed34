// Tests of the config loader: the example file, the defaults, and a located error for every key.
#include "control/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::control {
namespace {

constexpr const char* kExamplePath = SLUICE_SOURCE_ROOT "/gateway/sluice.example.toml";
// Three lines; appended after a case's own lines so that those keep their line numbers.
constexpr std::string_view kOneNode =
    "[[nodes]]\nname = \"rabbit1\"\naddress = \"127.0.0.1:61613\"\n";

GatewayConfig must_parse(std::string_view text) {
  Result<GatewayConfig> r = parse_config(text, "t.toml");
  if (const Error* e = r ? nullptr : &r.error()) {
    ADD_FAILURE() << "refused: " << e->to_string() << "\n" << text;
    return {};
  }
  return std::move(*r);
}

Error must_fail(std::string_view text) {
  Result<GatewayConfig> r = parse_config(text, "t.toml");
  if (const Error* e = r ? nullptr : &r.error()) return *e;
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every setting except the node list, the broker node names and the feed's URLs and credentials.
void expect_same_settings(const GatewayConfig& a, const GatewayConfig& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.state_dir, b.state_dir);
  EXPECT_EQ(a.workers, b.workers);
  EXPECT_EQ(a.listen.host, b.listen.host);
  EXPECT_EQ(a.listen.port, b.listen.port);
  EXPECT_EQ(a.admin_socket, b.admin_socket);
  EXPECT_EQ(a.admin_tcp.has_value(), b.admin_tcp.has_value());
  EXPECT_EQ(a.log_level, b.log_level);
  const session::SessionConfig& s = a.session;
  const session::SessionConfig& t = b.session;
  EXPECT_EQ(s.versions.list(), t.versions.list());
  EXPECT_EQ(s.owned_prefixes, t.owned_prefixes);
  EXPECT_EQ(s.default_vhost, t.default_vhost);
  EXPECT_EQ(s.server, t.server);
  EXPECT_EQ(s.prelude_bytes_max, t.prelude_bytes_max);
  EXPECT_EQ(s.frame_limits.frame_bytes_max, t.frame_limits.frame_bytes_max);
  EXPECT_EQ(s.frame_limits.header_count_max, t.frame_limits.header_count_max);
  EXPECT_EQ(s.frame_limits.header_line_bytes_max, t.frame_limits.header_line_bytes_max);
  EXPECT_EQ(s.frame_limits.body_bytes_max, t.frame_limits.body_bytes_max);
  EXPECT_EQ(s.frame_timeout_ns, t.frame_timeout_ns);
  EXPECT_EQ(s.prelude_idle_timeout_ns, t.prelude_idle_timeout_ns);
  EXPECT_EQ(s.login_check, t.login_check);
  EXPECT_EQ(s.heartbeat_min_ms, t.heartbeat_min_ms);
  EXPECT_EQ(s.heartbeat_max_ms, t.heartbeat_max_ms);
  EXPECT_EQ(a.login_cache_ms, b.login_cache_ms);
  EXPECT_EQ(a.placements_per_source_per_minute, b.placements_per_source_per_minute);
  EXPECT_EQ(a.placement_unused_ttl_ms, b.placement_unused_ttl_ms);
  EXPECT_EQ(a.sessions_max, b.sessions_max);
  EXPECT_EQ(a.sessions_per_source_max, b.sessions_per_source_max);
  EXPECT_EQ(a.prelude_sessions_max, b.prelude_sessions_max);
  EXPECT_EQ(a.connect_timeout_ms, b.connect_timeout_ms);
  EXPECT_EQ(a.pipe_bytes, b.pipe_bytes);
  EXPECT_EQ(a.pipe_bytes_max, b.pipe_bytes_max);
  EXPECT_EQ(a.grown_pipes_max, b.grown_pipes_max);
  EXPECT_EQ(a.park_sessions_above, b.park_sessions_above);
  EXPECT_EQ(a.queues_max, b.queues_max);
  EXPECT_EQ(a.health.probe, b.health.probe);
  EXPECT_EQ(a.health.interval_ms, b.health.interval_ms);
  EXPECT_EQ(a.health.timeout_ms, b.health.timeout_ms);
  EXPECT_EQ(a.health.rise, b.health.rise);
  EXPECT_EQ(a.health.fall, b.health.fall);
  EXPECT_EQ(a.health.login, b.health.login);
  EXPECT_EQ(a.health.passcode_file, b.health.passcode_file);
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.rabbitmq_feed.enabled, b.rabbitmq_feed.enabled);
  EXPECT_EQ(a.rabbitmq_feed.interval_ms, b.rabbitmq_feed.interval_ms);
  EXPECT_EQ(a.rabbitmq_feed.timeout_ms, b.rabbitmq_feed.timeout_ms);
  EXPECT_EQ(a.spill.dir, b.spill.dir);
  EXPECT_EQ(a.spill.max_bytes, b.spill.max_bytes);
  EXPECT_EQ(a.spill.segment_bytes, b.spill.segment_bytes);
  EXPECT_EQ(a.spill.queue_messages_max, b.spill.queue_messages_max);
  EXPECT_EQ(a.spill.queue_bytes_max, b.spill.queue_bytes_max);
  EXPECT_EQ(a.spill.on_full, b.spill.on_full);
  EXPECT_EQ(a.drain.window, b.drain.window);
  EXPECT_EQ(a.drain.rate_per_second, b.drain.rate_per_second);
  EXPECT_EQ(a.drain.backoff_base_ms, b.drain.backoff_base_ms);
  EXPECT_EQ(a.drain.backoff_max_ms, b.drain.backoff_max_ms);
  EXPECT_EQ(a.drain.connect_timeout_ms, b.drain.connect_timeout_ms);
  EXPECT_EQ(a.drain.receipt_timeout_ms, b.drain.receipt_timeout_ms);
}

TEST(ConfigStomp, LoginCheckAndHeartBeatsAreReadAndBadValuesNamed) {
  GatewayConfig c =
      must_parse(std::string("[stomp]\nlogin_check = \"deferred\"\nlogin_cache_ms = 0\n"
                             "heartbeat_min_ms = 500\nheartbeat_max_ms = 0\n") +
                 std::string(kOneNode));
  EXPECT_EQ(c.session.login_check, session::LoginCheck::kDeferred);
  EXPECT_EQ(c.login_cache_ms, 0u);
  EXPECT_EQ(c.session.heartbeat_min_ms, 500u);
  EXPECT_EQ(c.session.heartbeat_max_ms, 0u);
  EXPECT_EQ(GatewayConfig{}.session.login_check, session::LoginCheck::kEager);
  Error e = must_fail("[stomp]\nlogin_check = \"lazy\"\n" + std::string(kOneNode));
  EXPECT_EQ(e.to_string(), "t.toml:2: stomp.login_check: must be \"eager\" or \"deferred\"");
  e = must_fail("[stomp]\nheartbeat_min_ms = 20000\nheartbeat_max_ms = 10000\n" +
                std::string(kOneNode));
  EXPECT_NE(e.to_string().find("stomp.heartbeat_min_ms: heartbeat_min_ms must not exceed"),
            std::string::npos)
      << e.to_string();
  e = must_fail("[stomp]\nheartbeat_min_ms = 50\n" + std::string(kOneNode));
  EXPECT_NE(e.to_string().find("t.toml:2: stomp.heartbeat_min_ms"), std::string::npos)
      << e.to_string();
}

TEST(ConfigExample, LoadsAndDocumentsTheDefaults) {
  Result<GatewayConfig> r = load_config(kExamplePath);
  const Error* e = r ? nullptr : &r.error();
  ASSERT_EQ(e, nullptr) << e->to_string();
  const GatewayConfig& c = *r;
  // Every value the example writes out is the default it documents.
  const GatewayConfig defaults;
  expect_same_settings(c, defaults);
  EXPECT_EQ(c.session.server, "sluice/" SLUICE_VERSION);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].name, "rabbit1");
  EXPECT_EQ(c.nodes[0].host, "127.0.0.1");
  EXPECT_EQ(c.nodes[0].port, 61613);
  EXPECT_EQ(c.nodes[0].weight, 100u);
  EXPECT_EQ(c.nodes[1].name, "rabbit2");
  EXPECT_EQ(c.nodes[1].host, "127.0.0.1");
  EXPECT_EQ(c.nodes[1].port, 61614);
  EXPECT_EQ(c.broker_node_names, (std::vector<std::string>{"rabbit@rabbit1", "rabbit@rabbit2"}));
  EXPECT_FALSE(c.rabbitmq_feed.enabled);
  EXPECT_EQ(c.rabbitmq_feed.urls, std::vector<std::string>{"http://127.0.0.1:15672"});
  EXPECT_EQ(c.rabbitmq_feed.login, "sluice");
  EXPECT_EQ(c.rabbitmq_feed.passcode_file, "/etc/sluice/rabbitmq.passcode");
  ASSERT_EQ(c.pins.size(), 1u);
  EXPECT_EQ(c.pins[0].vhost, "/");
  EXPECT_EQ(c.pins[0].queue, "orders");
  EXPECT_EQ(c.pins[0].node, "rabbit1");
}

TEST(Config, SpillAndDrainSectionsAreRead) {
  GatewayConfig c = must_parse(
      "[gateway]\nstate_dir = \"/srv/sluice\"\n[spill]\nmax_bytes = 1073741824\n"
      "segment_bytes = 8388608\nqueue_messages_max = 5000\nqueue_bytes_max = 65536\n"
      "on_full = \"drop-oldest\"\n[drain]\nlogin = \"gw\"\npasscode_file = \"/etc/p\"\n"
      "window = 8\nrate_per_second = 100\nbackoff_base_ms = 10\nbackoff_max_ms = 10\n"
      "connect_timeout_ms = 300\nreceipt_timeout_ms = 400\n" +
      std::string(kOneNode));
  EXPECT_EQ(c.spill_dir(), "/srv/sluice/spill");
  EXPECT_EQ(c.spill.max_bytes, 1u << 30);
  EXPECT_EQ(c.spill.segment_bytes, 8u << 20);
  EXPECT_EQ(c.spill.queue_messages_max, 5000u);
  EXPECT_EQ(c.spill.queue_bytes_max, 65536u);
  EXPECT_EQ(c.spill.on_full, SpillOnFull::kDropOldest);
  EXPECT_EQ(spill_on_full_name(c.spill.on_full), "drop-oldest");
  EXPECT_EQ(c.drain.login, "gw");
  EXPECT_EQ(c.drain.passcode_file, "/etc/p");
  EXPECT_EQ(c.drain.window, 8u);
  EXPECT_EQ(c.drain.rate_per_second, 100u);
  EXPECT_EQ(c.drain.backoff_base_ms, 10u);
  EXPECT_EQ(c.drain.backoff_max_ms, 10u);
  EXPECT_EQ(c.drain.connect_timeout_ms, 300u);
  EXPECT_EQ(c.drain.receipt_timeout_ms, 400u);
  GatewayConfig d = must_parse("[spill]\ndir = \"/data/spill\"\n" + std::string(kOneNode));
  EXPECT_EQ(d.spill_dir(), "/data/spill");
}

TEST(Config, PinsNameTheirNodeAndTakeTheDefaultVhost) {
  GatewayConfig c = must_parse("[stomp]\ndefault_vhost = \"v\"\n" + std::string(kOneNode) +
                               "[[pins]]\nqueue = \"a\"\nnode = \"rabbit1\"\n"
                               "[[pins]]\nvhost = \"/\"\nqueue = \"a\"\nnode = \"rabbit1\"\n");
  ASSERT_EQ(c.pins.size(), 2u);
  EXPECT_EQ(c.pins[0].vhost, "v");
  EXPECT_EQ(c.pins[1].vhost, "/");
}

TEST(ConfigExample, MentionsEveryKey) {
  const std::string text = read_file(kExamplePath);
  for (const char* key : {"id =",
                          "state_dir =",
                          "workers =",
                          "address =",
                          "socket =",
                          "tcp =",
                          "log_level =",
                          "versions =",
                          "owned_prefixes =",
                          "default_vhost =",
                          "server =",
                          "sessions_max =",
                          "sessions_per_source_max =",
                          "prelude_sessions_max =",
                          "prelude_bytes_max =",
                          "frame_bytes_max =",
                          "header_count_max =",
                          "header_line_bytes_max =",
                          "body_bytes_max =",
                          "frame_timeout_ms =",
                          "prelude_idle_timeout_ms =",
                          "connect_timeout_ms =",
                          "probe =",
                          "interval_ms =",
                          "timeout_ms =",
                          "rise =",
                          "fall =",
                          "login =",
                          "passcode_file =",
                          "policy =",
                          "name =",
                          "weight =",
                          "broker_node =",
                          "enabled =",
                          "urls =",
                          "queues_max =",
                          "[[pins]]",
                          "vhost =",
                          "queue =",
                          "node =",
                          "[spill]",
                          "dir =",
                          "max_bytes =",
                          "segment_bytes =",
                          "queue_messages_max =",
                          "queue_bytes_max =",
                          "on_full =",
                          "[drain]",
                          "window =",
                          "rate_per_second =",
                          "backoff_base_ms =",
                          "backoff_max_ms =",
                          "receipt_timeout_ms =",
                          "engine =",
                          "[dpdk]",
                          "eal_args =",
                          "ports =",
                          "exception_port =",
                          "local_ips =",
                          "local_port_min =",
                          "local_port_max =",
                          "routes =",
                          "spill_listen =",
                          "flows_max =",
                          "prelude_flows_max =",
                          "mbufs ="}) {
    EXPECT_NE(text.find(key), std::string::npos) << key;
  }
}

TEST(Config, MinimalConfigWithOneNodeUsesEveryDefault) {
  GatewayConfig c = must_parse(kOneNode);
  const GatewayConfig defaults;
  expect_same_settings(c, defaults);
  EXPECT_EQ(c.id, "sluice");
  EXPECT_EQ(c.listen.host, "0.0.0.0");
  EXPECT_EQ(c.listen.port, 61613);
  EXPECT_FALSE(c.admin_tcp.has_value());
  EXPECT_EQ(c.session.owned_prefixes, (std::vector<std::string>{"/queue/", "/amq/queue/"}));
  EXPECT_EQ(c.session.frame_timeout_ns, session::SessionConfig::kFrameTimeout);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].name, "rabbit1");
  EXPECT_EQ(c.nodes[0].weight, 100u);
  EXPECT_EQ(c.broker_node_names, std::vector<std::string>{""});
  EXPECT_TRUE(c.rabbitmq_feed.urls.empty());
}

TEST(Config, ReadsEveryKey) {
  GatewayConfig c = must_parse(
      "[gateway]\nid = \"gw-1\"\nstate_dir = \"/srv/sluice\"\nworkers = 4\n"
      "[listen]\naddress = \"gw.example.com:1234\"\n"
      "[admin]\nsocket = \"/tmp/a.sock\"\ntcp = \"localhost:8161\"\nlog_level = \"debug\"\n"
      "[stomp]\nversions = [\"1.2\", \"1.1\"]\nowned_prefixes = [\"/q/\"]\n"
      "default_vhost = \"prod\"\nserver = \"edge\"\n"
      "[limits]\nsessions_max = 5\nsessions_per_source_max = 2\nprelude_sessions_max = 3\n"
      "prelude_bytes_max = 4096\nframe_bytes_max = 8192\nheader_count_max = 10\n"
      "header_line_bytes_max = 512\nbody_bytes_max = 0\nframe_timeout_ms = 7\n"
      "prelude_idle_timeout_ms = 9\nconnect_timeout_ms = 11\n"
      "[health]\nprobe = \"stomp\"\ninterval_ms = 500\ntimeout_ms = 499\nrise = 1\nfall = 100\n"
      "login = \"probe\"\npasscode_file = \"/etc/p\"\n"
      "[placement]\npolicy = \"least-queues\"\n"
      "[[nodes]]\nname = \"a\"\naddress = \"10.0.0.1:61613\"\nweight = 10000\n"
      "broker_node = \"rabbit@a\"\n"
      "[[nodes]]\nname = \"b\"\naddress = \"b.local:7\"\nweight = 1\n"
      "[feed.rabbitmq]\nenabled = true\nurls = [\"http://a:15672\", \"http://b:15672/\"]\n"
      "login = \"feed\"\npasscode_file = \"/etc/f\"\ninterval_ms = 100\ntimeout_ms = 10\n");
  EXPECT_EQ(c.id, "gw-1");
  EXPECT_EQ(c.state_dir, "/srv/sluice");
  EXPECT_EQ(c.workers, 4u);
  EXPECT_EQ(c.listen.host, "gw.example.com");
  EXPECT_EQ(c.listen.port, 1234);
  EXPECT_EQ(c.admin_socket, "/tmp/a.sock");
  ASSERT_TRUE(c.admin_tcp.has_value());
  EXPECT_EQ(c.admin_tcp->host, "localhost");
  EXPECT_EQ(c.admin_tcp->port, 8161);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.session.versions.list(), "1.1,1.2");
  EXPECT_EQ(c.session.owned_prefixes, std::vector<std::string>{"/q/"});
  EXPECT_EQ(c.session.default_vhost, "prod");
  EXPECT_EQ(c.session.server, "edge");
  EXPECT_EQ(c.sessions_max, 5u);
  EXPECT_EQ(c.sessions_per_source_max, 2u);
  EXPECT_EQ(c.prelude_sessions_max, 3u);
  EXPECT_EQ(c.session.prelude_bytes_max, 4096u);
  EXPECT_EQ(c.session.frame_limits.frame_bytes_max, 8192u);
  EXPECT_EQ(c.session.frame_limits.header_count_max, 10u);
  EXPECT_EQ(c.session.frame_limits.header_line_bytes_max, 512u);
  EXPECT_EQ(c.session.frame_limits.body_bytes_max, 0u);
  EXPECT_EQ(c.session.frame_timeout_ns, 7 * session::kNanosPerMilli);
  EXPECT_EQ(c.session.prelude_idle_timeout_ns, 9 * session::kNanosPerMilli);
  EXPECT_EQ(c.connect_timeout_ms, 11u);
  EXPECT_EQ(c.health.probe, ProbeKind::kStomp);
  EXPECT_EQ(c.health.interval_ms, 500u);
  EXPECT_EQ(c.health.timeout_ms, 499u);
  EXPECT_EQ(c.health.rise, 1u);
  EXPECT_EQ(c.health.fall, 100u);
  EXPECT_EQ(c.health.login, "probe");
  EXPECT_EQ(c.health.passcode_file, "/etc/p");
  EXPECT_EQ(c.placement, PlacementPolicy::kLeastQueues);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].host, "10.0.0.1");
  EXPECT_EQ(c.nodes[0].weight, 10000u);
  EXPECT_EQ(c.nodes[1].host, "b.local");
  EXPECT_EQ(c.nodes[1].port, 7);
  EXPECT_EQ(c.nodes[1].weight, 1u);
  EXPECT_EQ(c.broker_node_names, (std::vector<std::string>{"rabbit@a", ""}));
  EXPECT_TRUE(c.rabbitmq_feed.enabled);
  EXPECT_EQ(c.rabbitmq_feed.urls, (std::vector<std::string>{"http://a:15672", "http://b:15672/"}));
  EXPECT_EQ(c.rabbitmq_feed.login, "feed");
  EXPECT_EQ(c.rabbitmq_feed.passcode_file, "/etc/f");
  EXPECT_EQ(c.rabbitmq_feed.interval_ms, 100u);
  EXPECT_EQ(c.rabbitmq_feed.timeout_ms, 10u);
}

// One bad value: the document (kOneNode is appended unless it has its own [[nodes]]) and the
// error expected for it.
struct BadValue {
  std::string name;  // test name suffix
  std::string toml;
  uint32_t line;
  std::string key;
  std::string fragment;  // part of the message
};

void PrintTo(const BadValue& c, std::ostream* os) {
  *os << c.name;
}

// A wrong type and both ends of the range of every integer key.
void add_integer_cases(std::vector<BadValue>* out) {
  struct IntKey {
    std::string table;  // header lines before the key
    std::string key;
    std::string dotted;
    int64_t lo, hi;
  };
  const std::string kNodePrefix = std::string(kOneNode) + "[[nodes]]\nname = \"n2\"\n";
  const std::vector<IntKey> keys = {
      {"[gateway]\n", "workers", "gateway.workers", 1, 64},
      {"[limits]\n", "sessions_max", "limits.sessions_max", 1, 1'000'000},
      {"[limits]\n", "sessions_per_source_max", "limits.sessions_per_source_max", 1, 1'000'000},
      {"[limits]\n", "prelude_sessions_max", "limits.prelude_sessions_max", 1, 1'000'000},
      {"[limits]\n", "prelude_bytes_max", "limits.prelude_bytes_max", 64, 67'108'864},
      {"[limits]\n", "frame_bytes_max", "limits.frame_bytes_max", 64, 67'108'864},
      {"[limits]\n", "header_count_max", "limits.header_count_max", 1, 1024},
      {"[limits]\n", "header_line_bytes_max", "limits.header_line_bytes_max", 16, 67'108'864},
      {"[limits]\n", "body_bytes_max", "limits.body_bytes_max", 0, 67'108'864},
      {"[limits]\n", "frame_timeout_ms", "limits.frame_timeout_ms", 1, 86'400'000},
      {"[limits]\n", "prelude_idle_timeout_ms", "limits.prelude_idle_timeout_ms", 1, 86'400'000},
      {"[limits]\n", "connect_timeout_ms", "limits.connect_timeout_ms", 1, 600'000},
      {"[limits]\n", "queues_max", "limits.queues_max", 1, 67'108'864},
      {"[limits]\n", "pipe_bytes", "limits.pipe_bytes", 4096, 1'048'576},
      {"[limits]\n", "pipe_bytes_max", "limits.pipe_bytes_max", 4096, 1'048'576},
      {"[limits]\n", "grown_pipes_max", "limits.grown_pipes_max", 0, 65'536},
      {"[limits]\n", "park_sessions_above", "limits.park_sessions_above", 0, 1'000'000},
      {"[health]\n", "interval_ms", "health.interval_ms", 100, 3'600'000},
      {"[health]\n", "timeout_ms", "health.timeout_ms", 10, 3'600'000},
      {"[health]\n", "rise", "health.rise", 1, 100},
      {"[health]\n", "fall", "health.fall", 1, 100},
      {"[feed.rabbitmq]\n", "interval_ms", "feed.rabbitmq.interval_ms", 100, 3'600'000},
      {"[feed.rabbitmq]\n", "timeout_ms", "feed.rabbitmq.timeout_ms", 10, 3'600'000},
      {kNodePrefix + "address = \"127.0.0.1:1\"\n", "weight", "nodes[1].weight", 1, 10'000},
      {"[spill]\n", "segment_bytes", "spill.segment_bytes", 1 << 20, int64_t(4) << 30},
      {"[spill]\n", "max_bytes", "spill.max_bytes", 1, int64_t(1) << 50},
      {"[spill]\n", "queue_messages_max", "spill.queue_messages_max", 1, int64_t(1) << 40},
      {"[spill]\n", "queue_bytes_max", "spill.queue_bytes_max", 1, int64_t(1) << 50},
      {"[drain]\n", "window", "drain.window", 1, 4096},
      {"[drain]\n", "rate_per_second", "drain.rate_per_second", 0, 10'000'000},
      {"[drain]\n", "backoff_base_ms", "drain.backoff_base_ms", 1, 3'600'000},
      {"[drain]\n", "backoff_max_ms", "drain.backoff_max_ms", 1, 3'600'000},
      {"[drain]\n", "connect_timeout_ms", "drain.connect_timeout_ms", 1, 3'600'000},
      {"[drain]\n", "receipt_timeout_ms", "drain.receipt_timeout_ms", 1, 3'600'000},
  };
  for (const IntKey& k : keys) {
    const uint32_t line = uint32_t(std::count(k.table.begin(), k.table.end(), '\n')) + 1;
    std::string name = k.dotted;
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    const std::string range =
        "must be between " + std::to_string(k.lo) + " and " + std::to_string(k.hi);
    out->push_back({name + "_type", k.table + k.key + " = \"5\"\n", line, k.dotted,
                    "must be an integer, not a string"});
    out->push_back({name + "_float", k.table + k.key + " = 5.0\n", line, k.dotted,
                    "must be an integer, not a floating-point number"});
    out->push_back({name + "_below", k.table + k.key + " = " + std::to_string(k.lo - 1) + "\n",
                    line, k.dotted, range});
    out->push_back({name + "_above", k.table + k.key + " = " + std::to_string(k.hi + 1) + "\n",
                    line, k.dotted, range});
  }
}

std::vector<BadValue> bad_values() {
  const std::string node2 = std::string(kOneNode) + "[[nodes]]\n";  // nodes[1] starts on line 4
  std::vector<BadValue> v = {
      // Tables of the wrong type.
      {"gateway_not_table", "gateway = 3\n", 1, "gateway", "must be a table"},
      {"limits_not_table", "limits = [1]\n", 1, "limits", "must be a table, not an array"},
      // [limits] keys that are wrong together
      {"limits_pipe_bytes_max_below_pipe_bytes",
       "[limits]\npipe_bytes = 131072\npipe_bytes_max = 65536\n", 3, "limits.pipe_bytes_max",
       "must be at least limits.pipe_bytes (131072)"},
      {"feed_rabbitmq_not_table", "[feed]\nrabbitmq = true\n", 2, "feed.rabbitmq",
       "must be a table"},
      // [gateway]
      {"gateway_id_type", "[gateway]\nid = 5\n", 2, "gateway.id",
       "must be a string, not an integer"},
      {"gateway_id_chars", "[gateway]\nid = \"gw 1\"\n", 2, "gateway.id", "1 to 64 characters"},
      {"gateway_id_empty", "[gateway]\nid = \"\"\n", 2, "gateway.id", "1 to 64 characters"},
      {"gateway_id_too_long", "[gateway]\nid = \"" + std::string(65, 'a') + "\"\n", 2, "gateway.id",
       "1 to 64 characters"},
      {"gateway_state_dir_type", "[gateway]\nstate_dir = []\n", 2, "gateway.state_dir",
       "must be a string, not an array"},
      {"gateway_state_dir_empty", "[gateway]\nstate_dir = \"\"\n", 2, "gateway.state_dir",
       "must not be empty"},
      // [listen]
      {"listen_address_type", "[listen]\naddress = 61613\n", 2, "listen.address",
       "must be a string, not an integer"},
      {"listen_address_no_port", "[listen]\naddress = \"0.0.0.0\"\n", 2, "listen.address",
       "HOST:PORT"},
      {"listen_address_no_host", "[listen]\naddress = \":61613\"\n", 2, "listen.address",
       "with a host"},
      {"listen_address_port_zero", "[listen]\naddress = \"0.0.0.0:0\"\n", 2, "listen.address",
       "port must be between 1 and 65535"},
      {"listen_address_port_above", "[listen]\naddress = \"0.0.0.0:65536\"\n", 2, "listen.address",
       "port must be between 1 and 65535"},
      {"listen_address_port_text", "[listen]\naddress = \"0.0.0.0:stomp\"\n", 2, "listen.address",
       "port must be a number"},
      {"listen_address_bad_ipv4", "[listen]\naddress = \"256.0.0.1:61613\"\n", 2, "listen.address",
       "neither an IPv4 address nor a valid host name"},
      {"listen_address_short_ipv4", "[listen]\naddress = \"10.1.2:61613\"\n", 2, "listen.address",
       "neither an IPv4 address nor a valid host name"},
      {"listen_address_bad_hostname", "[listen]\naddress = \"bad_host:61613\"\n", 2,
       "listen.address", "neither an IPv4 address nor a valid host name"},
      {"listen_address_ipv6", "[listen]\naddress = \"[::]:61613\"\n", 2, "listen.address",
       "IPv6 addresses are not supported yet"},
      // [admin]
      {"admin_socket_type", "[admin]\nsocket = true\n", 2, "admin.socket",
       "must be a string, not a boolean"},
      {"admin_socket_empty", "[admin]\nsocket = \"\"\n", 2, "admin.socket", "must not be empty"},
      {"admin_socket_too_long", "[admin]\nsocket = \"/" + std::string(107, 's') + "\"\n", 2,
       "admin.socket", "at most 107 bytes"},
      {"admin_tcp_type", "[admin]\ntcp = 8161\n", 2, "admin.tcp",
       "must be a string, not an integer"},
      {"admin_tcp_bad_address", "[admin]\ntcp = \"127.0.0.1\"\n", 2, "admin.tcp", "HOST:PORT"},
      {"admin_tcp_not_loopback", "[admin]\ntcp = \"10.0.0.1:8161\"\n", 2, "admin.tcp",
       "must be a loopback address"},
      {"admin_tcp_any_address", "[admin]\ntcp = \"0.0.0.0:8161\"\n", 2, "admin.tcp",
       "must be a loopback address"},
      {"admin_tcp_host_name", "[admin]\ntcp = \"admin.example.com:8161\"\n", 2, "admin.tcp",
       "must be a loopback address"},
      {"admin_log_level_type", "[admin]\nlog_level = 1\n", 2, "admin.log_level",
       "must be a string, not an integer"},
      {"admin_log_level_value", "[admin]\nlog_level = \"verbose\"\n", 2, "admin.log_level",
       "must be \"debug\", \"info\", \"warn\" or \"error\""},
      // [stomp]
      {"stomp_versions_type", "[stomp]\nversions = \"1.2\"\n", 2, "stomp.versions",
       "must be an array of strings, not a string"},
      {"stomp_versions_element_type", "[stomp]\nversions = [\"1.2\", 1.1]\n", 2,
       "stomp.versions[1]", "must be a string, not a floating-point number"},
      {"stomp_versions_empty", "[stomp]\nversions = []\n", 2, "stomp.versions", "at least one of"},
      {"stomp_versions_unknown", "[stomp]\nversions = [\n  \"1.1\",\n  \"2.0\",\n]\n", 4,
       "stomp.versions[1]", "must be \"1.0\", \"1.1\" or \"1.2\""},
      {"stomp_versions_duplicate", "[stomp]\nversions = [\"1.2\", \"1.2\"]\n", 2,
       "stomp.versions[1]", "duplicate version"},
      {"stomp_owned_prefixes_type", "[stomp]\nowned_prefixes = \"/queue/\"\n", 2,
       "stomp.owned_prefixes", "must be an array of strings"},
      {"stomp_owned_prefixes_element_type", "[stomp]\nowned_prefixes = [{}]\n", 2,
       "stomp.owned_prefixes[0]", "must be a string, not a table"},
      {"stomp_owned_prefixes_empty_element", "[stomp]\nowned_prefixes = [\"/queue/\", \"\"]\n", 2,
       "stomp.owned_prefixes[1]", "must not be empty"},
      {"stomp_default_vhost_type", "[stomp]\ndefault_vhost = 1\n", 2, "stomp.default_vhost",
       "must be a string"},
      {"stomp_default_vhost_empty", "[stomp]\ndefault_vhost = \"\"\n", 2, "stomp.default_vhost",
       "must be 1 to 255 bytes"},
      {"stomp_default_vhost_too_long",
       "[stomp]\ndefault_vhost = \"" + std::string(256, 'v') + "\"\n", 2, "stomp.default_vhost",
       "must be 1 to 255 bytes"},
      {"stomp_server_type", "[stomp]\nserver = 1979-05-27\n", 2, "stomp.server",
       "must be a string, not a date"},
      {"stomp_server_line_feed", "[stomp]\nserver = \"a\\nb\"\n", 2, "stomp.server",
       "must not contain CR, LF or NUL"},
      {"stomp_server_nul", "[stomp]\nserver = \"a\\u0000b\"\n", 2, "stomp.server",
       "must not contain CR, LF or NUL"},
      {"stomp_server_too_long", "[stomp]\nserver = \"" + std::string(256, 's') + "\"\n", 2,
       "stomp.server", "must be 1 to 255 bytes"},
      // [health]
      {"health_probe_type", "[health]\nprobe = 1\n", 2, "health.probe", "must be a string"},
      {"health_probe_value", "[health]\nprobe = \"http\"\n", 2, "health.probe",
       "must be \"tcp\" or \"stomp\""},
      {"health_login_type", "[health]\nlogin = false\n", 2, "health.login",
       "must be a string, not a boolean"},
      {"health_login_carriage_return", "[health]\nlogin = \"a\\rb\"\n", 2, "health.login",
       "must not contain CR, LF or NUL"},
      {"health_passcode_file_type", "[health]\npasscode_file = 3\n", 2, "health.passcode_file",
       "must be a string"},
      // [placement]
      {"placement_policy_type", "[placement]\npolicy = [\"rendezvous\"]\n", 2, "placement.policy",
       "must be a string, not an array"},
      {"placement_policy_value", "[placement]\npolicy = \"random\"\n", 2, "placement.policy",
       "must be \"rendezvous\" or \"least-queues\""},
      // [[nodes]]
      {"nodes_type", "nodes = \"rabbit1\"\n", 1, "nodes", "must be an array of tables"},
      {"nodes_element_type", "nodes = [1]\n", 1, "nodes[0]", "must be a table, not an integer"},
      {"nodes_empty", "nodes = []\n", 1, "nodes", "at least one [[nodes]]"},
      {"node_name_type", node2 + "name = 2\n", 5, "nodes[1].name",
       "must be a string, not an integer"},
      {"node_name_chars", node2 + "name = \"rabbit 2\"\n", 5, "nodes[1].name",
       "1 to 64 characters"},
      {"node_address_type", node2 + "name = \"n2\"\naddress = [\"a\"]\n", 6, "nodes[1].address",
       "must be a string, not an array"},
      {"node_address_bad", node2 + "name = \"n2\"\naddress = \"127.0.0.1:99999\"\n", 6,
       "nodes[1].address", "port must be between 1 and 65535"},
      {"node_broker_node_type",
       node2 + "name = \"n2\"\naddress = \"127.0.0.1:1\"\nbroker_node = 1\n", 7,
       "nodes[1].broker_node", "must be a string, not an integer"},
      {"node_broker_node_line_feed",
       node2 + "name = \"n2\"\naddress = \"127.0.0.1:1\"\nbroker_node = \"a\\n\"\n", 7,
       "nodes[1].broker_node", "must not contain CR, LF or NUL"},
      // [feed.rabbitmq]
      {"feed_rabbitmq_enabled_type", "[feed.rabbitmq]\nenabled = \"yes\"\n", 2,
       "feed.rabbitmq.enabled", "must be a boolean (true or false), not a string"},
      {"feed_rabbitmq_urls_type", "[feed.rabbitmq]\nurls = \"http://a\"\n", 2, "feed.rabbitmq.urls",
       "must be an array of strings, not a string"},
      {"feed_rabbitmq_urls_element_type", "[feed.rabbitmq]\nurls = [\"http://a\", 2]\n", 2,
       "feed.rabbitmq.urls[1]", "must be a string, not an integer"},
      {"feed_rabbitmq_urls_https", "[feed.rabbitmq]\nurls = [\"https://a:15671\"]\n", 2,
       "feed.rabbitmq.urls[0]", "must be an http:// URL"},
      {"feed_rabbitmq_urls_no_host", "[feed.rabbitmq]\nurls = [\"http://\"]\n", 2,
       "feed.rabbitmq.urls[0]", "must be an http:// URL"},
      {"feed_rabbitmq_urls_space", "[feed.rabbitmq]\nurls = [\"http://a b\"]\n", 2,
       "feed.rabbitmq.urls[0]", "without spaces"},
      {"feed_rabbitmq_login_type", "[feed.rabbitmq]\nlogin = 1\n", 2, "feed.rabbitmq.login",
       "must be a string"},
      {"feed_rabbitmq_login_colon", "[feed.rabbitmq]\nlogin = \"a:b\"\n", 2, "feed.rabbitmq.login",
       "must not contain ':'"},
      {"feed_rabbitmq_passcode_file_type", "[feed.rabbitmq]\npasscode_file = {}\n", 2,
       "feed.rabbitmq.passcode_file", "must be a string, not a table"},
      // [spill]
      {"spill_not_table", "spill = 1\n", 1, "spill", "must be a table"},
      {"spill_unknown_key", "[spill]\nsize = 1\n", 2, "spill.size", "unknown key"},
      {"spill_dir_empty", "[spill]\ndir = \"\"\n", 2, "spill.dir", "must not be empty"},
      {"spill_on_full_bad", "[spill]\non_full = \"drop\"\n", 2, "spill.on_full",
       "must be \"refuse\" or \"drop-oldest\""},
      {"spill_on_full_type", "[spill]\non_full = 1\n", 2, "spill.on_full",
       "must be a string, not an integer"},
      {"spill_segment_below_frame",
       "[limits]\nframe_bytes_max = 2000000\n[spill]\nsegment_bytes = 1048576\n", 4,
       "spill.segment_bytes", "must hold the largest message"},
      {"spill_max_below_two_segments", "[spill]\nmax_bytes = 100000000\n", 2, "spill.max_bytes",
       "at least two segments: 2 x segment_bytes = 134217728 (128 MiB)"},
      // [drain]
      {"drain_unknown_key", "[drain]\npasscode = \"x\"\n", 2, "drain.passcode", "unknown key"},
      {"drain_login_type", "[drain]\nlogin = 1\n", 2, "drain.login", "must be a string"},
      {"drain_login_newline", "[drain]\nlogin = \"a\\nb\"\n", 2, "drain.login",
       "must not contain CR, LF or NUL"},
      {"drain_passcode_file_type", "[drain]\npasscode_file = []\n", 2, "drain.passcode_file",
       "must be a string, not an array"},
      {"drain_backoff_max_below_base", "[drain]\nbackoff_base_ms = 500\nbackoff_max_ms = 100\n", 3,
       "drain.backoff_max_ms", "at least backoff_base_ms (500)"},
      {"drain_backoff_base_above_max", "[drain]\nbackoff_base_ms = 40000\n", 2,
       "drain.backoff_base_ms", "at least backoff_base_ms (40000)"},
      // [[pins]] (after the one node: the pin's table starts on line 4)
      {"pins_type", "pins = 1\n" + std::string(kOneNode), 1, "pins", "must be an array of tables"},
      {"pin_unknown_key",
       std::string(kOneNode) + "[[pins]]\nqueue = \"q\"\nnode = \"rabbit1\"\nhost = \"/\"\n", 7,
       "pins[0].host", "unknown key"},
      {"pin_queue_missing", std::string(kOneNode) + "[[pins]]\nnode = \"rabbit1\"\n", 4,
       "pins[0].queue", "required"},
      {"pin_queue_empty", std::string(kOneNode) + "[[pins]]\nqueue = \"\"\nnode = \"rabbit1\"\n", 5,
       "pins[0].queue", "1 to 255 bytes"},
      {"pin_queue_too_long",
       std::string(kOneNode) + "[[pins]]\nqueue = \"" + std::string(256, 'q') +
           "\"\nnode = \"rabbit1\"\n",
       5, "pins[0].queue", "1 to 255 bytes"},
      {"pin_vhost_empty",
       std::string(kOneNode) + "[[pins]]\nvhost = \"\"\nqueue = \"q\"\nnode = \"rabbit1\"\n", 5,
       "pins[0].vhost", "1 to 255 bytes"},
      {"pin_node_missing", std::string(kOneNode) + "[[pins]]\nqueue = \"q\"\n", 4, "pins[0].node",
       "required"},
      {"pin_node_unknown", std::string(kOneNode) + "[[pins]]\nqueue = \"q\"\nnode = \"rabbit9\"\n",
       6, "pins[0].node", "no node named \"rabbit9\""},
      {"pin_duplicate",
       std::string(kOneNode) + "[[pins]]\nqueue = \"q\"\nnode = \"rabbit1\"\n[[pins]]\nqueue = "
                               "\"q\"\nnode = \"rabbit1\"\n",
       8, "pins[1].queue", "already pinned by pins[0]"},
  };
  add_integer_cases(&v);
  return v;
}

class ConfigBadValue : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigBadValue, IsRefusedNamingKeyAndLine) {
  const BadValue& c = GetParam();
  const std::string text =
      c.toml.find("nodes") != std::string::npos ? c.toml : c.toml + std::string(kOneNode);
  Error e = must_fail(text);
  EXPECT_EQ(e.key, c.key) << e.to_string();
  EXPECT_EQ(e.line, c.line) << e.to_string();
  EXPECT_NE(e.message.find(c.fragment), std::string::npos) << e.to_string();
  EXPECT_EQ(e.file, "t.toml");
}

INSTANTIATE_TEST_SUITE_P(EveryKey, ConfigBadValue, ::testing::ValuesIn(bad_values()),
                         [](const ::testing::TestParamInfo<BadValue>& i) { return i.param.name; });

TEST(Config, UnknownTopLevelKeyIsRefused) {
  Error e = must_fail("\nworkers = 4\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "workers");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("unknown key"), std::string::npos);
  EXPECT_NE(e.message.find("gateway"), std::string::npos) << "lists the allowed keys";
}

TEST(Config, UnknownTableIsRefused) {
  Error e = must_fail("[gatway]\nid = \"x\"\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "gatway");
  EXPECT_EQ(e.line, 1u);
  EXPECT_NE(e.message.find("unknown key"), std::string::npos);
}

TEST(Config, UnknownKeyInTableIsRefused) {
  Error e = must_fail("[limits]\nsessions_max = 5\nsession_max = 5\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "limits.session_max");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("unknown key"), std::string::npos);
  EXPECT_NE(e.message.find("sessions_max"), std::string::npos) << "lists the allowed keys";
}

TEST(Config, UnknownFeedIsRefused) {
  Error e = must_fail("[feed.kafka]\nenabled = true\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "feed.kafka");
  EXPECT_EQ(e.line, 1u);
}

TEST(Config, FirstUnknownKeyByLineIsReported) {
  Error e = must_fail("[health]\nzzz = 1\naaa = 2\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "health.zzz");
  EXPECT_EQ(e.line, 2u);
}

TEST(Config, UnknownKeyInNodeIsRefused) {
  Error e = must_fail(std::string(kOneNode) +
                      "[[nodes]]\nname = \"n2\"\naddress = \"h:1\"\nport = 61613\n");
  EXPECT_EQ(e.key, "nodes[1].port");
  EXPECT_EQ(e.line, 7u);
  EXPECT_NE(e.message.find("unknown key"), std::string::npos);
}

TEST(Config, DuplicateNodeNamesAreRefused) {
  Error e = must_fail(std::string(kOneNode) +
                      "[[nodes]]\nname = \"rabbit1\"\naddress = \"127.0.0.1:61614\"\n");
  EXPECT_EQ(e.key, "nodes[1].name");
  EXPECT_EQ(e.line, 5u);
  EXPECT_NE(e.message.find("duplicate node name \"rabbit1\" (also nodes[0])"), std::string::npos)
      << e.message;
}

TEST(Config, DuplicateBrokerNodesAreRefused) {
  Error e = must_fail(
      "[[nodes]]\nname = \"a\"\naddress = \"h:1\"\nbroker_node = \"rabbit@h\"\n"
      "[[nodes]]\nname = \"b\"\naddress = \"h:2\"\nbroker_node = \"rabbit@h\"\n");
  EXPECT_EQ(e.key, "nodes[1].broker_node");
  EXPECT_EQ(e.line, 8u);
  EXPECT_NE(e.message.find("duplicate broker node"), std::string::npos);
}

TEST(Config, EmptyBrokerNodesMayRepeat) {
  GatewayConfig c = must_parse(
      "[[nodes]]\nname = \"a\"\naddress = \"h:1\"\nbroker_node = \"\"\n"
      "[[nodes]]\nname = \"b\"\naddress = \"h:2\"\nbroker_node = \"\"\n");
  EXPECT_EQ(c.broker_node_names, (std::vector<std::string>{"", ""}));
}

TEST(Config, NodeWithoutNameIsRefusedAtItsTableLine) {
  Error e = must_fail(std::string(kOneNode) + "\n[[nodes]]\naddress = \"h:1\"\n");
  EXPECT_EQ(e.key, "nodes[1].name");
  EXPECT_EQ(e.line, 5u);
  EXPECT_NE(e.message.find("required"), std::string::npos);
}

TEST(Config, NodeWithoutAddressIsRefusedAtItsTableLine) {
  Error e = must_fail("[[nodes]]\nname = \"a\"\n");
  EXPECT_EQ(e.key, "nodes[0].address");
  EXPECT_EQ(e.line, 1u);
  EXPECT_NE(e.message.find("required"), std::string::npos);
}

TEST(Config, ConfigWithoutNodesIsRefused) {
  Error e = must_fail("[gateway]\nid = \"gw\"\n");
  EXPECT_EQ(e.key, "nodes");
  EXPECT_EQ(e.line, 0u);
  EXPECT_NE(e.message.find("at least one [[nodes]]"), std::string::npos);
  EXPECT_EQ(must_fail("").key, "nodes");
}

TEST(Config, InlineNodeTablesAreAccepted) {
  GatewayConfig c = must_parse("nodes = [{ name = \"a\", address = \"10.0.0.1:61613\" }]\n");
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].name, "a");
}

TEST(Config, MoreThanNodesMaxIsRefused) {
  std::string text;
  for (size_t i = 0; i <= kNodesMax; ++i) {
    text += "[[nodes]]\nname = \"n" + std::to_string(i) + "\"\naddress = \"h:1\"\n";
  }
  Error e = must_fail(text);
  EXPECT_EQ(e.key, "nodes");
  EXPECT_EQ(e.line, uint32_t(3 * kNodesMax + 1));
  EXPECT_NE(e.message.find("at most 256 nodes"), std::string::npos);
  // Exactly the maximum is fine.
  text.resize(text.rfind("[[nodes]]"));
  EXPECT_EQ(must_parse(text).nodes.size(), kNodesMax);
}

TEST(Config, SyntaxErrorReportsItsLine) {
  Error e = must_fail("[gateway]\nworkers = 2\nid = \n" + std::string(kOneNode));
  EXPECT_EQ(e.line, 3u);
  EXPECT_EQ(e.key, "");
  EXPECT_NE(e.message.find("expected"), std::string::npos) << e.message;
  EXPECT_EQ(e.to_string().rfind("t.toml:3: ", 0), 0u) << e.to_string();
}

TEST(Config, DuplicateKeyIsASyntaxError) {
  Error e = must_fail("[gateway]\nworkers = 2\nworkers = 3\n" + std::string(kOneNode));
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("workers"), std::string::npos) << e.message;
}

TEST(Config, HealthTimeoutNotBelowIntervalIsRefused) {
  Error e = must_fail("[health]\ninterval_ms = 1000\ntimeout_ms = 1000\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "health.timeout_ms");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("must be less than interval_ms (1000)"), std::string::npos);
}

TEST(Config, HealthIntervalBelowDefaultTimeoutIsRefused) {
  Error e = must_fail("[health]\ninterval_ms = 500\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "health.interval_ms");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("set timeout_ms lower"), std::string::npos) << e.message;
}

TEST(Config, FeedTimeoutNotBelowIntervalIsRefused) {
  Error e = must_fail("[feed.rabbitmq]\ntimeout_ms = 6000\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "feed.rabbitmq.timeout_ms");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("must be less than interval_ms (5000)"), std::string::npos);
}

TEST(Config, AdminTcpOnLoopbackIsAccepted) {
  GatewayConfig c = must_parse("[admin]\ntcp = \"127.1.2.3:8161\"\n" + std::string(kOneNode));
  ASSERT_TRUE(c.admin_tcp.has_value());
  EXPECT_EQ(c.admin_tcp->host, "127.1.2.3");
}

TEST(Config, AdminTcpOutsideLoopbackIsRefused) {
  Error e = must_fail("[admin]\ntcp = \"192.168.1.1:8161\"\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "admin.tcp");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("loopback"), std::string::npos);
}

TEST(Config, StompProbeWithoutPasscodeFileIsRefused) {
  Error e = must_fail("\n[health]\nprobe = \"stomp\"\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "health.passcode_file");
  EXPECT_EQ(e.line, 2u) << "the [health] line, as the key is missing";
  EXPECT_NE(e.message.find("required when probe = \"stomp\""), std::string::npos);
  e = must_fail("[health]\nprobe = \"stomp\"\npasscode_file = \"\"\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "health.passcode_file");
  EXPECT_EQ(e.line, 3u);
}

TEST(Config, EnabledFeedWithoutUrlsIsRefused) {
  Error e = must_fail("[feed.rabbitmq]\nenabled = true\npasscode_file = \"/p\"\n" +
                      std::string(kOneNode));
  EXPECT_EQ(e.key, "feed.rabbitmq.urls");
  EXPECT_EQ(e.line, 1u);
  EXPECT_NE(e.message.find("required when enabled = true"), std::string::npos);
  e = must_fail("[feed.rabbitmq]\nenabled = true\nurls = []\npasscode_file = \"/p\"\n" +
                std::string(kOneNode));
  EXPECT_EQ(e.key, "feed.rabbitmq.urls");
  EXPECT_EQ(e.line, 3u);
}

TEST(Config, EnabledFeedWithoutPasscodeFileIsRefused) {
  Error e = must_fail("[feed.rabbitmq]\nenabled = true\nurls = [\"http://h:15672\"]\n" +
                      std::string(kOneNode));
  EXPECT_EQ(e.key, "feed.rabbitmq.passcode_file");
  EXPECT_EQ(e.line, 1u);
  EXPECT_NE(e.message.find("required when enabled = true"), std::string::npos);
}

TEST(Config, DisabledFeedNeedsNoUrls) {
  GatewayConfig c = must_parse("[feed.rabbitmq]\nenabled = false\n" + std::string(kOneNode));
  EXPECT_FALSE(c.rabbitmq_feed.enabled);
}

TEST(Config, PreludeLargerThanFrameSurfacesAsLimitsError) {
  Error e = must_fail(
      "\n\n[limits]\nprelude_bytes_max = 4096\nframe_bytes_max = 2048\n"
      "header_line_bytes_max = 1024\nbody_bytes_max = 1024\n" +
      std::string(kOneNode));
  EXPECT_EQ(e.key, "limits");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("prelude_bytes_max must not exceed frame_bytes_max"), std::string::npos)
      << e.message;
}

TEST(Config, FrameSmallerThanDefaultBodySurfacesAsLimitsError) {
  // Only frame_bytes_max is lowered: the default body_bytes_max (1 MiB) no longer fits.
  Error e = must_fail("[limits]\nframe_bytes_max = 1024\n" + std::string(kOneNode));
  EXPECT_EQ(e.key, "limits");
  EXPECT_EQ(e.line, 1u);
  EXPECT_NE(e.message.find("body_bytes_max <= frame_bytes_max"), std::string::npos) << e.message;
}

TEST(Config, TableHeaderWithoutKeyIsASyntaxError) {
  // toml++ 3.3 asserts on these instead of reporting them when its assertions are on.
  for (const char* text : {"[=]\n", "[[=]]\n", "[ #]\n", "\n[\x03gateway]\n", "[[[a]]]\n"}) {
    Error e = must_fail(text);
    EXPECT_EQ(e.key, "") << text;
    EXPECT_NE(e.line, 0u) << text;
  }
}

TEST(Config, LoadConfigNamesMissingFile) {
  const std::string path = "/nonexistent/sluice-config-test.toml";
  Result<GatewayConfig> r = load_config(path);
  const Error* e = r ? nullptr : &r.error();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->file, path);
  EXPECT_EQ(e->line, 0u);
  EXPECT_NE(e->message.find("No such file or directory"), std::string::npos) << e->message;
  EXPECT_EQ(e->to_string(), path + ": " + e->message);
}

TEST(Config, LoadConfigRefusesADirectory) {
  Result<GatewayConfig> r = load_config("/");
  ASSERT_TRUE(!r.has_value());
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos);
}

TEST(Config, LoadConfigReportsErrorsWithTheFileName) {
  char path[] = "/tmp/sluice-config-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = std::string(kOneNode) + "[gateway]\nworkers = 0\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  close(fd);
  Result<GatewayConfig> r = load_config(path);
  unlink(path);
  ASSERT_TRUE(!r.has_value());
  EXPECT_EQ(r.error().to_string(),
            std::string(path) + ":5: gateway.workers: must be between 1 and 64");
}

TEST(Config, ToStringFormatsFileLineKeyMessage) {
  Error e{"must be between 1 and 10000", "sluice.toml", 12, "nodes[1].weight"};
  EXPECT_EQ(e.to_string(), "sluice.toml:12: nodes[1].weight: must be between 1 and 10000");
  e.line = 0;
  EXPECT_EQ(e.to_string(), "sluice.toml: nodes[1].weight: must be between 1 and 10000");
  e.key.clear();
  EXPECT_EQ(e.to_string(), "sluice.toml: must be between 1 and 10000");
}

TEST(Config, NamesRoundTrip) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    EXPECT_EQ(parse_log_level(log_level_name(l)), l);
  }
  EXPECT_EQ(parse_log_level("INFO"), std::nullopt);
  EXPECT_EQ(placement_policy_name(PlacementPolicy::kRendezvous), "rendezvous");
  EXPECT_EQ(placement_policy_name(PlacementPolicy::kLeastQueues), "least-queues");
}

// parse_config must answer every input with a config or an error, never an exception.
TEST(Config, MutatedExampleNeverThrows) {
  const std::string base = read_file(kExamplePath);
  ASSERT_FALSE(base.empty());
  std::mt19937 rng(20240611);
  const std::string alphabet = "[]{}=\".,:#\n\\ 0123456789aeztu-_";
  for (int round = 0; round < 3000; ++round) {
    std::string text = base;
    const int edits = 1 + int(rng() % 4);
    for (int i = 0; i < edits; ++i) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(at, 1 + rng() % 8);
          break;
        default:
          text.insert(at, 1, char(rng() % 256));
          break;
      }
    }
    std::optional<Result<GatewayConfig>> r;
    EXPECT_NO_THROW(r = parse_config(text, "fuzz.toml"));
    if (const Error* e = (*r ? nullptr : &r->error())) {
      EXPECT_FALSE(e->message.empty());
    }
  }
}

}  // namespace
}  // namespace sluice::control

namespace sluice::control {
namespace {

TEST(Config, SpillUsersFileAndAllowAnonymousAreRead) {
  GatewayConfig d = must_parse(std::string(kOneNode));
  EXPECT_EQ(d.spill.users_file, "");
  EXPECT_FALSE(d.spill.allow_anonymous);
  GatewayConfig u =
      must_parse("[spill]\nusers_file = \"/etc/sluice/spill-users\"\n" + std::string(kOneNode));
  EXPECT_EQ(u.spill.users_file, "/etc/sluice/spill-users");
  EXPECT_FALSE(u.spill.allow_anonymous);
  GatewayConfig a = must_parse("[spill]\nallow_anonymous = true\n" + std::string(kOneNode));
  EXPECT_EQ(a.spill.users_file, "");
  EXPECT_TRUE(a.spill.allow_anonymous);
  GatewayConfig f =
      must_parse("[spill]\nusers_file = \"u\"\nallow_anonymous = false\n" + std::string(kOneNode));
  EXPECT_EQ(f.spill.users_file, "u");
}

TEST(Config, SpillAuthKeysErrorsNameFileLineAndKey) {
  struct Case {
    std::string text;
    uint32_t line;
    std::string key;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"[spill]\nusers_file = 1\n", 2, "spill.users_file", "must be a string, not an integer"},
      {"[spill]\nusers_file = \"\"\n", 2, "spill.users_file", "must not be empty"},
      {"[spill]\n\nallow_anonymous = \"yes\"\n", 3, "spill.allow_anonymous",
       "must be a boolean (true or false), not a string"},
      {"[spill]\nusers_file = \"u\"\nallow_anonymous = true\n", 3, "spill.allow_anonymous",
       "must not be true with users_file"},
      {"[spill]\nusers = \"u\"\n", 2, "spill.users", "unknown key"},
  };
  for (const Case& c : cases) {
    const Error e = must_fail(c.text + std::string(kOneNode));
    EXPECT_EQ(e.file, "t.toml") << c.text;
    EXPECT_EQ(e.line, c.line) << e.to_string();
    EXPECT_EQ(e.key, c.key) << e.to_string();
    EXPECT_NE(e.message.find(c.message), std::string::npos) << e.to_string();
  }
}

TEST(ConfigExample, DocumentsTheSpillAuthDefaults) {
  Result<GatewayConfig> r = load_config(kExamplePath);
  ASSERT_TRUE(r.has_value());
  const GatewayConfig& c = *r;
  const GatewayConfig defaults;
  EXPECT_EQ(c.spill.users_file, defaults.spill.users_file);
  EXPECT_EQ(c.spill.allow_anonymous, defaults.spill.allow_anonymous);
  const std::string text = read_file(kExamplePath);
  EXPECT_NE(text.find("# users_file = "), std::string::npos);
  EXPECT_NE(text.find("\nallow_anonymous = false\n"), std::string::npos);
}

}  // namespace
}  // namespace sluice::control

namespace sluice::control {
namespace {

// ---- [dpdk] (gateway.engine = "dpdk") ---------------------------------------------------------

constexpr std::string_view kDpdk =
    "[gateway]\n"
    "engine = \"dpdk\"\n"
    "[listen]\n"
    "address = \"10.0.1.1:61613\"\n"
    "[dpdk]\n"
    "eal_args = [\"--no-huge\", \"--vdev\", \"net_af_packet0,iface=g0\"]\n"
    "ports = [\"net_af_packet0\", \"net_af_packet1\"]\n"
    "exception_port = \"net_tap0\"\n"
    "local_ips = [\"10.0.2.1\"]\n"
    "local_port_min = 30000\n"
    "local_port_max = 30999\n"
    "routes = [\"10.0.1.0/24 net_af_packet0\", \"10.0.2.0/24 net_af_packet1\",\n"
    "          \"10.0.3.0/24 net_tap0\", \"0.0.0.0/0 net_af_packet1 via 10.0.2.254\"]\n"
    "spill_listen = \"10.0.3.1:61700\"\n"
    "flows_max = 1000\n"
    "prelude_flows_max = 100\n"
    "mbufs = 4095\n"
    "[[nodes]]\nname = \"rabbit1\"\naddress = \"10.0.2.10:61613\"\n";

std::string dpdk_with(std::string_view from, std::string_view to) {
  std::string s(kDpdk);
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(ConfigDpdk, EveryKeyIsRead) {
  GatewayConfig c = must_parse(kDpdk);
  EXPECT_EQ(c.engine, EngineKind::kDpdk);
  const DpdkConfig& d = c.dpdk;
  EXPECT_EQ(d.eal_args.size(), 3u);
  EXPECT_EQ(d.ports, (std::vector<std::string>{"net_af_packet0", "net_af_packet1"}));
  EXPECT_EQ(d.exception_port, "net_tap0");
  EXPECT_EQ(d.local_ips, std::vector<uint32_t>{0x0a000201});
  EXPECT_EQ(d.local_port_min, 30000);
  EXPECT_EQ(d.local_port_max, 30999);
  ASSERT_EQ(d.routes.size(), 4u);
  EXPECT_EQ(d.routes[1].prefix, 0x0a000200u);
  EXPECT_EQ(d.routes[1].length, 24);
  EXPECT_EQ(d.routes[1].device, "net_af_packet1");
  EXPECT_EQ(d.routes[3].length, 0);
  EXPECT_EQ(d.routes[3].via, 0x0a0002feu);
  EXPECT_EQ(d.spill_ip, 0x0a000301u);
  EXPECT_EQ(d.spill_listen->port, 61700);
  EXPECT_EQ(d.virtual_ip, 0x0a000101u);
  EXPECT_EQ(d.flows_max, 1000u);
  EXPECT_EQ(d.prelude_flows_max, 100u);
  EXPECT_EQ(d.mbufs, 4095u);
}

TEST(ConfigDpdk, MistakesNameTheKey) {
  struct Case {
    std::string text;
    std::string key;
    std::string fragment;
  };
  const Case cases[] = {
      {dpdk_with("engine = \"dpdk\"", "engine = \"xdp\""), "gateway.engine",
       "\"uring\" or \"dpdk\""},
      {dpdk_with("engine = \"dpdk\"", "engine = \"uring\""), "dpdk.ports", "only read with"},
      {std::string(kDpdk.substr(0, kDpdk.find("[dpdk]"))) + std::string(kOneNode), "dpdk",
       "needs a [dpdk] section"},
      {dpdk_with("\"10.0.3.0/24 net_tap0\"", "\"10.0.3.0/24 net_tap9\""), "dpdk.routes[2]",
       "neither in ports nor exception_port"},
      {dpdk_with("\"10.0.3.0/24 net_tap0\"", "\"10.0.3.0/33 net_tap0\""), "dpdk.routes[2]",
       "length 0..32"},
      {dpdk_with("via 10.0.2.254", "by 10.0.2.254"), "dpdk.routes[3]", "PREFIX/LEN DEVICE"},
      {dpdk_with("spill_listen = \"10.0.3.1:61700\"", "spill_listen = \"10.9.9.9:61700\"")
           .replace(std::string(kDpdk).find("\"0.0.0.0/0"), 41,
                    "\"10.0.9.0/24 net_af_packet1\"   "),
       "dpdk.spill_listen", "no route reaches 10.9.9.9"},
      {dpdk_with("address = \"10.0.1.1:61613\"", "address = \"0.0.0.0:61613\""), "listen.address",
       "virtual IP"},
      {dpdk_with("address = \"10.0.2.10:61613\"", "address = \"rabbit.local:61613\""),
       "nodes[0].address", "IPv4 address"},
      {dpdk_with("local_ips = [\"10.0.2.1\"]", "local_ips = [\"host\"]"), "dpdk.local_ips[0]",
       "IPv4 address"},
      {dpdk_with("prelude_flows_max = 100", "prelude_flows_max = 2000"), "dpdk.prelude_flows_max",
       "must not exceed flows_max"},
      {dpdk_with("exception_port = \"net_tap0\"", "exception_port = \"net_af_packet0\""),
       "dpdk.exception_port", "must not be one of ports"},
      {dpdk_with("local_port_max = 30999", "local_port_max = 29999"), "dpdk.local_port_max",
       "below local_port_min"},
  };
  for (const Case& c : cases) {
    Error e = must_fail(c.text);
    EXPECT_EQ(e.key, c.key) << e.to_string();
    EXPECT_NE(e.message.find(c.fragment), std::string::npos) << e.to_string();
  }
}

}  // namespace
}  // namespace sluice::control
