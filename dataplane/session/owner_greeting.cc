// Classifies the owner's first frame after the replay.
#include "dataplane/session/owner_greeting.h"

#include "base/assert.h"
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

void OwnerGreeting::expect_heart_beats(HeartBeat client, HeartBeat told) {
  check_heart_beats_ = true;
  client_hb_ = client;
  told_hb_ = told;
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
      std::optional<HeartBeat> hb = parse_heart_beat(f.find("heart-beat").value_or("0,0"));
      if (!hb) return protocol_error("owner answered CONNECTED with an invalid heart-beat");
      GreetingResult g{GreetingResult::Kind::kStrip, consumed, {}, {}};
      g.connected = f.bytes();
      g.server = f.find("server").value_or(std::string_view());
      g.heart_beat = *hb;
      if (check_heart_beats_) {
        g.heart_beat_check = check_owner_heart_beat(client_hb_, told_hb_, *hb);
        if (g.heart_beat_check == HeartBeatCheck::kOwnerStricter) {
          GreetingResult e = protocol_error(
              "owner's heart-beat expects the client more often than the client was told");
          e.heart_beat = *hb;
          e.heart_beat_check = g.heart_beat_check;
          return e;
        }
      }
      return g;
    }
    if (f.command() == Command::kError) {
      GreetingResult g{GreetingResult::Kind::kForwardError, consumed, f.bytes(), {}};
      g.message = f.find("message").value_or(std::string_view());
      return g;
    }
    return protocol_error("owner's first frame was neither CONNECTED nor ERROR");
  }
}

}  // namespace sluice::session
