// Frame parsing and validation: every length is checked against the bytes present before it is
// used, so any input either parses or yields one counted reason.
#include "dataplane/dpdk/net/packet.h"

#include <algorithm>
#include <cstring>

#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"

namespace sluice::dpdk::net {

using detail::load16;
using detail::load32;

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kOk:
      return "ok";
    case Reason::kTruncated:
      return "truncated";
    case Reason::kBadEthertype:
      return "bad_ethertype";
    case Reason::kBadArp:
      return "bad_arp";
    case Reason::kBadIpVersion:
      return "bad_ip_version";
    case Reason::kBadIhl:
      return "bad_ihl";
    case Reason::kBadTotalLength:
      return "bad_total_length";
    case Reason::kBadIpChecksum:
      return "bad_ip_checksum";
    case Reason::kFragment:
      return "fragment";
    case Reason::kBadIcmp:
      return "bad_icmp";
    case Reason::kBadIcmpChecksum:
      return "bad_icmp_checksum";
    case Reason::kBadTcpOffset:
      return "bad_tcp_offset";
    case Reason::kBadTcpChecksum:
      return "bad_tcp_checksum";
    case Reason::kBadTcpOption:
      return "bad_tcp_option";
    case Reason::kNotForUs:
      return "not_for_us";
    case Reason::kCount:
      break;
  }
  return "unknown";
}

namespace {

MacAddr load_mac(const uint8_t* p) {
  MacAddr m;
  std::memcpy(m.bytes.data(), p, 6);
  return m;
}

// The IPv4 header checksum verifies: 32-bit words summed in native order into 64 bits and
// folded once (RFC 1071 section 2(B): the all-ones result does not depend on byte order).
// Inline and word by word rather than checksum_ok(): every frame the engine receives passes
// here, and its header is 20 bytes. ihl_bytes is a multiple of 4.
[[gnu::always_inline]] inline bool ip_header_ok(const uint8_t* ip, uint32_t ihl_bytes) {
  uint32_t w[5];
  std::memcpy(w, ip, sizeof w);
  uint64_t sum = uint64_t(w[0]) + w[1] + w[2] + w[3] + w[4];
  for (uint32_t i = uint32_t(sizeof w); i < ihl_bytes; i += 4) {  // options, rare
    uint32_t o;
    std::memcpy(&o, ip + i, 4);
    sum += o;
  }
  return checksum_fold(sum) == 0xffff;
}

bool is_local_ip(const ParseOptions& o, uint32_t ip) {
  return o.local_ips.empty() ||
         std::find(o.local_ips.begin(), o.local_ips.end(), ip) != o.local_ips.end();
}

Reason parse_arp(std::span<const uint8_t> frame, const ParseOptions& o, Packet* p) {
  if (frame.size() - p->l3_offset < kArpBytes) return Reason::kTruncated;
  const uint8_t* a = frame.data() + p->l3_offset;
  if (load16(a) != 1 || load16(a + 2) != kEthertypeIpv4 || a[4] != 6 || a[5] != 4) {
    return Reason::kBadArp;
  }
  const uint16_t op = load16(a + 6);
  if (op != kArpRequest && op != kArpReply) return Reason::kBadArp;
  p->kind = Kind::kArp;
  p->arp.operation = op;
  p->arp.sender_mac = load_mac(a + 8);
  p->arp.sender_ip = load32(a + 14);
  p->arp.target_mac = load_mac(a + 18);
  p->arp.target_ip = load32(a + 24);
  p->l4_offset = p->payload_offset = p->frame_end = p->l3_offset + uint32_t(kArpBytes);
  if (op == kArpRequest && !is_local_ip(o, p->arp.target_ip)) return Reason::kNotForUs;
  return Reason::kOk;
}

Reason parse_icmp(std::span<const uint8_t> frame, Packet* p) {
  const std::span<const uint8_t> msg = frame.subspan(p->l4_offset, p->frame_end - p->l4_offset);
  if (msg.size() < 8) return Reason::kBadIcmp;
  if (!checksum_ok(msg)) return Reason::kBadIcmpChecksum;
  p->icmp_type = msg[0];
  p->icmp_code = msg[1];
  p->icmp_id = load16(msg.data() + 4);
  p->icmp_seq = load16(msg.data() + 6);
  p->payload_offset = p->l4_offset + 8;
  p->payload_bytes = uint32_t(msg.size() - 8);
  p->kind = (p->icmp_type == 8 && p->icmp_code == 0) ? Kind::kIcmpEcho : Kind::kIcmpOther;
  return Reason::kOk;
}

// The fixed part of the TCP header at `t`, ports to window.
void load_tcp_fields(const uint8_t* t, Packet* p) {
  p->src_port = load16(t);
  p->dst_port = load16(t + 2);
  p->seq = load32(t + 4);
  p->ack = load32(t + 8);
  p->flags = t[13];
  p->window = load16(t + 14);
}

Reason parse_tcp(std::span<const uint8_t> frame, const ParseOptions& o, Packet* p) {
  const uint32_t segment_bytes = p->frame_end - p->l4_offset;
  if (segment_bytes < kTcpBytes) return Reason::kBadTcpOffset;
  const uint8_t* t = frame.data() + p->l4_offset;
  const uint32_t header_bytes = uint32_t(t[12] >> 4) * 4;
  if (header_bytes < kTcpBytes || header_bytes > segment_bytes) return Reason::kBadTcpOffset;
  load_tcp_fields(t, p);
  p->payload_offset = p->l4_offset + header_bytes;
  p->payload_bytes = segment_bytes - header_bytes;
  if (header_bytes != kTcpBytes) {
    const uint8_t* opt = t + kTcpBytes;
    const uint32_t opt_base = p->l4_offset + uint32_t(kTcpBytes);
    if (header_bytes == kTcpBytes + 12 && load32(opt) == 0x0101080au) {
      // NOP, NOP, timestamps and nothing else: what Linux puts in every segment of an
      // established flow, taken as parse_tcp_options() would without walking it.
      p->options.has_timestamps = true;
      p->options.timestamps = Timestamps{load32(opt + 4), load32(opt + 8)};
      p->options.timestamps_offset = opt_base + 4;
    } else {
      const Reason r = parse_tcp_options(std::span<const uint8_t>(opt, header_bytes - kTcpBytes),
                                         opt_base, &p->options);
      if (r != Reason::kOk) return r;
    }
  }
  if (o.verify_tcp_checksum) {
    const uint64_t pseudo =
        pseudo_header_sum(p->src_ip, p->dst_ip, kProtoTcp, uint16_t(segment_bytes));
    if (!checksum_ok(std::span<const uint8_t>(t, segment_bytes), pseudo)) {
      return Reason::kBadTcpChecksum;
    }
  }
  p->kind = Kind::kTcp;
  return Reason::kOk;
}

}  // namespace

