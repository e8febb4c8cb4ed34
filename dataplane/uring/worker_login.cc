// The login check (stomp.login_check = "eager"): a node of the vhost answers the CONNECT before
// the session goes on, and its connection is held while the prelude waits for a destination;
// the heart-beats the gateway owes and expects while it speaks for a session; session-end log
// lines (DESIGN section 3, PRELUDE).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/assert.h"
#include "dataplane/session/builder.h"
#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {

namespace {

// Bytes the held connection's node may send while it waits: heart-beat EOLs only.
constexpr size_t kHeldReadBytes = 256;

}  // namespace

void Worker::check_login(uint32_t slot) {
  Session& s = sessions_[slot];
  session::Prelude& p = *preludes_.object(s.prelude_slot).prelude;
  const std::string_view vhost = p.key().vhost;
  if (parts_.logins != nullptr) {
    if (std::optional<std::string_view> server =
            parts_.logins->find(vhost, p.login(), p.passcode(), now())) {
      bump(counters_.login_cached);
      answer_login(slot, *server, true);
      return;
    }
  }
  const session::Route d =
      s.login_attempts < kLoginAttemptsMax
          ? parts_.router->login_node(vhost, session_hash(s), s.login_attempts++)
          : session::Route{};
  if (d.kind != session::Route::Kind::kOwner) {
    // No node can check it now: the gateway answers, and the owner (or the spill session's
    // users file) checks the login when the session binds.
    bump(counters_.login_unchecked);
    answer_login(slot, config_.server);
    return;
  }
  s.owner_deadline = 0;  // set once connected
  connect_owner(slot, d, State::kLogin);
}

void Worker::answer_login(uint32_t slot, std::string_view server, bool verified) {
  Session& s = sessions_[slot];
  session::Prelude& p = *preludes_.object(s.prelude_slot).prelude;
  char id[32];
  const int n = std::snprintf(id, sizeof id, "sluice-%016llx", (unsigned long long)s.id);
  session::PreludeEvent ev = p.answer_connect(server, std::string_view(id, size_t(n)), verified);
  s.state = State::kPrelude;
  const session::HeartBeatIntervals hb = p.heart_beat_intervals();
  s.hb_to_client_ms = hb.server_to_client_ms;
  s.hb_from_client_ms = hb.client_to_server_ms;
  if (!queue_out(slot, ev.to_client)) begin_close(slot, false);
}

void Worker::on_login_answer(uint32_t slot, const session::GreetingResult& g) {
  Session& s = sessions_[slot];
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  session::Prelude& p = *ps.prelude;
  switch (g.kind) {
    case session::GreetingResult::Kind::kNeedMore:
      SLUICE_ASSERT(false);
      return;
    case session::GreetingResult::Kind::kStrip: {
      // The node's own CONNECTED, byte for byte, is the client's answer.
      bump(counters_.login_accepted);
      if (!queue_out(slot, g.connected)) {
        begin_close(slot, false);
        return;
      }
      p.login_accepted(g.heart_beat);
      if (parts_.logins != nullptr) {
        parts_.logins->remember(p.key().vhost, p.login(), p.passcode(), g.server, now());
      }
      const session::HeartBeatIntervals hb = p.heart_beat_intervals();
      s.hb_to_client_ms = hb.server_to_client_ms;
      s.hb_from_client_ms = hb.client_to_server_ms;
      s.hb_to_owner_ms = hb.client_to_server_ms;  // the node expects the client's beats
      s.last_owner_send = now();
      // Anything after its CONNECTED is heart-beat EOLs (a node sends nothing else unasked).
      ps.greet_len = 0;
      ps.greeting.reset();
      s.owner_conn = OwnerConn::kHeld;
      s.state = State::kPrelude;
      arm_poll_held(slot);
      drive_prelude(slot);
      if (s.state == State::kPrelude && !s.closing_after_send()) arm_recv_client(slot);
      return;
    }
    case session::GreetingResult::Kind::kForwardError:
      // The node refused the login (or the vhost): its ERROR, byte for byte, and close.
      bump(counters_.login_refused);
      bump(counters_.prelude_end[size_t(session::PreludeEnd::kLoginRefused)]);
      if (parts_.logins != nullptr) parts_.logins->forget(p.key().vhost, p.login(), p.passcode());
      log_session_end(slot, "login_refused", g.message);
      send_then_close(slot, g.to_client);
      return;
    case session::GreetingResult::Kind::kProtocolError:
      bump(counters_.login_failed);
      bump(counters_.owner_protocol);
      log_session_end(slot, "owner_protocol_error", g.reason);
      send_then_close(slot, g.to_client);
      return;
  }
}

void Worker::abandon_login(uint32_t slot) {
  Session& s = sessions_[slot];
  // Whatever waits on the node's socket goes by its tag (the descriptor is closed before the
  // cancels are submitted); their completions find the session past kLogin and are ignored.
  for (Op op : {Op::kSendOwner, Op::kRecvOwner}) {
    io_uring_sqe* c = sqe();
    io_uring_prep_cancel64(c, tag(slot, s.owner_epoch, op), 0);
    io_uring_sqe_set_data64(c, tag(slot, s.gen, Op::kCancel));
    ++s.inflight;
  }
  // Completions of the abandoned connection carry the old epoch and are ignored, even while the
  // next node's check is under way.
  ++s.owner_epoch;
  shutdown(s.ofd, SHUT_RDWR);
  close(s.ofd);
  s.ofd = -1;
  s.node = kNone;
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  ps.greeting.reset();
  ps.greet_len = 0;
  retry_login(slot);
}

