// The lcore's dispatch (parse, ARP, ICMP, TCP to the flow or the handshake, the exception
// path), its neighbours and timers. The flow table and local ports are in flows.cc.
#include "dataplane/dpdk/engine/lcore.h"

#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "dataplane/dpdk/engine/slot.h"
#include "dataplane/dpdk/net/build.h"

namespace sluice::dpdk::engine {

using detail::FlowState;
using detail::kNoSlot;

const char* detail::flow_state_name(FlowState s) {
  switch (s) {
    case FlowState::kFree:
      return "free";
    case FlowState::kPrelude:
      return "prelude";
    case FlowState::kConnecting:
      return "connecting";
    case FlowState::kReplay:
      return "replay";
    case FlowState::kSpliced:
      return "spliced";
    case FlowState::kClosing:
      return "closing";
    case FlowState::kLinger:
      return "linger";
  }
  return "?";
}

namespace {

constexpr uint64_t kTickNs = 1'000'000;  // the wheel's resolution: 1 ms
constexpr uint32_t kWheelSlots = 4096;   // ~4 s per turn; later deadlines take rounds
constexpr size_t kTimersPerTick = 4096;  // bound of one tick's work
constexpr uint64_t kArpRetryMs = 100;

}  // namespace

Result<> LcoreConfig::validate() const {
  if (port_macs.empty()) return failure("no port: port_macs is empty");
  if (virtual_ip == 0) return failure("virtual_ip is not set");
  if (listen_ports.empty()) return failure("listen_ports is empty");
  if (local_ips.empty()) return failure("local_ips is empty: the owner leg needs a source address");
  if (local_port_min == 0 || local_port_min > local_port_max)
    return failure("local_port_min..local_port_max is not a range of ports");
  if (flows_max == 0 || flows_max > (1u << 24)) return failure("flows_max must be 1..16777216");
  if (prelude_flows_max == 0 || prelude_flows_max > flows_max)
    return failure("prelude_flows_max must be 1..flows_max");
  if (neighbors_max == 0) return failure("neighbors_max must be at least 1");
  if (owner_greeting_bytes_max < 64) return failure("owner_greeting_bytes_max must be at least 64");
  if (mss < 536 || mss > 9000) return failure("mss must be 536..9000");
  if (window_scale > 14) return failure("window_scale must be 0..14");
  if (rto_initial_ms == 0 || rto_max_ms < rto_initial_ms)
    return failure("rto_initial_ms must be 1..rto_max_ms");
  if (connect_timeout_ms == 0) return failure("connect_timeout_ms must be positive");
  if (exception_port >= int32_t(port_macs.size())) return failure("exception_port is not a port");
  for (const Route& r : routes) {
    if (r.length > 32) return failure("a route's prefix length is above 32");
    if (r.port >= port_macs.size()) return failure("a route names a port that does not exist");
  }
  return session.validate();
}

Lcore::Lcore(const LcoreConfig& config, session::Router& router, FramePool& pool, uint64_t now_ns,
             session::LoginCache* logins)
    : config_(config),
      router_(router),
      logins_(logins),
      pool_(pool),
      cookies_(std::span<const uint8_t, splice::SynCookies::kKeyBytes>(config.cookie_key)),
      now_ns_(now_ns),
      now_ms_(now_ns / kTickNs),
      flows_(config.flows_max),
      destinations_(config.flows_max),
      tuples_(config.flows_max * 2, config.flow_hash_key),
      timers_(config.flows_max, kTickNs, kWheelSlots, now_ns),
      neighbors_(config.neighbors_max),
      placement_budget_(config.placements_per_source_per_minute) {
  SLUICE_ASSERT(config_.validate().has_value());
  for (uint32_t i = config_.flows_max; i-- > 0;) {
    flows_[i].next_free = free_head_;
    free_head_ = i;
  }
  slots_.reserve(config_.prelude_flows_max);
  free_slots_.reserve(config_.prelude_flows_max);
  for (uint32_t i = config_.prelude_flows_max; i-- > 0;) {
    slots_.push_back(std::make_unique<Slot>(config_));
    free_slots_.push_back(config_.prelude_flows_max - 1 - i);
  }
  const size_t pairs =
      config_.local_ips.size() * (size_t(config_.local_port_max) - config_.local_port_min + 1);
  ports_in_use_.assign((pairs + 63) / 64, 0);
  port_cursor_ = uint32_t(config_.local_port_start % pairs);
  prepare_fast_checks();
}

Lcore::~Lcore() {
  for (size_t i = 0; i < tx_count_; ++i)
    pool_.free(tx_[i]);
  for (const std::unique_ptr<Slot>& s : slots_) {
    for (uint32_t i = 0; i < s->parked_count; ++i)
      pool_.free(s->parked[i]);
  }
}

// ---- the burst -------------------------------------------------------------------------------

void Lcore::advance_clock(uint64_t now_ns) {
  if (now_ns > now_ns_) {
    now_ns_ = now_ns;
    now_ms_ = now_ns / kTickNs;
  }
}

void Lcore::burst(std::span<Frame*> rx, uint64_t now_ns) {
  advance_clock(now_ns);
  counters_.rx_frames += rx.size();
  // Staged as in DPDK's l3fwd: parse every frame of a stage and prefetch its flow's slot in the
  // table, then handle the frames in order, so that the lookups' cache misses overlap instead of
  // each frame waiting for its own. Parsing reads only the frame and the config, so handling an
  // earlier frame never changes how a later one parses.
  for (size_t at = 0; at < rx.size(); at += kStageMax) {
    const size_t n = std::min(kStageMax, rx.size() - at);
    for (size_t i = 0; i < n; ++i) {
      Staged& s = staged_[i];
      Frame* f = rx[at + i];
      s.established = parse_established(f, &s.packet);
      s.reason = s.established ? net::Reason::kOk : parse_frame(f, &s.packet);
      if (s.reason == net::Reason::kOk && s.packet.kind == net::Kind::kTcp) {
        const net::Packet& p = s.packet;
        s.hash = tuples_.hash(flow::Tuple{p.src_ip, p.dst_ip, p.src_port, p.dst_port});
        tuples_.prefetch_hash(s.hash);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      Frame* f = rx[at + i];
      Staged& s = staged_[i];
      if (s.established && splice_established(f, s)) continue;
      handle(f, s);
    }
  }
}

bool Lcore::parse_established(Frame* f, net::Packet* p) const {
  // The kernel's frames (TAP port) are addressed to their next hop: the general path.
  return config_.established_path && !from_kernel(f) &&
         net::parse_established(f->bytes(), config_.port_macs[f->port], p);
}

// What handle_tcp() does with a segment of a spliced or lingering flow, without the general
// parse and dispatch before it. A SYN (a lingering flow's tuple reused) never comes here:
// parse_established() leaves SYNs to the general path. s.packet is what parse_frame() would
// give but for the ARP and ICMP fields and the SACK blocks, which nothing reads in a TCP
// segment without SACK blocks, so the general path takes the frame as it is when this one
// does not.
bool Lcore::splice_established(Frame* f, Staged& s) {
  net::Packet& p = s.packet;
  const flow::Tuple t{p.src_ip, p.dst_ip, p.src_port, p.dst_port};
  const uint32_t id = tuples_.find(t, s.hash);
  if (id == flow::TupleMap::kNone) return false;
  Flow& fl = flows_[id];
  if (fl.state != FlowState::kSpliced && fl.state != FlowState::kLinger) return false;
  ++counters_.established_path;
  // Once both maps are down to their bases, segments without FIN or RST need none of
  // from_client/from_owner's other cases.
  const bool plain =
      fl.c2o.edits() == 0 && fl.o2c.edits() == 0 && (p.flags & (net::kFin | net::kRst)) == 0;
  if (fl.client.rx == t) {
    set_client_port(fl, f->port);
    if (plain) {
      client_established(fl, f, p);
    } else {
      from_client(fl, f, p);
    }
  } else if (plain) {
    owner_established(fl, f, p);
  } else {
    from_owner(fl, f, p);
  }
  return true;
}

void Lcore::tick(uint64_t now_ns) {
  advance_clock(now_ns);
  timers_.advance(
      now_ns_, [this](uint32_t id) { on_timer(id); }, kTimersPerTick);
}

std::span<Frame*> Lcore::take_tx() {
  const size_t n = tx_count_;
  tx_count_ = 0;
  counters_.tx_frames += n;
  return {tx_.data(), n};
}

void Lcore::send(Frame* f) {
  if (tx_count_ == kTxMax) {
    ++counters_.tx_full;
    pool_.free(f);
    return;
  }
  tx_[tx_count_++] = f;
}

void Lcore::drop(Frame* f) {
  pool_.free(f);
}

void Lcore::to_exception(Frame* f) {
  if (config_.exception_port < 0) {
    ++counters_.rx_not_handled;
    drop(f);
    return;
  }
  ++counters_.exception_frames;
  if (kernel_mac_known_ && (f->data[0] & 1) == 0) std::memcpy(f->data, kernel_mac_.bytes.data(), 6);
  f->port = uint16_t(config_.exception_port);
  send(f);
}

net::Reason Lcore::parse_frame(Frame* f, net::Packet* p) const {
  net::ParseOptions po;
  po.verify_tcp_checksum = false;  // verified where the gateway terminates TCP; NAT keeps it
  // The kernel addresses its frames to their next hop, not to the TAP port.
  if (!from_kernel(f)) po.local_mac = &config_.port_macs[f->port];
  return net::parse(f->bytes(), po, p);
}

void Lcore::handle(Frame* f, Staged& s) {
  const net::Reason r = s.reason;
  net::Packet& p = s.packet;
  // The kernel's own frames (through the TAP port) leave by their route, unparsed but for L3.
  if (from_kernel(f)) {
    if (r != net::Reason::kOk) {
      ++counters_.rx_invalid[size_t(r)];
      drop(f);
      return;
    }
    const uint32_t dst = p.kind == net::Kind::kArp ? p.arp.target_ip : p.dst_ip;
    if (!is_local_ip(dst)) {
      kernel_out(f, p, dst);
      return;
    }
    // The kernel talks to the engine itself: the spill listener answering an owner leg, ARP
    // for a local address. Handled like any frame (the TAP's MAC is checked in the parse).
  }
  if (r != net::Reason::kOk) {
    ++counters_.rx_invalid[size_t(r)];
    drop(f);
    return;
  }
  dispatch(f, p, s.hash);
}

void Lcore::kernel_out(Frame* f, const net::Packet& p, uint32_t dst) {
  const Route* route = route_for(dst);
  if (route == nullptr) {
    ++counters_.no_route;
    drop(f);
    return;
  }
  // The host shares the ports' addresses: its frames leave with the port's MAC (in the ARP
  // payload too), and frames for it come back to the TAP with the kernel's own MAC.
  kernel_mac_ = p.src_mac;
  kernel_mac_known_ = true;
  const net::MacAddr& mac = config_.port_macs[route->port];
  std::memcpy(f->data + 6, mac.bytes.data(), 6);
  if (p.kind == net::Kind::kArp) std::memcpy(f->data + p.l3_offset + 8, mac.bytes.data(), 6);
  ++counters_.exception_frames;
  f->port = route->port;
  send(f);
}

void Lcore::dispatch(Frame* f, net::Packet& p, uint32_t tuple_hash) {
  switch (p.kind) {
    case net::Kind::kTcp:
      handle_tcp(f, p, tuple_hash);
      return;
    case net::Kind::kArp:
      handle_arp(f, p);
      return;
    case net::Kind::kIcmpEcho:
      if (is_local_ip(p.dst_ip)) {
        net::icmp_echo_reply_in_place(f->bytes(), p);
        ++counters_.icmp_echo_replies;
        send(f);
        return;
      }
      to_exception(f);
      return;
    case net::Kind::kIcmpOther:
    case net::Kind::kIpv4Other:
      to_exception(f);
      return;
  }
}

bool Lcore::is_local_ip(uint32_t ip) const {
  if (ip == config_.virtual_ip) return true;
  return std::find(config_.local_ips.begin(), config_.local_ips.end(), ip) !=
         config_.local_ips.end();
}

bool Lcore::is_listen(uint32_t ip, uint16_t port) const {
  return ip == config_.virtual_ip &&
         std::find(config_.listen_ports.begin(), config_.listen_ports.end(), port) !=
             config_.listen_ports.end();
}

// ---- ARP and neighbours -------------------------------------------------------------------

void Lcore::handle_arp(Frame* f, net::Packet& p) {
  const net::Arp& a = p.arp;
  const bool for_us = is_local_ip(a.target_ip);
  if (for_us || a.operation == net::kArpReply) {
    // Learn only what we asked for or already know: an ARP flood cannot fill the table.
    for (uint32_t i = 0; i < neighbor_count_; ++i) {
      if (neighbors_[i].ip == a.sender_ip) {
        neighbors_[i].mac = a.sender_mac;
        neighbors_[i].resolved = true;
      }
    }
  }
  if (!for_us) {
    to_exception(f);
    return;
  }
  if (a.operation != net::kArpRequest) {
    drop(f);
    return;
  }
  Frame* out = pool_.alloc();
  if (out == nullptr) {
    ++counters_.pool_empty;
    drop(f);
    return;
  }
  out->len = uint32_t(net::build_arp_reply(p, config_.port_macs[f->port], out->writable()));
  out->port = f->port;
  drop(f);
  if (out->len == 0) {
    drop(out);
    return;
  }
  ++counters_.arp_replies;
  send(out);
}

void Lcore::add_neighbor(uint32_t ip, const net::MacAddr& mac) {
  for (uint32_t i = 0; i < neighbor_count_; ++i) {
    if (neighbors_[i].ip == ip) {
      neighbors_[i].mac = mac;
      neighbors_[i].resolved = true;
      return;
    }
  }
  if (neighbor_count_ == neighbors_.size()) {
    ++counters_.neighbors_full;
    return;
  }
  neighbors_[neighbor_count_++] = Neighbor{ip, mac, 0, true};
}

const net::MacAddr* Lcore::neighbor(uint32_t ip) const {
  for (uint32_t i = 0; i < neighbor_count_; ++i) {
    if (neighbors_[i].ip == ip) return neighbors_[i].resolved ? &neighbors_[i].mac : nullptr;
  }
  return nullptr;
}

const Route* Lcore::route_for(uint32_t ip) const {
  const Route* best = nullptr;
  for (const Route& r : config_.routes) {
    const uint32_t mask = r.length == 0 ? 0 : ~uint32_t(0) << (32 - r.length);
    if ((ip & mask) == (r.prefix & mask) && (best == nullptr || r.length > best->length)) {
      best = &r;
    }
  }
  return best;
}

void Lcore::arp_request(uint16_t port, uint32_t target) {
  Neighbor* n = nullptr;
  for (uint32_t i = 0; i < neighbor_count_; ++i) {
    if (neighbors_[i].ip == target) n = &neighbors_[i];
  }
  if (n == nullptr) {
    if (neighbor_count_ == neighbors_.size()) {
      ++counters_.neighbors_full;
      return;
    }
    n = &neighbors_[neighbor_count_++];
    *n = Neighbor{target, {}, 0, false};
  }
  if (n->asked_ms != 0 && now_ms_ < n->asked_ms + kArpRetryMs) return;
  n->asked_ms = std::max<uint64_t>(now_ms_, 1);
  Frame* out = pool_.alloc();
  if (out == nullptr) {
    ++counters_.pool_empty;
    return;
  }
  // A request is a reply's mirror image: build it from a synthetic "request" to us.
  net::Packet q;
  q.kind = net::Kind::kArp;
  q.arp.operation = net::kArpRequest;
  q.arp.sender_ip = target;
  q.arp.sender_mac = net::kBroadcastMac;
  q.arp.target_ip = config_.local_ips.front();
  q.src_mac = net::kBroadcastMac;
  out->len = uint32_t(net::build_arp_reply(q, config_.port_macs[port], out->writable()));
  if (out->len == 0) {
    drop(out);
    return;
  }
  // Turn the reply into a request: operation 1, target MAC zero.
  uint8_t* arp = out->data + net::kEthernetBytes;
  arp[6] = 0;
  arp[7] = uint8_t(net::kArpRequest);
  std::memset(arp + 18, 0, 6);
  out->port = port;
  ++counters_.arp_requests;
  send(out);
}

// ---- TCP dispatch -------------------------------------------------------------------------

void Lcore::handle_tcp(Frame* f, net::Packet& p, uint32_t tuple_hash) {
  const flow::Tuple t{p.src_ip, p.dst_ip, p.src_port, p.dst_port};
  const uint32_t id = tuples_.find(t, tuple_hash);
  if (id != flow::TupleMap::kNone) {
    Flow& fl = flows_[id];
    if (fl.client.rx == t) {
      if (fl.state == FlowState::kLinger &&
          (p.flags & (net::kSyn | net::kAck | net::kRst)) == net::kSyn && p.seq != fl.client_isn) {
        reopen(fl, f, p);
        return;
      }
      set_client_port(fl, f->port);
      switch (fl.state) {
        case FlowState::kSpliced:
        case FlowState::kLinger:
          from_client(fl, f, p);
          return;
        case FlowState::kPrelude:
        case FlowState::kConnecting:
        case FlowState::kReplay:
          client_prelude(fl, f, p);
          return;
        case FlowState::kClosing:
          client_closing(fl, f, p);
          return;
        case FlowState::kFree:
          break;
      }
      SLUICE_ASSERT(false);
    }
    switch (fl.state) {
      case FlowState::kSpliced:
      case FlowState::kLinger:
        from_owner(fl, f, p);
        return;
      default:
        owner_binding(fl, f, p);
        return;
    }
  }
  if (is_listen(p.dst_ip, p.dst_port)) {
    client_no_flow(f, p);
    return;
  }
  if (is_local_ip(p.dst_ip)) {
    // A segment for a flow that is gone (expired, reset): tell the peer, as a host would.
    if ((p.flags & net::kRst) == 0) send_reset_reply(p, f->port);
    ++counters_.rx_not_handled;
    drop(f);
    return;
  }
  to_exception(f);
}

// ---- timers ----------------------------------------------------------------------------------

void Lcore::arm(Flow& fl) {
  uint64_t at = fl.deadline_ms;
  if (fl.rtx_at_ms != 0 && (at == 0 || fl.rtx_at_ms < at)) at = fl.rtx_at_ms;
  if (at == 0) {
    timers_.cancel(index_of(fl));
    return;
  }
  timers_.arm(index_of(fl), at * kTickNs);
}

void Lcore::on_timer(uint32_t id) {
  Flow& fl = flows_[id];
  if (fl.state == FlowState::kFree) return;
  const bool rtx_due = fl.rtx_at_ms != 0 && now_ms_ >= fl.rtx_at_ms;
  const bool deadline_due = fl.deadline_ms != 0 && now_ms_ >= fl.deadline_ms;
  if (state_timer(fl, rtx_due, deadline_due)) return;
  if (rtx_due && fl.state != FlowState::kSpliced && fl.state != FlowState::kLinger) {
    retransmit_flow(fl);
    return;
  }
  arm(fl);
}

bool Lcore::state_timer(Flow& fl, bool rtx_due, bool deadline_due) {
  switch (fl.state) {
    case FlowState::kFree:
      return true;
    case FlowState::kPrelude:
      return prelude_timer(fl, deadline_due);
    case FlowState::kConnecting:
      if (deadline_due && now_ms_ >= slots_[fl.slot]->bind_deadline_ms) {
        ++counters_.owner_timeouts;
        owner_failed(fl, false);
        return true;
      }
      if (deadline_due) binding_beat(fl);
      if (rtx_due) {
        ++counters_.retransmits;
        send_owner_syn(fl);
        return true;
      }
      arm(fl);
      return true;
    case FlowState::kReplay:
      if (deadline_due && now_ms_ >= slots_[fl.slot]->bind_deadline_ms) {
        ++counters_.owner_timeouts;
        ++counters_.flows_expired;
        if (!fl.to_spill) router_.connect_failed(fl.node);
        end_session(fl, "owner_timeout", {});
        refuse(fl, "owner did not answer",
               "the owner accepted the connection but sent no CONNECTED in time");
        return true;
      }
      if (deadline_due) binding_beat(fl);
      return false;
    case FlowState::kSpliced:
      if (now_ms_ >= fl.last_seen_ms + config_.established_idle_ms) {
        ++counters_.flows_expired;
        free_flow(fl);
        return true;
      }
      fl.deadline_ms = fl.last_seen_ms + config_.established_idle_ms;
      return false;
    case FlowState::kClosing:
    case FlowState::kLinger:
      if (deadline_due) {
        ++counters_.flows_expired;
        free_flow(fl);
        return true;
      }
      return false;
  }
  return false;
}

bool Lcore::prelude_timer(Flow& fl, bool deadline_due) {
  if (login_timer(fl)) return true;
  Slot& s = *slots_[fl.slot];
  if (deadline_due) {
    prelude_beat(fl);
    const session::PreludeEvent e = s.prelude->on_time(session::Nanos(now_ns_));
    if (e.kind == session::PreludeEvent::Kind::kClose) {
      ++counters_.prelude_ends[size_t(e.end)];
      ++counters_.flows_expired;
      end_session(fl, session::prelude_end_name(e.end), {});
      close_client(fl, e.to_client);
      return true;
    }
    fl.deadline_ms = s.prelude_timer_ms();
  }
  if (fl.login == detail::LoginLeg::kConnecting) {
    arm(fl);  // the SYN's retransmission is login_timer's
    return true;
  }
  return false;
}

void Lcore::retransmit_flow(Flow& fl) {
  // One retransmission timer per flow covers both legs' outstanding bytes (RFC 6298 backoff,
  // bounded by retries_max).
  if (++fl.retries > config_.retries_max) {
    ++counters_.retransmit_giveups;
    abort_flow(fl, true);
    return;
  }
  fl.rto_ms = std::min(fl.rto_ms * 2, config_.rto_max_ms);
  fl.rtx_at_ms = 0;
  if (fl.snd_una != fl.snd_nxt) send_injected(fl, true);
  if (fl.state == FlowState::kReplay && fl.o_snd_una != fl.o_snd_nxt) send_replay(fl, true);
  if (fl.state == FlowState::kPrelude && fl.o_snd_una != fl.o_snd_nxt &&
      (fl.login == detail::LoginLeg::kGreeting || fl.login == detail::LoginLeg::kHeld)) {
    send_login(fl, true);
  }
  update_rtx(fl);
}

}  // namespace sluice::dpdk::engine
