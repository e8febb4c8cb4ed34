// Classifies the owner's first frame after the replay.
#include "dataplane/session/owner_greeting.h"

#include "dataplane/session/assert.h"
#include "dataplane/session/builder.h"

namespace sluice::session {

OwnerGreeting::OwnerGreeting(const FrameLimits& limits, Version agreed)
    : parser_(limits), agreed_(agreed) {
  parser_.set_version(agreed);
}

OwnerGreeting::OwnerGreeting(const FrameLimits& limits, Version agreed, HeaderTable& headers)
    : parser_(limits, headers), agreed_(agreed) {
  parser_.set_version(agreed);
}

GreetingResult OwnerGreeting::protocol_error(std::string_view reason) {
  std::optional<std::string_view> bytes =
      build_error(reply_, agreed_, ErrorFrame{"bad response from owner", reason, {}, {}});
  SLUICE_ASSERT(bytes.has_value());
  return GreetingResult{GreetingResult::Kind::kProtocolError, 0, *bytes, reason};
}

GreetingResult OwnerGreeting::on_bytes(std::string_view buf) {
  for (;;) {
    ParseResult r = parser_.parse(buf.substr(skipped_));
    switch (r.status) {
      case ParseResult::Status::kNeedMore:
        return GreetingResult{};
      case ParseResult::Status::kHeartbeat:
        skipped_ += r.consumed;
        continue;
      case ParseResult::Status::kError:
        return protocol_error(parse_error_message(r.error));
      case ParseResult::Status::kFrame:
        break;
    }
    const Frame& f = parser_.frame();
    const size_t consumed = skipped_ + r.consumed;
    if (f.command() == Command::kConnected) {
      // The replay narrowed accept-version to one version; the owner must agree to it.
      std::string_view v = f.find("version").value_or("1.0");
      if (v != version_name(agreed_)) {
        return protocol_error("owner answered CONNECTED with another STOMP version");
      }
      return GreetingResult{GreetingResult::Kind::kStrip, consumed, {}, {}};
    }
    if (f.command() == Command::kError) {
      return GreetingResult{GreetingResult::Kind::kForwardError, consumed, f.bytes(), {}};
    }
    return protocol_error("owner's first frame was neither CONNECTED nor ERROR");
  }
}

}  // namespace sluice::session
