// Splice mode, the fast path: full-NAT rewrite of both legs' segments in place, sequence and
// ACK translation through the flow's maps, SACK blocks shifted, windows rescaled, timestamps
// offset, incremental checksums; FIN and RST end the flow after a linger.
#include <algorithm>
#include <cstring>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/engine/slot.h"
#include "dataplane/dpdk/net/rewrite.h"

namespace sluice::dpdk::engine {

using detail::FlowState;

namespace {

void set_macs(Frame* f, const net::MacAddr& dst, const net::MacAddr& src) {
  std::memcpy(f->data, dst.bytes.data(), 6);
  std::memcpy(f->data + 6, src.bytes.data(), 6);
}

}  // namespace

bool Lcore::ack_storm(Leg& leg, const net::Packet& p) {
  if (p.payload_bytes != 0 || (p.flags & ~(net::kAck | net::kPsh | net::kEce | net::kCwr))) {
    leg.storm_count = 0;
    return false;
  }
  if (p.ack != leg.last_ack || p.window != leg.last_window) {
    leg.last_ack = p.ack;
    leg.last_window = p.window;
    leg.storm_count = 0;
    return false;
  }
  const uint64_t window = now_ms_ / 10;
  if (window != leg.storm_window_ms) {
    leg.storm_window_ms = window;
    leg.storm_count = 0;
  }
  return ++leg.storm_count > config_.ack_storm_max;
}

void Lcore::from_client(Flow& fl, Frame* f, net::Packet& p) {
  fl.last_seen_ms = now_ms_;
  if (ack_storm(fl.client, p)) {
    ++counters_.ack_storm_drops;
    drop(f);
    return;
  }
  if (p.payload_bytes != 0 && fl.c2o.edits() != 0 && fl.c2o.removed(p.seq)) {
    // Bytes of the prelude: the gateway acknowledged them long ago.
    ++counters_.removed_range;
    drop(f);
    return;
  }
  const uint32_t src_seq = p.seq;  // the rewrites keep p in step with the bytes
  set_macs(f, fl.owner.peer_mac, config_.port_macs[fl.owner.port]);
  // Every change below, then one checksum update per header.
  net::SegmentRewrite rw(f->bytes(), p);
  rw.src_ip(fl.local_ip);
  rw.dst_ip(fl.owner.rx.src_ip);
  rw.src_port(fl.local_port);
  rw.dst_port(fl.owner.rx.src_port);
  const uint32_t seq = fl.c2o.to_dest(p.seq);
  rw.seq(seq);
  const uint32_t seq_end = seq + p.payload_bytes + ((p.flags & net::kFin) ? 1 : 0);
  if (splice::seq_gt(seq_end, fl.owner_seq_max)) fl.owner_seq_max = seq_end;
  if (p.flags & net::kAck) {
    const uint32_t client_ack = p.ack;
    rw.ack(fl.o2c.to_source(client_ack));
    if (fl.o2c.edits() != 0) fl.o2c.fold(client_ack);
  }
  for (size_t i = 0; i < p.options.sack_count; ++i) {
    const net::SackBlock& s = p.options.sack[i];
    const auto m = fl.o2c.to_source(splice::SackBlock{s.left, s.right});
    // A block of only injected bytes becomes empty; receivers ignore it.
    rw.sack_block(i, m ? net::SackBlock{m->left, m->right} : net::SackBlock{p.ack, p.ack});
  }
  if (fl.client.peer_wscale != fl.owner.our_wscale) {
    rw.window(splice::rescale_window(p.window, fl.client.peer_wscale, fl.owner.our_wscale));
  }
  if (fl.owner.ts_ok && p.options.has_timestamps) {
    rw.timestamps(net::Timestamps{p.options.timestamps.value,
                                  p.options.timestamps.echo_reply - fl.ts_offset});
  }
  rw.finish();
  ++counters_.c2o_packets;
  counters_.c2o_bytes += p.payload_bytes;
  fl.spliced_bytes[1] += p.payload_bytes;
  f->port = fl.owner.port;
  send(f);
  if (p.flags & (net::kFin | net::kRst)) after_fin_or_rst(fl, p, src_seq, true);
}

void Lcore::from_owner(Flow& fl, Frame* f, net::Packet& p) {
  fl.last_seen_ms = now_ms_;
  if (ack_storm(fl.owner, p)) {
    ++counters_.ack_storm_drops;
    drop(f);
    return;
  }
  if (p.payload_bytes != 0 && fl.o2c.edits() != 0 && fl.o2c.removed(p.seq)) {
    // The owner sends its CONNECTED again: the gateway's ACK of it was lost. Acknowledge it
    // once more (with the client's latest sequence number) instead of forwarding it.
    ++counters_.removed_range;
    drop(f);
    send_to_owner(fl, Seg{fl.owner_seq_max, fl.o_rcv_nxt, net::kAck, owner_window(fl)});
    return;
  }
  const uint32_t src_seq = p.seq;
  set_macs(f, fl.client.peer_mac, config_.port_macs[fl.client.port]);
  net::SegmentRewrite rw(f->bytes(), p);
  rw.src_ip(fl.client.rx.dst_ip);
  rw.dst_ip(fl.client.rx.src_ip);
  rw.src_port(fl.client.rx.dst_port);
  rw.dst_port(fl.client.rx.src_port);
  rw.seq(fl.o2c.to_dest(p.seq));
  if (p.flags & net::kAck) {
    const uint32_t owner_ack = p.ack;
    rw.ack(fl.c2o.to_source(owner_ack));
    if (fl.c2o.edits() != 0) fl.c2o.fold(owner_ack);
  }
  for (size_t i = 0; i < p.options.sack_count; ++i) {
    const net::SackBlock& s = p.options.sack[i];
    const auto m = fl.c2o.to_source(splice::SackBlock{s.left, s.right});
    rw.sack_block(i, m ? net::SackBlock{m->left, m->right} : net::SackBlock{p.ack, p.ack});
  }
  if (fl.owner.peer_wscale != fl.client.our_wscale) {
    rw.window(splice::rescale_window(p.window, fl.owner.peer_wscale, fl.client.our_wscale));
  }
  if (fl.owner.ts_ok && p.options.has_timestamps) {
    rw.timestamps(net::Timestamps{p.options.timestamps.value + fl.ts_offset,
                                  p.options.timestamps.echo_reply});
  }
  rw.finish();
  ++counters_.o2c_packets;
  counters_.o2c_bytes += p.payload_bytes;
  fl.spliced_bytes[0] += p.payload_bytes;
  f->port = fl.client.port;
  send(f);
  if (p.flags & (net::kFin | net::kRst)) after_fin_or_rst(fl, p, src_seq, false);
}

// from_client() and from_owner() for a segment that parse_established() took, on a flow whose
// sequence maps hold no edit any more (every injected and removed byte acknowledged: a base
// each) and without FIN or RST: the same frame out, with none of the general path's cases.
void Lcore::client_established(Flow& fl, Frame* f, const net::Packet& p) {
  fl.last_seen_ms = now_ms_;
  if (ack_storm(fl.client, p)) {
    ++counters_.ack_storm_drops;
    drop(f);
    return;
  }
  net::SpliceChange c;
  c.dst_mac = fl.owner.peer_mac;
  c.src_mac = config_.port_macs[fl.owner.port];
  c.src_ip = fl.local_ip;
  c.dst_ip = fl.owner.rx.src_ip;
  c.src_port = fl.local_port;
  c.dst_port = fl.owner.rx.src_port;
  c.seq = p.seq + fl.c2o.base();  // SeqMap::to_dest() without edits
  const uint32_t seq_end = c.seq + p.payload_bytes;
  if (splice::seq_gt(seq_end, fl.owner_seq_max)) fl.owner_seq_max = seq_end;
  if (p.flags & net::kAck) c.ack = p.ack - fl.o2c.base();  // SeqMap::to_source()
  if (fl.client.peer_wscale != fl.owner.our_wscale) {
    c.window = splice::rescale_window(p.window, fl.client.peer_wscale, fl.owner.our_wscale);
  }
  if (fl.owner.ts_ok && p.options.has_timestamps) {
    c.timestamps =
        net::Timestamps{p.options.timestamps.value, p.options.timestamps.echo_reply - fl.ts_offset};
  }
  net::rewrite_established(f->bytes(), p, c);
  ++counters_.c2o_packets;
  counters_.c2o_bytes += p.payload_bytes;
  fl.spliced_bytes[1] += p.payload_bytes;
  f->port = fl.owner.port;
  send(f);
}

void Lcore::owner_established(Flow& fl, Frame* f, const net::Packet& p) {
  fl.last_seen_ms = now_ms_;
  if (ack_storm(fl.owner, p)) {
    ++counters_.ack_storm_drops;
    drop(f);
    return;
  }
  net::SpliceChange c;
  c.dst_mac = fl.client.peer_mac;
  c.src_mac = config_.port_macs[fl.client.port];
  c.src_ip = fl.client.rx.dst_ip;
  c.dst_ip = fl.client.rx.src_ip;
  c.src_port = fl.client.rx.dst_port;
  c.dst_port = fl.client.rx.src_port;
  c.seq = p.seq + fl.o2c.base();
  if (p.flags & net::kAck) c.ack = p.ack - fl.c2o.base();
  if (fl.owner.peer_wscale != fl.client.our_wscale) {
    c.window = splice::rescale_window(p.window, fl.owner.peer_wscale, fl.client.our_wscale);
  }
  if (fl.owner.ts_ok && p.options.has_timestamps) {
    c.timestamps =
        net::Timestamps{p.options.timestamps.value + fl.ts_offset, p.options.timestamps.echo_reply};
  }
  net::rewrite_established(f->bytes(), p, c);
  ++counters_.o2c_packets;
  counters_.o2c_bytes += p.payload_bytes;
  fl.spliced_bytes[0] += p.payload_bytes;
  f->port = fl.client.port;
  send(f);
}

void Lcore::linger(Flow& fl) {
  if (fl.state == FlowState::kLinger) return;
  ++lingering_;
  fl.state = FlowState::kLinger;
  // At the tail of the linger list: its head has lingered longest and gives way first when the
  // flow table or the local ports run out.
  const uint32_t id = index_of(fl);
  fl.linger_prev = linger_tail_;
  fl.linger_next = detail::kNoSlot;
  if (linger_tail_ != detail::kNoSlot) {
    flows_[linger_tail_].linger_next = id;
  } else {
    linger_head_ = id;
  }
  linger_tail_ = id;
}

// A SYN on the client tuple of a flow that ended: the client's port came round again while the
// flow lingered. The old connection is over on the client's side (it sends a SYN only from
// CLOSED), so the SYN opens a new session, which gets a cookie and is routed like any other;
// forwarded on the old splice it would reach the old owner without a routing decision (past a
// spill backlog's drain barrier, or to an owner the queue has left). A copy of the flow's own
// first SYN (same ISN) is a straggler and goes the old way.
void Lcore::reopen(Flow& fl, Frame* f, net::Packet& p) {
  if (!tcp_checksum_ok(f, p)) {
    ++counters_.bad_tcp_checksum;
    drop(f);
    return;
  }
  ++counters_.flows_reopened;
  free_flow(fl);
  client_no_flow(f, p);
}

void Lcore::after_fin_or_rst(Flow& fl, const net::Packet& p, uint32_t src_seq, bool from_client) {
  if (p.flags & net::kRst) {
    ++counters_.flow_resets;
    linger(fl);
    fl.deadline_ms = now_ms_ + config_.reset_linger_ms;
    arm(fl);
    return;
  }
  Leg& leg = from_client ? fl.client : fl.owner;
  if (!leg.fin_seen) {
    leg.fin_seen = true;
    leg.fin_seq = src_seq + p.payload_bytes;  // in the sender's own space
  }
  if (fl.client.fin_seen && fl.owner.fin_seen && fl.state == FlowState::kSpliced) {
    linger(fl);
    fl.deadline_ms = now_ms_ + config_.fin_timeout_ms;
    arm(fl);
  }
}

}  // namespace sluice::dpdk::engine
