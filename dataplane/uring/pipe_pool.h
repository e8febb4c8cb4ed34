// The splice's pipes of one worker: the pipe each spliced direction holds, the empty pipes of
// ended sessions kept for new ones (saving pipe2, F_SETPIPE_SZ and close), and the pipes grown
// to pipe_bytes_max for directions that stream, within the worker's share of them.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "base/assert.h"

namespace sluice::uring {

// A pipe one direction holds; r < 0 when it holds none.
struct Pipe {
  int r = -1;
  int w = -1;
  uint32_t cap = 0;  // as asked of F_SETPIPE_SZ: pipe_bytes or less, pipe_bytes_max when grown
  bool held() const { return r >= 0; }
};

class PipePool {
 public:
  static constexpr size_t kPooledMax = 1024;  // empty pipes of pipe_bytes kept

  PipePool() = default;
  PipePool(const PipePool&) = delete;
  PipePool& operator=(const PipePool&) = delete;
  ~PipePool() {
    for (Pipe& p : pool_)
      close(p);
    for (Pipe& p : grown_pool_)
      close(p);
  }

  // New pipes get pipe_bytes; at most grown_max of pipe_bytes_max exist at once (0: none is
  // grown), counted in *grown_gauge. Before the first take: the pools never allocate later.
  void configure(uint32_t pipe_bytes, uint32_t pipe_bytes_max, uint32_t grown_max,
                 std::atomic<uint64_t>* grown_gauge) {
    SLUICE_ASSERT(pipe_bytes > 0 && grown_gauge != nullptr);
    pipe_bytes_ = pipe_bytes;
    pipe_bytes_max_ = pipe_bytes_max;
    grown_max_ = pipe_bytes_max > pipe_bytes ? grown_max : 0;
    grown_gauge_ = grown_gauge;
    pool_.reserve(kPooledMax);
    grown_pool_.reserve(grown_max_);
  }

  // A pooled pipe (a grown one first for a direction that streams), else a new one. False,
  // with errno from pipe2, when there is none.
  bool take(Pipe& p, bool bulk) {
    SLUICE_ASSERT(!p.held());
    std::vector<Pipe>& pool = bulk && !grown_pool_.empty() ? grown_pool_ : pool_;
    if (!pool.empty()) {
      p = pool.back();
      pool.pop_back();
      return true;
    }
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    p.r = fds[0];
    p.w = fds[1];
    // Refused (an unprivileged user over fs.pipe-user-pages-soft): the pipe keeps what the
    // kernel gave it, which is then what gets asked of it.
    int cap = fcntl(p.w, F_SETPIPE_SZ, int(pipe_bytes_));
    if (cap < 0) cap = fcntl(p.w, F_GETPIPE_SZ);
    p.cap = cap > 0 ? std::min(uint32_t(cap), pipe_bytes_) : pipe_bytes_;
    return true;
  }

  // Back to its pool when it is empty (bytes_left 0), else closed; p holds none after.
  void give(Pipe& p, uint32_t bytes_left) {
    if (!p.held()) return;
    if (grown(p)) {
      if (bytes_left == 0) {
        grown_pool_.push_back(p);  // at most grown_max_ exist: reserved at configure
      } else {
        close(p);
        count_grown(-1);
      }
    } else if (bytes_left == 0 && pool_.size() < kPooledMax) {
      pool_.push_back(p);
    } else {
      close(p);
    }
    p = Pipe{};
  }

  enum class Grow : uint8_t {
    kGrown,
    kNoRoom,   // every grown pipe is held by a direction
    kRefused,  // F_SETPIPE_SZ failed: errno says why
    kSmaller,  // the kernel gave less than pipe_bytes_max
  };
  // To pipe_bytes_max, keeping what it holds. A grown pipe is not shrunk again: given back, it
  // goes to the grown pool for the next direction that streams.
  Grow grow(Pipe& p) {
    SLUICE_ASSERT(p.held() && !grown(p) && can_grow());
    if (grown_ >= grown_max_) {
      // Every grown pipe is held, or idle in the pool: an idle one gives way.
      if (grown_pool_.empty()) return Grow::kNoRoom;
      close(grown_pool_.back());
      grown_pool_.pop_back();
      count_grown(-1);
    }
    const int cap = fcntl(p.w, F_SETPIPE_SZ, int(pipe_bytes_max_));
    if (cap < 0) return Grow::kRefused;
    if (cap < int(pipe_bytes_max_)) return Grow::kSmaller;
    p.cap = pipe_bytes_max_;
    count_grown(1);
    return Grow::kGrown;
  }

  bool grown(const Pipe& p) const { return p.cap > pipe_bytes_; }
  bool can_grow() const { return grown_max_ != 0; }

  // Closes a pipe that is not given back (the worker's teardown).
  static void close(Pipe& p) {
    if (p.r >= 0) ::close(p.r);
    if (p.w >= 0) ::close(p.w);
    p = Pipe{};
  }

 private:
  void count_grown(int delta) {
    grown_ = uint32_t(int64_t(grown_) + delta);
    grown_gauge_->store(grown_, std::memory_order_relaxed);
  }

  uint32_t pipe_bytes_ = 0;
  uint32_t pipe_bytes_max_ = 0;
  uint32_t grown_max_ = 0;
  uint32_t grown_ = 0;  // grown pipes that exist, held or pooled
  std::atomic<uint64_t>* grown_gauge_ = nullptr;
  std::vector<Pipe> pool_;
  std::vector<Pipe> grown_pool_;
};

}  // namespace sluice::uring
