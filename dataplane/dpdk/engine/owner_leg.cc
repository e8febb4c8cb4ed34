// The owner leg while the gateway is the owner's client: RESOLVE, the SYN from a local
// address with the client's ISN and options, the fall-back to the spill listener, the replay
// of the bind plan until acknowledged, the owner's CONNECTED (stripped) and the switch to
// splice mode.
#include <algorithm>
#include <cstring>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/engine/slot.h"

namespace sluice::dpdk::engine {

using detail::FlowState;
using splice::seq_gt;
using splice::seq_leq;
using splice::seq_lt;

namespace {
constexpr uint64_t kArpWaitMs = 100;  // SYN retry while the next hop's MAC is unknown
}

void Lcore::bind(Flow& fl) {
  Slot& s = *slots_[fl.slot];
  const session::Route t = router_.route(s.prelude->key(), tuples_.hash(fl.client.rx));
  if (t.kind == session::Route::Kind::kRefuse) {
    ++counters_.binds_refused;
    end_session(fl, "route", t.message);
    refuse(fl, t.message, "the destination cannot be routed");
    return;
  }
  const session::QueueKey key = s.prelude->key();
  detail::FlowDestination& destination = destinations_[index_of(fl)];
  destination.flow_id = fl.id;
  destination.vhost.assign(key.vhost);  // the strings keep their capacity from flow to flow
  destination.queue.assign(key.queue);
  destination.login.assign(s.prelude->login().value_or(std::string_view()));
  destination.default_route = key.default_route;
  destination.placement_pending = t.kind == session::Route::Kind::kOwner && t.placement_pending;
  if (fl.login == detail::LoginLeg::kHeld) {
    if (t.kind == session::Route::Kind::kOwner && t.node == fl.node) {
      keep_held(fl, destination.placement_pending);
      return;
    }
    drop_held(fl);
  }
  const session::BindPlan plan = s.prelude->take_bind_plan();
  const uint32_t connect_bytes = uint32_t(plan.connect.size());
  const uint32_t connect_end = connect_bytes + plan.connect_bytes_removed;
  // Make the replay contiguous: the rewritten CONNECT, then every byte after the original.
  std::memmove(s.buffer.get() + connect_bytes, plan.rest.data(), plan.rest.size());
  fl.replay_bytes = connect_bytes + uint32_t(plan.rest.size());
  fl.replay_seq = fl.client_isn + 1;
  const bool edited = fl.c2o.add(splice::SeqEdit{fl.client_isn + 1, connect_end, connect_bytes});
  SLUICE_ASSERT(edited);
  if (t.kind == session::Route::Kind::kSpill) {
    connect_to(
        fl,
        session::Route{
            session::Route::Kind::kSpill, UINT32_MAX, config_.spill_ip, config_.spill_port, {}});
    return;
  }
  connect_to(fl, t);
}

void Lcore::connect_to(Flow& fl, const session::Route& t) {
  if (t.kind == session::Route::Kind::kSpill && config_.spill_ip == 0) {
    ++counters_.binds_refused;
    refuse(fl, "owner unavailable, retry later", "the owner is down and no spill is configured");
    return;
  }
  fl.node = t.node;
  fl.to_spill = t.kind == session::Route::Kind::kSpill;
  switch (open_owner_leg(fl, t)) {
    case LegOpen::kOpen:
      break;
    case LegOpen::kNoRoute:
      if (!fl.to_spill) {
        owner_failed(fl, false);
        return;
      }
      end_session(fl, "no_route", "no route to the spill listener");
      refuse(fl, "owner unavailable, retry later", "no route to the spill listener");
      return;
    case LegOpen::kNoPort:
      end_session(fl, "local_ports_exhausted", {});
      refuse(fl, "gateway busy, retry later", "no free local port for the owner connection");
      return;
  }
  ++(fl.to_spill ? counters_.binds_spill : counters_.binds_owner);
  fl.state = FlowState::kConnecting;
  Slot& s = *slots_[fl.slot];
  s.bind_deadline_ms = now_ms_ + config_.connect_timeout_ms;
  fl.deadline_ms =
      s.beat_at_ms != 0 ? std::min(s.beat_at_ms, s.bind_deadline_ms) : s.bind_deadline_ms;
  send_owner_syn(fl);
}

Lcore::LegOpen Lcore::open_owner_leg(Flow& fl, const session::Route& t) {
  const Route* route = route_for(t.ip);
  if (route == nullptr) {
    ++counters_.no_route;
    return LegOpen::kNoRoute;
  }
  fl.owner.rx.src_ip = t.ip;
  fl.owner.rx.src_port = t.port;
  fl.owner.port = route->port;
  fl.next_hop = route->gateway != 0 ? route->gateway : t.ip;
  if (!alloc_local_port(fl)) return LegOpen::kNoPort;
  fl.syn_after_reset = false;
  fl.o_snd_una = fl.o_snd_nxt = fl.client_isn + 1;
  return LegOpen::kOpen;
}

void Lcore::binding_beat(Flow& fl) {
  Slot& s = *slots_[fl.slot];
  if (!fl.greeting_done) prelude_beat(fl);
  if (fl.state != FlowState::kConnecting && fl.state != FlowState::kReplay) return;
  if (fl.greeting_done) s.beat_at_ms = 0;
  fl.deadline_ms =
      s.beat_at_ms != 0 ? std::min(s.beat_at_ms, s.bind_deadline_ms) : s.bind_deadline_ms;
}

void Lcore::send_owner_syn(Flow& fl) {
  if (const net::MacAddr* mac = neighbor(fl.next_hop)) fl.owner.peer_mac = *mac;
  const bool known = neighbor(fl.next_hop) != nullptr;
  send_to_owner(fl, Seg{fl.client_isn,
                        0,
                        net::kSyn,
                        uint16_t(std::min<uint32_t>(fl.client.peer_window, 0xffff)),
                        {},
                        true});
  fl.rtx_at_ms = now_ms_ + (known ? config_.syn_rto_ms : kArpWaitMs);
  arm(fl);
}

void Lcore::release_owner_leg(Flow& fl, bool reset) {
  const bool login = fl.login != detail::LoginLeg::kNone;
  fl.login = detail::LoginLeg::kNone;
  if (fl.local_port == 0) return;
  if (reset && (fl.state == FlowState::kConnecting || fl.state == FlowState::kReplay || login)) {
    send_to_owner(fl, Seg{fl.o_snd_nxt, 0, net::kRst, 0});
    ++counters_.resets_sent;
  }
  free_local_port(fl);
}

void Lcore::owner_failed(Flow& fl, bool refused) {
  if (refused) ++counters_.owner_refused;
  const bool was_spill = fl.to_spill;
  if (!was_spill) router_.connect_failed(fl.node);
  release_owner_leg(fl, !refused);
  fl.rtx_at_ms = 0;
  if (!was_spill) {
    // DESIGN section 3, CONNECTING: the client sees no error; the session spills.
    connect_to(
        fl,
        session::Route{
            session::Route::Kind::kSpill, UINT32_MAX, config_.spill_ip, config_.spill_port, {}});
    return;
  }
  end_session(fl, "spill_unavailable", "neither the owner nor the spill listener answered");
  refuse(fl, "owner unavailable, retry later", "neither the owner nor the spill listener answered");
}

void Lcore::abort_flow(Flow& fl, bool reset_client) {
  release_owner_leg(fl, true);
  if (reset_client) {
    send_to_client(fl, Seg{fl.snd_nxt, 0, net::kRst, 0});
    ++counters_.resets_sent;
  }
  free_flow(fl);
}

Lcore::SynAnswer Lcore::owner_syn_answer(Flow& fl, Frame* f, net::Packet& p) {
  Leg& o = fl.owner;
  const bool acks_syn = (p.flags & net::kAck) && p.ack == fl.client_isn + 1;
  if ((p.flags & net::kRst) && acks_syn) {
    drop(f);
    return SynAnswer::kRefused;
  }
  if ((p.flags & net::kAck) && !acks_syn && !(p.flags & net::kRst)) {
    // An ACK of something else: most likely the owner's TIME_WAIT of an earlier connection
    // on this local port answering the SYN. As a host in SYN-SENT (RFC 793), reset it
    // <SEQ=SEG.ACK>: that ends the TIME_WAIT. The SYN then goes again at once, behind the
    // RST on the same path, rather than a whole syn_rto_ms later; once per attempt, so an
    // owner that keeps answering so is left to the SYN's own timer.
    send_to_owner(fl, Seg{p.ack, 0, net::kRst, 0});
    ++counters_.resets_sent;
    drop(f);
    if (!fl.syn_after_reset) {
      fl.syn_after_reset = true;
      ++counters_.retransmits;
      send_owner_syn(fl);
    }
    return SynAnswer::kOther;
  }
  if ((p.flags & (net::kSyn | net::kAck | net::kRst)) != (net::kSyn | net::kAck) || !acks_syn) {
    drop(f);
    return SynAnswer::kOther;
  }
  o.peer_mac = p.src_mac;
  o.wscale_ok = fl.client.wscale_ok && p.options.has_window_scale;
  o.peer_wscale = o.wscale_ok ? std::min<uint8_t>(p.options.window_scale, 14) : 0;
  o.our_wscale = o.wscale_ok ? fl.client.peer_wscale : 0;
  o.sack_ok = fl.client.sack_ok && p.options.sack_permitted;
  o.ts_ok = fl.client.ts_ok && p.options.has_timestamps;
  o.ts_recent = p.options.timestamps.value;
  o.peer_mss = p.options.has_mss ? p.options.mss : 536;
  o.peer_window = p.window;  // a SYN's window is never scaled
  fl.owner_isn = p.seq;
  fl.o_rcv_nxt = p.seq + 1;
  fl.o_snd_una = fl.client_isn + 1;
  // The client keeps seeing timestamps that never go back (it saw the gateway's first).
  fl.ts_offset = ts_now() + 1 - o.ts_recent;
  fl.o2c = splice::SeqMap(fl.our_isn - fl.owner_isn);
  fl.greeting_fill = 0;
  fl.rtx_at_ms = 0;
  fl.retries = 0;
  fl.rto_ms = config_.rto_initial_ms;
  drop(f);
  return SynAnswer::kAccepted;
}

void Lcore::owner_binding(Flow& fl, Frame* f, net::Packet& p) {
  if (!tcp_checksum_ok(f, p)) {
    ++counters_.bad_tcp_checksum;
    drop(f);
    return;
  }
  if (fl.state == FlowState::kPrelude) {
    login_binding(fl, f, p);
    return;
  }
  if (fl.state == FlowState::kConnecting) {
    switch (owner_syn_answer(fl, f, p)) {
      case SynAnswer::kOther:
        return;
      case SynAnswer::kRefused:
        owner_failed(fl, true);
        return;
      case SynAnswer::kAccepted:
        break;
    }
    Slot& s = *slots_[fl.slot];
    s.owner_greeting.emplace(config_.session.frame_limits, s.prelude->version(),
                             s.greeting_headers);
    // The owner's CONNECTED must agree with the heart-beats the client was told.
    s.owner_greeting->expect_heart_beats(s.prelude->client_heart_beat(),
                                         s.prelude->told_heart_beat());
    fl.state = FlowState::kReplay;
    send_replay(fl, false);
    arm(fl);
    return;
  }
  if (fl.state != FlowState::kReplay) {
    drop(f);
    return;
  }
  if (p.flags & net::kRst) {
    drop(f);
    if (p.seq != fl.o_rcv_nxt) return;
    ++counters_.owner_errors;
    end_session(fl, "owner_reset", {});
    free_local_port(fl);
    refuse(fl, "owner closed the connection", "the owner reset the connection after the replay");
    return;
  }
  if (p.flags & net::kSyn) {
    // Our ACK of its SYN-ACK was lost: the replay's next segment acknowledges it again.
    drop(f);
    send_replay(fl, true);
    return;
  }
  if (!(p.flags & net::kAck)) {
    drop(f);
    return;
  }
  owner_ack(fl, p);
  if (fl.greeting_done && (p.payload_bytes > 0 || (p.flags & net::kFin))) {
    // Owner bytes after its CONNECTED (a RECEIPT for the replayed SEND, say): when this
    // segment's ACK completes the replay the flow splices now and the bytes go straight on;
    // otherwise they are not acknowledged and the owner sends them again.
    maybe_splice(fl);
    if (fl.state == FlowState::kSpliced) {
      from_owner(fl, f, p);
      return;
    }
  }
  if (p.payload_bytes > 0 || (p.flags & net::kFin)) {
    greeting_bytes(fl, f, p);
    if (fl.state != FlowState::kReplay) return;
  } else {
    drop(f);
  }
  send_replay(fl, false);
  maybe_splice(fl);
}

void Lcore::owner_ack(Flow& fl, const net::Packet& p) {
  Leg& o = fl.owner;
  if (o.ts_ok && p.options.has_timestamps && seq_leq(p.seq, fl.o_rcv_nxt))
    o.ts_recent = p.options.timestamps.value;
  o.peer_window = uint32_t(p.window) << o.peer_wscale;
  if (seq_gt(p.ack, fl.o_snd_una) && seq_leq(p.ack, fl.o_snd_nxt)) {
    fl.o_snd_una = p.ack;
    fl.retries = 0;
    fl.rto_ms = config_.rto_initial_ms;
    fl.rtx_at_ms = 0;
  }
}

Lcore::GreetingStep Lcore::read_greeting(Flow& fl, Frame* f, net::Packet& p,
                                         session::GreetingResult* r) {
  const Seg ack{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)};
  if (seq_gt(p.seq, fl.o_rcv_nxt)) {
    ++counters_.out_of_order;
    drop(f);
    send_to_owner(fl, ack);
    return GreetingStep::kWait;
  }
  const uint32_t end = p.seq + p.payload_bytes;
  if (seq_leq(end, fl.o_rcv_nxt)) {
    drop(f);
    if (p.flags & net::kFin) return GreetingStep::kClosed;
    ++counters_.duplicates;
    send_to_owner(fl, ack);
    return GreetingStep::kWait;
  }
  Slot& s = *slots_[fl.slot];
  const std::string_view fresh = payload_of(f, p).substr(fl.o_rcv_nxt - p.seq);
  const uint32_t room = s.greeting_bytes_max - fl.greeting_fill;
  const uint32_t n = uint32_t(std::min<size_t>(fresh.size(), room));
  std::memcpy(s.greeting.get() + fl.greeting_fill, fresh.data(), n);
  fl.greeting_fill += n;
  drop(f);
  *r = s.owner_greeting->on_bytes(std::string_view(s.greeting.get(), fl.greeting_fill));
  if (r->kind != session::GreetingResult::Kind::kNeedMore) return GreetingStep::kDone;
  if (n < fresh.size()) return GreetingStep::kTooLarge;
  fl.o_rcv_nxt += n;
  send_to_owner(fl, Seg{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
  return GreetingStep::kWait;
}

void Lcore::greeting_bytes(Flow& fl, Frame* f, net::Packet& p) {
  if (fl.greeting_done) {
    // Owner bytes after its CONNECTED before the splice: not acknowledged, the owner sends
    // them again and they reach the client through the splice.
    drop(f);
    return;
  }
  session::GreetingResult r;
  switch (read_greeting(fl, f, p, &r)) {
    case GreetingStep::kWait:
      return;
    case GreetingStep::kClosed:
      ++counters_.owner_errors;
      end_session(fl, "owner_closed", {});
      release_owner_leg(fl, true);
      refuse(fl, "owner closed the connection", "the owner closed before its CONNECTED");
      return;
    case GreetingStep::kTooLarge:
      ++counters_.owner_errors;
      end_session(fl, "owner_protocol_error", "the owner's first frame is too large");
      release_owner_leg(fl, true);
      refuse(fl, "owner sent an invalid greeting", "the owner's first frame is too large");
      return;
    case GreetingStep::kDone:
      break;
  }
  Slot& s = *slots_[fl.slot];
  if (r.heart_beat_check != session::HeartBeatCheck::kSame) {
    const bool refused = r.heart_beat_check == session::HeartBeatCheck::kOwnerStricter;
    ++(refused ? counters_.heartbeat_mismatch_refused : counters_.heartbeat_mismatch_allowed);
    router_.heart_beat_mismatch(fl.node, s.prelude->client_heart_beat(),
                                s.prelude->told_heart_beat(), r.heart_beat, r.heart_beat_check);
  }
  switch (r.kind) {
    case session::GreetingResult::Kind::kNeedMore:
      SLUICE_ASSERT(false);
      return;
    case session::GreetingResult::Kind::kStrip: {
      const uint32_t g = uint32_t(r.consumed);
      fl.greeting_done = true;
      s.beat_at_ms = 0;  // what the client is sent is fixed from here: the splice maps it
      if (detail::FlowDestination& d = destinations_[index_of(fl)];
          d.flow_id == fl.id && d.placement_pending) {
        d.placement_pending = false;
        if (placement_budget_.take(fl.client.rx.src_ip, session::Nanos(now_ns_))) {
          router_.confirm_placement(session::QueueKey{d.vhost, d.queue, d.default_route}, fl.node);
        } else {
          ++counters_.placements_rate_limited;
        }
      }
      fl.o_rcv_nxt = fl.owner_isn + 1 + g;
      const bool edited = fl.o2c.add(splice::SeqEdit{fl.owner_isn + 1, g, s.injected_bytes});
      SLUICE_ASSERT(edited);
      send_to_owner(fl, Seg{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
      return;
    }
    case session::GreetingResult::Kind::kForwardError:
    case session::GreetingResult::Kind::kProtocolError: {
      ++counters_.owner_errors;
      end_session(fl,
                  r.kind == session::GreetingResult::Kind::kForwardError ? "owner_error"
                                                                         : "owner_protocol_error",
                  r.kind == session::GreetingResult::Kind::kForwardError ? r.message : r.reason);
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

void Lcore::send_replay(Flow& fl, bool retransmit) {
  if (fl.state != FlowState::kReplay) return;
  Slot& s = *slots_[fl.slot];
  const uint32_t begin = fl.replay_seq;
  const uint32_t end = begin + fl.replay_bytes;
  // Send within the owner's window, and at least one segment (a zero window is probed).
  const uint32_t mss = segment_bytes_max(fl.owner.peer_mss, config_.mss, fl.owner.ts_ok);
  const uint32_t limit = fl.o_snd_una + std::max(fl.owner.peer_window, mss);
  uint32_t at = retransmit ? fl.o_snd_una : fl.o_snd_nxt;
  bool sent = false;
  while (seq_lt(at, end) && seq_lt(at, limit)) {
    uint32_t n = std::min(mss, end - at);
    n = std::min(n, limit - at);
    const bool last = at + n == end;
    send_to_owner(
        fl, Seg{at, fl.o_rcv_nxt, uint8_t(net::kAck | (last ? net::kPsh : 0)), owner_window(fl),
                std::span<const uint8_t>(
                    reinterpret_cast<const uint8_t*>(s.buffer.get()) + (at - begin), n)});
    if (retransmit) ++counters_.retransmits;
    sent = true;
    at += n;
  }
  if (retransmit && !sent) {
    // Everything is acknowledged: a bare ACK (e.g. for a repeated SYN-ACK).
    send_to_owner(fl, Seg{fl.o_snd_nxt, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
  }
  if (seq_gt(at, fl.o_snd_nxt)) fl.o_snd_nxt = at;
  update_rtx(fl);
}

void Lcore::update_rtx(Flow& fl) {
  const bool client_out = fl.snd_una != fl.snd_nxt;
  const bool owner_leg = fl.state == FlowState::kReplay ||
                         fl.login == detail::LoginLeg::kGreeting ||
                         fl.login == detail::LoginLeg::kHeld;
  const bool owner_out = owner_leg && fl.o_snd_una != fl.o_snd_nxt;
  // The SYN's own interval.
  if (fl.state == FlowState::kConnecting || fl.login == detail::LoginLeg::kConnecting) return;
  if (!client_out && !owner_out) {
    fl.rtx_at_ms = 0;
  } else if (fl.rtx_at_ms == 0) {
    fl.rtx_at_ms = now_ms_ + fl.rto_ms;
  }
  arm(fl);
}

void Lcore::maybe_splice(Flow& fl) {
  if (fl.state != FlowState::kReplay || !fl.greeting_done) return;
  if (fl.o_snd_una != fl.replay_seq + fl.replay_bytes) return;
  // The client must hold every byte the gateway injected: after the switch nobody would
  // send them again.
  if (fl.snd_una != fl.snd_nxt) return;
  fl.state = FlowState::kSpliced;
  // The parked segments first: they came before whatever the caller still holds.
  release_parked(fl, true);
  slots_[fl.slot]->reset();
  free_slots_.push_back(fl.slot);
  --slots_in_use_;
  fl.slot = detail::kNoSlot;
  fl.rtx_at_ms = 0;
  fl.last_seen_ms = now_ms_;
  fl.deadline_ms = now_ms_ + config_.established_idle_ms;
  fl.owner_seq_max = fl.o_snd_nxt;
  prepare_fast(fl);
  ++counters_.spliced;
  arm(fl);
}

bool Lcore::park(Flow& fl, Frame* f) {
  SLUICE_ASSERT(fl.slot != detail::kNoSlot);
  Slot& s = *slots_[fl.slot];
  if (s.parked_count == kParkedPerFlowMax || parked_ >= config_.parked_frames_max) {
    ++counters_.binding_park_full;
    return false;
  }
  s.parked[s.parked_count++] = f;
  ++parked_;
  ++counters_.binding_parked;
  return true;
}

void Lcore::release_parked(Flow& fl, bool send_on) {
  Slot& s = *slots_[fl.slot];
  const uint32_t n = s.parked_count;
  s.parked_count = 0;
  parked_ -= n;
  for (uint32_t i = 0; i < n; ++i) {
    Frame* f = s.parked[i];
    net::Packet p;
    // Parsed once already; the frame is unchanged since.
    if (!send_on || parse_frame(f, &p) != net::Reason::kOk) {
      drop(f);
      continue;
    }
    from_client(fl, f, p);
  }
}

}  // namespace sluice::dpdk::engine
