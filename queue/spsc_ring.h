// A bounded single-producer single-consumer ring between a worker and the spill thread
// (boost::lockfree::spsc_queue sized once at construction): no allocation or lock after that,
// and a full ring is refused and counted (DESIGN section 4). Same contract as control/ring.h,
// with the depth chosen at run time because it is an option of the spill log.
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace sluice::queue {

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring elements are copied byte for byte");

 public:
  explicit SpscRing(size_t depth) : queue_(depth) {}
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer side. False (and counted) when full.
  [[nodiscard]] bool try_push(const T& v) {
    if (queue_.push(v)) return true;
    full_count_.store(full_count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }
  // Consumer side: the oldest element, without removing it (read_available() > 0).
  const T& front() const { return queue_.front(); }
  void pop() { queue_.pop(); }
  // Consumer side: fn(const T&) for at most `max` elements, in order.
  template <typename F>
  size_t pop_some(F&& fn, size_t max) {
    size_t n = 0;
    auto consume = [&fn](const T& v) { fn(v); };
    while (n < max && queue_.consume_one(consume))
      ++n;
    return n;
  }
  size_t read_available() const { return queue_.read_available(); }
  size_t write_available() const { return queue_.write_available(); }
  uint64_t full_count() const { return full_count_.load(std::memory_order_relaxed); }

 private:
  boost::lockfree::spsc_queue<T> queue_;
  alignas(64) std::atomic<uint64_t> full_count_{0};
};

}  // namespace sluice::queue
