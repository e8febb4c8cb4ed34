// Destination classification by the configured owned prefixes.
#include "dataplane/session/queue_key.h"

#include <algorithm>

#include "dataplane/session/parser.h"

namespace sluice::session {

QueueKey classify_destination(std::string_view vhost, std::string_view destination,
                              std::span<const std::string> owned_prefixes) {
  for (const std::string& prefix : owned_prefixes) {
    if (destination.starts_with(prefix)) {
      return QueueKey{vhost, destination.substr(prefix.size()), false};
    }
  }
  return QueueKey{vhost, destination, true};
}

std::string_view destination_error_message(DestinationError e) {
  switch (e) {
    case DestinationError::kNone:
      return "no error";
    case DestinationError::kMissing:
      return "missing destination header";
    case DestinationError::kEmpty:
      return "empty destination header";
    case DestinationError::kTooLong:
      return "destination header too long";
    case DestinationError::kNoQueue:
      return "invalid destination: no queue name after the prefix";
  }
  return "invalid destination";
}

DestinationError destination_key(const Frame& f, std::string_view vhost,
                                 std::span<const std::string> owned_prefixes,
                                 std::span<char> scratch, QueueKey* out) {
  std::optional<size_t> index = f.find_index("destination");
  if (!index) return DestinationError::kMissing;
  std::string_view dest = f.header(*index).value;
  std::optional<size_t> n = dest.size();
  if (f.escaped() && header_needs_unescape(dest)) {
    n = unescape_header(dest, scratch.first(std::min(scratch.size(), kDestinationBytesMax)));
    if (n) dest = std::string_view(scratch.data(), *n);
  }
  if (!n || dest.size() > kDestinationBytesMax) return DestinationError::kTooLong;
  if (dest.empty()) return DestinationError::kEmpty;
  *out = classify_destination(vhost, dest, owned_prefixes);
  if (!out->default_route && out->queue.empty()) return DestinationError::kNoQueue;
  return DestinationError::kNone;
}

}  // namespace sluice::session
