// Settings of the session core, filled from the gateway's config (prelude and frame limits,
// STOMP versions, owned prefixes). Read-only after start; every session refers to one instance.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "dataplane/session/stomp.h"

namespace sluice::session {

// Monotonic time in nanoseconds, always supplied by the engine: the core never reads a clock.
using Nanos = int64_t;
inline constexpr Nanos kNanosPerMilli = 1'000'000;
inline constexpr Nanos kNever = INT64_MAX;

// How a CONNECT's login is checked (`stomp.login_check`). kEager: a healthy node of the vhost
// answers the CONNECT (its CONNECTED or ERROR reaches the client) before the session goes on;
// kDeferred: the gateway answers CONNECTED itself and the owner checks the login at the replay.
enum class LoginCheck : uint8_t { kEager, kDeferred };

struct SessionConfig {
  static constexpr uint32_t kPreludeBytesMax = 64u << 10;
  static constexpr uint32_t kHeartBeatMinMs = 1'000;
  static constexpr uint32_t kHeartBeatMaxMs = 3'600'000;
  static constexpr Nanos kFrameTimeout = 5'000 * kNanosPerMilli;
  static constexpr Nanos kPreludeIdleTimeout = 600'000 * kNanosPerMilli;

  FrameLimits frame_limits;
  uint32_t prelude_bytes_max = kPreludeBytesMax;  // CONNECT and every byte up to the destination
  Nanos frame_timeout_ns = kFrameTimeout;         // a started frame must complete within this
  Nanos prelude_idle_timeout_ns = kPreludeIdleTimeout;  // no complete frame for this long
  VersionSet versions = VersionSet::all();
  // Destinations starting with one of these name a queue owned through the ownership table; the
  // queue name is what follows the prefix. Others take the default route.
  std::vector<std::string> owned_prefixes = {"/queue/", "/amq/queue/"};
  std::string default_vhost = "/";  // key vhost when CONNECT has no host header
  std::string server = "sluice/" SLUICE_VERSION;
  // The core's defaults are the plainest: the gateway answers CONNECT and keeps no heart-beats.
  // sluiced's configuration defaults to eager checks and heart-beats within
  // [kHeartBeatMinMs, kHeartBeatMaxMs] (gateway_defaults()).
  LoginCheck login_check = LoginCheck::kDeferred;
  // Where the gateway answers CONNECTED itself, each heart-beat it agrees to is the client's
  // clamped into [heartbeat_min_ms, heartbeat_max_ms]. heartbeat_max_ms 0: no heart-beats
  // (CONNECTED says 0,0 and the replay tells the owner 0,0).
  uint32_t heartbeat_min_ms = kHeartBeatMinMs;
  uint32_t heartbeat_max_ms = 0;

  // What sluiced starts from before its config file: eager login checks, heart-beats on.
  static SessionConfig gateway_defaults() {
    SessionConfig c;
    c.login_check = LoginCheck::kEager;
    c.heartbeat_max_ms = kHeartBeatMaxMs;
    return c;
  }

  // An error naming the first setting that is wrong, if one is.
  Result<> validate() const;
  bool operator==(const SessionConfig&) const = default;
};

// Size of the caller's buffer for one spill session: one frame plus retained transaction frames.
inline size_t spill_buffer_bytes(const SessionConfig& c, size_t txn_bytes_max) {
  return size_t(c.frame_limits.frame_bytes_max) + txn_bytes_max;
}

}  // namespace sluice::session
