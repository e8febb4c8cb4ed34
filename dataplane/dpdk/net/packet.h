// Parsing of Ethernet frames for the DPDK engine: Ethernet II (one optional 802.1Q tag), ARP,
// IPv4, ICMP echo and TCP with its options, validated, as offsets and values over the bytes.
// Pure C++ over byte spans: no DPDK headers, so it builds and is tested anywhere.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace sluice::dpdk::net {

constexpr uint16_t kEthertypeIpv4 = 0x0800;
constexpr uint16_t kEthertypeArp = 0x0806;
constexpr uint16_t kEthertypeVlan = 0x8100;
constexpr uint8_t kProtoIcmp = 1;
constexpr uint8_t kProtoTcp = 6;
constexpr uint16_t kArpRequest = 1;
constexpr uint16_t kArpReply = 2;
constexpr size_t kEthernetBytes = 14;
constexpr size_t kVlanBytes = 4;
constexpr size_t kArpBytes = 28;
constexpr size_t kIpv4Bytes = 20;
constexpr size_t kTcpBytes = 20;
constexpr size_t kTcpOptionsBytesMax = 40;
constexpr size_t kSackBlocksMax = 4;

// TCP flags as in the header's 13th byte.
enum TcpFlag : uint8_t {
  kFin = 0x01,
  kSyn = 0x02,
  kRst = 0x04,
  kPsh = 0x08,
  kAck = 0x10,
  kUrg = 0x20,
  kEce = 0x40,
  kCwr = 0x80,
};

// Why a frame was not accepted; each one is a counter in the engine.
enum class Reason : uint8_t {
  kOk,
  kTruncated,        // the frame ends inside a header or before the IPv4 total length
  kBadEthertype,     // neither IPv4 nor ARP (after at most one 802.1Q tag)
  kBadArp,           // not Ethernet/IPv4 ARP, or an operation other than request and reply
  kBadIpVersion,     // version is not 4
  kBadIhl,           // IHL below 5
  kBadTotalLength,   // total length shorter than the IPv4 header
  kBadIpChecksum,    // header checksum does not verify
  kFragment,         // MF set or a fragment offset: the engine does not reassemble
  kBadIcmp,          // ICMP message shorter than its 8-byte header
  kBadIcmpChecksum,  // ICMP checksum does not verify
  kBadTcpOffset,     // data offset below 5 or past the IPv4 payload
  kBadTcpChecksum,   // TCP checksum does not verify (only when asked to verify)
  kBadTcpOption,     // an option runs past the header or has a wrong length
  kNotForUs,         // not our MAC (nor broadcast), or not one of our IPv4 addresses
  kCount,
};
const char* reason_name(Reason r);

// What a parsed frame carries.
enum class Kind : uint8_t {
  kArp,
  kIcmpEcho,   // echo request
  kIcmpOther,  // any other ICMP message (checksum verified)
  kTcp,
  kIpv4Other,  // another IPv4 protocol: the header is valid, the payload is not looked at
};

struct MacAddr {
  std::array<uint8_t, 6> bytes{};
  // Two loads a side: the defaulted comparison is a call to memcmp, made for every frame.
  friend bool operator==(const MacAddr& a, const MacAddr& b) {
    uint32_t a4, b4;
    uint16_t a2, b2;
    std::memcpy(&a4, a.bytes.data(), 4);
    std::memcpy(&b4, b.bytes.data(), 4);
    std::memcpy(&a2, a.bytes.data() + 4, 2);
    std::memcpy(&b2, b.bytes.data() + 4, 2);
    return a4 == b4 && a2 == b2;
  }
};
constexpr MacAddr kBroadcastMac{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

struct SackBlock {
  uint32_t left = 0;
  uint32_t right = 0;
  friend bool operator==(const SackBlock&, const SackBlock&) = default;
};

struct Timestamps {
  uint32_t value = 0;
  uint32_t echo_reply = 0;
  friend bool operator==(const Timestamps&, const Timestamps&) = default;
};

// TCP options found in a segment. Offsets are from the start of the frame (0: absent) so that
// the rewrite helpers can change SACK blocks and timestamps in place.
struct TcpOptions {
  bool has_mss = false;
  bool has_window_scale = false;
  bool sack_permitted = false;
  bool has_timestamps = false;
  uint16_t mss = 0;
  uint8_t window_scale = 0;  // as sent; RFC 7323 says to use 14 for larger values
  uint8_t sack_count = 0;
  std::array<SackBlock, kSackBlocksMax> sack{};
  Timestamps timestamps;
  uint32_t sack_offset = 0;        // first byte of the first block
  uint32_t timestamps_offset = 0;  // first byte of TSval
};

struct Arp {
  uint16_t operation = 0;
  MacAddr sender_mac;
  uint32_t sender_ip = 0;
  MacAddr target_mac;
  uint32_t target_ip = 0;
};

// A parsed frame. Offsets are from the start of the frame; addresses and ports in host order.
struct Packet {
  Kind kind = Kind::kIpv4Other;
  MacAddr dst_mac;
  MacAddr src_mac;
  bool has_vlan = false;
  uint16_t vlan_tci = 0;
  uint16_t ethertype = 0;  // after the VLAN tag
  uint32_t l3_offset = 0;
  uint32_t l4_offset = 0;
  uint32_t payload_offset = 0;  // TCP payload or ICMP data
  uint32_t payload_bytes = 0;
  uint32_t frame_end = 0;  // l3_offset + IPv4 total length (Ethernet padding excluded)

  Arp arp;  // kind == kArp

  // IPv4 (every kind but kArp)
  uint8_t ttl = 0;
  uint8_t protocol = 0;
  uint16_t ip_id = 0;
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;

  // ICMP (kIcmpEcho, kIcmpOther)
  uint8_t icmp_type = 0;
  uint8_t icmp_code = 0;
  uint16_t icmp_id = 0;
  uint16_t icmp_seq = 0;

  // TCP
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;
  TcpOptions options;
};

struct ParseOptions {
  bool verify_tcp_checksum = true;
  // When set, frames to another unicast MAC are kNotForUs.
  const MacAddr* local_mac = nullptr;
  // When not empty, IPv4 packets and ARP requests for other addresses are kNotForUs.
  std::span<const uint32_t> local_ips;
};

// Parses and validates `frame`; on kOk, `*out` describes it. Reads only inside `frame`.
Reason parse(std::span<const uint8_t> frame, const ParseOptions& options, Packet* out);

// The common shape of a spliced flow's segments, recognised without the general parse's
// branches: untagged Ethernet to `local_mac`, IPv4 without options or fragments whose header
// checksum verifies, TCP with no options or exactly NOP, NOP, timestamps, and no SYN. Returns
// true and fills `*out` as parse() (TCP checksum not verified, no local_ips) would for such a
// frame, but for the ARP and ICMP fields and the SACK blocks, which it leaves as they were;
// false for anything else, which the caller hands to parse(). Reads only inside `frame`.
bool parse_established(std::span<const uint8_t> frame, const MacAddr& local_mac, Packet* out);

// Parses TCP options from `bytes` (the option area of a header starting `base` bytes into the
// frame). Returns kOk or kBadTcpOption.
Reason parse_tcp_options(std::span<const uint8_t> bytes, uint32_t base, TcpOptions* out);

}  // namespace sluice::dpdk::net
