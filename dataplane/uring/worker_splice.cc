// The spliced phase: bytes move socket -> pipe -> socket, never through user memory. Each
// direction runs poll(readable) -> splice in -> splice out (poll(writable) while the peer's
// buffer is full) -> splice in ...; EOF is passed on as a half-close, an error on either side
// resets both. The splices are splice(2) calls on the worker's thread (SpliceMode::kInline,
// non-blocking, after io_uring's poll said ready) or IORING_OP_SPLICE (kRing: io-wq threads).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/assert.h"
#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {

namespace {

void add(std::atomic<uint64_t>& c, uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

constexpr unsigned kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
// Inline mode: splice rounds per readiness before the direction polls again (fairness between
// sessions of one worker: a fast stream yields after this many pipe-fulls).
constexpr int kPumpRounds = 4;

}  // namespace

void Worker::count_spliced(Session& s, int d, uint64_t n) {
  if (d == 0) {
    s.bytes_in += n;
    add(counters_.bytes_in, n);
  } else {
    s.bytes_out += n;
    add(counters_.bytes_out, n);
  }
}

void Worker::start_splice(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.sending || s.out_sent < s.out_len) {
    // Replies still on their way to the client (its CONNECTED): they go first, and their
    // buffer must stay until the send completes.
    s.splice_when_sent();
    return;
  }
  // Ring mode: each direction keeps its pipe (splices in flight refer to it). Inline mode takes
  // a pipe only while bytes pass (pump()), so an idle spliced session holds none.
  if (options_.splice == EngineOptions::SpliceMode::kRing) {
    for (Dir& d : s.dir) {
      if (!take_pipe(d)) {
        begin_close(slot, true);
        return;
      }
    }
  }
  release_prelude(slot);
  release_out(slot);
  s.state = State::kSpliced;
  add(counters_.spliced, 1);
  add(counters_.splicing, 1);
  arm_poll(slot, 0, false);
  arm_poll(slot, 1, false);
  maybe_park(slot);
}

// Parking: the ring's fixed-file table holds both sockets instead of the descriptor table. The
// two polls were submitted with the descriptors and keep their own references to the sockets,
// so closing the descriptors changes nothing for them; when one completes, unpark() gets both
// descriptors back before pump() runs. A parked session that is closed gets its descriptors
// back first too (a reset needs SO_LINGER on them); without them, emptying its slots closes the
// sockets, with a reset (SO_LINGER is set on them before they are parked).
void Worker::maybe_park(uint32_t slot) {
  if (!parking_.enabled()) return;
  Session& s = sessions_[slot];
  if (s.state != State::kSpliced || s.park != kNone || s.unparking != 0) return;
  if (!s.dir[0].idle || !s.dir[1].idle) return;
  if (!parking_.wanted(global_sessions_->load(std::memory_order_relaxed))) return;
  if (!s.linger_reset) {
    // A socket whose descriptor cannot come back (unpark_failed) is closed by the ring alone,
    // and must reset its peer as every failed session does, not end it with a FIN. A graceful
    // close turns this off again first (finish_close).
    linger l{1, 0};
    setsockopt(s.cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    setsockopt(s.ofd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    s.linger_reset = true;
  }
  int r = 0;
  const uint32_t p = parking_.put(ring_, s.cfd, s.ofd, &r);
  if (p == ParkingTable::kNoPair) {
    if (parking_.failed()) {
      log_(LogLevel::kWarn, "park_failed",
           {{{"error", r < 0 ? std::strerror(-r) : "short update"},
             {"failures", std::to_string(parking_.failures())}}});
    }
    return;
  }
  // The polls must hold their sockets before the descriptors go: if they could not all be
  // submitted (the completion queue overflowing), the session stays as it is.
  io_uring_submit(&ring_);
  if (io_uring_sq_ready(&ring_) != 0) {
    parking_.release(ring_, p);
    return;
  }
  parking_.take(p);
  close(s.cfd);
  close(s.ofd);
  s.cfd = s.ofd = -1;
  s.park = p;
  add(counters_.parks, 1);
  bump(counters_.parked);
}

void Worker::unpark(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.park == kNone || s.unparking != 0 || s.unpark_failed) return;
  for (int side = 0; side < 2; ++side) {
    io_uring_sqe* e = sqe();
    io_uring_prep_rw(kOpFixedFdInstall, e, ParkingTable::slot(s.park, side), nullptr, 0, 0);
    e->flags |= IOSQE_FIXED_FILE;  // install_fd_flags 0: the descriptor is O_CLOEXEC
    io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kInstall, side));
    ++s.inflight;
  }
  s.unparking = 2;
}

