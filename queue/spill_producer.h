// A worker's end of the spill log: appends serialised into the worker's own byte arena and
// announced on its own ring; completions come back in append order on a second ring. No
// allocation, lock or syscall per append (one eventfd write only when the spill thread sleeps).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "queue/spill_types.h"
#include "queue/spsc_ring.h"

namespace sluice::queue {

class SpillLog;
class LogState;

// The message a producer pushes for one append; the record bytes wait in the producer's arena.
struct AppendMsg {
  uint64_t token;
  uint64_t arena_pos;  // monotonic position of the first byte (vhost, queue, headers, body)
  uint32_t headers_len;
  uint32_t body_len;
  uint16_t vhost_len;
  uint16_t queue_len;
  uint32_t total;  // vhost + queue + headers + body
};

class SpillProducer {
 public:
  SpillProducer(const SpillProducer&) = delete;
  SpillProducer& operator=(const SpillProducer&) = delete;
  ~SpillProducer();

  // Owner thread only. kQueued: exactly one Completion for `token` follows, in append order.
  // Any other result is an immediate, counted refusal and nothing follows.
  AppendResult append(uint64_t token, std::string_view vhost, std::string_view queue,
                      std::string_view headers, std::string_view body);

  // Owner thread only. Batched, append() leaves waking a sleeping spill thread to the next
  // publish() or arm_notify(), which the owner must call before it blocks: one full fence per
  // pass of the owner's loop instead of one per record (the fence waits for the record's bytes
  // to leave the store buffer, which showed as 5% of a spilling worker's time). Off by default.
  void set_batched_wake(bool on) { batched_wake_ = on; }
  // Owner thread only: wakes the spill thread if it sleeps and has a use for the records
  // appended since the last publish (none in flight: nothing to do, no fence).
  void publish();

  // Owner thread only: fn(const Completion&) for at most `max` completions, in append order.
  template <typename F>
  size_t poll(F&& fn, size_t max) {
    const size_t n = done_.pop_some(fn, max);
    completed_ += n;
    return n;
  }
  uint64_t in_flight() const { return appended_ - completed_; }

  // Sleeping until completions arrive: the owner calls arm_notify(); when it returns true the
  // spill thread will make notify_fd() (an eventfd) readable after the next completion, so the
  // owner may block on it (or on an io_uring read of it). False: completions are already there.
  bool arm_notify();
  int notify_fd() const { return notify_fd_; }
  // Convenience for threads with nothing else to do: arm, then wait up to `timeout_ms`.
  void wait(int timeout_ms);

 private:
  friend class SpillLog;
  friend class LogState;
  SpillProducer(SpillLog& log, uint32_t index, uint32_t ring_depth, uint32_t arena_bytes);

  SpillLog& log_;
  const uint32_t index_;
  SpscRing<AppendMsg> ring_;
  const size_t ring_depth_;
  SpscRing<Completion> done_;
  const uint64_t arena_bytes_;
  std::unique_ptr<char[]> arena_;
  uint64_t head_ = 0;       // owner: next free arena position
  uint64_t appended_ = 0;   // owner
  uint64_t completed_ = 0;  // owner
  // Owner: records appended but not yet published (batched wake only).
  bool batched_wake_ = false;
  bool unpublished_ = false;
  int notify_fd_ = -1;
  // Either thread: half the ring or half the arena holds records the spill thread has not
  // taken (while a batch is written, only then is it worth waking for them).
  bool past_half() const;
  // Owner: head_ as published for past_half() on the spill thread.
  std::atomic<uint64_t> head_seen_{0};
  // Spill thread: arena bytes before this position are free again.
  alignas(64) std::atomic<uint64_t> tail_{0};
  // Owner, after a full fence that follows the records' publication: wakes the spill thread
  // if its sleep is one these records end.
  void wake_if_asleep();
  // Owner sets it before sleeping; the spill thread clears it and writes notify_fd_.
  alignas(64) std::atomic<bool> waiting_{false};
};

}  // namespace sluice::queue
