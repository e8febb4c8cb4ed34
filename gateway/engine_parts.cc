#include "gateway/engine_parts.h"

namespace sluice::gateway {

uring::SpillSink::Result ProducerSink::append(uint64_t token, std::string_view vhost,
                                              std::string_view queue, std::string_view headers,
                                              std::string_view body, std::string_view* why) {
  switch (producer_.append(token, vhost, queue, headers, body)) {
    case queue::AppendResult::kQueued:
      return Result::kQueued;
    case queue::AppendResult::kRingFull:
    case queue::AppendResult::kArenaFull:
      return Result::kBusy;
    case queue::AppendResult::kTooLarge:
      *why = "message too large for the spill log";
      return Result::kRefused;
    case queue::AppendResult::kBadName:
      *why = "queue name not accepted by the spill log";
      return Result::kRefused;
  }
  *why = "spill log refused the message";
  return Result::kRefused;
}

size_t ProducerSink::poll(std::span<Done> out) {
  size_t n = 0;
  producer_.poll(
      [&](const queue::Completion& c) {
        out[n++] = Done{c.token, c.status == queue::AppendStatus::kDurable,
                        queue::append_status_message(c.status)};
      },
      out.size());
  return n;
}

}  // namespace sluice::gateway
