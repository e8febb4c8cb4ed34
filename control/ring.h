// A bounded single-producer single-consumer ring between two threads (Boost.Lockfree spsc_queue
// with its capacity fixed at compile time): no allocation after construction, no lock, and a
// full ring is refused and counted, never a silent drop (DESIGN section 4).
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace sluice::control {

// The elements live inside the object (N of them), so a Ring of large messages belongs on the
// heap (std::make_unique), not on a thread's stack.
template <typename T, size_t N>
class Ring {
  static_assert(N > 0, "a ring holds at least one element");
  static_assert(std::is_trivially_copyable_v<T>, "ring elements are copied byte for byte");

 public:
  static constexpr size_t kCapacity = N;

  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Producer thread only. False when the ring is full: the element is not queued and
  // full_count() goes up; the producer decides whether to retry later or to give up.
  [[nodiscard]] bool try_push(const T& v) {
    if (queue_.push(v)) return true;
    // Only the producer writes the counter, so a load and a store suffice (no locked add).
    full_count_.store(full_count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }

  // Consumer thread only. Calls fn(const T&) for at most `max` elements in order and returns how
  // many; the bound keeps the consumer's work per tick bounded (STYLE: run at your own pace).
  template <typename F>
  size_t pop_some(F&& fn, size_t max) {
    size_t n = 0;
    auto consume = [&fn](const T& v) { fn(v); };
    while (n < max && queue_.consume_one(consume))
      ++n;
    return n;
  }

  // Pushes refused because the ring was full, since construction. Written by the producer; read
  // from any thread (metrics on the control thread): the value may lag by a few refusals.
  uint64_t full_count() const { return full_count_.load(std::memory_order_relaxed); }

  // Consumer side: elements ready to pop. Producer side: free places. Exact for the calling side,
  // a lower bound because the other side may move meanwhile.
  size_t read_available() const { return queue_.read_available(); }
  size_t write_available() const { return queue_.write_available(); }

 private:
  boost::lockfree::spsc_queue<T, boost::lockfree::capacity<N>> queue_;
  // On a line of its own: the producer writes it, the consumer reads the ring's other lines.
  alignas(64) std::atomic<uint64_t> full_count_{0};
};

}  // namespace sluice::control
