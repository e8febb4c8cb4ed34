// In-place rewrites for full NAT and sequence translation: each helper changes one field of a
// frame parsed as `p`, updates the IPv4 and TCP checksums incrementally (RFC 1624) and keeps
// `p` in step with the bytes. Precondition: `p` was parsed from `frame` (asserted).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "base/assert.h"
#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/dpdk/net/packet.h"

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

// Several fields of one TCP segment rewritten with a single checksum update per header, for the
// splice path, which changes up to a dozen fields of every segment. Each change adds its
// one's-complement difference (~old + new, RFC 1624 eqn. 3) to a running sum per header and
// finish() folds each sum into its checksum once. The result is what the per-field setters
// below give, bit for bit: folding a chain of updates once or step by step yields the same
// value. Until finish(), the checksum fields in the frame are stale and `p` holds the new
// values. Precondition: `p` was parsed from `frame` as kTcp (asserted once, here).
class SegmentRewrite {
 public:
  SegmentRewrite(std::span<uint8_t> frame, Packet& p) : f_(frame.data()), p_(p) {
    rewrite_detail::check_tcp(frame, p);
  }
  SegmentRewrite(const SegmentRewrite&) = delete;
  SegmentRewrite& operator=(const SegmentRewrite&) = delete;

  // The addresses count in the IPv4 header checksum and, through the pseudo-header, in the
  // TCP one.
  void src_ip(uint32_t ip) {
    address(p_.l3_offset + 12, ip);
    p_.src_ip = ip;
  }
  void dst_ip(uint32_t ip) {
    address(p_.l3_offset + 16, ip);
    p_.dst_ip = ip;
  }
  void src_port(uint16_t port) {
    tcp16(p_.l4_offset, port);
    p_.src_port = port;
  }
  void dst_port(uint16_t port) {
    tcp16(p_.l4_offset + 2, port);
    p_.dst_port = port;
  }
  void seq(uint32_t seq) {
    tcp32(p_.l4_offset + 4, seq, false);
    p_.seq = seq;
  }
  void ack(uint32_t ack) {
    tcp32(p_.l4_offset + 8, ack, false);
    p_.ack = ack;
  }
  void window(uint16_t window) {
    tcp16(p_.l4_offset + 14, window);
    p_.window = window;
  }
  // Block `i` < p.options.sack_count.
  void sack_block(size_t i, SackBlock block) {
    SLUICE_ASSERT(i < p_.options.sack_count && p_.options.sack_offset != 0);
    const uint32_t at = p_.options.sack_offset + uint32_t(8 * i);
    SLUICE_ASSERT(at + 8 <= p_.payload_offset);
    const bool odd = ((at - p_.l4_offset) & 1) != 0;
    tcp32(at, block.left, odd);
    tcp32(at + 4, block.right, odd);
    p_.options.sack[i] = block;
  }
  // p.options.has_timestamps.
  void timestamps(Timestamps ts) {
    SLUICE_ASSERT(p_.options.has_timestamps && p_.options.timestamps_offset != 0);
    const uint32_t at = p_.options.timestamps_offset;
    SLUICE_ASSERT(at + 8 <= p_.payload_offset);
    const bool odd = ((at - p_.l4_offset) & 1) != 0;
    tcp32(at, ts.value, odd);
    tcp32(at + 4, ts.echo_reply, odd);
    p_.options.timestamps = ts;
  }

  // Writes both checksums; call once, after the last change.
  void finish() {
    using rewrite_detail::load16;
    using rewrite_detail::store16;
    if (ip_sum_ != 0) {
      uint8_t* check = f_ + p_.l3_offset + 10;
      store16(check, uint16_t(~checksum_fold(uint64_t(uint16_t(~load16(check))) + ip_sum_)));
    }
    uint8_t* check = f_ + p_.l4_offset + 16;
    store16(check, uint16_t(~checksum_fold(uint64_t(uint16_t(~load16(check))) + tcp_sum_)));
  }

 private:
  // ~old + new for a 32-bit field, taken as one number: 2^16 = 1 in one's-complement
  // arithmetic, so it counts as the sum of its two 16-bit halves.
  static uint64_t diff32(uint32_t old_value, uint32_t new_value) {
    return uint64_t(~old_value) + new_value;
  }

