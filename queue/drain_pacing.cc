// Backoff with jitter and the drain rate limit.
#include "queue/drain_pacing.h"

#include <algorithm>

#include "base/assert.h"

namespace sluice::queue {

Backoff::Backoff(uint32_t base_ms, uint32_t max_ms, uint64_t seed)
    : base_ms_(std::max<uint32_t>(base_ms, 1)),
      max_ms_(std::max(max_ms, std::max<uint32_t>(base_ms, 1))),
      state_(seed ? seed : 0x9e3779b97f4a7c15ull) {}

uint64_t Backoff::random() {
  // xorshift64*: plenty for jitter.
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545f4914f6cdd1dull;
}

uint32_t Backoff::next_delay_ms() {
  if (failures_ < 63) ++failures_;
  uint64_t delay = base_ms_;
  for (uint32_t i = 1; i < failures_ && delay < max_ms_; ++i)
    delay *= 2;
  delay = std::min<uint64_t>(delay, max_ms_);
  // Jitter in [delay/2, delay].
  const uint64_t half = delay / 2;
  return uint32_t(delay - half + random() % (half + 1));
}

RateLimit::RateLimit(uint32_t per_second, uint32_t burst)
    : per_second_(per_second),
      burst_(double(std::max<uint32_t>(burst, 1))),
      tokens_(double(std::max<uint32_t>(burst, 1))) {}

void RateLimit::refill(session::Nanos now) {
  if (!started_) {
    started_ = true;
    last_ = now;
    return;
  }
  if (now <= last_) return;
  tokens_ = std::min(burst_, tokens_ + double(now - last_) * per_second_ / 1e9);
  last_ = now;
}

void RateLimit::set_rate(uint32_t per_second) {
  if (per_second_ == 0 && per_second != 0) {
    tokens_ = burst_;
    started_ = false;
  }
  per_second_ = per_second;
}

bool RateLimit::take(session::Nanos now) {
  if (per_second_ == 0) return true;
  refill(now);
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

session::Nanos RateLimit::next_at(session::Nanos now) const {
  if (per_second_ == 0 || tokens_ >= 1.0) return now;
  // tokens_ is as of last_; the missing fraction arrives at the configured rate.
  const double wait_ns = (1.0 - tokens_) * 1e9 / per_second_;
  return std::max(now, last_ + session::Nanos(wait_ns) + 1);
}

}  // namespace sluice::queue
