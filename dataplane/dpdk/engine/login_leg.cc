// The login check (stomp.login_check = "eager", DESIGN section 3, PRELUDE) at packet level: on
// the client's CONNECT the lcore opens the owner leg to a node of the vhost, sends it the
// rewritten CONNECT and gives the client that node's own CONNECTED or ERROR. An accepted
// session's connection is held while the prelude waits for a destination (the node's
// heart-beat EOLs absorbed, the client's owed to it sent), and becomes the owner leg when that
// node owns the destination: only what followed the CONNECT is replayed, and the sequence maps
// cover what each side was sent meanwhile.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/engine/slot.h"

namespace sluice::dpdk::engine {

using detail::FlowState;
using detail::LoginLeg;
using splice::seq_gt;
using splice::seq_leq;
using splice::seq_lt;

namespace {

// Nodes asked in turn before the gateway answers a CONNECT itself.
constexpr uint8_t kLoginAttemptsMax = 3;
// The held connection's heart-beats to the node, sent from here.
struct Eols {
  char bytes[64];
  constexpr Eols() : bytes{} {
    for (char& c : bytes)
      c = '\n';
  }
};
constexpr Eols kEols;

bool only_eols(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == '\n' || c == '\r'; });
}

}  // namespace

void Lcore::check_login(Flow& fl) {
  Slot& s = *slots_[fl.slot];
  session::Prelude& p = *s.prelude;
  const std::string_view vhost = p.key().vhost;
  if (std::optional<std::string_view> server =
          logins_ != nullptr
              ? logins_->find(vhost, p.login(), p.passcode(), session::Nanos(now_ns_))
              : std::nullopt) {
    ++counters_.login_cached;
    (void)answer_login(fl, *server, true);
    return;
  }
  const session::Route t =
      fl.login_attempts < kLoginAttemptsMax
          ? router_.login_node(vhost, tuples_.hash(fl.client.rx), fl.login_attempts++)
          : session::Route{};
  if (t.kind != session::Route::Kind::kOwner || open_owner_leg(fl, t) != LegOpen::kOpen) {
    // No node can check it now: the gateway answers, and the owner (or the spill session's
    // users file) checks the login when the session binds.
    ++counters_.login_unchecked;
    (void)answer_login(fl, config_.session.server, false);
    return;
  }
  fl.node = t.node;
  fl.to_spill = false;
  fl.login = LoginLeg::kConnecting;
  fl.login_connect_bytes = fl.login_bytes = uint32_t(p.connect_frame().size());
  s.login_deadline_ms = now_ms_ + config_.connect_timeout_ms;
  fl.deadline_ms = s.prelude_timer_ms();
  send_owner_syn(fl);
}

bool Lcore::answer_login(Flow& fl, std::string_view server, bool verified) {
  Slot& s = *slots_[fl.slot];
  char id[32];
  const int n = std::snprintf(id, sizeof id, "sluice-%016llx", (unsigned long long)fl.id);
  const session::PreludeEvent e =
      s.prelude->answer_connect(server, std::string_view(id, size_t(n)), verified);
  if (!inject(fl, e.to_client)) return false;
  send_injected(fl, false);
  arm_beats(s);
  return true;
}

void Lcore::login_binding(Flow& fl, Frame* f, net::Packet& p) {
  switch (fl.login) {
    case LoginLeg::kNone:
      drop(f);
      return;
    case LoginLeg::kConnecting: {
      switch (owner_syn_answer(fl, f, p)) {
        case SynAnswer::kOther:
          return;
        case SynAnswer::kRefused:
          ++counters_.owner_refused;
          login_failed(fl, false);
          return;
        case SynAnswer::kAccepted:
          break;
      }
      Slot& s = *slots_[fl.slot];
      // No heart-beat expectation: the node's answer is what the client is told.
      s.owner_greeting.emplace(config_.session.frame_limits, s.prelude->version(),
                               s.greeting_headers);
      fl.login = LoginLeg::kGreeting;
      send_login(fl, false);
      arm(fl);
      return;
    }
    case LoginLeg::kGreeting:
      break;
    case LoginLeg::kHeld:
      held_bytes(fl, f, p);
      return;
  }
  if (p.flags & net::kRst) {
    drop(f);
    if (p.seq == fl.o_rcv_nxt) {
      free_local_port(fl);
      login_failed(fl, false);
    }
    return;
  }
  if (p.flags & net::kSyn) {
    drop(f);
    send_login(fl, true);
    return;
  }
  if (!(p.flags & net::kAck)) {
    drop(f);
    return;
  }
  owner_ack(fl, p);
  if (p.payload_bytes == 0 && !(p.flags & net::kFin)) {
    drop(f);
    send_login(fl, false);
    return;
  }
  session::GreetingResult r;
  switch (read_greeting(fl, f, p, &r)) {
    case GreetingStep::kWait:
      return;
    case GreetingStep::kClosed:
      // The node closed before answering (shutting down): the next one checks it.
      login_failed(fl, true);
      return;
    case GreetingStep::kTooLarge:
      ++counters_.login_failed;
      ++counters_.owner_errors;
      end_session(fl, "owner_protocol_error", "the owner's first frame is too large");
      refuse(fl, "owner sent an invalid greeting", "the owner's first frame is too large");
      return;
    case GreetingStep::kDone:
      login_answer(fl, r);
      return;
  }
}

