// STOMP heart-beats (STOMP 1.1 and 1.2, "Heart-beating"): the `heart-beat` header's two numbers,
// the gateway's answer within its bounds, the intervals both sides keep once negotiated, and
// the check of an owner's answer against what the client was told.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace sluice::session {

// `heart-beat:cx,cy` as a client sends it (cx: the least it can send, cy: the least it wants to
// receive, in milliseconds, 0 meaning never), or as a server answers it (sx, sy).
struct HeartBeat {
  uint32_t x = 0;
  uint32_t y = 0;
  bool operator==(const HeartBeat&) const = default;
};

// Two decimal numbers separated by a comma, each at most 10 digits and below 2^32; nullopt
// otherwise. An absent header is HeartBeat{0, 0}.
std::optional<HeartBeat> parse_heart_beat(std::string_view v);
// "x,y" into `out` (at least 21 bytes); the view of what was written.
std::string_view format_heart_beat(std::span<char> out, HeartBeat hb);

// Where the gateway answers CONNECTED itself: each side is the client's value clamped into
// [min_ms, max_ms], 0 where the client's is 0 (as RabbitMQ and ActiveMQ answer: the client's
// rates, echoed). `max_ms == 0` turns heart-beating off: the answer is 0,0.
HeartBeat answer_heart_beat(HeartBeat client, uint32_t min_ms, uint32_t max_ms);

// The intervals one side of a session keeps, from the client's header and the server's answer
// (spec: the larger of the two, or none when either is 0).
struct HeartBeatIntervals {
  uint32_t client_to_server_ms = 0;  // the client sends at least this often
  uint32_t server_to_client_ms = 0;  // the server sends at least this often
  bool operator==(const HeartBeatIntervals&) const = default;
};
HeartBeatIntervals negotiate(HeartBeat client, HeartBeat server);

// A peer is dead when nothing came from it for this many of its intervals.
inline constexpr uint32_t kHeartBeatGraceFactor = 2;

// An owner's answer to the replay (`owner`) against what the client was told (`told`), both
// answers to the same client header.
enum class HeartBeatCheck : uint8_t {
  kSame,           // the intervals both ways are the ones the client was told
  kOwnerSlower,    // the owner sends less often than the client expects: the client may give up
                   // on it (counted and logged; the session goes on)
  kOwnerStricter,  // the owner expects the client more often than the client was told to send:
                   // the owner would drop the client (the session is refused)
  kOtherwise,      // the intervals differ but neither side would give up (counted and logged)
};
HeartBeatCheck check_owner_heart_beat(HeartBeat client, HeartBeat told, HeartBeat owner);
std::string_view heart_beat_check_name(HeartBeatCheck c);

}  // namespace sluice::session