  void address(uint32_t at, uint32_t ip) {
    const uint64_t d = diff32(rewrite_detail::load32(f_ + at), ip);
    ip_sum_ += d;
    tcp_sum_ += d;
    rewrite_detail::store32(f_ + at, ip);
  }
  // `odd`: the field lies at an odd offset in the TCP header (an option after a lone NOP, say)
  // and straddles checksum words.
  void tcp32(uint32_t at, uint32_t value, bool odd) {
    tcp_sum_ += diff32(rewrite_detail::as_summed(rewrite_detail::load32(f_ + at), odd),
                       rewrite_detail::as_summed(value, odd));
    rewrite_detail::store32(f_ + at, value);
  }
  void tcp16(uint32_t at, uint16_t value) {
    tcp_sum_ += uint64_t(uint16_t(~rewrite_detail::load16(f_ + at))) + value;
    rewrite_detail::store16(f_ + at, value);
  }

  uint8_t* f_;
  Packet& p_;
  uint64_t ip_sum_ = 0;   // differences of the IPv4 header's words
  uint64_t tcp_sum_ = 0;  // differences of the TCP checksum's words (pseudo-header included)
};

// What the splice changes in a segment of an established flow (see rewrite_established).
struct SpliceChange {
  MacAddr dst_mac;
  MacAddr src_mac;
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t seq = 0;
  std::optional<uint32_t> ack;           // the segment carries ACK
  std::optional<uint16_t> window;        // the legs' window scales differ
  std::optional<Timestamps> timestamps;  // the segment carries them and both legs use them
};

// The splice's rewrite of a segment that parse_established() took (Ethernet, IPv4 and TCP
// headers at fixed offsets, no SACK blocks), in one pass: MACs, addresses and ports, sequence
// and acknowledgment numbers, window and timestamps as `c` says, both checksums updated once.
// The bytes, checksums included, are exactly those of a SegmentRewrite making the same calls
// in the splice path's order (src_ip, dst_ip, src_port, dst_port, seq, then ack, window and
// timestamps when set): every term of its sums is added here too, the old values taken from
// `p` instead of the frame. `p` is not changed. Precondition: `p` was filled from `frame` by
// parse_established() (asserted: the offsets).
inline void rewrite_established(std::span<uint8_t> frame, const Packet& p, const SpliceChange& c) {
  using rewrite_detail::store16;
  using rewrite_detail::store32;
  constexpr uint32_t l3 = uint32_t(kEthernetBytes);
  constexpr uint32_t l4 = l3 + uint32_t(kIpv4Bytes);
  SLUICE_ASSERT(p.l3_offset == l3 && p.l4_offset == l4 && p.frame_end <= frame.size());
  uint8_t* f = frame.data();
  const auto diff32 = [](uint32_t old_value, uint32_t new_value) {
    return uint64_t(~old_value) + new_value;
  };
  const auto diff16 = [](uint16_t old_value, uint16_t new_value) {
    return uint64_t(uint16_t(~old_value)) + new_value;
  };
  std::memcpy(f, c.dst_mac.bytes.data(), 6);
  std::memcpy(f + 6, c.src_mac.bytes.data(), 6);
  const uint64_t addresses = diff32(p.src_ip, c.src_ip) + diff32(p.dst_ip, c.dst_ip);
  store32(f + l3 + 12, c.src_ip);
  store32(f + l3 + 16, c.dst_ip);
  uint64_t tcp = addresses + diff16(p.src_port, c.src_port) + diff16(p.dst_port, c.dst_port) +
                 diff32(p.seq, c.seq);
  store16(f + l4, c.src_port);
  store16(f + l4 + 2, c.dst_port);
  store32(f + l4 + 4, c.seq);
  if (c.ack) {
    tcp += diff32(p.ack, *c.ack);
    store32(f + l4 + 8, *c.ack);
  }
  if (c.window) {
    tcp += diff16(p.window, *c.window);
    store16(f + l4 + 14, *c.window);
  }
  if (c.timestamps) {
    // NOP, NOP, TS: the values sit at even offsets of the TCP header.
    SLUICE_ASSERT(p.options.has_timestamps && p.options.timestamps_offset == l4 + kTcpBytes + 4);
    tcp += diff32(p.options.timestamps.value, c.timestamps->value) +
           diff32(p.options.timestamps.echo_reply, c.timestamps->echo_reply);
    store32(f + l4 + kTcpBytes + 4, c.timestamps->value);
    store32(f + l4 + kTcpBytes + 8, c.timestamps->echo_reply);
  }
  if (addresses != 0) {
    uint8_t* check = f + l3 + 10;
    store16(check, uint16_t(~checksum_fold(uint64_t(uint16_t(~rewrite_detail::load16(check))) +
                                           addresses)));
  }
  uint8_t* check = f + l4 + 16;
  store16(check,
          uint16_t(~checksum_fold(uint64_t(uint16_t(~rewrite_detail::load16(check))) + tcp)));
}

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
