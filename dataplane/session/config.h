// Settings of the session core, filled from the gateway's config (prelude and frame limits,
// STOMP versions, owned prefixes). Read-only after start; every session refers to one instance.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/session/stomp.h"

namespace sluice::session {

// Monotonic time in nanoseconds, always supplied by the engine: the core never reads a clock.
using Nanos = int64_t;
inline constexpr Nanos kNanosPerMilli = 1'000'000;
inline constexpr Nanos kNever = INT64_MAX;

struct SessionConfig {
  static constexpr uint32_t kPreludeBytesMax = 64u << 10;
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

  // Empty when valid; otherwise names the first setting that is wrong.
  std::string validate() const;
  bool operator==(const SessionConfig&) const = default;
};

// Size of the caller's buffer for one spill session: one frame plus retained transaction frames.
inline size_t spill_buffer_bytes(const SessionConfig& c, size_t txn_bytes_max) {
  return size_t(c.frame_limits.frame_bytes_max) + txn_bytes_max;
}

}  // namespace sluice::session
