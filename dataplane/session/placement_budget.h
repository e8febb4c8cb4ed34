// New queues one client address may have placed per minute
// (placement.placements_per_source_per_minute): a fixed direct-mapped table of per-address
// counters for the current minute, so a client that logs in cannot fill the ownership table.
// Addresses that share a slot share a budget (the limit only gets stricter for them). Both
// engines keep one per worker; the time is the caller's.
#pragma once

#include <cstdint>
#include <vector>

#include "dataplane/session/config.h"

namespace sluice::session {

class PlacementBudget {
 public:
  static constexpr uint32_t kSlots = 4096;
  static constexpr Nanos kWindow = 60'000 * kNanosPerMilli;

  // `per_minute` 0: no limit.
  explicit PlacementBudget(uint32_t per_minute) : per_minute_(per_minute), slots_(kSlots) {}

  // True, and one taken, when `addr` may place another queue now.
  bool take(uint32_t addr, Nanos now) {
    if (per_minute_ == 0) return true;
    Slot& s = slots_[mix(addr) % kSlots];
    if (now - s.window_start >= kWindow || s.count == 0) {
      s.window_start = now;
      s.count = 0;
    }
    if (s.count >= per_minute_) return false;
    ++s.count;
    return true;
  }

 private:
  struct Slot {
    Nanos window_start = 0;
    uint32_t count = 0;
  };
  static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    return x;
  }

  uint32_t per_minute_;
  std::vector<Slot> slots_;
};

}  // namespace sluice::session
