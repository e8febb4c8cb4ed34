// SpillProducer: the worker side of an append (serialise into the arena, announce on the ring).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "queue/spill_log.h"

namespace sluice::queue {

SpillProducer::SpillProducer(SpillLog& log, uint32_t index, uint32_t ring_depth,
                             uint32_t arena_bytes)
    : log_(log),
      index_(index),
      ring_(ring_depth),
      ring_depth_(ring_depth),
      done_(ring_depth),
      arena_bytes_(arena_bytes),
      arena_(new char[arena_bytes]),
      notify_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

bool SpillProducer::past_half() const {
  return ring_.read_available() * 2 >= ring_depth_ ||
         (head_seen_.load(std::memory_order_relaxed) - tail_.load(std::memory_order_relaxed)) * 2 >=
             arena_bytes_;
}

SpillProducer::~SpillProducer() {
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

AppendResult SpillProducer::append(uint64_t token, std::string_view vhost, std::string_view queue,
                                   std::string_view headers, std::string_view body) {
  SpillMetrics& m = log_.metrics_;
  if (vhost.empty() || queue.empty() || vhost.size() > kVhostBytesMax ||
      queue.size() > kQueueBytesMax)
    return AppendResult::kBadName;
  const uint64_t payload = uint64_t(headers.size()) + body.size();
  const uint64_t total = payload + vhost.size() + queue.size();
  if (payload > log_.options().record_bytes_max || total > arena_bytes_) {
    m.refused_too_large.fetch_add(1, std::memory_order_relaxed);
    return AppendResult::kTooLarge;
  }
  // In flight is bounded by the completion ring's depth, so the spill thread can always post.
  if (in_flight() >= log_.options().producer_ring_depth || ring_.write_available() == 0) {
    m.refused_ring_full.fetch_add(1, std::memory_order_relaxed);
    return AppendResult::kRingFull;
  }
  uint64_t pos = head_;
  const uint64_t off = pos % arena_bytes_;
  if (off + total > arena_bytes_) pos += arena_bytes_ - off;  // records never wrap
  if (pos + total - tail_.load(std::memory_order_acquire) > arena_bytes_) {
    m.refused_arena_full.fetch_add(1, std::memory_order_relaxed);
    return AppendResult::kArenaFull;
  }
  char* p = arena_.get() + pos % arena_bytes_;
  std::memcpy(p, vhost.data(), vhost.size());
  p += vhost.size();
  std::memcpy(p, queue.data(), queue.size());
  p += queue.size();
  if (!headers.empty()) std::memcpy(p, headers.data(), headers.size());
  p += headers.size();
  if (!body.empty()) std::memcpy(p, body.data(), body.size());
  const AppendMsg msg{token,
                      pos,
                      uint32_t(headers.size()),
                      uint32_t(body.size()),
                      uint16_t(vhost.size()),
                      uint16_t(queue.size()),
                      uint32_t(total)};
  if (!ring_.try_push(msg)) {
    m.refused_ring_full.fetch_add(1, std::memory_order_relaxed);
    return AppendResult::kRingFull;
  }
  head_ = pos + total;
  head_seen_.store(head_, std::memory_order_relaxed);
  ++appended_;
  if (batched_wake_) {
    unpublished_ = true;
    return AppendResult::kQueued;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_if_asleep();
  return AppendResult::kQueued;
}

void SpillProducer::wake_if_asleep() {
  // The caller's fence pairs with the one after the spill thread announces it sleeps: either
  // it sees these messages (or this producer past half full) when it looks again, or we see it
  // sleeping here and wake it.
  unpublished_ = false;
  const uint8_t sleeping = log_.sleeping_.load(std::memory_order_relaxed);
  if (sleeping == SpillLog::kIdleSleep || (sleeping == SpillLog::kDiskSleep && past_half())) {
    log_.wake();
  }
}

void SpillProducer::publish() {
  if (!unpublished_) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_if_asleep();
}

bool SpillProducer::arm_notify() {
  waiting_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // The same fence publishes what was appended since (batched wake).
  if (unpublished_) wake_if_asleep();
  if (done_.read_available() > 0) {
    waiting_.store(false, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void SpillProducer::wait(int timeout_ms) {
  if (!arm_notify()) return;
  pollfd pfd{notify_fd_, POLLIN, 0};
  if (::poll(&pfd, 1, timeout_ms) > 0) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = ::read(notify_fd_, &v, sizeof v);
  }
  waiting_.store(false, std::memory_order_relaxed);
}

}  // namespace sluice::queue