void Worker::clear_park(Session& s) {
  if (s.park == kNone) return;
  parking_.give(ring_, s.park);
  s.park = kNone;
  drop(counters_.parked);
}

void Worker::on_install(uint32_t slot, int side, int res) {
  Session& s = sessions_[slot];
  SLUICE_ASSERT(s.unparking > 0);
  --s.unparking;
  if (res >= 0) {
    (side == 0 ? s.cfd : s.ofd) = res;
  } else if (!s.unpark_failed) {
    s.unpark_failed = true;
    add(counters_.unpark_failed, 1);
    if (parking_.failed()) {  // logged once per 1000 failures, as park_failed
      log_(LogLevel::kWarn, "unpark_failed",
           {{{"error", std::strerror(-res)}, {"failures", std::to_string(parking_.failures())}}});
    }
  }
  if (s.unparking > 0) return;
  if (s.state == State::kClosing) {
    // finish_close closes the descriptors and empties the slots.
    if (s.inflight == 0) finish_close(slot);
    return;
  }
  if (s.unpark_failed) {
    // The slots stay until the session is closed: its cancels find the sockets through them.
    add(counters_.resets, 1);
    begin_close(slot, true);
    return;
  }
  clear_park(s);
  add(counters_.unparks, 1);
  const uint8_t wake = s.wake;
  s.wake = 0;
  for (int d = 0; d < 2; ++d) {
    if ((wake & (1u << d)) != 0 && s.state == State::kSpliced) pump(slot, d);
  }
}

bool Worker::take_pipe(Dir& d) {
  if (pipes_.take(d.pipe, d.bulk)) return true;
  log_(LogLevel::kWarn, "pipe_failed", {{{"error", std::strerror(errno)}}});
  return false;
}

void Worker::give_pipe(Dir& d) {
  pipes_.give(d.pipe, d.in_pipe);
  d.in_pipe = 0;
}

void Worker::grow_pipe(Dir& d) {
  if (pipes_.grown(d.pipe) || d.grow_refused || !pipes_.can_grow()) return;
  const PipePool::Grow g = pipes_.grow(d.pipe);
  switch (g) {
    case PipePool::Grow::kGrown:
      d.bulk = true;
      add(counters_.pipes_grown, 1);
      return;
    case PipePool::Grow::kNoRoom:
      return;
    case PipePool::Grow::kRefused:
    case PipePool::Grow::kSmaller:
      d.grow_refused = true;  // not asked again
      log_(LogLevel::kDebug, "pipe_grow_refused",
           {{{"error",
              g == PipePool::Grow::kRefused ? std::strerror(errno) : "smaller than asked"}}});
      return;
  }
}

void Worker::arm_poll(uint32_t slot, int d, bool out) {
  Session& s = sessions_[slot];
  const int fd = out ? (d == 0 ? s.ofd : s.cfd) : (d == 0 ? s.cfd : s.ofd);
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, fd, out ? POLLOUT : POLLIN);
  io_uring_sqe_set_data64(e, tag(slot, s.gen, out ? Op::kPollOut : Op::kPollIn, d));
  ++s.inflight;
  s.dir[d].idle = !out && !s.dir[d].pipe.held();
  if (!out && options_.splice == EngineOptions::SpliceMode::kRing) {
    // Readable -> splice in, as one linked submission: the poll completes in the ring's own
    // task work and the splice follows without another trip through the loop.
    e->flags |= IOSQE_IO_LINK;
    splice_in(slot, d);
  }
}

void Worker::splice_in(uint32_t slot, int d) {
  Session& s = sessions_[slot];
  Dir& dir = s.dir[d];
  const int src = d == 0 ? s.cfd : s.ofd;
  io_uring_sqe* e = sqe();
  io_uring_prep_splice(e, src, -1, dir.pipe.w, -1, dir.pipe.cap, kSpliceFlags);
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kSpliceIn, d));
  ++s.inflight;
}

void Worker::splice_out(uint32_t slot, int d) {
  Session& s = sessions_[slot];
  Dir& dir = s.dir[d];
  const int dst = d == 0 ? s.ofd : s.cfd;
  io_uring_sqe* e = sqe();
  io_uring_prep_splice(e, dir.pipe.r, -1, dst, -1, dir.in_pipe, kSpliceFlags);
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kSpliceOut, d));
  ++s.inflight;
}

