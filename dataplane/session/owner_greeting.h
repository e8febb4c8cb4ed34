// The owner's first frame after the replay (DESIGN section 3, REPLAY): CONNECTED is stripped and
// never reaches the client; ERROR is forwarded and both sides close; anything else is a protocol
// error that closes both sides.
#pragma once

#include <array>
#include <string_view>

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
};

class OwnerGreeting {
 public:
  OwnerGreeting(const FrameLimits& limits, Version agreed);
  // With the parser's header table lent by the caller (see Parser): no allocation.
  OwnerGreeting(const FrameLimits& limits, Version agreed, HeaderTable& headers);
  // `buf`: the owner's bytes from the start of its stream (the engine accumulates them until a
  // result other than kNeedMore).
  GreetingResult on_bytes(std::string_view buf);

 private:
  GreetingResult protocol_error(std::string_view reason);

  Parser parser_;
  Version agreed_;
  size_t skipped_ = 0;  // heart-beat EOLs before the first frame
  std::array<char, 512> reply_{};
};

}  // namespace sluice::session