void Lcore::login_answer(Flow& fl, const session::GreetingResult& r) {
  Slot& s = *slots_[fl.slot];
  session::Prelude& p = *s.prelude;
  const uint32_t connect_end = fl.client_isn + 1 + fl.login_bytes;
  if (r.kind == session::GreetingResult::Kind::kStrip && fl.o_snd_nxt != connect_end) {
    // A CONNECTED to a CONNECT the node has not had whole: not an answer to it.
    ++counters_.login_failed;
    ++counters_.owner_errors;
    end_session(fl, "owner_protocol_error", "CONNECTED before the whole CONNECT");
    refuse(fl, "owner protocol error", "the node answered before the whole CONNECT reached it");
    return;
  }
  switch (r.kind) {
    case session::GreetingResult::Kind::kNeedMore:
      SLUICE_ASSERT(false);
      return;
    case session::GreetingResult::Kind::kStrip: {
      // The node's own CONNECTED, byte for byte, is the client's answer.
      ++counters_.login_accepted;
      fl.o_snd_una = connect_end;
      if (!inject(fl, r.connected)) return;
      p.login_accepted(r.heart_beat);
      if (logins_ != nullptr) {
        logins_->remember(p.key().vhost, p.login(), p.passcode(), r.server,
                          session::Nanos(now_ns_));
      }
      fl.o_rcv_nxt = fl.owner_isn + 1 + uint32_t(r.consumed);
      send_to_owner(fl, Seg{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
      // Anything after its CONNECTED is heart-beat EOLs (a node sends nothing else unasked).
      fl.login = LoginLeg::kHeld;
      s.owner_greeting.reset();
      fl.greeting_fill = 0;
      s.login_deadline_ms = 0;
      const uint32_t to_owner_ms = p.heart_beat_intervals().client_to_server_ms;
      s.owner_beat_at_ms = to_owner_ms == 0 ? 0 : now_ms_ + to_owner_ms;
      send_injected(fl, false);
      arm_beats(s);
      prelude_events(fl);
      if (fl.state == FlowState::kPrelude) {
        fl.deadline_ms = s.prelude_timer_ms();
        arm(fl);
      }
      return;
    }
    case session::GreetingResult::Kind::kForwardError:
    case session::GreetingResult::Kind::kProtocolError: {
      const bool refused = r.kind == session::GreetingResult::Kind::kForwardError;
      if (refused) {
        // The node refused the login (or the vhost): its ERROR, byte for byte, and close.
        ++counters_.login_refused;
        ++counters_.prelude_ends[size_t(session::PreludeEnd::kLoginRefused)];
        if (logins_ != nullptr) logins_->forget(p.key().vhost, p.login(), p.passcode());
      } else {
        ++counters_.login_failed;
        ++counters_.owner_errors;
      }
      end_session(fl, refused ? "login_refused" : "owner_protocol_error",
                  refused ? r.message : r.reason);
      // The ERROR lives in the greeting buffer or the OwnerGreeting: copy before closing.
      char copy[Slot::kInjectBytesMax];
      const size_t bytes = std::min(r.to_client.size(), sizeof copy);
      std::memcpy(copy, r.to_client.data(), bytes);
      release_owner_leg(fl, true);
      close_client(fl, std::string_view(copy, bytes));
      return;
    }
  }
}

void Lcore::login_failed(Flow& fl, bool reset) {
  ++counters_.login_failed;
  router_.connect_failed(fl.node);
  release_owner_leg(fl, reset);
  fl.node = UINT32_MAX;
  fl.rtx_at_ms = 0;
  Slot& s = *slots_[fl.slot];
  s.owner_greeting.reset();
  s.login_deadline_ms = 0;
  fl.greeting_fill = 0;
  check_login(fl);  // the next node, or the gateway's answer when none is left
  if (fl.state != FlowState::kPrelude) return;
  if (fl.login == LoginLeg::kNone) prelude_events(fl);
  if (fl.state != FlowState::kPrelude) return;
  fl.deadline_ms = s.prelude_timer_ms();
  arm(fl);
}

void Lcore::send_login(Flow& fl, bool retransmit) {
  Slot& s = *slots_[fl.slot];
  const uint32_t begin = fl.client_isn + 1;
  const uint32_t end = begin + fl.login_bytes;
  const uint32_t mss = segment_bytes_max(fl.owner.peer_mss, config_.mss, fl.owner.ts_ok);
  const uint32_t limit = fl.o_snd_una + std::max(fl.owner.peer_window, mss);
  uint32_t at = retransmit ? fl.o_snd_una : fl.o_snd_nxt;
  while (seq_lt(at, end) && seq_lt(at, limit)) {
    const uint32_t off = at - begin;
    const char* data;
    uint32_t n;
    if (off < fl.login_connect_bytes) {
      data = s.prelude->connect_frame().data() + off;
      n = fl.login_connect_bytes - off;
    } else {
      data = kEols.bytes;
      n = std::min<uint32_t>(end - at, sizeof kEols.bytes);
    }
    n = std::min({n, mss, limit - at});
    const bool last = at + n == end;
    send_to_owner(
        fl, Seg{at, fl.o_rcv_nxt, uint8_t(net::kAck | (last ? net::kPsh : 0)), owner_window(fl),
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), n)});
    if (retransmit) ++counters_.retransmits;
    at += n;
  }
  if (seq_gt(at, fl.o_snd_nxt)) fl.o_snd_nxt = at;
  update_rtx(fl);
}