Reason parse_tcp_options(std::span<const uint8_t> bytes, uint32_t base, TcpOptions* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t kind = bytes[i];
    if (kind == 0) break;  // EOL: the rest is padding
    if (kind == 1) {       // NOP
      ++i;
      continue;
    }
    if (bytes.size() - i < 2) return Reason::kBadTcpOption;
    const size_t len = bytes[i + 1];
    if (len < 2 || len > bytes.size() - i) return Reason::kBadTcpOption;
    const uint8_t* v = bytes.data() + i + 2;
    switch (kind) {
      case 2:
        if (len != 4) return Reason::kBadTcpOption;
        out->has_mss = true;
        out->mss = load16(v);
        break;
      case 3:
        if (len != 3) return Reason::kBadTcpOption;
        out->has_window_scale = true;
        out->window_scale = v[0];
        break;
      case 4:
        if (len != 2) return Reason::kBadTcpOption;
        out->sack_permitted = true;
        break;
      case 5: {
        const size_t n = (len - 2) / 8;
        if ((len - 2) % 8 != 0 || n == 0 || n > kSackBlocksMax) return Reason::kBadTcpOption;
        out->sack_count = uint8_t(n);
        out->sack_offset = base + uint32_t(i + 2);
        for (size_t b = 0; b < n; ++b)
          out->sack[b] = SackBlock{load32(v + 8 * b), load32(v + 8 * b + 4)};
        break;
      }
      case 8:
        if (len != 10) return Reason::kBadTcpOption;
        out->has_timestamps = true;
        out->timestamps = Timestamps{load32(v), load32(v + 4)};
        out->timestamps_offset = base + uint32_t(i + 2);
        break;
      default:  // unknown: skipped by its length
        break;
    }
    i += len;
  }
  return Reason::kOk;
}

