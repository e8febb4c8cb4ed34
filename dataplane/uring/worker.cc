// The worker's loop: accept, dispatch completions, close sessions, deadlines, stop. Its set-up
// and tear-down are in worker_setup.cc, the sessions view in worker_snapshot.cc.
#include "dataplane/uring/worker.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "base/assert.h"
#include "dataplane/session/builder.h"

namespace sluice::uring::detail {

Nanos Worker::now() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

io_uring_sqe* Worker::sqe() {
  io_uring_sqe* e = io_uring_get_sqe(&ring_);
  if (e == nullptr) {
    io_uring_submit(&ring_);
    e = io_uring_get_sqe(&ring_);
  }
  SLUICE_ASSERT(e != nullptr);
  return e;
}

uint64_t Worker::tag(uint32_t slot, uint32_t gen, Op op, int side) {
  SLUICE_ASSERT(uint64_t(op) <= kOpMask && (side == 0 || side == 1));
  return (uint64_t(slot) << 32) | (uint64_t(gen & kEpochMask) << 8) | (uint64_t(side) << 7) |
         uint64_t(op);
}

void Worker::arm_accept() {
  if (accept_armed_ || stopping_) return;
  if (accept_pause_until_ != 0 && now() < accept_pause_until_) return;
  io_uring_sqe* e = sqe();
  io_uring_prep_multishot_accept(e, listen_fd_.get(), nullptr, nullptr,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
  io_uring_sqe_set_data64(e, tag(kNone, 0, Op::kAccept));
  accept_armed_ = true;
}

void Worker::arm_wake() {
  io_uring_sqe* e = sqe();
  io_uring_prep_read(e, wake_fd_.get(), &wake_value_, sizeof wake_value_, 0);
  io_uring_sqe_set_data64(e, tag(kNone, 0, Op::kWake));
}

void Worker::arm_spill_notify() {
  if (spill_notify_armed_ || parts_.spill == nullptr) return;
  io_uring_sqe* e = sqe();
  io_uring_prep_read(e, parts_.spill->notify_fd(), &spill_notify_value_, sizeof spill_notify_value_,
                     0);
  io_uring_sqe_set_data64(e, tag(kNone, 0, Op::kSpillNotify));
  spill_notify_armed_ = true;
}

// Armed for the worker's life when its spill logins may be checked on another thread.
void Worker::arm_login_notify() {
  io_uring_sqe* e = sqe();
  io_uring_prep_read(e, parts_.login_answers->notify_fd(), &login_notify_value_,
                     sizeof login_notify_value_, 0);
  io_uring_sqe_set_data64(e, tag(kNone, 0, Op::kLoginNotify));
}

void Worker::arm_recv_client(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.recv_armed || s.state == State::kClosing) return;
  io_uring_sqe* e = sqe();
  io_uring_prep_recv(e, s.cfd, nullptr, options_.recv_buffer_bytes, 0);
  e->flags |= IOSQE_BUFFER_SELECT;
  e->buf_group = 0;
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kRecvClient));
  s.recv_armed = true;
  ++s.inflight;
}

void Worker::recycle(uint16_t bid) {
  io_uring_buf_ring_add(buf_ring_, recv_bufs_.at(size_t(bid) * options_.recv_buffer_bytes),
                        options_.recv_buffer_bytes, bid, recv_mask_, 0);
  io_uring_buf_ring_advance(buf_ring_, 1);
}

bool Worker::queue_out(uint32_t slot, std::string_view bytes) {
  Session& s = sessions_[slot];
  if (s.out_slot == kNone) return false;
  char* out = outs_.bytes(s.out_slot);
  if (!s.sending && s.out_sent == s.out_len) s.out_sent = s.out_len = 0;
  if (!s.sending && s.out_sent > 0) {
    std::memmove(out, out + s.out_sent, s.out_len - s.out_sent);
    s.out_len -= s.out_sent;
    s.out_sent = 0;
  }
  if (bytes.size() > kOutBytes - s.out_len) return false;
  std::memcpy(out + s.out_len, bytes.data(), bytes.size());
  s.out_len += uint32_t(bytes.size());
  flush_out(slot);
  return true;
}

