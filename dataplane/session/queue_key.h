// What a session is about: the (vhost, queue) key the ownership table is asked for, or a
// destination outside the owned prefixes that takes the default route.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "base/names.h"

namespace sluice::session {

// Longest names the session core keeps; longer ones are refused with a STOMP ERROR that names
// the header. RabbitMQ limits queue and vhost names to 255 bytes.
using ::sluice::kVhostBytesMax;
inline constexpr size_t kDestinationBytesMax = 1024;
inline constexpr size_t kLoginBytesMax = 255;
inline constexpr size_t kReceiptIdBytesMax = 256;
inline constexpr size_t kTransactionIdBytesMax = 256;

struct QueueKey {
  std::string_view vhost;
  // Queue name after the owned prefix, or the whole destination when default_route.
  std::string_view queue;
  bool default_route = false;
};

// Splits an (unescaped) destination by the owned prefixes. An owned prefix followed by nothing
// yields an empty queue, which callers refuse.
QueueKey classify_destination(std::string_view vhost, std::string_view destination,
                              std::span<const std::string> owned_prefixes);

class Frame;

enum class DestinationError : uint8_t { kNone, kMissing, kEmpty, kTooLong, kNoQueue };
// STOMP ERROR `message` text for each error.
std::string_view destination_error_message(DestinationError e);

// The key of a SEND or SUBSCRIBE frame: its destination header, unescaped into `scratch` when it
// carries escapes (at most kDestinationBytesMax bytes), split by the owned prefixes.
DestinationError destination_key(const Frame& f, std::string_view vhost,
                                 std::span<const std::string> owned_prefixes,
                                 std::span<char> scratch, QueueKey* out);

}  // namespace sluice::session
