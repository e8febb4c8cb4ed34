// Health of one node with HAProxy's rise/fall semantics: an up node goes down after `fall`
// consecutive failures (probe failures and passive reports from workers alike), a down node
// comes up after `rise` consecutive successes.
#pragma once

#include <cstdint>

#include "control/node.h"

namespace sluice::control {

class HealthTracker {
 public:
  // Starts up at the lowest up level, as HAProxy does: one failure before the first success
  // takes a node that never answered down at once; after a success it needs `fall`.
  HealthTracker(uint32_t rise, uint32_t fall);

  // Each returns true when the state changed.
  bool on_success();
  bool on_failure();
  // New parameters keep the state; the level is clamped into the new range.
  void set_params(uint32_t rise, uint32_t fall);

  HealthState state() const { return level_ >= rise_ ? HealthState::kUp : HealthState::kDown; }
  uint32_t rise() const { return rise_; }
  uint32_t fall() const { return fall_; }

 private:
  uint32_t top() const { return rise_ + fall_ - 1; }

  uint32_t rise_;
  uint32_t fall_;
  // 0 .. rise-1: down (successes so far); rise .. rise+fall-1: up (failures still allowed + rise).
  uint32_t level_;
};

}  // namespace sluice::control