void Worker::send_then_close(uint32_t slot, std::string_view bytes) {
  Session& s = sessions_[slot];
  s.after_send = AfterSend::kClose;
  if (!bytes.empty() && !queue_out(slot, bytes)) {
    begin_close(slot, false);
    return;
  }
  // Nothing (more) to send: close now; else on_send_client closes once the bytes are out.
  if (!s.sending && s.out_sent == s.out_len) begin_close(slot, false);
}

void Worker::flush_out(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.sending || s.out_sent == s.out_len || s.out_slot == kNone) return;
  io_uring_sqe* e = sqe();
  s.out_inflight = s.out_len - s.out_sent;
  io_uring_prep_send(e, s.cfd, outs_.bytes(s.out_slot) + s.out_sent, s.out_inflight, MSG_NOSIGNAL);
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kSendClient));
  s.sending = true;
  ++s.inflight;
}

void Worker::on_send_client(uint32_t slot, int res) {
  Session& s = sessions_[slot];
  s.sending = false;
  if (s.state == State::kClosing) return;
  if (res < 0 && res != -EAGAIN && res != -EINTR) {
    begin_close(slot, false);
    return;
  }
  if (res > 0) {
    s.out_sent += uint32_t(res);
    s.last_client_send = now();
    if (s.spill_slot == kNone) s.bytes_out += uint64_t(res);
  }
  if (s.out_sent < s.out_len) {
    flush_out(slot);
    return;
  }
  s.out_sent = s.out_len = 0;
  if (s.closing_after_send()) {
    begin_close(slot, false);
    return;
  }
  if (s.after_send == AfterSend::kSplice) {
    s.after_send = AfterSend::kNothing;
    start_splice(slot);
    return;
  }
  if (s.state == State::kSpill) drive_spill(slot);
}

void Worker::on_accept(int fd) {
  if (stopping_) {
    close(fd);
    return;
  }
  const uint32_t limit = live_->sessions_max.load(std::memory_order_relaxed);
  if (global_sessions_->fetch_add(1, std::memory_order_relaxed) >= limit) {
    global_sessions_->fetch_sub(1, std::memory_order_relaxed);
    refuse_at_accept(fd, counters_.refused_sessions_max, "too many sessions");
    return;
  }
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len);
  auto unglobal = [&] { global_sessions_->fetch_sub(1, std::memory_order_relaxed); };
  const uint32_t prelude_max =
      std::min(prelude_max_, share_of(live_->prelude_sessions_max.load(std::memory_order_relaxed)));
  if (preludes_.used() >= prelude_max || free_sessions_.empty()) {
    unglobal();
    refuse_at_accept(fd, counters_.refused_prelude_max, "too many sessions in prelude");
    return;
  }
  const uint32_t per_source =
      share_of(live_->sessions_per_source_max.load(std::memory_order_relaxed));
  if (sources_.add(peer.sin_addr.s_addr, per_source) == 0) {
    unglobal();
    refuse_at_accept(fd, counters_.refused_per_source, "too many sessions from this address");
    return;
  }
  const uint32_t slot = free_sessions_.back();
  free_sessions_.pop_back();
  Session& s = sessions_[slot];
  const uint32_t gen = s.gen;
  s = Session{};
  s.gen = gen;
  s.state = State::kPrelude;
  s.cfd = fd;
  s.src_ip = peer.sin_addr.s_addr;
  s.src_port = ntohs(peer.sin_port);
  s.id = (uint64_t(index_) << 48) | ++next_id_;
  s.started = now();
  s.last_client_send = s.last_client_recv = s.started;
  s.prelude_slot = preludes_.take();
  s.out_slot = outs_.take();
  SLUICE_ASSERT(s.prelude_slot != kNone && s.out_slot != kNone);
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  if (!ps.prelude_headers) {
    ps.prelude_headers =
        std::make_unique<session::HeaderTable>(config_.frame_limits.header_count_max);
    bump(counters_.header_tables);
  }
  ps.prelude.emplace(config_, std::span<char>(ps.buf, config_.prelude_bytes_max), s.started,
                     *ps.prelude_headers);
  ps.carry_len = 0;
  ps.greet_len = 0;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  bump(counters_.accepted);
  bump(counters_.active);
  bump(counters_.prelude);
  arm_recv_client(slot);
}

