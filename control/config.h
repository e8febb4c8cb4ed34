// The gateway's configuration (TOML, DESIGN section 9): every key, its type, default and limits.
// Loading is strict: an unknown key, a wrong type or an impossible value is an error naming the
// key, the file and the line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "control/node.h"
#include "dataplane/session/config.h"

namespace sluice::control {

struct ListenAddress {
  std::string host;  // IPv4 address, "::"/IPv6 in brackets not yet supported
  uint16_t port = 0;
};

enum class ProbeKind : uint8_t { kTcp, kStomp };
enum class PlacementPolicy : uint8_t { kRendezvous, kLeastQueues };
enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kError };

struct HealthConfig {
  ProbeKind probe = ProbeKind::kTcp;
  uint32_t interval_ms = 2000;  // between probes of one node
  uint32_t timeout_ms = 1000;   // one probe; must be below interval_ms
  uint32_t rise = 2;            // consecutive successes that bring a down node up
  uint32_t fall = 3;          // consecutive failures (probes or passive reports) that take it down
  std::string login;          // stomp probe: CONNECT login (empty: none)
  std::string passcode_file;  // stomp probe: file holding the passcode (never the passcode)
};

struct RabbitFeedConfig {
  bool enabled = false;
  std::vector<std::string> urls;  // management API base URLs, tried in order
  std::string login;
  std::string passcode_file;
  uint32_t interval_ms = 5000;
  uint32_t timeout_ms = 2000;
};

// An operator's pin in the config file: the queue goes to the node whatever placement or the
// feeds say. Pins can also be set at run time through the admin API.
struct PinSpec {
  std::string vhost;
  std::string queue;
  std::string node;  // a configured node's name
};

// [spill]: the spill log (queue/, DESIGN section 6). The gateway turns these into the log's
// options; the largest record is one frame (limits.frame_bytes_max).
enum class SpillOnFull : uint8_t { kRefuse, kDropOldest };
struct SpillConfig {
  static constexpr uint64_t kSegmentBytesMin = 1ull << 20;
  static constexpr uint64_t kSegmentBytesMax = 4ull << 30;
  static constexpr uint64_t kBytesCeiling = 1ull << 50;
  static constexpr uint64_t kMessagesCeiling = 1ull << 40;

  std::string dir;                          // empty: <gateway.state_dir>/spill
  uint64_t max_bytes = 8ull << 30;          // all segments together; at least two segments
  uint64_t segment_bytes = 64ull << 20;     // each segment file, preallocated
  uint64_t queue_messages_max = 1'000'000;  // undelivered messages of one queue
  uint64_t queue_bytes_max = 1ull << 30;    // their bytes
  SpillOnFull on_full = SpillOnFull::kRefuse;
  // Spill sessions' credentials and per-queue ACL (gateway/spill_auth.h). Without a users file,
  // spill sessions are refused unless allow_anonymous; setting both is a config error.
  std::string users_file;        // empty: none
  bool allow_anonymous = false;  // only without users_file: anyone may spill to any queue
};

// [drain]: the drainer that delivers spilled backlogs to their owners.
struct DrainConfig {
  static constexpr uint32_t kWindowMax = 4096;
  static constexpr uint32_t kRateMax = 10'000'000;

  std::string login;             // the gateway's own STOMP login at the owners (empty: none)
  std::string passcode_file;     // file holding its passcode (empty: none)
  uint32_t window = 64;          // SENDs awaiting their RECEIPT on one connection
  uint32_t rate_per_second = 0;  // per connection; 0: no limit
  uint32_t backoff_base_ms = 100;
  uint32_t backoff_max_ms = 30'000;
  uint32_t connect_timeout_ms = 5'000;   // TCP connect through CONNECTED
  uint32_t receipt_timeout_ms = 30'000;  // no RECEIPT for this long: reconnect
};

std::string_view spill_on_full_name(SpillOnFull f);

// Queues each worker's replica can hold; the ownership table refuses entries beyond it.
inline constexpr uint32_t kQueuesMaxCeiling = 1u << 26;

// [dpdk]: the DPDK engine (DESIGN section 7). Addresses are host-order IPv4 numbers.
struct DpdkConfig {
  static constexpr uint32_t kFlowsMax = 1u << 24;
  static constexpr uint32_t kMbufsMax = 1u << 22;

  struct RouteSpec {
    uint32_t prefix = 0;
    uint8_t length = 0;
    std::string device;  // one of ports or exception_port
    uint32_t via = 0;    // 0: on-link
  };
  std::vector<std::string> eal_args;
  std::vector<std::string> ports;  // device names as in --vdev or the PCI address, in port order
  std::string exception_port;      // a net_tap device to the host's kernel; empty: none
  std::vector<uint32_t> local_ips;
  uint16_t local_port_min = 20000;
  uint16_t local_port_max = 59999;
  std::vector<RouteSpec> routes;
  std::optional<ListenAddress> spill_listen;  // the io_uring engine's listener (spill service)
  uint32_t spill_ip = 0;                      // spill_listen's host
  uint32_t virtual_ip = 0;                    // listen.address's host: what clients connect to
  uint32_t flows_max = 65536;
  uint32_t prelude_flows_max = 1024;
  uint32_t mbufs = 16383;
};