void Lcore::held_bytes(Flow& fl, Frame* f, net::Packet& p) {
  const Seg ack{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)};
  if (p.flags & net::kRst) {
    drop(f);
    if (p.seq != fl.o_rcv_nxt) return;
    free_local_port(fl);
    drop_held(fl);
    return;
  }
  if (p.flags & net::kSyn) {
    drop(f);
    send_to_owner(fl, ack);
    return;
  }
  if (!(p.flags & net::kAck)) {
    drop(f);
    return;
  }
  owner_ack(fl, p);
  const bool fin = p.flags & net::kFin;
  if (p.payload_bytes == 0 && !fin) {
    drop(f);
    update_rtx(fl);
    return;
  }
  if (seq_gt(p.seq, fl.o_rcv_nxt)) {
    ++counters_.out_of_order;
    drop(f);
    send_to_owner(fl, ack);
    return;
  }
  const uint32_t end = p.seq + p.payload_bytes;
  if (!fin && seq_leq(end, fl.o_rcv_nxt)) {
    ++counters_.duplicates;
    drop(f);
    send_to_owner(fl, ack);
    return;
  }
  const std::string_view fresh = seq_leq(end, fl.o_rcv_nxt)
                                     ? std::string_view{}
                                     : payload_of(f, p).substr(fl.o_rcv_nxt - p.seq);
  drop(f);
  if (fin || !only_eols(fresh)) {
    // The node closed it, or said something unasked (an ERROR as it shuts down): the session
    // connects to its owner afresh when it binds.
    drop_held(fl);
    return;
  }
  fl.o_rcv_nxt += uint32_t(fresh.size());
  send_to_owner(fl, Seg{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
}

bool Lcore::login_timer(Flow& fl) {
  if (fl.login == LoginLeg::kNone) return false;
  Slot& s = *slots_[fl.slot];
  if (fl.login == LoginLeg::kConnecting || fl.login == LoginLeg::kGreeting) {
    if (now_ms_ >= s.login_deadline_ms) {
      // The node took no connection, or no CONNECT, in time: the next one checks it.
      ++counters_.owner_timeouts;
      login_failed(fl, true);
      return fl.state != FlowState::kPrelude;
    }
    if (fl.login == LoginLeg::kConnecting && fl.rtx_at_ms != 0 && now_ms_ >= fl.rtx_at_ms) {
      ++counters_.retransmits;
      send_owner_syn(fl);
    }
    return false;
  }
  if (s.owner_beat_at_ms != 0 && now_ms_ >= s.owner_beat_at_ms) {
    // The client's beat the node expects; one at a time, so that at most one is ever
    // outstanding when the connection is kept (keep_held).
    if (fl.o_snd_una == fl.o_snd_nxt) {
      ++fl.login_bytes;
      ++counters_.heartbeats_sent;
      send_login(fl, false);
    }
    const uint32_t to_owner_ms = s.prelude->heart_beat_intervals().client_to_server_ms;
    s.owner_beat_at_ms = to_owner_ms == 0 ? 0 : now_ms_ + to_owner_ms;
  }
  return false;
}

void Lcore::drop_held(Flow& fl) {
  ++counters_.login_conn_closed;
  release_owner_leg(fl, true);
  fl.node = UINT32_MAX;
  fl.login_bytes = fl.login_connect_bytes = 0;
  fl.rtx_at_ms = 0;
  slots_[fl.slot]->owner_beat_at_ms = 0;
  update_rtx(fl);
}

void Lcore::keep_held(Flow& fl, bool placement_pending) {
  // The login check's node owns the destination: its connection becomes the owner's. It has
  // answered the CONNECT already, so only what came after it is sent, and nothing is stripped.
  ++counters_.login_conn_kept;
  ++counters_.binds_owner;
  Slot& s = *slots_[fl.slot];
  const session::BindPlan plan = s.prelude->take_bind_plan();
  const uint32_t connect_end = uint32_t(plan.connect.size()) + plan.connect_bytes_removed;
  // The node has the CONNECT (it answered it) and every heart-beat but perhaps the last: that
  // one goes again ahead of the rest.
  const uint32_t unacked = fl.o_snd_nxt - fl.o_snd_una;
  SLUICE_ASSERT(unacked <= 1 && unacked <= connect_end);
  std::memmove(s.buffer.get() + unacked, plan.rest.data(), plan.rest.size());
  std::memset(s.buffer.get(), '\n', unacked);
  fl.replay_seq = fl.o_snd_una;
  fl.replay_bytes = unacked + uint32_t(plan.rest.size());
  fl.o_snd_nxt = fl.o_snd_una;
  // The client's CONNECT became the rewritten one and the beats sent for it; the node's
  // CONNECTED and the EOLs absorbed became everything the client was sent.
  bool edited = fl.c2o.add(splice::SeqEdit{fl.client_isn + 1, connect_end, fl.login_bytes});
  SLUICE_ASSERT(edited);
  edited = fl.o2c.add(
      splice::SeqEdit{fl.owner_isn + 1, fl.o_rcv_nxt - fl.owner_isn - 1, s.injected_bytes});
  SLUICE_ASSERT(edited);
  fl.greeting_done = true;
  fl.login = LoginLeg::kNone;
  s.beat_at_ms = 0;
  s.owner_beat_at_ms = 0;
  if (placement_pending) {
    detail::FlowDestination& d = destinations_[index_of(fl)];
    d.placement_pending = false;
    if (placement_budget_.take(fl.client.rx.src_ip, session::Nanos(now_ns_))) {
      router_.confirm_placement(session::QueueKey{d.vhost, d.queue, d.default_route}, fl.node);
    } else {
      ++counters_.placements_rate_limited;
    }
  }
  fl.state = FlowState::kReplay;
  s.bind_deadline_ms = now_ms_ + config_.connect_timeout_ms;
  fl.deadline_ms = s.bind_deadline_ms;
  fl.rtx_at_ms = 0;
  fl.retries = 0;
  fl.rto_ms = config_.rto_initial_ms;
  send_replay(fl, false);
  arm(fl);
}

void Lcore::end_session(const Flow& fl, std::string_view reason, std::string_view message) {
  session::SessionEnd e;
  e.reason = reason;
  e.client_ip = fl.client.rx.src_ip;
  e.client_port = fl.client.rx.src_port;
  e.node = fl.node;
  e.message = message;
  const detail::FlowDestination& d = destinations_[index_of(fl)];
  if (d.flow_id == fl.id) {
    e.vhost = d.vhost;
    e.queue = d.queue;
    e.login = d.login;
  } else if (fl.slot != detail::kNoSlot && slots_[fl.slot]->prelude) {
    const session::Prelude& p = *slots_[fl.slot]->prelude;
    e.vhost = p.key().vhost;
    e.login = p.login().value_or(std::string_view());
  }
  router_.session_end(e);
}

}  // namespace sluice::dpdk::engine