void Worker::retry_login(uint32_t slot) {
  Session& s = sessions_[slot];
  s.state = State::kPrelude;
  check_login(slot);  // the next node, or the gateway's answer when none is left
  if (s.state != State::kPrelude) return;
  drive_prelude(slot);
  if (s.state == State::kPrelude && !s.closing_after_send()) arm_recv_client(slot);
}

void Worker::arm_poll_held(uint32_t slot) {
  Session& s = sessions_[slot];
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, s.ofd, POLLIN);
  io_uring_sqe_set_data64(e, tag(slot, s.gen, Op::kPollHeld));
  ++s.inflight;
}

void Worker::on_poll_held(uint32_t slot, int res) {
  Session& s = sessions_[slot];
  if (s.owner_conn != OwnerConn::kHeld || s.state != State::kPrelude)
    return;  // bound or dropped meanwhile
  if (res < 0) {
    drop_held(slot);
    return;
  }
  char buf[kHeldReadBytes];
  const ssize_t n = recv(s.ofd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    arm_poll_held(slot);
    return;
  }
  bool beats = n > 0;
  for (ssize_t i = 0; i < n && beats; ++i)
    beats = buf[i] == '\n' || buf[i] == '\r';
  if (!beats) {
    // The node closed it, or said something unasked (an ERROR as it shuts down): the session
    // connects to its owner afresh when it binds.
    drop_held(slot);
    return;
  }
  arm_poll_held(slot);
}

void Worker::drop_held(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.owner_conn != OwnerConn::kHeld) return;
  s.owner_conn = OwnerConn::kNoConn;
  s.hb_to_owner_ms = 0;
  bump(counters_.login_conn_closed);
  // The poll goes by its tag (the descriptor is closed before the cancel is submitted); its
  // reference keeps the socket until it completes.
  io_uring_sqe* c = sqe();
  io_uring_prep_cancel64(c, tag(slot, s.gen, Op::kPollHeld), 0);
  io_uring_sqe_set_data64(c, tag(slot, s.gen, Op::kCancel));
  ++s.inflight;
  shutdown(s.ofd, SHUT_RDWR);
  close(s.ofd);
  s.ofd = -1;
  s.node = kNone;
}

void Worker::heart_beats(uint32_t slot, Nanos t) {
  Session& s = sessions_[slot];
  // Sent up to one scan early, so that a beat is never late.
  auto due = [&](uint32_t ms, Nanos last) {
    return ms != 0 && t - last + kScanInterval >= Nanos(ms) * session::kNanosPerMilli;
  };
  const bool speaking = s.state == State::kPrelude || s.state == State::kLogin ||
                        s.state == State::kConnecting || s.state == State::kReplay ||
                        s.state == State::kGreeting || s.state == State::kSpill;
  if (!speaking || s.closing_after_send()) return;
  if (s.state == State::kSpill && s.hb_from_client_ms != 0 &&
      t - s.last_client_recv >=
          Nanos(s.hb_from_client_ms) * session::kNanosPerMilli * session::kHeartBeatGraceFactor) {
    bump(counters_.spill_end[size_t(session::SpillEnd::kHeartBeatTimeout)]);
    log_session_end(slot, "heartbeat_timeout", {});
    const session::Version v = spills_.object(s.spill_slot).spill->version();
    char buf[256];
    auto frame = session::build_error(
        std::span<char>(buf, sizeof buf), v,
        session::ErrorFrame{"heart-beat timeout",
                            "nothing received within the negotiated heart-beat grace",
                            {},
                            {}});
    send_then_close(slot, frame ? *frame : std::string_view());
    return;
  }
  if (due(s.hb_to_client_ms, s.last_client_send) && !s.sending && s.out_sent == s.out_len) {
    bump(counters_.heartbeats_sent);
    (void)queue_out(slot, "\n");
  }
  if (s.owner_conn == OwnerConn::kHeld && due(s.hb_to_owner_ms, s.last_owner_send)) {
    // One byte on an idle connection the worker holds for the prelude: a plain send.
    s.last_owner_send = t;
    if (send(s.ofd, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) drop_held(slot);
  }
}

void Worker::log_session_end(uint32_t slot, std::string_view reason, std::string_view message) {
  const Session& s = sessions_[slot];
  session::SessionEnd e;
  e.reason = reason;
  e.client_ip = ntohl(s.src_ip);
  e.client_port = s.src_port;
  if (s.prelude_slot != kNone && preludes_.object(s.prelude_slot).prelude) {
    session::Prelude& p = *preludes_.object(s.prelude_slot).prelude;
    e.vhost = p.key().vhost;
    e.queue = p.key().queue;
    e.login = p.login().value_or(std::string_view());
  } else if (s.spill_slot != kNone) {
    const SpillSlot& ss = spills_.object(s.spill_slot);
    e.vhost = std::string_view(ss.vhost, ss.vhost_len);
    e.queue = std::string_view(ss.queue, ss.queue_len);
  }
  e.node = s.node != kNone ? s.node : session::kNoRouteNode;
  e.message = message;
  parts_.router->session_end(e);
}

void Worker::log_heart_beat_mismatch(uint32_t slot, const session::GreetingResult& g) {
  const Session& s = sessions_[slot];
  const session::Prelude& p = *preludes_.object(s.prelude_slot).prelude;
  parts_.router->heart_beat_mismatch(s.node, p.client_heart_beat(), p.told_heart_beat(),
                                     g.heart_beat, g.heart_beat_check);
}

}  // namespace sluice::uring::detail
