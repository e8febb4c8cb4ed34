// The client leg while the gateway is the client's server: the stateless SYN-cookie
// handshake, the prelude as a minimal TCP endpoint (in-order bytes only, every prelude reply
// kept until acknowledged), and the gateway's own close (ERROR, DISCONNECT, limits).
#include <algorithm>
#include <cstring>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/engine/slot.h"
#include "dataplane/dpdk/net/build.h"
#include "dataplane/session/builder.h"

namespace sluice::dpdk::engine {

using detail::FlowState;
using splice::seq_gt;
using splice::seq_leq;
using splice::seq_lt;

namespace {

constexpr uint32_t kCookieSlotSeconds = 64;

splice::FlowKey cookie_key(const net::Packet& p) {
  return {p.src_ip, p.dst_ip, p.src_port, p.dst_port};
}

}  // namespace

void Lcore::client_no_flow(Frame* f, net::Packet& p) {
  if (p.flags & net::kRst) {
    drop(f);
    return;
  }
  if (!tcp_checksum_ok(f, p)) {
    ++counters_.bad_tcp_checksum;
    drop(f);
    return;
  }
  const uint32_t slot = uint32_t(now_ms_ / 1000 / kCookieSlotSeconds);
  if ((p.flags & (net::kSyn | net::kAck)) == net::kSyn) {
    splice::SynOptions o;
    if (p.options.has_mss) o.mss = p.options.mss;
    if (p.options.has_window_scale) o.window_scale = p.options.window_scale;
    o.sack_permitted = p.options.sack_permitted;
    o.timestamps = p.options.has_timestamps;
    const uint32_t cookie = cookies_.make(cookie_key(p), p.seq, o, slot);
    Frame* out = pool_.alloc();
    if (out == nullptr) {
      ++counters_.pool_empty;
      drop(f);
      return;
    }
    net::TcpSegment seg;
    seg.src_mac = config_.port_macs[f->port];
    seg.dst_mac = p.src_mac;
    if (p.has_vlan) seg.vlan_tci = p.vlan_tci;
    seg.src_ip = p.dst_ip;
    seg.dst_ip = p.src_ip;
    seg.src_port = p.dst_port;
    seg.dst_port = p.src_port;
    seg.seq = cookie;
    seg.ack = p.seq + 1;
    seg.flags = net::kSyn | net::kAck;
    seg.window = uint16_t(std::min<uint32_t>(config_.session.prelude_bytes_max, 0xffff));
    seg.options.mss = config_.mss;
    if (p.options.has_window_scale) seg.options.window_scale = config_.window_scale;
    seg.options.sack_permitted = p.options.sack_permitted;
    if (p.options.has_timestamps)
      seg.options.timestamps = net::Timestamps{ts_now(), p.options.timestamps.value};
    out->len = uint32_t(net::build_tcp_segment(seg, out->writable()));
    out->port = f->port;
    drop(f);
    if (out->len == 0) {
      drop(out);
      return;
    }
    ++counters_.syn_cookies_sent;
    send(out);
    return;
  }
  if ((p.flags & (net::kSyn | net::kAck)) == net::kAck) {
    const std::optional<splice::SynOptions> o =
        cookies_.check(cookie_key(p), p.seq - 1, p.ack - 1, slot);
    if (o) {
      client_open(f, p, *o);
      return;
    }
    ++counters_.cookies_bad;
  }
  send_reset_reply(p, f->port);
  drop(f);
}

void Lcore::client_open(Frame* f, net::Packet& p, const splice::SynOptions& o) {
  Flow* flp = alloc_flow();
  if (flp == nullptr) {
    ++counters_.flows_refused;
    send_reset_reply(p, f->port);
    drop(f);
    return;
  }
  Flow& fl = *flp;
  ++counters_.flows_created;
  fl.state = FlowState::kPrelude;
  fl.id = next_flow_id_++;
  fl.created_ms = now_ms_;
  Leg& c = fl.client;
  c.rx = flow::Tuple{p.src_ip, p.dst_ip, p.src_port, p.dst_port};
  c.peer_mac = p.src_mac;
  c.port = f->port;
  c.wscale_ok = o.window_scale.has_value();
  c.peer_wscale = c.wscale_ok ? *o.window_scale : 0;
  c.our_wscale = c.wscale_ok ? config_.window_scale : 0;
  c.sack_ok = o.sack_permitted;
  c.ts_ok = o.timestamps && p.options.has_timestamps;
  c.ts_recent = p.options.timestamps.value;
  c.peer_mss = o.mss;
  c.peer_window = uint32_t(p.window) << c.peer_wscale;
  fl.client_isn = p.seq - 1;
  fl.our_isn = p.ack - 1;
  fl.rcv_nxt = p.seq;
  fl.snd_una = fl.snd_nxt = p.ack;
  fl.rto_ms = config_.rto_initial_ms;
  const bool inserted = tuples_.insert(c.rx, index_of(fl));
  SLUICE_ASSERT(inserted);
  Slot& s = *slots_[fl.slot];
  s.prelude.emplace(config_.session,
                    std::span<char>(s.buffer.get(), config_.session.prelude_bytes_max),
                    session::Nanos(now_ns_), s.prelude_headers);
  fl.deadline_ms = s.prelude_timer_ms();
  if (p.payload_bytes > 0 || (p.flags & net::kFin)) {
    client_prelude(fl, f, p);
    return;
  }
  arm(fl);
  drop(f);
}

void Lcore::client_ack(Flow& fl, const net::Packet& p) {
  Leg& c = fl.client;
  if (c.ts_ok && p.options.has_timestamps && seq_leq(p.seq, fl.rcv_nxt))
    c.ts_recent = p.options.timestamps.value;
  c.peer_window = uint32_t(p.window) << c.peer_wscale;
  if (seq_gt(p.ack, fl.snd_una) && seq_leq(p.ack, fl.snd_nxt)) {
    fl.snd_una = p.ack;
    fl.retries = 0;
    fl.rto_ms = config_.rto_initial_ms;
    fl.rtx_at_ms = 0;
    update_rtx(fl);
  }
}

void Lcore::client_prelude(Flow& fl, Frame* f, net::Packet& p) {
  if (!tcp_checksum_ok(f, p)) {
    ++counters_.bad_tcp_checksum;
    drop(f);
    return;
  }
  if (p.flags & net::kRst) {
    // RFC 5961: only a RST at exactly rcv_nxt resets; others get a challenge ACK.
    if (p.seq == fl.rcv_nxt) {
      drop(f);
      abort_flow(fl, false);
      return;
    }
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, client_window(fl)});
    drop(f);
    return;
  }
  if ((p.flags & net::kSyn) || !(p.flags & net::kAck)) {
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, client_window(fl)});
    drop(f);
    return;
  }
  client_ack(fl, p);
  const bool fin = p.flags & net::kFin;
  if (fl.state != FlowState::kPrelude) {
    // Binding. If this segment's ACK completes it, the flow splices and the segment goes on
    // (after the ones parked before it); otherwise a segment with bytes or a FIN waits in the
    // slot for the splice. What cannot wait is not acknowledged: the client sends it again.
    maybe_splice(fl);
    if (fl.state == FlowState::kSpliced) {
      from_client(fl, f, p);
      return;
    }
    if ((p.payload_bytes != 0 || fin) && park(fl, f)) return;
    drop(f);
    return;
  }
  if (p.payload_bytes == 0 && !fin) {
    drop(f);
    return;
  }
  const uint32_t end = p.seq + p.payload_bytes;
  if (seq_gt(p.seq, fl.rcv_nxt)) {
    ++counters_.out_of_order;
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, client_window(fl)});
    drop(f);
    return;
  }
  if (seq_lt(end, fl.rcv_nxt) || (end == fl.rcv_nxt && !fin)) {
    ++counters_.duplicates;
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, client_window(fl)});
    drop(f);
    return;
  }
  const std::string_view fresh = payload_of(f, p).substr(fl.rcv_nxt - p.seq);
  Slot& s = *slots_[fl.slot];
  const size_t taken = s.prelude->feed(fresh, session::Nanos(now_ns_));
  fl.rcv_nxt += uint32_t(taken);
  drop(f);
  const uint32_t sent_before = fl.snd_nxt;
  if (fin && taken == fresh.size()) {
    // The client closed before naming a destination: the prelude ends with it.
    fl.rcv_nxt += 1;
    fl.client.fin_seen = true;
    ++counters_.prelude_ends[size_t(session::PreludeEnd::kNone)];
    close_client(fl, {});
    return;
  }
  prelude_events(fl);
  if (fl.state == FlowState::kFree) return;
  if (fl.snd_nxt == sent_before) {
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, client_window(fl)});
  }
  fl.deadline_ms = fl.state == FlowState::kPrelude ? s.prelude_timer_ms() : fl.deadline_ms;
  arm(fl);
}

