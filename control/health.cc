// HAProxy's check counter (src/check.c): one level moving between down and up bands.
#include "control/health.h"

#include <algorithm>

#include "base/assert.h"

namespace sluice::control {

HealthTracker::HealthTracker(uint32_t rise, uint32_t fall)
    : rise_(rise), fall_(fall), level_(rise) {
  SLUICE_ASSERT(rise >= 1 && fall >= 1);
}

bool HealthTracker::on_success() {
  const HealthState before = state();
  if (level_ + 1 >= rise_) {
    level_ = top();  // up now, or already up: full margin again
  } else {
    ++level_;
  }
  return state() != before;
}

bool HealthTracker::on_failure() {
  const HealthState before = state();
  if (level_ > rise_) {
    --level_;  // still up, one failure less to spare
  } else {
    level_ = 0;  // down now, or already down: start counting successes again
  }
  return state() != before;
}

void HealthTracker::set_params(uint32_t rise, uint32_t fall) {
  SLUICE_ASSERT(rise >= 1 && fall >= 1);
  const bool up = state() == HealthState::kUp;
  const uint32_t spare = up ? level_ - rise_ : 0;
  rise_ = rise;
  fall_ = fall;
  level_ = up ? rise_ + std::min(spare, fall_ - 1) : std::min(level_, rise_ - 1);
}

}  // namespace sluice::control
