// Active health probes of broker nodes: a TCP connect, or a STOMP CONNECT answered by CONNECTED,
// run asynchronously on the control thread's io_context under one deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "control/config.h"

namespace sluice::control {

// Longest reply to CONNECT read before the probe gives up: CONNECTED and ERROR frames are small.
inline constexpr size_t kProbeReplyBytesMax = 64u << 10;

struct ProbeSettings {
  ProbeKind kind = ProbeKind::kTcp;
  uint32_t timeout_ms = 1000;  // whole probe: resolve + connect + (stomp) handshake
  std::string login;           // stomp: CONNECT login header (empty: no header)
  std::string passcode;  // stomp: passcode header (empty: no header); never logged or put in errors
  std::string vhost = "/";  // stomp: CONNECT host header
};

struct ProbeResult {
  bool ok = false;
  uint32_t latency_us = 0;  // start to verdict
  // Empty when ok; else one line naming the step that failed, e.g.
  // "connect 127.0.0.1:61613: Connection refused", "timed out after 1000 ms",
  // "stomp: broker answered ERROR: Access refused for user 'guest'".
  std::string error;
};

// Starts one probe of host:port. `done` runs exactly once, on io's thread, never from inside
// start_probe. If io is stopped or destroyed first, `done` is destroyed without being called.
void start_probe(boost::asio::io_context& io, const std::string& host, uint16_t port,
                 const ProbeSettings& settings, std::function<void(ProbeResult)> done);

}  // namespace sluice::control