void Lcore::prelude_events(Flow& fl) {
  Slot& s = *slots_[fl.slot];
  for (;;) {
    const session::PreludeEvent e = s.prelude->next();
    switch (e.kind) {
      case session::PreludeEvent::Kind::kNeedMore:
        return;
      case session::PreludeEvent::Kind::kReply:
        if (!inject(fl, e.to_client)) return;
        send_injected(fl, false);
        arm_beats(s);
        continue;
      case session::PreludeEvent::Kind::kLogin:
        // Answered at once (the login cache, or no node to ask), or later by the node.
        check_login(fl);
        if (fl.state != FlowState::kPrelude || fl.login != detail::LoginLeg::kNone) return;
        continue;
      case session::PreludeEvent::Kind::kBind:
        bind(fl);
        return;
      case session::PreludeEvent::Kind::kClose:
        ++counters_.prelude_ends[size_t(e.end)];
        if (e.end != session::PreludeEnd::kNone)
          end_session(fl, session::prelude_end_name(e.end), {});
        close_client(fl, e.to_client);
        return;
    }
  }
}

void Lcore::arm_beats(Slot& s) {
  const uint32_t ms = s.prelude->heart_beat_intervals().server_to_client_ms;
  s.beat_at_ms = ms == 0 ? 0 : now_ms_ + ms;
}

