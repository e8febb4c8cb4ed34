// From the first byte to the owner's CONNECTED: the prelude, routing, the connect with its
// linked timeout, the replay and the owner's first frame (DESIGN section 3).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/assert.h"
#include "dataplane/session/builder.h"
#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

void Worker::on_recv_client(uint32_t slot, int res, uint32_t flags) {
  Session& s = sessions_[slot];
  if (res == -ENOBUFS) {
    recv_retry_.push_back(slot);
    return;
  }
  if (res <= 0) {
    // The client went away (EOF or error) before or while being served here.
    if (s.state == State::kPrelude) bump(counters_.prelude_end[0]);
    begin_close(slot, res < 0);
    return;
  }
  s.last_client_recv = now();
  SLUICE_ASSERT(flags & IORING_CQE_F_BUFFER);
  const uint16_t bid = uint16_t(flags >> IORING_CQE_BUFFER_SHIFT);
  std::string_view bytes(recv_bufs_.at(size_t(bid) * options_.recv_buffer_bytes), size_t(res));
  if (s.state == State::kPrelude) {
    feed_prelude(slot, bytes);
    recycle(bid);
    if (s.state == State::kPrelude && !s.closing_after_send()) arm_recv_client(slot);
  } else if (s.state == State::kSpill) {
    on_recv_spill(slot, bytes);
    recycle(bid);
  } else {
    recycle(bid);
  }
}

void Worker::feed_prelude(uint32_t slot, std::string_view bytes) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  const size_t taken = ps.prelude->feed(bytes, now());
  if (taken < bytes.size()) {
    // The prelude buffer is full: what is left belongs to the stream after a bind (or is
    // dropped with the session when the prelude ends over its limit).
    std::memcpy(ps.carry, bytes.data() + taken, bytes.size() - taken);
    ps.carry_len = uint32_t(bytes.size() - taken);
  }
  drive_prelude(slot);
}

void Worker::drive_prelude(uint32_t slot) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  while (true) {
    session::PreludeEvent ev = ps.prelude->next();
    switch (ev.kind) {
      case session::PreludeEvent::Kind::kNeedMore:
        return;
      case session::PreludeEvent::Kind::kReply: {
        if (!queue_out(slot, ev.to_client)) {
          begin_close(slot, false);
          return;
        }
        // The first reply is the CONNECTED: the heart-beats it agreed to apply from now on.
        const session::HeartBeatIntervals hb = ps.prelude->heart_beat_intervals();
        s.hb_to_client_ms = hb.server_to_client_ms;
        s.hb_from_client_ms = hb.client_to_server_ms;
        break;
      }
      case session::PreludeEvent::Kind::kClose:
        bump(counters_.prelude_end[size_t(ev.end)]);
        if (ev.end != session::PreludeEnd::kDisconnect) {
          log_session_end(slot, session::prelude_end_name(ev.end), {});
        }
        send_then_close(slot, ev.to_client);
        return;
      case session::PreludeEvent::Kind::kLogin:
        check_login(slot);
        if (s.state != State::kPrelude) return;  // a node answers; drive_prelude follows
        break;
      case session::PreludeEvent::Kind::kBind:
        resolve(slot);
        return;
    }
  }
}

void Worker::resolve(uint32_t slot) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  const session::QueueKey& key = ps.prelude->key();
  // Kept for `sluicectl sessions`, cut to fit.
  s.vhost_len = uint8_t(std::min<size_t>(key.vhost.size(), 20));
  s.queue_len = uint8_t(std::min<size_t>(key.queue.size(), sizeof s.key - s.vhost_len));
  std::memcpy(s.key, key.vhost.data(), s.vhost_len);
  std::memcpy(s.key + s.vhost_len, key.queue.data(), s.queue_len);

  if (options_.spill_only) {
    start_spill(slot);
    return;
  }
  const session::Route d = parts_.router->route(key, session_hash(s));
  if (s.owner_conn == OwnerConn::kHeld &&
      !(d.kind == session::Route::Kind::kOwner && d.node == s.node))
    drop_held(slot);
  switch (d.kind) {
    case session::Route::Kind::kOwner:
      s.placement_pending = d.placement_pending;
      if (s.owner_conn == OwnerConn::kHeld) {
        keep_held(slot);
      } else {
        connect_owner(slot, d, State::kConnecting);
      }
      return;
    case session::Route::Kind::kSpill:
      start_spill(slot);
      return;
    case session::Route::Kind::kRefuse:
      bump(counters_.refused_route);
      log_session_end(slot, "route", d.message);
      close_with_error(slot, d.message, "the gateway cannot route this destination");
      return;
  }
}

