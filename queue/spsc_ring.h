// A bounded single-producer single-consumer ring between two threads (Boost.Lockfree's
// spsc_queue): no allocation after construction, no lock, and a full ring is refused and
// counted, never a silent drop (DESIGN section 4). Its capacity is fixed at compile time
// (SpscRing<T, N>: the elements live inside the object, so a ring of large messages belongs on
// the heap, not on a thread's stack) or at construction (SpscRing<T>(depth), for a depth that
// is an option). The rings between control and the workers and between the workers and the
// spill thread are all of this type.
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace sluice::queue {

template <typename T, size_t N = 0>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring elements are copied byte for byte");
  using Queue = std::conditional_t<N == 0, boost::lockfree::spsc_queue<T>,
                                   boost::lockfree::spsc_queue<T, boost::lockfree::capacity<N>>>;

 public:
  static constexpr size_t kCapacity = N;  // 0: set at construction

  SpscRing() requires(N > 0) = default;
  explicit SpscRing(size_t depth) requires(N == 0) : queue_(depth) {}
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer thread only. False when the ring is full: the element is not queued and
  // full_count() goes up; the producer decides whether to retry later or to give up.
  [[nodiscard]] bool try_push(const T& v) {
    if (queue_.push(v)) return true;
    // Only the producer writes the counter, so a load and a store suffice (no locked add).
    full_count_.store(full_count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }

  // Consumer thread only: the oldest element, without removing it (read_available() > 0).
  const T& front() const { return queue_.front(); }
  void pop() { queue_.pop(); }
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
  Queue queue_;
  // On a line of its own: the producer writes it, the consumer reads the ring's other lines.
  alignas(64) std::atomic<uint64_t> full_count_{0};
};

}  // namespace sluice::queue
