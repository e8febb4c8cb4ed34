// The flow lookup's inserts and backward-shift deletes; see tuple_map.h.
#include "dataplane/dpdk/flow/tuple_map.h"

#include <bit>

#include "base/assert.h"

namespace sluice::dpdk::flow {

TupleMap::TupleMap(uint32_t capacity, uint64_t key)
    : key_(key), capacity_(capacity), mask_(std::bit_ceil(2 * capacity) - 1) {
  SLUICE_ASSERT(capacity >= 1 && capacity <= kCapacityMax);
  slots_ = std::make_unique<Slot[]>(size_t(mask_) + 1);
}

bool TupleMap::insert(const Tuple& t, uint32_t value) {
  SLUICE_ASSERT(value != kNone);
  uint32_t i = hash(t) & mask_;
  for (;;) {
    Slot& s = slots_[i];
    if (s.value == kNone) break;
    if (s.tuple == t) return false;
    i = (i + 1) & mask_;
  }
  if (size_ == capacity_) return false;
  slots_[i] = Slot{t, value};
  ++size_;
  return true;
}

bool TupleMap::erase(const Tuple& t) {
  uint32_t hole = hash(t) & mask_;
  for (;;) {
    const Slot& s = slots_[hole];
    if (s.value == kNone) return false;
    if (s.tuple == t) break;
    hole = (hole + 1) & mask_;
  }
  // Backward shift: walk the rest of the run and move back into the hole every entry whose home
  // is not in (hole, j], i.e. whose probe from home to j passes the hole; otherwise a lookup
  // would stop at the hole before reaching it. Distances are taken modulo the table size so that
  // runs wrapping past the last slot work too.
  uint32_t j = hole;
  for (;;) {
    j = (j + 1) & mask_;
    const Slot& s = slots_[j];
    if (s.value == kNone) break;
    const uint32_t home = hash(s.tuple) & mask_;
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      slots_[hole] = s;
      hole = j;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  return true;
}

}  // namespace sluice::dpdk::flow