enum class EngineKind : uint8_t { kUring, kDpdk };

// Ranges of the limits the config file and the run-time settings share.
inline constexpr uint32_t kLimitSessionsMax = 1'000'000;        // limits.*sessions*_max
inline constexpr uint32_t kLimitConnectTimeoutMsMax = 600'000;  // limits.connect_timeout_ms

struct GatewayConfig {
  // [gateway]
  std::string id = "sluice";  // in sluice-message-id; [A-Za-z0-9._-]{1,64}
  std::string state_dir = "/var/lib/sluice";
  uint32_t workers = 1;
  uint32_t stop_grace_ms = 10'000;  // SIGTERM: spliced sessions get this long to finish
  bool sqpoll = false;              // io_uring SQPOLL: a kernel thread polls each worker's ring
  bool splice_inline = true;        // splice(2) on the worker thread; false: IORING_OP_SPLICE
  EngineKind engine = EngineKind::kUring;
  // [listen]
  ListenAddress listen{"0.0.0.0", 61613};
  // [admin]
  std::string admin_socket = "/run/sluice/admin.sock";
  std::optional<ListenAddress> admin_tcp;  // loopback only
  LogLevel log_level = LogLevel::kInfo;
  // [stomp] and [limits]: the session core's settings (versions, prefixes, frame and prelude
  // limits, timeouts).
  session::SessionConfig session = session::SessionConfig::gateway_defaults();
  uint32_t sessions_max = 10'000;
  uint32_t sessions_per_source_max = 1'000;
  uint32_t prelude_sessions_max = 10'000;
  uint32_t connect_timeout_ms = 2'000;
  // How long a login a node accepted answers the same (vhost, login, passcode) without asking a
  // node again (stomp.login_cache_ms; 0: never).
  uint32_t login_cache_ms = 60'000;
  // New queues one client address may have placed per minute (0: no limit).
  uint32_t placements_per_source_per_minute = 600;
  // Placements that no session used and no feed confirmed for this long are forgotten
  // (placement.unused_ttl_ms; 0: never).
  uint64_t placement_unused_ttl_ms = 86'400'000;
  uint32_t queues_max = 100'000;
  uint32_t spill_sessions_max = 256;   // sessions served from the spill log at once; 0: none
  uint32_t pipe_bytes = 64u << 10;     // capacity of each splice pipe (two per spliced session)
  uint32_t pipe_bytes_max = 1u << 20;  // what a pipe that a stream fills grows to
  uint32_t grown_pipes_max = 32;       // grown pipes at once, across workers; 0: none
  // Above this many sessions idle spliced sessions are parked (uring::EngineOptions); unset:
  // a quarter of the open-file limit.
  std::optional<uint32_t> park_sessions_above;
  // [health], [placement], [[nodes]], [feed.rabbitmq]
  HealthConfig health;
  PlacementPolicy placement = PlacementPolicy::kRendezvous;
  std::vector<NodeSpec> nodes;
  // RabbitMQ node name ("rabbit@host") of each node, same order as nodes; empty: not mapped.
  std::vector<std::string> broker_node_names;
  RabbitFeedConfig rabbitmq_feed;
  // [[pins]]
  std::vector<PinSpec> pins;
  // [spill], [drain]
  SpillConfig spill;
  DrainConfig drain;
  // [dpdk]
  DpdkConfig dpdk;

  // The spill directory: spill.dir, or "spill" in the state directory.
  std::string spill_dir() const { return spill.dir.empty() ? state_dir + "/spill" : spill.dir; }
};

// Reads and validates a config file. An error names the file, and the line and the key where
// there is one.
Result<GatewayConfig> load_config(const std::string& path);
// The same from text (path is only used in messages).
Result<GatewayConfig> parse_config(std::string_view text, const std::string& path);

std::string_view log_level_name(LogLevel l);
std::optional<LogLevel> parse_log_level(std::string_view s);
std::string_view placement_policy_name(PlacementPolicy p);
std::optional<PlacementPolicy> parse_placement_policy(std::string_view s);
std::string_view probe_kind_name(ProbeKind k);
// Checks a set of health parameters as the loader does (for changes at run time); the error
// names the parameter.
Result<> check_health_params(uint32_t interval_ms, uint32_t timeout_ms, uint32_t rise,
                             uint32_t fall);

}  // namespace sluice::control