void Lcore::prelude_beat(Flow& fl) {
  Slot& s = *slots_[fl.slot];
  if (s.beat_at_ms == 0 || now_ms_ < s.beat_at_ms) return;
  // A prelude that lasts very long at a short interval stops beating rather than filling the
  // buffer its final ERROR needs (the client may then give up on it).
  if (s.injected_bytes + 1 > Slot::kInjectBytesMax - Slot::kInjectRoomForEnd) {
    s.beat_at_ms = 0;
    return;
  }
  if (!inject(fl, "\n")) return;
  send_injected(fl, false);
  ++counters_.heartbeats_sent;
  arm_beats(s);
}

bool Lcore::inject(Flow& fl, std::string_view bytes) {
  Slot& s = *slots_[fl.slot];
  if (bytes.size() > Slot::kInjectBytesMax - s.injected_bytes) {
    // Only a prelude that sends many receipted frames before a destination gets here.
    abort_flow(fl, true);
    return false;
  }
  std::memcpy(s.injected.data() + s.injected_bytes, bytes.data(), bytes.size());
  s.injected_bytes += uint32_t(bytes.size());
  return true;
}

void Lcore::send_injected(Flow& fl, bool retransmit) {
  Slot& s = *slots_[fl.slot];
  const uint32_t data_end = fl.our_isn + 1 + s.injected_bytes;
  uint32_t at = retransmit ? fl.snd_una : fl.snd_nxt;
  const uint32_t mss = segment_bytes_max(fl.client.peer_mss, config_.mss, fl.client.ts_ok);
  while (seq_lt(at, data_end)) {
    const uint32_t n = std::min(mss, data_end - at);
    const uint32_t off = at - fl.our_isn - 1;
    const bool last = at + n == data_end;
    uint8_t flags = net::kAck | (last ? net::kPsh : 0);
    if (last && fl.our_fin) flags |= net::kFin;
    send_to_client(fl, Seg{at, fl.rcv_nxt, flags, client_window(fl),
                           std::span<const uint8_t>(
                               reinterpret_cast<const uint8_t*>(s.injected.data()) + off, n)});
    if (retransmit) ++counters_.retransmits;
    at += n;
    if (last && fl.our_fin) at += 1;
  }
  if (fl.our_fin && at == data_end) {
    // A FIN alone (no bytes left to send, or the FIN itself is what is unacknowledged).
    send_to_client(fl, Seg{data_end, fl.rcv_nxt, net::kAck | net::kFin, client_window(fl)});
    if (retransmit) ++counters_.retransmits;
    at += 1;
  }
  if (seq_gt(at, fl.snd_nxt)) fl.snd_nxt = at;
  update_rtx(fl);
}

void Lcore::close_client(Flow& fl, std::string_view last_bytes) {
  release_owner_leg(fl, true);
  if (!last_bytes.empty() && !inject(fl, last_bytes)) return;
  fl.state = FlowState::kClosing;
  fl.our_fin = true;
  fl.deadline_ms = now_ms_ + config_.fin_timeout_ms;
  send_injected(fl, false);
  arm(fl);
}

void Lcore::refuse(Flow& fl, std::string_view message, std::string_view detail) {
  Slot& s = *slots_[fl.slot];
  char buf[512];
  session::ErrorFrame e;
  e.message = message;
  e.detail = detail;
  const auto frame =
      session::build_error(std::span<char>(buf, sizeof buf),
                           s.prelude ? s.prelude->version() : session::Version::k1_0, e);
  close_client(fl, frame ? *frame : std::string_view{});
}

void Lcore::client_closing(Flow& fl, Frame* f, net::Packet& p) {
  if (!tcp_checksum_ok(f, p)) {
    ++counters_.bad_tcp_checksum;
    drop(f);
    return;
  }
  if (p.flags & net::kRst) {
    drop(f);
    free_flow(fl);
    return;
  }
  if (!(p.flags & net::kAck)) {
    drop(f);
    return;
  }
  client_ack(fl, p);
  const uint32_t end = p.seq + p.payload_bytes;
  if (p.payload_bytes > 0 && seq_gt(end, fl.rcv_nxt)) {
    // New data for a session the gateway has closed: reset, as a closed socket would.
    drop(f);
    abort_flow(fl, true);
    return;
  }
  bool client_fin_now = false;
  if ((p.flags & net::kFin) && end == fl.rcv_nxt) {
    fl.rcv_nxt += 1;
    client_fin_now = true;
    fl.client.fin_seen = true;
  }
  drop(f);
  const bool ours_acked = fl.snd_una == fl.snd_nxt;
  if (client_fin_now || (p.flags & net::kFin)) {
    send_to_client(fl, Seg{fl.snd_nxt, fl.rcv_nxt, net::kAck, 0});
  }
  if (ours_acked && fl.client.fin_seen) {
    free_flow(fl);
    return;
  }
  arm(fl);
}

}  // namespace sluice::dpdk::engine