uint64_t Worker::session_hash(const Session& s) {
  return mix((uint64_t(s.src_ip) << 16) ^ s.src_port ^ (s.id << 40));
}

void Worker::keep_held(uint32_t slot) {
  // The login check's node owns the destination: its connection becomes the owner's. It has
  // answered the CONNECT already, so only what came after it is sent, and nothing is stripped.
  Session& s = sessions_[slot];
  s.owner_conn = OwnerConn::kKept;
  bump(counters_.login_conn_kept);
  io_uring_sqe* c = sqe();
  io_uring_prep_cancel64(c, tag(slot, s.gen, Op::kPollHeld), 0);
  io_uring_sqe_set_data64(c, tag(slot, s.gen, Op::kCancel));
  ++s.inflight;
  s.state = State::kReplay;
  s.owner_deadline = now() + Nanos(live_->connect_timeout_ms.load(std::memory_order_relaxed)) *
                                 session::kNanosPerMilli;
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  session::BindPlan plan = ps.prelude->take_bind_plan();
  ps.iov[0] = iovec{};
  ps.iov[1] = iovec{const_cast<char*>(plan.rest.data()), plan.rest.size()};
  ps.iov[2] = iovec{ps.carry, ps.carry_len};
  ps.iov_count = 3;
  send_replay(slot);
}

void Worker::close_with_error(uint32_t slot, std::string_view message, std::string_view detail) {
  Session& s = sessions_[slot];
  session::Version v = session::Version::k1_0;
  if (s.prelude_slot != kNone && preludes_.object(s.prelude_slot).prelude) {
    v = preludes_.object(s.prelude_slot).prelude->version();
  }
  char buf[1024];
  auto frame = session::build_error(std::span<char>(buf, sizeof buf), v,
                                    session::ErrorFrame{message, detail, {}, {}});
  if (!frame) {
    frame = session::build_error(std::span<char>(buf, sizeof buf), v,
                                 session::ErrorFrame{message, {}, {}, {}});
  }
  if (!frame) {
    begin_close(slot, false);
    return;
  }
  send_then_close(slot, *frame);
}

void Worker::connect_owner(uint32_t slot, const session::Route& d, State state) {
  Session& s = sessions_[slot];
  s.node = d.node;
  s.ofd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.ofd < 0) {
    log_(LogLevel::kWarn, "owner_socket_failed", {{{"error", std::strerror(errno)}}});
    s.node = kNone;
    if (state == State::kLogin) {
      bump(counters_.login_failed);
      answer_login(slot, config_.server);
    } else {
      start_spill(slot);
    }
    return;
  }
  int one = 1;
  setsockopt(s.ofd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s.state = state;
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  // The address lives in the prelude slot until the connect completes.
  static_assert(sizeof(sockaddr_in) <= sizeof(ps.iov));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(d.ip);
  addr.sin_port = htons(d.port);
  std::memcpy(ps.iov, &addr, sizeof addr);
  io_uring_sqe* e = sqe();
  io_uring_prep_connect(e, s.ofd, reinterpret_cast<const sockaddr*>(ps.iov), sizeof(sockaddr_in));
  e->flags |= IOSQE_IO_LINK;
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kConnect));
  // The kernel copies the timeout when the SQE is submitted, so one timespec serves every
  // connect (those prepared in one pass of the loop take the value of the last of them, which
  // differs only in the pass where the limit changed).
  const uint32_t ms = live_->connect_timeout_ms.load(std::memory_order_relaxed);
  connect_timeout_.tv_sec = ms / 1000;
  connect_timeout_.tv_nsec = long(ms % 1000) * 1'000'000;
  io_uring_sqe* t = sqe();
  io_uring_prep_link_timeout(t, &connect_timeout_, 0);
  io_uring_sqe_set_data64(t, tag(slot, s.gen, Op::kConnectTimeout));
  s.inflight += 2;
}

