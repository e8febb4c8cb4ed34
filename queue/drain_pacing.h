// How fast the drainer goes: exponential backoff with jitter between connection attempts to an
// owner, and an optional rate limit on messages (a token bucket). Sans I/O: the caller supplies
// the time and the random seed.
#pragma once

#include <cstdint>

#include "dataplane/session/config.h"

namespace sluice::queue {

class Backoff {
 public:
  static constexpr uint32_t kBaseMsDefault = 100;
  static constexpr uint32_t kMaxMsDefault = 30'000;

  Backoff(uint32_t base_ms, uint32_t max_ms, uint64_t seed);
  // Delay before the next attempt after one more failure: base * 2^(failures-1), capped at max,
  // scaled by a jitter in [0.5, 1.0] so that gateways do not reconnect in step.
  uint32_t next_delay_ms();
  // After a connection that worked: the next failure starts from the base again.
  void reset() { failures_ = 0; }
  uint32_t failures() const { return failures_; }

 private:
  uint64_t random();

  uint32_t base_ms_;
  uint32_t max_ms_;
  uint32_t failures_ = 0;
  uint64_t state_;
};

// Messages per second with a burst allowance; 0 messages per second means no limit.
class RateLimit {
 public:
  RateLimit(uint32_t per_second, uint32_t burst);
  // True when one message may go at `now` (and takes its token).
  bool take(session::Nanos now);
  // When the next token is there (now, if one is).
  session::Nanos next_at(session::Nanos now) const;
  bool unlimited() const { return per_second_ == 0; }
  // A new rate from now on (0: no limit). Tokens already in the bucket stay; a bucket that had
  // no limit starts full.
  void set_rate(uint32_t per_second);

 private:
  void refill(session::Nanos now);

  uint32_t per_second_;
  double burst_;
  double tokens_;
  session::Nanos last_ = 0;
  bool started_ = false;
};

}  // namespace sluice::queue
