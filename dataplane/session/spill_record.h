// The headers of a spilled SEND as the spill log keeps them: every header of the client's frame,
// in order, as a line "name:value" LF encoded the way STOMP 1.2 encodes SEND headers, whatever
// version the client spoke. The drainer replays them in a 1.2 session with the owner.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace sluice::session {

class Frame;

// Writes the frame's headers into `out`; nothing when they do not fit.
std::optional<std::string_view> spill_record_headers(const Frame& frame, std::span<char> out);

}  // namespace sluice::session
