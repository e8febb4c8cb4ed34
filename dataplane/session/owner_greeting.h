// The owner's first frame after the replay (DESIGN section 3, REPLAY): CONNECTED is stripped and
// never reaches the client; ERROR is forwarded and both sides close; anything else is a protocol
// error that closes both sides.
#pragma once

#include <array>
#include <string_view>

#include "dataplane/session/heart_beat.h"
#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"

namespace sluice::session {

struct GreetingResult {
  enum class Kind : uint8_t {
    kNeedMore,       // feed more owner bytes
    kStrip,          // drop `consumed` owner bytes; splice everything after them
    kForwardError,   // forward `to_client` (the owner's ERROR, byte for byte), close both sides
    kProtocolError,  // send `to_client` (our ERROR), close both sides; `reason` for the log
  };
  Kind kind = Kind::kNeedMore;
  size_t consumed = 0;
  std::string_view to_client;
  std::string_view reason;
  // kStrip: the CONNECTED frame itself, its heart-beat header (absent: 0,0) and how that
  // compares with what the client was told (kSame unless expect_heart_beats() was called).
  std::string_view connected;
  std::string_view server;   // kStrip: the CONNECTED's server header (empty when absent)
  std::string_view message;  // kForwardError: the ERROR's message header (empty when absent)
  HeartBeat heart_beat;
  HeartBeatCheck heart_beat_check = HeartBeatCheck::kSame;
};

class OwnerGreeting {
 public:
  OwnerGreeting(const FrameLimits& limits, Version agreed);
  // With the parser's header table lent by the caller (see Parser): no allocation.
  OwnerGreeting(const FrameLimits& limits, Version agreed, HeaderTable& headers);
  // `buf`: the owner's bytes from the start of its stream (the engine accumulates them until a
  // result other than kNeedMore).
  GreetingResult on_bytes(std::string_view buf);
  // The owner's heart-beat answer is checked against `told` (what the client was told for its
  // header `client`): an owner stricter than the client was told is a kProtocolError.
  void expect_heart_beats(HeartBeat client, HeartBeat told);

 private:
  GreetingResult protocol_error(std::string_view reason);

  Parser parser_;
  Version agreed_;
  size_t skipped_ = 0;  // heart-beat EOLs before the first frame
  bool check_heart_beats_ = false;
  HeartBeat client_hb_;
  HeartBeat told_hb_;
  std::array<char, 512> reply_{};
};

}  // namespace sluice::session