void Worker::on_splice_in(uint32_t slot, int d, int res) {
  Session& s = sessions_[slot];
  Dir& dir = s.dir[d];
  if (res > 0) {
    dir.in_pipe += uint32_t(res);
    count_spliced(s, d, uint64_t(res));
    splice_out(slot, d);
    return;
  }
  if (res == 0) {
    dir.eof = true;
    finish_dir(slot, d);
    return;
  }
  if (res == -EAGAIN || res == -EINTR || res == -ECANCELED) {
    // Not readable after all, or the poll before it failed (the link was cut): poll again.
    arm_poll(slot, d, false);
    return;
  }
  // ECONNRESET and friends: the reset reaches the other side too.
  add(counters_.resets, 1);
  begin_close(slot, true);
}

void Worker::on_splice_out(uint32_t slot, int d, int res) {
  Session& s = sessions_[slot];
  Dir& dir = s.dir[d];
  if (res > 0) {
    SLUICE_ASSERT(uint32_t(res) <= dir.in_pipe);
    dir.in_pipe -= uint32_t(res);
    arm_poll(slot, d, dir.in_pipe > 0);
    return;
  }
  if (res == -EAGAIN || res == -EINTR || res == 0) {
    arm_poll(slot, d, true);
    return;
  }
  add(counters_.resets, 1);
  begin_close(slot, true);
}

void Worker::pump(uint32_t slot, int d) {
  Session& s = sessions_[slot];
  Dir& dir = s.dir[d];
  const int src = d == 0 ? s.cfd : s.ofd;
  const int dst = d == 0 ? s.ofd : s.cfd;
  if (!dir.pipe.held() && !take_pipe(dir)) {
    begin_close(slot, true);
    return;
  }
  bool drained = false;
  for (int round = 0; round < kPumpRounds; ++round) {
    if (dir.in_pipe > 0) {
      const ssize_t m = splice(dir.pipe.r, nullptr, dst, nullptr, dir.in_pipe, kSpliceFlags);
      if (m > 0) dir.in_pipe -= uint32_t(m);
      if (m < 0 && errno != EAGAIN && errno != EINTR) {
        add(counters_.resets, 1);
        begin_close(slot, true);
        return;
      }
      if (dir.in_pipe > 0) {  // the peer is full: wait until it can take more
        arm_poll(slot, d, true);
        return;
      }
      if (dir.eof) {
        finish_dir(slot, d);
        return;
      }
      if (drained) {
        // The last read took less than it could: the socket is most likely empty. Poll rather
        // than pay a read that says EAGAIN (one syscall less per message on a quiet stream).
        give_pipe(dir);
        arm_poll(slot, d, false);
        maybe_park(slot);
        return;
      }
    }
    const ssize_t n = splice(src, nullptr, dir.pipe.w, nullptr, dir.pipe.cap, kSpliceFlags);
    if (n > 0) {
      drained = uint32_t(n) < dir.pipe.cap;
      dir.in_pipe += uint32_t(n);
      count_spliced(s, d, uint64_t(n));
      // A stream: a pipe-full at each read. Larger splices move it with fewer calls per byte.
      if (!drained) grow_pipe(dir);
      continue;
    }
    if (n == 0) {
      dir.eof = true;
      finish_dir(slot, d);
      return;
    }
    if (errno == EAGAIN || errno == EINTR) {
      give_pipe(dir);  // empty (flushed above): idle directions hold no pipe
      arm_poll(slot, d, false);
      maybe_park(slot);
      return;
    }
    add(counters_.resets, 1);
    begin_close(slot, true);
    return;
  }
  // A busy stream: let the worker's other sessions run; the poll completes at once if there is
  // more (after the pipe is flushed).
  arm_poll(slot, d, dir.in_pipe > 0);
}

void Worker::finish_dir(uint32_t slot, int d) {
  Session& s = sessions_[slot];
  s.dir[d].done = true;
  if (options_.splice == EngineOptions::SpliceMode::kInline) give_pipe(s.dir[d]);
  // Half-close passes on: the peer reads EOF, the other direction keeps flowing.
  shutdown(d == 0 ? s.ofd : s.cfd, SHUT_WR);
  if (s.dir[0].done && s.dir[1].done) begin_close(slot, false);
}

}  // namespace sluice::uring::detail
