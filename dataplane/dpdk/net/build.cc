// Frame builders: ARP reply, ICMP echo reply in place, TCP segment with options.
#include "dataplane/dpdk/net/build.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"

namespace sluice::dpdk::net {

using detail::load16;
using detail::store16;
using detail::store32;

namespace {

// Ethernet header (with the tag when given); returns the L3 offset.
size_t write_ethernet(uint8_t* out, const MacAddr& dst, const MacAddr& src,
                      std::optional<uint16_t> vlan_tci, uint16_t ethertype) {
  std::memcpy(out, dst.bytes.data(), 6);
  std::memcpy(out + 6, src.bytes.data(), 6);
  size_t at = 12;
  if (vlan_tci) {
    store16(out + at, kEthertypeVlan);
    store16(out + at + 2, *vlan_tci);
    at += 4;
  }
  store16(out + at, ethertype);
  return at + 2;
}

}  // namespace

size_t build_arp_reply(const Packet& request, const MacAddr& our_mac, std::span<uint8_t> out) {
  if (request.kind != Kind::kArp || request.arp.operation != kArpRequest) return 0;
  const size_t bytes = kEthernetBytes + (request.has_vlan ? kVlanBytes : 0) + kArpBytes;
  if (out.size() < bytes) return 0;
  uint8_t* f = out.data();
  const std::optional<uint16_t> tag =
      request.has_vlan ? std::optional<uint16_t>(request.vlan_tci) : std::nullopt;
  uint8_t* a = f + write_ethernet(f, request.arp.sender_mac, our_mac, tag, kEthertypeArp);
  store16(a, 1);
  store16(a + 2, kEthertypeIpv4);
  a[4] = 6;
  a[5] = 4;
  store16(a + 6, kArpReply);
  std::memcpy(a + 8, our_mac.bytes.data(), 6);
  store32(a + 14, request.arp.target_ip);
  std::memcpy(a + 18, request.arp.sender_mac.bytes.data(), 6);
  store32(a + 24, request.arp.sender_ip);
  return bytes;
}

bool icmp_echo_reply_in_place(std::span<uint8_t> frame, Packet& p, uint8_t ttl) {
  if (p.kind != Kind::kIcmpEcho || frame.size() < p.frame_end) return false;
  uint8_t* f = frame.data();
  std::swap_ranges(f, f + 6, f + 6);
  std::swap(p.dst_mac, p.src_mac);
  uint8_t* ip = f + p.l3_offset;
  // Swapping the addresses leaves the header sum unchanged.
  store32(ip + 12, p.dst_ip);
  store32(ip + 16, p.src_ip);
  std::swap(p.src_ip, p.dst_ip);
  const uint16_t old_ttl_word = load16(ip + 8);
  ip[8] = ttl;
  store16(ip + 10, checksum_update16(load16(ip + 10), old_ttl_word, load16(ip + 8)));
  p.ttl = ttl;
  uint8_t* icmp = f + p.l4_offset;
  icmp[0] = 0;
  // Summed again rather than updated (RFC 1624): a message that sums to zero once its type is
  // 0 (identifier, sequence and data all zero) needs 0xffff, where the update gives 0x0000,
  // which receivers reject. Echoes are not on a fast path.
  store16(icmp + 2, 0);
  store16(icmp + 2, internet_checksum(std::span<const uint8_t>(icmp, p.frame_end - p.l4_offset)));
  p.icmp_type = 0;
  p.kind = Kind::kIcmpOther;
  return true;
}

std::optional<size_t> tcp_options_bytes(const TcpOptionList& o) {
  if (o.sack.size() > kSackBlocksMax) return std::nullopt;
  size_t n = 0;
  if (o.mss) n += 4;
  if (o.sack_permitted || o.timestamps) n += o.timestamps ? 12 : 4;
  if (o.window_scale) n += 4;
  if (!o.sack.empty()) n += 4 + 8 * o.sack.size();
  if (n > kTcpOptionsBytesMax) return std::nullopt;
  return n;
}

namespace {

// Writes the options in Linux's order and alignment; every option's values are 4-byte aligned.
void write_tcp_options(uint8_t* p, const TcpOptionList& o) {
  if (o.mss) {
    p[0] = 2;
    p[1] = 4;
    store16(p + 2, *o.mss);
    p += 4;
  }
  if (o.timestamps) {
    if (o.sack_permitted) {
      p[0] = 4;
      p[1] = 2;
    } else {
      p[0] = p[1] = 1;
    }
    p[2] = 8;
    p[3] = 10;
    store32(p + 4, o.timestamps->value);
    store32(p + 8, o.timestamps->echo_reply);
    p += 12;
  } else if (o.sack_permitted) {
    p[0] = p[1] = 1;
    p[2] = 4;
    p[3] = 2;
    p += 4;
  }
  if (o.window_scale) {
    p[0] = 1;
    p[1] = 3;
    p[2] = 3;
    p[3] = *o.window_scale;
    p += 4;
  }
  if (!o.sack.empty()) {
    p[0] = p[1] = 1;
    p[2] = 5;
    p[3] = uint8_t(2 + 8 * o.sack.size());
    p += 4;
    for (const SackBlock& b : o.sack) {
      store32(p, b.left);
      store32(p + 4, b.right);
      p += 8;
    }
  }
}

}  // namespace

size_t build_tcp_segment(const TcpSegment& s, std::span<uint8_t> out) {
  const std::optional<size_t> options = tcp_options_bytes(s.options);
  if (!options) return 0;
  const size_t tcp_bytes = kTcpBytes + *options;
  const size_t ip_total = kIpv4Bytes + tcp_bytes + s.payload.size();
  if (ip_total > 0xffff) return 0;
  const size_t l3 = kEthernetBytes + (s.vlan_tci ? kVlanBytes : 0);
  if (out.size() < l3 + ip_total) return 0;
  uint8_t* f = out.data();
  write_ethernet(f, s.dst_mac, s.src_mac, s.vlan_tci, kEthertypeIpv4);

  uint8_t* ip = f + l3;
  ip[0] = 0x45;
  ip[1] = 0;
  store16(ip + 2, uint16_t(ip_total));
  store16(ip + 4, s.ip_id);
  store16(ip + 6, s.dont_fragment ? 0x4000 : 0);
  ip[8] = s.ttl;
  ip[9] = kProtoTcp;
  store16(ip + 10, 0);
  store32(ip + 12, s.src_ip);
  store32(ip + 16, s.dst_ip);
  store16(ip + 10, internet_checksum(std::span<const uint8_t>(ip, kIpv4Bytes)));

  uint8_t* t = ip + kIpv4Bytes;
  store16(t, s.src_port);
  store16(t + 2, s.dst_port);
  store32(t + 4, s.seq);
  store32(t + 8, s.ack);
  t[12] = uint8_t((tcp_bytes / 4) << 4);
  t[13] = s.flags;
  store16(t + 14, s.window);
  store16(t + 16, 0);
  store16(t + 18, 0);
  write_tcp_options(t + kTcpBytes, s.options);
  if (!s.payload.empty()) std::memcpy(t + tcp_bytes, s.payload.data(), s.payload.size());
  const size_t segment = tcp_bytes + s.payload.size();
  const uint64_t pseudo = pseudo_header_sum(s.src_ip, s.dst_ip, kProtoTcp, uint16_t(segment));
  store16(t + 16,
          uint16_t(~checksum_fold(checksum_add(std::span<const uint8_t>(t, segment), pseudo))));
  return l3 + ip_total;
}

}  // namespace sluice::dpdk::net
