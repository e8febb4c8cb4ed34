// Segments the gateway sends in its own name: to the client while it is the client's server
// (SYN-ACK, prelude replies, ACKs, FIN), to the owner while it is the owner's client (SYN,
// replay, ACKs), and resets for segments of no flow.
#include <algorithm>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/net/build.h"

namespace sluice::dpdk::engine {

uint32_t Lcore::ts_now() const {
  return uint32_t(now_ms_);
}

uint16_t Lcore::client_window(const Flow& fl) const {
  uint32_t free_bytes = 0;
  if (fl.slot != detail::kNoSlot && fl.state == detail::FlowState::kPrelude) {
    free_bytes = config_.session.prelude_bytes_max - uint32_t(fl.rcv_nxt - fl.client_isn - 1);
  } else if (fl.state == detail::FlowState::kClosing) {
    // Closed as a socket is after close(): its window stays open (bytes get a RST), so that
    // the client's FIN, which a zero window would hold back, ends the flow.
    free_bytes = config_.mss;
  }
  const uint8_t shift = fl.client.wscale_ok ? fl.client.our_wscale : 0;
  return uint16_t(std::min<uint32_t>(free_bytes >> shift, 0xffff));
}

uint16_t Lcore::owner_window(const Flow& fl) const {
  const uint8_t shift = fl.owner.wscale_ok ? fl.owner.our_wscale : 0;
  const uint32_t bytes = std::max(fl.client.peer_window, config_.owner_greeting_bytes_max);
  return uint16_t(std::min<uint32_t>(bytes >> shift, 0xffff));
}

void Lcore::send_to_client(const Flow& fl, const Seg& s) {
  Frame* out = pool_.alloc();
  if (out == nullptr) {
    ++counters_.pool_empty;
    return;
  }
  net::TcpSegment seg;
  seg.src_mac = config_.port_macs[fl.client.port];
  seg.dst_mac = fl.client.peer_mac;
  seg.src_ip = fl.client.rx.dst_ip;
  seg.dst_ip = fl.client.rx.src_ip;
  seg.src_port = fl.client.rx.dst_port;
  seg.dst_port = fl.client.rx.src_port;
  seg.seq = s.seq;
  seg.ack = s.ack;
  seg.flags = s.flags;
  seg.window = s.window;
  if (fl.client.ts_ok) seg.options.timestamps = net::Timestamps{ts_now(), fl.client.ts_recent};
  seg.payload = s.payload;
  out->len = uint32_t(net::build_tcp_segment(seg, out->writable()));
  if (out->len == 0) {
    drop(out);
    return;
  }
  out->port = fl.client.port;
  send(out);
}

void Lcore::send_to_owner(const Flow& fl, const Seg& s) {
  const net::MacAddr* mac = neighbor(fl.next_hop);
  if (mac == nullptr) {
    // The SYN's retransmission timer tries again once the neighbour answers.
    arp_request(fl.owner.port, fl.next_hop);
    return;
  }
  Frame* out = pool_.alloc();
  if (out == nullptr) {
    ++counters_.pool_empty;
    return;
  }
  net::TcpSegment seg;
  seg.src_mac = config_.port_macs[fl.owner.port];
  seg.dst_mac = *mac;
  seg.src_ip = fl.local_ip;
  seg.dst_ip = fl.owner.rx.src_ip;
  seg.src_port = fl.local_port;
  seg.dst_port = fl.owner.rx.src_port;
  seg.seq = s.seq;
  seg.ack = s.ack;
  seg.flags = s.flags;
  seg.window = s.window;
  if (s.syn_options) {
    // The owner sees the client's own options (DESIGN section 7), so the splice needs no MSS
    // clamping and the client's window scale holds on both legs.
    seg.options.mss = fl.client.peer_mss;
    if (fl.client.wscale_ok) seg.options.window_scale = fl.client.peer_wscale;
    seg.options.sack_permitted = fl.client.sack_ok;
    if (fl.client.ts_ok) seg.options.timestamps = net::Timestamps{fl.client.ts_recent, 0};
  } else if (fl.owner.ts_ok) {
    seg.options.timestamps = net::Timestamps{fl.client.ts_recent, fl.owner.ts_recent};
  }
  seg.payload = s.payload;
  out->len = uint32_t(net::build_tcp_segment(seg, out->writable()));
  if (out->len == 0) {
    drop(out);
    return;
  }
  out->port = fl.owner.port;
  send(out);
}

void Lcore::send_reset_reply(const net::Packet& p, uint16_t port) {
  Frame* out = pool_.alloc();
  if (out == nullptr) {
    ++counters_.pool_empty;
    return;
  }
  net::TcpSegment seg;
  seg.src_mac = config_.port_macs[port];
  seg.dst_mac = p.src_mac;
  if (p.has_vlan) seg.vlan_tci = p.vlan_tci;
  seg.src_ip = p.dst_ip;
  seg.dst_ip = p.src_ip;
  seg.src_port = p.dst_port;
  seg.dst_port = p.src_port;
  // RFC 9293 section 3.10.7.1: answer an ACK with its own ack as seq, anything else with an
  // ACK of what it occupied.
  if (p.flags & net::kAck) {
    seg.seq = p.ack;
    seg.flags = net::kRst;
  } else {
    seg.seq = 0;
    seg.ack =
        p.seq + p.payload_bytes + ((p.flags & net::kSyn) ? 1 : 0) + ((p.flags & net::kFin) ? 1 : 0);
    seg.flags = net::kRst | net::kAck;
  }
  out->len = uint32_t(net::build_tcp_segment(seg, out->writable()));
  if (out->len == 0) {
    drop(out);
    return;
  }
  out->port = port;
  ++counters_.resets_sent;
  send(out);
}

}  // namespace sluice::dpdk::engine