void Worker::refuse_at_accept(int fd, std::atomic<uint64_t>& counter, std::string_view message) {
  bump(counter);
  // The client has not spoken yet: a STOMP 1.0 ERROR any version can read, sent on the fresh
  // socket (its buffer is empty, so the send does not block), then close.
  char buf[512];
  auto frame = session::build_error(std::span<char>(buf, sizeof buf), session::Version::k1_0,
                                    session::ErrorFrame{message, "retry later", {}, {}});
  // Best effort: a client that cannot take the frame now only misses the reason.
  if (frame) (void)!send(fd, frame->data(), frame->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

void Worker::release_prelude(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.prelude_slot == kNone) return;
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  ps.prelude.reset();
  ps.greeting.reset();
  preludes_.give(s.prelude_slot);
  s.prelude_slot = kNone;
  drop(counters_.prelude);
}

void Worker::release_out(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.out_slot == kNone) return;
  outs_.give(s.out_slot);
  s.out_slot = kNone;
  s.out_len = s.out_sent = 0;
}

void Worker::release_spill(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.spill_slot == kNone) return;
  SpillSlot& ss = spills_.object(s.spill_slot);
  ss.spill.reset();
  ss.held = false;
  ss.in_len = ss.in_off = 0;
  spills_.give(s.spill_slot);
  s.spill_slot = kNone;
  drop(counters_.spilling);
}

