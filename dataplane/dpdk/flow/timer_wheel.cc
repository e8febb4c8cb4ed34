// The timer wheel's construction, arming and list moves; advance() is in timer_wheel.h.
#include "dataplane/dpdk/flow/timer_wheel.h"

#include <bit>

namespace sluice::dpdk::flow {

TimerWheel::TimerWheel(uint32_t capacity, uint64_t tick_ns, uint32_t slots, uint64_t now_ns)
    : capacity_(capacity),
      tick_ns_(tick_ns),
      mask_(slots - 1),
      cursor_tick_(tick_ns == 0 ? 0 : now_ns / tick_ns),
      last_now_ns_(now_ns) {
  SLUICE_ASSERT(capacity >= 1 && capacity <= kCapacityMax);
  SLUICE_ASSERT(tick_ns > 0);
  SLUICE_ASSERT(slots >= 1 && slots <= kSlotsMax && std::has_single_bit(slots));
  // The ids, then slots + 2 sentinels, each an empty circular list (linked to itself).
  nodes_.resize(size_t(capacity) + slots + 2);
  for (uint32_t s = capacity; s < nodes_.size(); ++s)
    nodes_[s].prev = nodes_[s].next = s;
}

void TimerWheel::move_all(uint32_t from, uint32_t to) {
  if (empty(from)) return;
  const uint32_t first = nodes_[from].next;
  const uint32_t last = nodes_[from].prev;
  const uint32_t to_last = nodes_[to].prev;
  nodes_[to_last].next = first;
  nodes_[first].prev = to_last;
  nodes_[last].next = to;
  nodes_[to].prev = last;
  nodes_[from].prev = nodes_[from].next = from;
}

// Invariant kept here and by advance(): a timer in a bucket has a deadline tick at or after
// cursor_tick_ and sits in that tick's bucket, so scanning the ended ticks from the cursor
// finds every timer that is due. A deadline at or before last_now_ns_ is already due (its tick
// may be before the cursor, whose bucket would come round only a rotation later), so it goes
// to the due list.
void TimerWheel::place(uint32_t id) {
  const uint64_t deadline_ns = nodes_[id].deadline_ns;
  if (deadline_ns <= last_now_ns_) {
    link_back(due_list(), id);
  } else {
    link_back(bucket(deadline_ns / tick_ns_), id);
  }
}

void TimerWheel::arm(uint32_t id, uint64_t deadline_ns) {
  SLUICE_ASSERT(id < capacity_);
  if (nodes_[id].next != kUnlinked) {
    unlink(id);
  } else {
    ++armed_count_;
  }
  nodes_[id].deadline_ns = deadline_ns;
  place(id);
}

void TimerWheel::cancel(uint32_t id) {
  SLUICE_ASSERT(id < capacity_);
  if (nodes_[id].next == kUnlinked) return;
  unlink(id);
  --armed_count_;
}

}  // namespace sluice::dpdk::flow
