// In-place field rewrites with incremental checksum updates (RFC 1624).
#include "dataplane/dpdk/net/rewrite.h"

#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/session/assert.h"

namespace sluice::dpdk::net {

using detail::load16;
using detail::load32;
using detail::store16;
using detail::store32;

namespace {

// A field at an odd offset from the start of its header straddles two checksum words; its
// contribution to the sum is its value with the bytes of each half swapped (one's-complement
// sums commute with a byte swap).
uint32_t as_summed(uint32_t v, bool odd) {
  return odd ? ((v & 0xff00ff00u) >> 8) | ((v & 0x00ff00ffu) << 8) : v;
}

void check_tcp(std::span<uint8_t> frame, const Packet& p) {
  SLUICE_ASSERT(p.kind == Kind::kTcp);
  SLUICE_ASSERT(p.frame_end <= frame.size() && p.l4_offset + kTcpBytes <= p.frame_end);
}

// Changes the 32-bit field at frame offset `at` inside the TCP header and updates its checksum.
void tcp_field32(std::span<uint8_t> frame, const Packet& p, uint32_t at, uint32_t value) {
  uint8_t* f = frame.data();
  uint8_t* check = f + p.l4_offset + 16;
  const bool odd = ((at - p.l4_offset) & 1) != 0;
  const uint32_t old_value = load32(f + at);
  store16(check,
          checksum_update32(load16(check), as_summed(old_value, odd), as_summed(value, odd)));
  store32(f + at, value);
}

void tcp_field16(std::span<uint8_t> frame, const Packet& p, uint32_t at, uint16_t value) {
  uint8_t* f = frame.data();
  uint8_t* check = f + p.l4_offset + 16;
  store16(check, checksum_update16(load16(check), load16(f + at), value));
  store16(f + at, value);
}

void set_ip(std::span<uint8_t> frame, Packet& p, uint32_t at, uint32_t ip) {
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

}  // namespace

void set_src_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip) {
  set_ip(frame, p, p.l3_offset + 12, ip);
  p.src_ip = ip;
}

void set_dst_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip) {
  set_ip(frame, p, p.l3_offset + 16, ip);
  p.dst_ip = ip;
}

void set_src_port(std::span<uint8_t> frame, Packet& p, uint16_t port) {
  check_tcp(frame, p);
  tcp_field16(frame, p, p.l4_offset, port);
  p.src_port = port;
}

void set_dst_port(std::span<uint8_t> frame, Packet& p, uint16_t port) {
  check_tcp(frame, p);
  tcp_field16(frame, p, p.l4_offset + 2, port);
  p.dst_port = port;
}

void set_seq(std::span<uint8_t> frame, Packet& p, uint32_t seq) {
  check_tcp(frame, p);
  tcp_field32(frame, p, p.l4_offset + 4, seq);
  p.seq = seq;
}

void set_ack(std::span<uint8_t> frame, Packet& p, uint32_t ack) {
  check_tcp(frame, p);
  tcp_field32(frame, p, p.l4_offset + 8, ack);
  p.ack = ack;
}

void set_window(std::span<uint8_t> frame, Packet& p, uint16_t window) {
  check_tcp(frame, p);
  tcp_field16(frame, p, p.l4_offset + 14, window);
  p.window = window;
}

void set_sack_block(std::span<uint8_t> frame, Packet& p, size_t i, SackBlock block) {
  check_tcp(frame, p);
  SLUICE_ASSERT(i < p.options.sack_count && p.options.sack_offset != 0);
  const uint32_t at = p.options.sack_offset + uint32_t(8 * i);
  SLUICE_ASSERT(at + 8 <= p.payload_offset);
  tcp_field32(frame, p, at, block.left);
  tcp_field32(frame, p, at + 4, block.right);
  p.options.sack[i] = block;
}

void set_timestamps(std::span<uint8_t> frame, Packet& p, Timestamps ts) {
  check_tcp(frame, p);
  SLUICE_ASSERT(p.options.has_timestamps && p.options.timestamps_offset != 0);
  const uint32_t at = p.options.timestamps_offset;
  SLUICE_ASSERT(at + 8 <= p.payload_offset);
  tcp_field32(frame, p, at, ts.value);
  tcp_field32(frame, p, at + 4, ts.echo_reply);
  p.options.timestamps = ts;
}

uint16_t compute_ip_checksum(std::span<const uint8_t> frame, const Packet& p) {
  SLUICE_ASSERT(p.kind != Kind::kArp && p.l3_offset + kIpv4Bytes <= frame.size());
  const uint8_t* ip = frame.data() + p.l3_offset;
  const uint32_t ihl_bytes = uint32_t(ip[0] & 0x0f) * 4;
  SLUICE_ASSERT(p.l3_offset + ihl_bytes <= frame.size());
  // Sum around the checksum field, as though it were zero.
  uint64_t sum = checksum_add(std::span<const uint8_t>(ip, 10));
  sum = checksum_add(std::span<const uint8_t>(ip + 12, ihl_bytes - 12), sum);
  return uint16_t(~checksum_fold(sum));
}

uint16_t compute_tcp_checksum(std::span<const uint8_t> frame, const Packet& p) {
  SLUICE_ASSERT(p.kind == Kind::kTcp && p.frame_end <= frame.size());
  const uint8_t* t = frame.data() + p.l4_offset;
  const uint32_t segment = p.frame_end - p.l4_offset;
  uint64_t sum = pseudo_header_sum(p.src_ip, p.dst_ip, kProtoTcp, uint16_t(segment));
  sum = checksum_add(std::span<const uint8_t>(t, 16), sum);
  sum = checksum_add(std::span<const uint8_t>(t + 18, segment - 18), sum);
  return uint16_t(~checksum_fold(sum));
}

}  // namespace sluice::dpdk::net