void Worker::on_connect(uint32_t slot, int res) {
  Session& s = sessions_[slot];
  const bool login = s.state == State::kLogin;
  if (res < 0) {
    // Refused, unreachable or timed out (the linked timeout cancels the connect): passive
    // health, and the session is served from the spill log; the client sees no error. A login
    // check the node could not take is answered by the gateway (the owner checks it later).
    bump(counters_.connect_failed);
    parts_.router->connect_failed(s.node);
    close(s.ofd);
    s.ofd = -1;
    s.node = kNone;
    if (login) {
      bump(counters_.login_failed);
      retry_login(slot);
    } else {
      start_spill(slot);
    }
    return;
  }
  s.owner_deadline = now() + Nanos(live_->connect_timeout_ms.load(std::memory_order_relaxed)) *
                                 session::kNanosPerMilli;
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  if (login) {
    const std::string_view connect = ps.prelude->connect_frame();
    ps.iov[0] = iovec{};
    ps.iov[1] = iovec{};
    ps.iov[2] = iovec{const_cast<char*>(connect.data()), connect.size()};
    ps.iov_count = 1;
    send_replay(slot);
    return;
  }
  s.state = State::kReplay;
  session::BindPlan plan = ps.prelude->take_bind_plan();
  ps.iov[0] = iovec{const_cast<char*>(plan.connect.data()), plan.connect.size()};
  ps.iov[1] = iovec{const_cast<char*>(plan.rest.data()), plan.rest.size()};
  ps.iov[2] = iovec{ps.carry, ps.carry_len};
  ps.iov_count = 3;
  send_replay(slot);
}

void Worker::send_replay(uint32_t slot) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  // Skip what is fully sent.
  uint32_t first = 3 - ps.iov_count;
  while (ps.iov_count > 0 && ps.iov[first].iov_len == 0) {
    ++first;
    --ps.iov_count;
  }
  if (ps.iov_count == 0) {
    if (s.owner_conn == OwnerConn::kKept) {
      // The owner answered the CONNECT at the login check: nothing to strip.
      owner_accepted(slot);
      start_splice(slot);
      return;
    }
    start_owner_greeting(slot);
    return;
  }
  ps.msg = msghdr{};
  ps.msg.msg_iov = &ps.iov[first];
  ps.msg.msg_iovlen = ps.iov_count;
  io_uring_sqe* e = sqe();
  io_uring_prep_sendmsg(e, s.ofd, &ps.msg, MSG_NOSIGNAL);
  io_uring_sqe_set_data64(e, tag(slot, s.owner_epoch, Op::kSendOwner));
  ++s.inflight;
}

void Worker::start_owner_greeting(uint32_t slot) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  if (!ps.greeting_headers) {
    ps.greeting_headers =
        std::make_unique<session::HeaderTable>(config_.frame_limits.header_count_max);
    bump(counters_.header_tables);
  }
  ps.greet_len = 0;
  ps.greeting.emplace(config_.frame_limits, ps.prelude->version(), *ps.greeting_headers);
  if (s.state != State::kLogin) {
    s.state = State::kGreeting;
    // The replay's CONNECTED must agree with what the client was told.
    ps.greeting->expect_heart_beats(ps.prelude->client_heart_beat(), ps.prelude->told_heart_beat());
  }
  arm_recv_owner(slot);
}

void Worker::owner_accepted(uint32_t slot) {
  Session& s = sessions_[slot];
  if (!s.placement_pending) return;
  s.placement_pending = false;
  if (!placement_budget_.take(s.src_ip, now())) {
    bump(counters_.placements_rate_limited);
    return;
  }
  parts_.router->confirm_placement(preludes_.object(s.prelude_slot).prelude->key(), s.node);
  bump(counters_.placements_confirmed);
}

