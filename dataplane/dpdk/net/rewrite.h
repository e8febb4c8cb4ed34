// In-place rewrites for full NAT and sequence translation: each helper changes one field of a
// frame parsed as `p`, updates the IPv4 and TCP checksums incrementally (RFC 1624) and keeps
// `p` in step with the bytes. Precondition: `p` was parsed from `frame` (asserted).
#pragma once

#include <cstdint>
#include <span>

#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/dpdk/net/packet.h"
#include "dataplane/session/assert.h"

namespace sluice::dpdk::net {

// Defined here, inline: the splice path calls several of them per packet.
namespace rewrite_detail {

using detail::load16;
using detail::load32;
using detail::store16;
using detail::store32;

// A field at an odd offset from the start of its header straddles two checksum words; its
// contribution to the sum is its value with the bytes of each half swapped (one's-complement
// sums commute with a byte swap).
inline uint32_t as_summed(uint32_t v, bool odd) {
  return odd ? ((v & 0xff00ff00u) >> 8) | ((v & 0x00ff00ffu) << 8) : v;
}

inline void check_tcp(std::span<uint8_t> frame, const Packet& p) {
  SLUICE_ASSERT(p.kind == Kind::kTcp);
  SLUICE_ASSERT(p.frame_end <= frame.size() && p.l4_offset + kTcpBytes <= p.frame_end);
}

// Changes the 32-bit field at frame offset `at` inside the TCP header and updates its checksum.
inline void tcp_field32(std::span<uint8_t> frame, const Packet& p, uint32_t at, uint32_t value) {
  uint8_t* f = frame.data();
  uint8_t* check = f + p.l4_offset + 16;
  const bool odd = ((at - p.l4_offset) & 1) != 0;
  const uint32_t old_value = load32(f + at);
  store16(check,
          checksum_update32(load16(check), as_summed(old_value, odd), as_summed(value, odd)));
  store32(f + at, value);
}

inline void tcp_field16(std::span<uint8_t> frame, const Packet& p, uint32_t at, uint16_t value) {
  uint8_t* f = frame.data();
  uint8_t* check = f + p.l4_offset + 16;
  store16(check, checksum_update16(load16(check), load16(f + at), value));
  store16(f + at, value);
}

inline void set_ip(std::span<uint8_t> frame, Packet& p, uint32_t at, uint32_t ip) {
  SLUICE_ASSERT(p.kind != Kind::kArp && p.l3_offset + kIpv4Bytes <= frame.size());
  uint8_t* f = frame.data();
  uint8_t* ip_check = f + p.l3_offset + 10;
  const uint32_t old_ip = load32(f + at);
  store16(ip_check, checksum_update32(load16(ip_check), old_ip, ip));
  // The TCP checksum covers the addresses through the pseudo-header.
  if (p.kind == Kind::kTcp) {
    check_tcp(frame, p);
    uint8_t* tcp_check = f + p.l4_offset + 16;
    store16(tcp_check, checksum_update32(load16(tcp_check), old_ip, ip));
  }
  store32(f + at, ip);
}

}  // namespace rewrite_detail

// Addresses: the IPv4 header checksum, and for TCP the pseudo-header part of its checksum.
inline void set_src_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip) {
  rewrite_detail::set_ip(frame, p, p.l3_offset + 12, ip);
  p.src_ip = ip;
}

inline void set_dst_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip) {
  rewrite_detail::set_ip(frame, p, p.l3_offset + 16, ip);
  p.dst_ip = ip;
}

// TCP fields (p.kind == kTcp).
inline void set_src_port(std::span<uint8_t> frame, Packet& p, uint16_t port) {
  rewrite_detail::check_tcp(frame, p);
  rewrite_detail::tcp_field16(frame, p, p.l4_offset, port);
  p.src_port = port;
}

inline void set_dst_port(std::span<uint8_t> frame, Packet& p, uint16_t port) {
  rewrite_detail::check_tcp(frame, p);
  rewrite_detail::tcp_field16(frame, p, p.l4_offset + 2, port);
  p.dst_port = port;
}

inline void set_seq(std::span<uint8_t> frame, Packet& p, uint32_t seq) {
  rewrite_detail::check_tcp(frame, p);
  rewrite_detail::tcp_field32(frame, p, p.l4_offset + 4, seq);
  p.seq = seq;
}

inline void set_ack(std::span<uint8_t> frame, Packet& p, uint32_t ack) {
  rewrite_detail::check_tcp(frame, p);
  rewrite_detail::tcp_field32(frame, p, p.l4_offset + 8, ack);
  p.ack = ack;
}

inline void set_window(std::span<uint8_t> frame, Packet& p, uint16_t window) {
  rewrite_detail::check_tcp(frame, p);
  rewrite_detail::tcp_field16(frame, p, p.l4_offset + 14, window);
  p.window = window;
}

// Block `i` < p.options.sack_count.
inline void set_sack_block(std::span<uint8_t> frame, Packet& p, size_t i, SackBlock block) {
  rewrite_detail::check_tcp(frame, p);
  SLUICE_ASSERT(i < p.options.sack_count && p.options.sack_offset != 0);
  const uint32_t at = p.options.sack_offset + uint32_t(8 * i);
  SLUICE_ASSERT(at + 8 <= p.payload_offset);
  rewrite_detail::tcp_field32(frame, p, at, block.left);
  rewrite_detail::tcp_field32(frame, p, at + 4, block.right);
  p.options.sack[i] = block;
}

// p.options.has_timestamps.
inline void set_timestamps(std::span<uint8_t> frame, Packet& p, Timestamps ts) {
  rewrite_detail::check_tcp(frame, p);
  SLUICE_ASSERT(p.options.has_timestamps && p.options.timestamps_offset != 0);
  const uint32_t at = p.options.timestamps_offset;
  SLUICE_ASSERT(at + 8 <= p.payload_offset);
  rewrite_detail::tcp_field32(frame, p, at, ts.value);
  rewrite_detail::tcp_field32(frame, p, at + 4, ts.echo_reply);
  p.options.timestamps = ts;
}

// Full recomputation, for tests and for frames whose checksums are not trusted.
uint16_t compute_ip_checksum(std::span<const uint8_t> frame, const Packet& p);
uint16_t compute_tcp_checksum(std::span<const uint8_t> frame, const Packet& p);

}  // namespace sluice::dpdk::net