void Worker::begin_close(uint32_t slot, bool reset) {
  Session& s = sessions_[slot];
  if (s.state == State::kClosing) return;
  if (s.state == State::kSpliced) drop(counters_.splicing);
  s.state = State::kClosing;
  s.reset = s.reset || reset;
  if (s.inflight == 0) {
    finish_close(slot);
    return;
  }
  if (s.park != kNone) {
    // Parked: the descriptors come back first (finish_close may need them for the reset), then
    // the cancels find the sockets through the slots.
    unpark(slot);
    for (uint32_t side = 0; side < 2; ++side) {
      io_uring_sqe* e = sqe();
      io_uring_prep_cancel_fd(e, ParkingTable::slot(s.park, int(side)),
                              IORING_ASYNC_CANCEL_ALL | IORING_ASYNC_CANCEL_FD_FIXED);
      io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kCancel));
      ++s.inflight;
    }
    return;
  }
  // Cancel whatever waits on the session's sockets; splices in flight finish by themselves
  // (every descriptor is non-blocking).
  for (int fd : {s.cfd, s.ofd}) {
    if (fd < 0) continue;
    io_uring_sqe* e = sqe();
    io_uring_prep_cancel_fd(e, fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kCancel));
    ++s.inflight;
  }
  if (s.reset) {
    // A reset is passed on as a reset: no FIN first (shutdown would send one).
    linger l{1, 0};
    if (s.cfd >= 0) setsockopt(s.cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    if (s.ofd >= 0) setsockopt(s.ofd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  } else {
    if (s.cfd >= 0) shutdown(s.cfd, SHUT_RDWR);
    if (s.ofd >= 0) shutdown(s.ofd, SHUT_RDWR);
  }
}

void Worker::finish_close(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.reset) {
    linger l{1, 0};
    if (s.cfd >= 0) setsockopt(s.cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    if (s.ofd >= 0) setsockopt(s.ofd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  } else if (s.linger_reset) {
    // Parked once: a graceful close ends with a FIN after what is still queued.
    linger l{0, 0};
    if (s.cfd >= 0) setsockopt(s.cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    if (s.ofd >= 0) setsockopt(s.ofd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  if (s.cfd >= 0) close(s.cfd);
  if (s.ofd >= 0) close(s.ofd);
  clear_park(s);  // a parked session whose descriptors did not come back: its sockets close here
  for (Dir& d : s.dir) {
    // An empty pipe is as good as new; one that still holds bytes is closed with them (asked
    // of the kernel: a splice that completed while the session was closing is not counted).
    int left = -1;
    if (d.pipe.held()) {
      d.in_pipe = ioctl(d.pipe.r, FIONREAD, &left) == 0 ? uint32_t(left) : 1;  // unknown: not empty
      give_pipe(d);
    }
    d = Dir{};
  }
  s.cfd = s.ofd = -1;
  s.unpark_failed = false;
  s.linger_reset = false;
  s.wake = 0;
  release_prelude(slot);
  release_out(slot);
  release_spill(slot);
  sources_.remove(s.src_ip);
  global_sessions_->fetch_sub(1, std::memory_order_relaxed);
  bump(counters_.closed);
  drop(counters_.active);
  s.state = State::kFree;
  s.gen = (s.gen + 1) & 0xFFFFFF;
  free_sessions_.push_back(slot);
}

// The completions of the worker's own operations (the listener's accept, the wake-up, the spill
// thread's notification); false for a session's.
inline bool Worker::on_worker_cqe(Op op, int res, uint32_t flags) {
  switch (op) {
    case Op::kAccept:
      if (!(flags & IORING_CQE_F_MORE)) accept_armed_ = false;
      if (res >= 0) {
        on_accept(res);
      } else if (res != -ECANCELED && res != -EINVAL && res != -EBADF) {
        // EMFILE, ENFILE, ENOBUFS: accepting pauses for a scan interval (pending connections
        // wait in the backlog); logged once per 1000 failures.
        accept_pause_until_ = now() + kScanInterval;
        if (accept_errors_++ % 1000 == 0) {
          const std::string count = std::to_string(accept_errors_);
          log_(LogLevel::kWarn, "accept_failed",
               {{{"error", std::strerror(-res)}, {"failures", count}}});
        }
      }
      return true;
    case Op::kWake:
      arm_wake();
      return true;
    case Op::kSpillNotify:
      spill_notify_armed_ = false;
      return true;
    case Op::kLoginNotify:
      // The answers are taken in loop_once(); this read only wakes the loop. Should the read
      // fail (never for an eventfd), the loop still takes them, at most kWaitMax apart.
      if (res >= 0) {
        arm_login_notify();
      } else {
        log_(LogLevel::kError, "login_notify_failed", {{{"error", std::strerror(-res)}}});
      }
      return true;
    default:
      return false;
  }
}

// A completion of a live session's operation, by its op: the session's own handlers.
inline void Worker::on_session_cqe(uint32_t slot, Op op, int res, uint32_t flags, uint64_t data) {
  Session& s = sessions_[slot];
  switch (op) {
    case Op::kRecvClient:
      on_recv_client(slot, res, flags);
      break;
    case Op::kSendClient:
      on_send_client(slot, res);
      break;
    case Op::kConnect:
      on_connect(slot, res);
      break;
    case Op::kConnectTimeout:
    case Op::kCancel:
      break;
    case Op::kSendOwner:
      if (epoch_of(data) == (s.owner_epoch & kEpochMask)) on_send_owner(slot, res);
      break;
    case Op::kRecvOwner:
      if (epoch_of(data) == (s.owner_epoch & kEpochMask)) on_recv_owner(slot, res);
      break;
    case Op::kPollHeld:
      on_poll_held(slot, res);
      break;
    case Op::kPollIn:
      if (res < 0) {
        begin_close(slot, true);
      } else if (s.park != kNone) {
        s.wake = uint8_t(s.wake | (1u << side_of(data)));
        unpark(slot);
      } else if (options_.splice == EngineOptions::SpliceMode::kInline) {
        pump(slot, side_of(data));
      }  // else the linked splice in follows
      break;
    case Op::kPollOut:
      if (res < 0) {
        begin_close(slot, true);
        break;
      }
      if (options_.splice == EngineOptions::SpliceMode::kInline) {
        pump(slot, side_of(data));
      } else {
        splice_out(slot, side_of(data));
      }
      break;
    case Op::kSpliceIn:
      on_splice_in(slot, side_of(data), res);
      break;
    case Op::kSpliceOut:
      on_splice_out(slot, side_of(data), res);
      break;
    default:
      break;
  }
}

void Worker::on_cqe(const io_uring_cqe* cqe) {
  const uint64_t data = io_uring_cqe_get_data64(cqe);
  const Op op = op_of(data);
  const uint32_t slot = uint32_t(data >> 32);
  const int res = cqe->res;
  if (on_worker_cqe(op, res, cqe->flags)) return;
  if (slot == kNone) return;  // the listener's cancel
  Session& s = sessions_[slot];
  SLUICE_ASSERT(s.inflight > 0);
  --s.inflight;
  if (op == Op::kRecvClient) s.recv_armed = false;
  if (op == Op::kPollIn) s.dir[side_of(data)].idle = false;
  if (op == Op::kInstall) {
    on_install(slot, side_of(data), res);  // closing or not: it holds a descriptor
    return;
  }
  if (s.state == State::kClosing) {
    if (op == Op::kRecvClient && (cqe->flags & IORING_CQE_F_BUFFER)) {
      recycle(uint16_t(cqe->flags >> IORING_CQE_BUFFER_SHIFT));
    }
    if (op == Op::kSendClient) s.sending = false;
    if (s.inflight == 0) finish_close(slot);
    return;
  }
  on_session_cqe(slot, op, res, cqe->flags, data);
}

void Worker::scan(Nanos t) {
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    Session& s = sessions_[i];
    if (s.state == State::kFree || s.state == State::kSpliced || s.state == State::kClosing) {
      continue;
    }
    heart_beats(i, t);
    if (s.closing_after_send()) continue;
    if (s.state == State::kPrelude && s.prelude_slot != kNone) {
      PreludeSlot& ps = preludes_.object(s.prelude_slot);
      if (t >= ps.prelude->deadline()) {
        session::PreludeEvent ev = ps.prelude->on_time(t);
        if (ev.kind == session::PreludeEvent::Kind::kClose) {
          bump(counters_.prelude_end[size_t(ev.end)]);
          log_session_end(i, session::prelude_end_name(ev.end), {});
          send_then_close(i, ev.to_client);
        }
      }
    } else if (s.state == State::kLogin && s.owner_deadline != 0 && t >= s.owner_deadline) {
      // The node took the connection but did not answer the CONNECT: nothing happened there
      // that matters, so the gateway answers (the owner checks the login when it binds).
      bump(counters_.owner_timeout);
      bump(counters_.login_failed);
      parts_.router->connect_failed(s.node);
      abandon_login(i);
    } else if ((s.state == State::kReplay || s.state == State::kGreeting) &&
               t >= s.owner_deadline && !s.closing_after_send()) {
      // The owner took the connection but did not answer the replay in time. The replay may
      // have reached it, so the session cannot fall back to the spill log (that could deliver
      // a SEND twice): the client gets an ERROR and retries; the node's health hears of it.
      bump(counters_.owner_timeout);
      parts_.router->connect_failed(s.node);
      log_session_end(i, "owner_timeout", {});
      close_with_error(i, "owner did not answer",
                       "the queue's owner accepted the connection but did not answer CONNECT "
                       "within connect_timeout_ms; retry later");
    } else if (s.state == State::kSpill && !s.end_requested && s.spill_slot != kNone) {
      SpillSlot& ss = spills_.object(s.spill_slot);
      session::QueueKey key{{ss.vhost, ss.vhost_len}, {ss.queue, ss.queue_len}, false};
      if (parts_.router->owner_up(key)) {
        s.end_requested = true;
        ss.spill->request_end();
        drive_spill(i);
      }
    }
  }
}

void Worker::begin_stop() {
  stopping_ = true;
  stop_deadline_ =
      now() + Nanos(stop_grace_ms_.load(std::memory_order_relaxed)) * session::kNanosPerMilli;
  if (accept_armed_) {
    io_uring_sqe* e = sqe();
    io_uring_prep_cancel_fd(e, listen_fd_.get(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(e, tag(kNone, 0, Op::kCancel));
    io_uring_submit(&ring_);
  }
  // New connections are refused from now on.
  listen_fd_.reset();
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    Session& s = sessions_[i];
    if (s.state == State::kPrelude || s.state == State::kLogin) {
      bump(counters_.refused_stopping);
      close_with_error(i, "gateway stopping", "the gateway is shutting down; reconnect");
    } else if (s.state == State::kSpill && !s.end_requested) {
      s.end_requested = true;
      spills_.object(s.spill_slot).spill->request_end();
      drive_spill(i);
    }
  }
}

void Worker::loop_once() {
  arm_accept();
  if (parts_.spill != nullptr && parts_.spill->in_flight() > 0) arm_spill_notify();
  Nanos wait = kWaitMax;
  if (parts_.spill != nullptr && parts_.spill->in_flight() > 0 && !parts_.spill->arm_notify()) {
    wait = 0;  // completions are already there
  }
  if (!recv_retry_.empty()) wait = std::min<Nanos>(wait, session::kNanosPerMilli);
  __kernel_timespec ts{wait / 1'000'000'000, wait % 1'000'000'000};
  io_uring_cqe* cqe = nullptr;
  const int r = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  if (r < 0 && r != -ETIME && r != -EINTR) {
    // EBUSY (completions not yet reaped) or EAGAIN (the kernel short of memory): the
    // completions below are reaped and the next pass submits what is left. Logged once per
    // 1000 failures, as accept's.
    if (submit_errors_++ % 1000 == 0) {
      const std::string count = std::to_string(submit_errors_);
      log_(LogLevel::kWarn, "ring_submit_failed",
           {{{"error", std::strerror(-r)}, {"failures", count}}});
    }
  }
  unsigned head;
  unsigned n = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    on_cqe(cqe);
    ++n;
  }
  io_uring_cq_advance(&ring_, n);

  parts_.router->poll();
  poll_spill();
  if (parts_.login_answers != nullptr) poll_login_answers();
  if (!recv_retry_.empty()) {
    std::vector<uint32_t> retry;
    retry.swap(recv_retry_);
    for (uint32_t slot : retry)
      if (sessions_[slot].state == State::kPrelude || sessions_[slot].state == State::kSpill) {
        arm_recv_client(slot);
      }
  }
  const Nanos t = now();
  if (t >= next_scan_) {
    next_scan_ = t + kScanInterval;
    scan(t);
  }
  if (snapshot_requested_.load(std::memory_order_acquire) != snapshot_done_) fill_snapshot();
  if (!stopping_ && stop_requested_.load(std::memory_order_acquire)) begin_stop();
  if (stopping_ && t >= stop_deadline_) {
    for (uint32_t i = 0; i < sessions_.size(); ++i)
      if (sessions_[i].state != State::kFree) begin_close(i, false);
  }
}

void Worker::run() {
  // liburing 2.3 declares io_uring_enable_rings() but its library does not export it.
  if (syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) <
      0) {
    log_(LogLevel::kError, "io_uring_enable_failed", {{{"error", std::strerror(errno)}}});
    return;
  }
  arm_wake();
  if (parts_.login_answers != nullptr && parts_.login_answers->notify_fd() >= 0) {
    arm_login_notify();
  }
  next_scan_ = now() + kScanInterval;
  while (true) {
    loop_once();
    if (stopping_ && counters_.active.load(std::memory_order_relaxed) == 0 &&
        (parts_.spill == nullptr || parts_.spill->in_flight() == 0)) {
      break;
    }
  }
  // Take what is still in flight (cancels, the listener's accept) before the ring goes.
  io_uring_submit(&ring_);
  if (snapshot_requested_.load() != snapshot_done_) fill_snapshot();
}

}  // namespace sluice::uring::detail