void Worker::on_send_owner(uint32_t slot, int res) {
  Session& s = sessions_[slot];
  if (s.closing_after_send()) return;  // timed out meanwhile: the ERROR is on its way
  if (s.state != State::kLogin && s.state != State::kReplay) return;  // an abandoned login
  if (res < 0 && res != -EAGAIN && res != -EINTR) {
    bump(counters_.owner_protocol);
    close_with_error(slot, "owner unavailable", "the connection to the owner failed");
    return;
  }
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  size_t left = res > 0 ? size_t(res) : 0;
  s.bytes_in += left;
  for (uint32_t i = 3 - ps.iov_count; i < 3 && left > 0; ++i) {
    const size_t k = std::min(left, ps.iov[i].iov_len);
    ps.iov[i].iov_base = static_cast<char*>(ps.iov[i].iov_base) + k;
    ps.iov[i].iov_len -= k;
    left -= k;
  }
  send_replay(slot);
}

void Worker::arm_recv_owner(uint32_t slot) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  io_uring_sqe* e = sqe();
  io_uring_prep_recv(e, s.ofd, ps.greet + ps.greet_len, options_.greeting_bytes_max - ps.greet_len,
                     0);
  io_uring_sqe_set_data64(e, tag(slot, s.owner_epoch, Op::kRecvOwner));
  ++s.inflight;
}

void Worker::on_recv_owner(uint32_t slot, int res) {
  Session& s = sessions_[slot];
  if (s.closing_after_send()) return;
  if (s.state != State::kLogin && s.state != State::kGreeting) return;  // an abandoned login
  if (res == -EAGAIN || res == -EINTR) {
    arm_recv_owner(slot);
    return;
  }
  if (res <= 0) {
    if (s.state == State::kLogin) {
      // The node closed before answering the CONNECT (shutting down): the next one checks it.
      bump(counters_.login_failed);
      abandon_login(slot);
      return;
    }
    bump(counters_.owner_protocol);
    log_session_end(slot, "owner_closed", {});
    close_with_error(slot, "owner closed the connection",
                     "the owner closed the connection before answering CONNECT");
    return;
  }
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  ps.greet_len += uint32_t(res);
  session::GreetingResult g = ps.greeting->on_bytes(std::string_view(ps.greet, ps.greet_len));
  if (s.state == State::kLogin && g.kind != session::GreetingResult::Kind::kNeedMore) {
    on_login_answer(slot, g);
    return;
  }
  switch (g.kind) {
    case session::GreetingResult::Kind::kNeedMore:
      if (ps.greet_len >= options_.greeting_bytes_max) {
        bump(counters_.owner_protocol);
        close_with_error(slot, "owner protocol error", "the owner's first frame is too large");
        return;
      }
      arm_recv_owner(slot);
      return;
    case session::GreetingResult::Kind::kStrip: {
      if (g.heart_beat_check != session::HeartBeatCheck::kSame) {
        bump(counters_.heartbeat_mismatch_allowed);
        log_heart_beat_mismatch(slot, g);
      }
      owner_accepted(slot);
      // What came after CONNECTED (a MESSAGE for a replayed SUBSCRIBE) goes to the client
      // before the splice starts.
      std::string_view after(ps.greet + g.consumed, ps.greet_len - g.consumed);
      if (after.empty()) {
        start_splice(slot);
      } else {
        s.splice_when_sent();
        if (!queue_out(slot, after)) begin_close(slot, true);
      }
      return;
    }
    case session::GreetingResult::Kind::kForwardError:
      bump(counters_.owner_error);
      if (parts_.logins != nullptr) {
        parts_.logins->forget(ps.prelude->key().vhost, ps.prelude->login(), ps.prelude->passcode());
      }
      log_session_end(slot, "owner_error", g.message);
      send_then_close(slot, g.to_client);
      return;
    case session::GreetingResult::Kind::kProtocolError:
      if (g.heart_beat_check == session::HeartBeatCheck::kOwnerStricter) {
        bump(counters_.heartbeat_mismatch_refused);
        log_heart_beat_mismatch(slot, g);
      } else {
        bump(counters_.owner_protocol);
      }
      log_session_end(slot, "owner_protocol_error", g.reason);
      send_then_close(slot, g.to_client);
      return;
  }
}

}  // namespace sluice::uring::detail
