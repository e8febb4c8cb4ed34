// Validation of the session core's settings; messages name the config key.
#include "dataplane/session/config.h"

namespace sluice::session {

Result<> SessionConfig::validate() const {
  if (!frame_limits.valid()) {
    return failure(
        "frame limits: frame_bytes_max must be 64..67108864, header_count_max 1..1024, "
        "header_line_bytes_max 16..frame_bytes_max, body_bytes_max <= frame_bytes_max");
  }
  if (prelude_bytes_max < 64 || prelude_bytes_max > frame_limits.kFrameBytesCeiling) {
    return failure("prelude_bytes_max must be between 64 and 67108864");
  }
  // A spill session re-reads the whole prelude, and its buffer is sized from frame_bytes_max.
  if (prelude_bytes_max > frame_limits.frame_bytes_max) {
    return failure("prelude_bytes_max must not exceed frame_bytes_max");
  }
  if (frame_timeout_ns <= 0) return failure("frame_timeout must be positive");
  if (prelude_idle_timeout_ns <= 0) return failure("prelude_idle_timeout must be positive");
  if (versions.empty()) return failure("versions must name at least one of 1.0, 1.1, 1.2");
  for (const std::string& p : owned_prefixes) {
    if (p.empty()) return failure("owned_prefixes must not contain an empty prefix");
  }
  // CONNECTED carries it on every session; it must fit the prelude's reply buffer and a header.
  if (server.empty() || server.size() > 255 ||
      server.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
    return failure("server must be 1..255 bytes without CR, LF or NUL");
  }
  if (default_vhost.empty() || default_vhost.size() > 255) {
    return failure("default_vhost must be 1..255 bytes");
  }
  if (heartbeat_max_ms != 0 && (heartbeat_min_ms < 100 || heartbeat_min_ms > heartbeat_max_ms)) {
    return failure("heartbeat_min_ms must be between 100 and heartbeat_max_ms");
  }
  return {};
}

}  // namespace sluice::session