bool parse_established(std::span<const uint8_t> frame, const MacAddr& local_mac, Packet* p) {
  constexpr uint32_t l3 = uint32_t(kEthernetBytes);
  constexpr uint32_t l4 = l3 + uint32_t(kIpv4Bytes);
  if (frame.size() < l4 + kTcpBytes) return false;
  const uint8_t* f = frame.data();
  const MacAddr dst_mac = load_mac(f);
  if (load16(f + 12) != kEthertypeIpv4 || dst_mac != local_mac) return false;
  const uint8_t* ip = f + l3;
  const uint32_t total = load16(ip + 2);
  // Version 4 and a 20-byte header; the segment holds at least a TCP header; no fragment.
  if (ip[0] != 0x45 || ip[9] != kProtoTcp || total < kIpv4Bytes + kTcpBytes ||
      frame.size() - l3 < total || (load16(ip + 6) & 0x3fff) != 0 ||
      !ip_header_ok(ip, uint32_t(kIpv4Bytes))) {
    return false;
  }
  const uint8_t* t = f + l4;
  const uint32_t header_bytes = uint32_t(t[12] >> 4) * 4;
  const bool timestamps = header_bytes == kTcpBytes + 12 && load32(t + kTcpBytes) == 0x0101080au;
  const uint32_t segment_bytes = total - uint32_t(kIpv4Bytes);
  if ((header_bytes != kTcpBytes && !timestamps) || header_bytes > segment_bytes ||
      (t[13] & kSyn) != 0) {
    return false;
  }
  // Field by field rather than `*p = Packet{}` first: GCC makes that reset (or the copy of a
  // blank Packet) a `rep stos` here whatever the memset strategy (see meson.build), and its
  // start-up cost is what this path exists to save. The ARP and ICMP fields and the SACK
  // blocks are not written: nothing reads them for a TCP segment without SACK blocks.
  p->kind = Kind::kTcp;
  p->dst_mac = dst_mac;
  p->src_mac = load_mac(f + 6);
  p->has_vlan = false;
  p->vlan_tci = 0;
  p->ethertype = kEthertypeIpv4;
  p->l3_offset = l3;
  p->l4_offset = l4;
  p->payload_offset = l4 + header_bytes;
  p->payload_bytes = segment_bytes - header_bytes;
  p->frame_end = l3 + total;
  p->ttl = ip[8];
  p->protocol = kProtoTcp;
  p->ip_id = load16(ip + 4);
  p->src_ip = load32(ip + 12);
  p->dst_ip = load32(ip + 16);
  load_tcp_fields(t, p);
  TcpOptions& o = p->options;
  o.has_mss = false;
  o.has_window_scale = false;
  o.sack_permitted = false;
  o.mss = 0;
  o.window_scale = 0;
  o.sack_count = 0;
  o.sack_offset = 0;
  o.has_timestamps = timestamps;
  if (timestamps) {
    o.timestamps = Timestamps{load32(t + kTcpBytes + 4), load32(t + kTcpBytes + 8)};
    o.timestamps_offset = l4 + uint32_t(kTcpBytes) + 4;
  } else {
    o.timestamps = Timestamps{};
    o.timestamps_offset = 0;
  }
  return true;
}

Reason parse(std::span<const uint8_t> frame, const ParseOptions& o, Packet* p) {
  *p = Packet{};
  if (frame.size() < kEthernetBytes) return Reason::kTruncated;
  const uint8_t* f = frame.data();
  p->dst_mac = load_mac(f);
  p->src_mac = load_mac(f + 6);
  uint16_t ethertype = load16(f + 12);
  uint32_t l3 = uint32_t(kEthernetBytes);
  if (ethertype == kEthertypeVlan) {
    if (frame.size() < kEthernetBytes + kVlanBytes) return Reason::kTruncated;
    p->has_vlan = true;
    p->vlan_tci = load16(f + 14);
    ethertype = load16(f + 16);
    l3 += uint32_t(kVlanBytes);
  }
  p->ethertype = ethertype;
  p->l3_offset = l3;
  if (ethertype != kEthertypeIpv4 && ethertype != kEthertypeArp) return Reason::kBadEthertype;
  if (o.local_mac != nullptr && p->dst_mac != *o.local_mac && p->dst_mac != kBroadcastMac) {
    return Reason::kNotForUs;
  }
  if (ethertype == kEthertypeArp) return parse_arp(frame, o, p);

  if (frame.size() - l3 < kIpv4Bytes) return Reason::kTruncated;
  const uint8_t* ip = f + l3;
  if ((ip[0] >> 4) != 4) return Reason::kBadIpVersion;
  const uint32_t ihl_bytes = uint32_t(ip[0] & 0x0f) * 4;
  if (ihl_bytes < kIpv4Bytes) return Reason::kBadIhl;
  if (frame.size() - l3 < ihl_bytes) return Reason::kTruncated;
  const uint32_t total = load16(ip + 2);
  if (total < ihl_bytes) return Reason::kBadTotalLength;
  if (frame.size() - l3 < total) return Reason::kTruncated;
  if (!ip_header_ok(ip, ihl_bytes)) return Reason::kBadIpChecksum;
  if ((load16(ip + 6) & 0x3fff) != 0) return Reason::kFragment;  // MF or an offset
  p->ip_id = load16(ip + 4);
  p->ttl = ip[8];
  p->protocol = ip[9];
  p->src_ip = load32(ip + 12);
  p->dst_ip = load32(ip + 16);
  p->l4_offset = l3 + ihl_bytes;
  p->frame_end = l3 + total;
  p->payload_offset = p->l4_offset;
  p->payload_bytes = total - ihl_bytes;
  if (!is_local_ip(o, p->dst_ip)) return Reason::kNotForUs;
  switch (p->protocol) {
    case kProtoIcmp:
      return parse_icmp(frame, p);
    case kProtoTcp:
      return parse_tcp(frame, o, p);
    default:
      p->kind = Kind::kIpv4Other;
      return Reason::kOk;
  }
}

}  // namespace sluice::dpdk::net
