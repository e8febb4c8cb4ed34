// Per-flow timers of a DPDK lcore (handshake, idle and retransmit timeouts): a hashed timing
// wheel over dense timer ids, O(1) arm and cancel and no allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/assert.h"

namespace sluice::dpdk::flow {

// Each id (a flow index, 0 to capacity - 1) has at most one timer. A timer sits in the bucket of
// its deadline's tick, (deadline / tick_ns) % slots; deadlines more than one rotation away share
// the bucket and are told apart by their deadline when it is scanned, so any deadline works and
// a far one costs one look per rotation. Every list is an intrusive circular list through one
// node array indexed by id, whose entries past the ids are the lists' sentinels, so linking,
// unlinking and moving a whole bucket are O(1).
//
// Timing: a timer never fires before its deadline. advance() scans the buckets of the ticks
// that have ended, so a timer fires at the first advance() at or after the end of its
// deadline's tick: at most one tick late. A timer armed with a deadline at or before the time of
// the last advance() (or construction) fires on the next advance(). Firing order is by bucket,
// roughly deadline order at tick resolution; no order is promised within a tick.
class TimerWheel {
 public:
  static constexpr uint32_t kCapacityMax = uint32_t(1) << 28;
  static constexpr uint32_t kSlotsMax = uint32_t(1) << 24;

  // capacity: number of timer ids, 1 to kCapacityMax. tick_ns: the resolution, > 0. slots: a
  // power of two, 1 to kSlotsMax; one rotation is slots * tick_ns. now_ns: the current time.
  TimerWheel(uint32_t capacity, uint64_t tick_ns, uint32_t slots, uint64_t now_ns);

  // Sets id's deadline, moving it if it is armed. O(1). Called from an on_expire callback, the
  // timer cannot fire in the advance() that is running, only in a later one: a deadline after
  // now_ns is not due, and one at or before it goes to the list the next advance() fires first.
  void arm(uint32_t id, uint64_t deadline_ns);

  // Disarms id; a no-op when it is not armed. O(1).
  void cancel(uint32_t id);

  bool armed(uint32_t id) const {
    SLUICE_ASSERT(id < capacity_);
    return nodes_[id].next != kUnlinked;
  }

  // The deadline of an armed id.
  uint64_t deadline(uint32_t id) const {
    SLUICE_ASSERT(armed(id));
    return nodes_[id].deadline_ns;
  }

  uint32_t armed_count() const { return armed_count_; }

  // Advances the wheel to now_ns and calls on_expire(id), the id already disarmed, for timers
  // whose deadline is <= now_ns: every one whose deadline's tick has ended, every one that was
  // due when armed (see above), maybe others. At most max_expired fire per call; the rest stay
  // due and fire on the next call. on_expire may arm() or cancel() any id, must not call
  // advance() and must not throw. A now_ns earlier than the previous one counts as the previous
  // one. However far now_ns jumps, one call scans at most `slots` buckets. Returns how many
  // fired.
  template <class F>
  size_t advance(uint64_t now_ns, F&& on_expire, size_t max_expired = SIZE_MAX);

 private:
  static constexpr uint32_t kUnlinked = UINT32_MAX;  // next of an id that is not armed

  struct Node {
    uint32_t prev = kUnlinked;
    uint32_t next = kUnlinked;
    uint64_t deadline_ns = 0;
  };

  // Sentinels, after the ids: the buckets, then the list of timers due on the next advance()
  // and the bucket being scanned (apart, so that on_expire can change any list meanwhile).
  uint32_t bucket(uint64_t tick) const { return capacity_ + uint32_t(tick & mask_); }
  uint32_t due_list() const { return capacity_ + mask_ + 1; }
  uint32_t scan_list() const { return capacity_ + mask_ + 2; }

  bool empty(uint32_t list) const { return nodes_[list].next == list; }
  void link_back(uint32_t list, uint32_t n);
  void unlink(uint32_t n);
  void move_all(uint32_t from, uint32_t to);  // appends `from`'s entries to `to`
  void place(uint32_t id);                    // links an unlinked id by its deadline

  // Fires the due entries of scan_list(), moving the others to `home`; false when max_expired
  // stopped it (the rest, due or not, go back to `home`).
  template <class F>
  bool fire_scanned(uint32_t home, uint64_t now_ns, F& on_expire, size_t max_expired,
                    size_t& fired);

  uint32_t capacity_;
  uint64_t tick_ns_;
  uint32_t mask_;         // slots - 1
  uint64_t cursor_tick_;  // the first tick whose bucket has not been scanned to its end
  uint64_t last_now_ns_;  // the time of the last advance() (or construction)
  uint32_t armed_count_ = 0;
  bool in_advance_ = false;  // to catch an on_expire that calls advance()
  std::vector<Node> nodes_;  // ids, then the sentinels
};

inline void TimerWheel::link_back(uint32_t list, uint32_t n) {
  const uint32_t last = nodes_[list].prev;
  nodes_[n].prev = last;
  nodes_[n].next = list;
  nodes_[last].next = n;
  nodes_[list].prev = n;
}

inline void TimerWheel::unlink(uint32_t n) {
  Node& node = nodes_[n];
  nodes_[node.prev].next = node.next;
  nodes_[node.next].prev = node.prev;
  node.prev = kUnlinked;
  node.next = kUnlinked;
}

template <class F>
bool TimerWheel::fire_scanned(uint32_t home, uint64_t now_ns, F& on_expire, size_t max_expired,
                              size_t& fired) {
  const uint32_t scan = scan_list();
  // Always take the list's first entry afresh: on_expire may unlink any entry, this one's
  // successor included.
  while (!empty(scan)) {
    const uint32_t id = nodes_[scan].next;
    if (nodes_[id].deadline_ns > now_ns) {
      unlink(id);
      link_back(home, id);
      continue;
    }
    if (fired == max_expired) {
      move_all(scan, home);
      return false;
    }
    unlink(id);
    --armed_count_;
    ++fired;
    on_expire(id);
  }
  return true;
}

template <class F>
size_t TimerWheel::advance(uint64_t now_ns, F&& on_expire, size_t max_expired) {
  SLUICE_ASSERT(!in_advance_);  // on_expire must not call advance()
  if (now_ns < last_now_ns_) now_ns = last_now_ns_;
  last_now_ns_ = now_ns;
  in_advance_ = true;
  size_t fired = 0;

  bool done = true;
  if (!empty(due_list())) {
    move_all(due_list(), scan_list());
    done = fire_scanned(due_list(), now_ns, on_expire, max_expired, fired);
  }
  // The buckets of the ticks that have ended, each once even when now_ns jumped more than a
  // rotation (then every bucket is scanned once and the deadline decides).
  const uint64_t now_tick = now_ns / tick_ns_;
  const uint64_t ticks = now_tick - cursor_tick_;
  const uint64_t scans = ticks < uint64_t(mask_) + 1 ? ticks : uint64_t(mask_) + 1;
  for (uint64_t i = 0; done && i < scans; ++i) {
    const uint64_t tick = cursor_tick_ + i;
    const uint32_t b = bucket(tick);
    if (empty(b)) continue;
    move_all(b, scan_list());
    if (!fire_scanned(b, now_ns, on_expire, max_expired, fired)) {
      // Buckets before this one hold only timers due after now_ns, i.e. in now_tick or later.
      cursor_tick_ = tick;
      done = false;
    }
  }
  if (done) cursor_tick_ = now_tick;
  in_advance_ = false;
  return fired;
}

}  // namespace sluice::dpdk::flow
