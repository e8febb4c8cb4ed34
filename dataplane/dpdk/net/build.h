// Building frames: ARP replies, ICMP echo replies (in place) and TCP segments with options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "dataplane/dpdk/net/packet.h"

namespace sluice::dpdk::net {

// Writes the ARP reply to `request` (a parsed kArp request) announcing `our_mac`, keeping its
// VLAN tag. Returns the frame's length, or 0 when `request` is not a request or `out` is too
// small (42 bytes, 46 with a tag; no Ethernet padding is added).
size_t build_arp_reply(const Packet& request, const MacAddr& our_mac, std::span<uint8_t> out);

// Turns the echo request `p` parsed from `frame` into its reply in place: MACs and IPv4
// addresses swapped, TTL set to `ttl`, type 0; both checksums updated incrementally.
// Afterwards `p` describes the reply (kIcmpOther, type 0). Returns false (and changes
// nothing) when `p` is not a kIcmpEcho.
bool icmp_echo_reply_in_place(std::span<uint8_t> frame, Packet& p, uint8_t ttl = 64);

struct TcpOptionList {
  std::optional<uint16_t> mss;
  std::optional<uint8_t> window_scale;
  bool sack_permitted = false;
  std::optional<Timestamps> timestamps;
  std::span<const SackBlock> sack;  // at most kSackBlocksMax
};

// Encoded size of `options` (padded to 4 bytes with NOPs, in the layout Linux uses), or
// nothing when they do not fit in kTcpOptionsBytesMax or carry too many SACK blocks.
std::optional<size_t> tcp_options_bytes(const TcpOptionList& options);

struct TcpSegment {
  MacAddr src_mac;
  MacAddr dst_mac;
  std::optional<uint16_t> vlan_tci;
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint8_t ttl = 64;
  uint16_t ip_id = 0;
  bool dont_fragment = true;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;
  TcpOptionList options;
  std::span<const uint8_t> payload;
};

// Writes Ethernet (+ tag) + IPv4 + TCP + payload into `out` with both checksums. Returns the
// frame's length, or 0 when the options are invalid, the IPv4 packet would exceed 65535 bytes
// or `out` is too small.
size_t build_tcp_segment(const TcpSegment& segment, std::span<uint8_t> out);

}  // namespace sluice::dpdk::net
