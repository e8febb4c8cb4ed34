// The DPDK engine's packet layer: checksums, parsing with every failure reason, builders and
// incremental NAT rewrites checked against full recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "dataplane/dpdk/net/build.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/dpdk/net/packet.h"
#include "dataplane/dpdk/net/rewrite.h"

namespace {

namespace net = sluice::dpdk::net;
using Bytes = std::vector<uint8_t>;

constexpr net::MacAddr kGatewayMac{{0x02, 0, 0, 0, 0, 0x01}};
constexpr net::MacAddr kClientMac{{0x02, 0, 0, 0, 0, 0x02}};
constexpr uint32_t kVip = 0x0a000001;     // 10.0.0.1
constexpr uint32_t kClient = 0x0a000002;  // 10.0.0.2

// The RFC 1071 definition, 16 bits at a time, for comparison.
uint16_t reference_checksum(std::span<const uint8_t> b, uint64_t sum = 0) {
  for (size_t i = 0; i + 1 < b.size(); i += 2)
    sum += uint32_t(b[i] << 8 | b[i + 1]);
  if (b.size() % 2) sum += uint32_t(b.back() << 8);
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

uint16_t load16(const uint8_t* p) {
  return uint16_t(p[0] << 8 | p[1]);
}
void store16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

net::TcpSegment base_segment() {
  net::TcpSegment s;
  s.src_mac = kClientMac;
  s.dst_mac = kGatewayMac;
  s.src_ip = kClient;
  s.dst_ip = kVip;
  s.src_port = 40000;
  s.dst_port = 61613;
  s.seq = 0x11223344;
  s.ack = 0x55667788;
  s.flags = net::kAck | net::kPsh;
  s.window = 29200;
  s.ip_id = 7;
  return s;
}

// Random addresses, ports, sequence and acknowledgment numbers, window and flags.
void randomize(net::TcpSegment& s, std::mt19937& rng) {
  s.src_ip = uint32_t(rng());
  s.dst_ip = uint32_t(rng());
  s.src_port = uint16_t(rng());
  s.dst_port = uint16_t(rng());
  s.seq = uint32_t(rng());
  s.ack = uint32_t(rng());
  s.window = uint16_t(rng());
  s.flags = uint8_t(rng());
}

Bytes build(const net::TcpSegment& s) {
  Bytes out(2048);
  const size_t n = net::build_tcp_segment(s, out);
  EXPECT_NE(n, 0u);
  out.resize(n);
  return out;
}

net::Reason parse(const Bytes& f, net::Packet* p, bool verify = true) {
  net::ParseOptions o;
  o.verify_tcp_checksum = verify;
  return net::parse(f, o, p);
}

// A TCP frame whose option area is `options` verbatim (a multiple of 4 bytes).
Bytes tcp_with_raw_options(const Bytes& options, const Bytes& payload) {
  Bytes body = options;
  body.insert(body.end(), payload.begin(), payload.end());
  net::TcpSegment s = base_segment();
  s.payload = body;
  Bytes f = build(s);
  const size_t l4 = net::kEthernetBytes + net::kIpv4Bytes;
  f[l4 + 12] = uint8_t(((net::kTcpBytes + options.size()) / 4) << 4);
  net::Packet p;
  EXPECT_EQ(parse(f, &p, false), net::Reason::kOk);
  store16(&f[l4 + 16], net::compute_tcp_checksum(f, p));
  return f;
}

// Sets the IPv4 header checksum of a frame without VLAN tag after a crafted change.
void fix_ip_checksum(Bytes& f) {
  uint8_t* ip = &f[net::kEthernetBytes];
  const size_t ihl = size_t(ip[0] & 0x0f) * 4;
  store16(ip + 10, 0);
  store16(ip + 10, net::internet_checksum(std::span<const uint8_t>(ip, ihl)));
}

Bytes arp_request(bool vlan) {
  Bytes f;
  f.insert(f.end(), net::kBroadcastMac.bytes.begin(), net::kBroadcastMac.bytes.end());
  f.insert(f.end(), kClientMac.bytes.begin(), kClientMac.bytes.end());
  if (vlan) f.insert(f.end(), {0x81, 0x00, 0x00, 0x2a});
  f.insert(f.end(), {0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1});
  f.insert(f.end(), kClientMac.bytes.begin(), kClientMac.bytes.end());
  f.insert(f.end(), {10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1});
  return f;
}

Bytes icmp_echo_request(const Bytes& data = {'p', 'i', 'n', 'g', '!'}, uint16_t id = 0x1234,
                        uint16_t seq = 1) {
  Bytes f;
  f.insert(f.end(), kGatewayMac.bytes.begin(), kGatewayMac.bytes.end());
  f.insert(f.end(), kClientMac.bytes.begin(), kClientMac.bytes.end());
  f.insert(f.end(), {0x08, 0x00});
  const uint16_t total = uint16_t(20 + 8 + data.size());
  f.insert(
      f.end(),
      {0x45, 0, uint8_t(total >> 8), uint8_t(total), 0, 1, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 2, 10, 0,
       0,    1});
  fix_ip_checksum(f);
  const size_t l4 = f.size();
  f.insert(f.end(), {8, 0, 0, 0, uint8_t(id >> 8), uint8_t(id), uint8_t(seq >> 8), uint8_t(seq)});
  f.insert(f.end(), data.begin(), data.end());
  store16(&f[l4 + 2], net::internet_checksum(std::span<const uint8_t>(&f[l4], f.size() - l4)));
  return f;
}

TEST(DpdkNetChecksum, MatchesRfc1071Example) {
  // RFC 1071 section 3: the sum of these bytes is 0xddf2, so the checksum is 0x220d.
  const Bytes b = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(net::checksum_fold(net::checksum_add(b)), 0xddf2);
  EXPECT_EQ(net::internet_checksum(b), 0x220d);
}

// checksum_fold (and through it checksum_fold32) gives what folding until no carry is left
// gives: at the bounds of each step, around 0 and 0xffff, and for random sums of every size.
TEST(DpdkNetChecksum, FoldMatchesTheCarryLoop) {
  const auto loop = [](uint64_t sum) {
    while (sum >> 16)
      sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
  };
  std::vector<uint64_t> sums = {
      0,       1,          0xfffe,      0xffff,      0x10000,        0x10001,    0x1fffe,
      0x2fffe, 0xffffffff, 0x100000000, 0x1fffffffe, 0xffffffffffff, UINT64_MAX, UINT64_MAX - 1};
  std::mt19937_64 rng(1624);
  for (int bits = 1; bits <= 64; ++bits) {
    for (int i = 0; i < 2000; ++i)
      sums.push_back(bits == 64 ? rng() : rng() & ((uint64_t(1) << bits) - 1));
  }
  for (const uint64_t sum : sums)
    ASSERT_EQ(net::checksum_fold(sum), loop(sum)) << std::hex << sum;
}

TEST(DpdkNetChecksum, MatchesReferenceOnEveryLengthAndAlignment) {
  std::mt19937 rng(1071);
  Bytes buf(600);
  for (auto& c : buf)
    c = uint8_t(rng());
  for (size_t start = 0; start < 8; ++start) {
    for (size_t len = 0; len + start <= buf.size(); ++len) {
      const std::span<const uint8_t> s(buf.data() + start, len);
      ASSERT_EQ(net::internet_checksum(s), reference_checksum(s)) << start << " " << len;
    }
  }
  const Bytes ones(4096, 0xff);
  EXPECT_EQ(net::internet_checksum(ones), reference_checksum(ones));
}

TEST(DpdkNetChecksum, IncrementalUpdateEqualsRecomputation) {
  std::mt19937 rng(1624);
  for (int i = 0; i < 20000; ++i) {
    Bytes b(4 + 2 * (rng() % 40));
    for (auto& c : b)
      c = uint8_t(rng());
    store16(&b[0], 0);
    store16(&b[0], net::internet_checksum(b));
    const size_t at = 2 + 2 * (rng() % ((b.size() - 2) / 2));
    if (at + 4 <= b.size() && rng() % 2) {
      const uint32_t old_value = uint32_t(load16(&b[at])) << 16 | load16(&b[at + 2]);
      const uint32_t new_value = uint32_t(rng());
      store16(&b[at], uint16_t(new_value >> 16));
      store16(&b[at + 2], uint16_t(new_value));
      const uint16_t incremental = net::checksum_update32(load16(&b[0]), old_value, new_value);
      store16(&b[0], 0);
      ASSERT_EQ(incremental, net::internet_checksum(b));
      store16(&b[0], incremental);
    } else {
      const uint16_t old_value = load16(&b[at]);
      const uint16_t new_value = uint16_t(rng());
      store16(&b[at], new_value);
      const uint16_t incremental = net::checksum_update16(load16(&b[0]), old_value, new_value);
      store16(&b[0], 0);
      ASSERT_EQ(incremental, net::internet_checksum(b));
      store16(&b[0], incremental);
    }
    ASSERT_TRUE(net::checksum_ok(b));
  }
}

TEST(DpdkNetChecksum, PseudoHeaderSumCoversAddressesProtocolAndLength) {
  const Bytes pseudo = {10, 0, 0, 2, 10, 0, 0, 1, 0, 6, 0, 40};
  EXPECT_EQ(net::checksum_fold(net::pseudo_header_sum(kClient, kVip, 6, 40)),
            uint16_t(~reference_checksum(pseudo)));
}

TEST(DpdkNetParse, TcpSegmentRoundTripsWithOptionsAndPayload) {
  net::TcpSegment s = base_segment();
  s.flags = net::kSyn;
  s.options.mss = 1460;
  s.options.window_scale = 7;
  s.options.sack_permitted = true;
  s.options.timestamps = net::Timestamps{123456, 0};
  const Bytes payload = {'C', 'O', 'N', 'N', 'E', 'C', 'T', '\n'};
  s.payload = payload;
  const Bytes f = build(s);
  net::Packet p;
  ASSERT_EQ(parse(f, &p), net::Reason::kOk);
  EXPECT_EQ(p.kind, net::Kind::kTcp);
  EXPECT_FALSE(p.has_vlan);
  EXPECT_EQ(p.src_mac, kClientMac);
  EXPECT_EQ(p.dst_mac, kGatewayMac);
  EXPECT_EQ(p.src_ip, kClient);
  EXPECT_EQ(p.dst_ip, kVip);
  EXPECT_EQ(p.ttl, 64);
  EXPECT_EQ(p.ip_id, 7);
  EXPECT_EQ(p.src_port, 40000);
  EXPECT_EQ(p.dst_port, 61613);
  EXPECT_EQ(p.seq, 0x11223344u);
  EXPECT_EQ(p.ack, 0x55667788u);
  EXPECT_EQ(p.flags, net::kSyn);
  EXPECT_EQ(p.window, 29200);
  EXPECT_TRUE(p.options.has_mss);
  EXPECT_EQ(p.options.mss, 1460);
  EXPECT_TRUE(p.options.has_window_scale);
  EXPECT_EQ(p.options.window_scale, 7);
  EXPECT_TRUE(p.options.sack_permitted);
  EXPECT_TRUE(p.options.has_timestamps);
  EXPECT_EQ(p.options.timestamps, (net::Timestamps{123456, 0}));
  EXPECT_EQ(p.options.sack_count, 0);
  EXPECT_EQ(p.payload_bytes, payload.size());
  EXPECT_EQ(Bytes(f.begin() + p.payload_offset, f.end()), payload);
  EXPECT_EQ(p.payload_offset - p.l4_offset, 20u + 20u);
}

TEST(DpdkNetParse, VlanTaggedSegmentRoundTrips) {
  net::TcpSegment s = base_segment();
  s.vlan_tci = 0x2064;
  const Bytes f = build(s);
  EXPECT_EQ(f[12], 0x81);
  net::Packet p;
  ASSERT_EQ(parse(f, &p), net::Reason::kOk);
  EXPECT_TRUE(p.has_vlan);
  EXPECT_EQ(p.vlan_tci, 0x2064);
  EXPECT_EQ(p.ethertype, net::kEthertypeIpv4);
  EXPECT_EQ(p.l3_offset, 18u);
  EXPECT_EQ(p.kind, net::Kind::kTcp);
}

TEST(DpdkNetParse, SackBlocksParse) {
  const std::array<net::SackBlock, 4> blocks{
      {{1000, 2000}, {3000, 4000}, {5000, 6000}, {0xfffffff0u, 0x10}}};
  net::TcpSegment s = base_segment();
  s.options.sack = blocks;
  net::Packet p;
  ASSERT_EQ(parse(build(s), &p), net::Reason::kOk);
  ASSERT_EQ(p.options.sack_count, 4);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(p.options.sack[i], blocks[i]);

  // With timestamps only three blocks fit, as in Linux.
  s.options.timestamps = net::Timestamps{1, 2};
  EXPECT_FALSE(net::tcp_options_bytes(s.options));
  Bytes out(2048);
  EXPECT_EQ(net::build_tcp_segment(s, out), 0u);
  s.options.sack = std::span(blocks).first(3);
  ASSERT_EQ(parse(build(s), &p), net::Reason::kOk);
  EXPECT_EQ(p.options.sack_count, 3);
  EXPECT_EQ(p.options.sack[2], blocks[2]);
  EXPECT_EQ(p.options.timestamps, (net::Timestamps{1, 2}));
}

TEST(DpdkNetParse, OptionsSkipUnknownAndStopAtEol) {
  // Unknown kind 30 of length 6, NOP, MSS, EOL, then garbage that must be ignored.
  const Bytes options = {30, 6, 1, 2, 3, 4, 1, 2, 4, 0x05, 0xb4, 0, 0xff, 0xff, 0xff, 0xff};
  net::Packet p;
  ASSERT_EQ(parse(tcp_with_raw_options(options, {}), &p), net::Reason::kOk);
  EXPECT_TRUE(p.options.has_mss);
  EXPECT_EQ(p.options.mss, 1460);
}

TEST(DpdkNetParse, EveryMalformedOptionIsBadTcpOption) {
  const std::vector<Bytes> bad = {
      {1, 1, 2, 4},              // MSS running past the header
      {2, 3, 0, 1},              // MSS of length 3
      {3, 4, 7, 1},              // window scale of length 4
      {4, 3, 0, 1},              // SACK-permitted of length 3
      {5, 2, 1, 1},              // SACK without blocks
      {5, 9, 0, 0, 0, 0, 0, 0},  // SACK with a partial block
      {8, 8, 0, 0, 0, 0, 0, 0},  // timestamps of length 8
      {30, 1, 1, 1},             // length below 2
      {1, 1, 1, 30},             // kind without a length byte
      {30, 9, 1, 1},             // unknown option past the header
  };
  for (const Bytes& b : bad) {
    Bytes padded = b;
    while (padded.size() % 4)
      padded.push_back(1);
    // Build with valid options, then overwrite them so the checksum is not what fails.
    Bytes f = tcp_with_raw_options(Bytes(padded.size(), 1), {});
    std::copy(padded.begin(), padded.end(), f.begin() + 14 + 20 + 20);
    net::Packet p;
    EXPECT_EQ(parse(f, &p, false), net::Reason::kBadTcpOption) << int(b[0]) << " " << int(b[1]);
  }
  // Five SACK blocks do not fit: four is the most.
  Bytes five = {1, 1, 5, 42};
  five.resize(44, 0);
  Bytes f = tcp_with_raw_options(Bytes(40, 1), {});
  std::copy(five.begin(), five.begin() + 40, f.begin() + 54);
  net::Packet p;
  EXPECT_EQ(parse(f, &p, false), net::Reason::kBadTcpOption);
}

TEST(DpdkNetParse, EveryFailureReasonFromACraftedFrame) {
  const Bytes good = build(base_segment());
  net::Packet p;
  ASSERT_EQ(parse(good, &p), net::Reason::kOk);
  const size_t ip = 14, tcp = 34;
  auto check = [&](const char* what, Bytes f, net::Reason want, bool fix_ip = true) {
    if (fix_ip) fix_ip_checksum(f);
    net::Packet q;
    EXPECT_EQ(parse(f, &q), want) << what << ": " << net::reason_name(parse(f, &q));
  };
  check("truncated", Bytes(good.begin(), good.begin() + 10), net::Reason::kTruncated, false);
  {
    Bytes f = good;
    f[12] = 0x86;
    f[13] = 0xdd;  // IPv6
    check("ethertype", f, net::Reason::kBadEthertype, false);
  }
  {
    Bytes f = good;
    f.insert(f.begin() + 12, {0x81, 0x00, 0, 1, 0x81, 0x00, 0, 2});  // two tags
    check("double tag", f, net::Reason::kBadEthertype, false);
  }
  {
    Bytes f = arp_request(false);
    f[14 + 3] = 0xdd;  // protocol type not IPv4
    check("arp ptype", f, net::Reason::kBadArp, false);
    f = arp_request(false);
    f[14 + 7] = 3;  // RARP request
    check("arp op", f, net::Reason::kBadArp, false);
  }
  {
    Bytes f = good;
    f[ip] = 0x65;
    check("version", f, net::Reason::kBadIpVersion, false);
  }
  {
    Bytes f = good;
    f[ip] = 0x44;
    check("ihl", f, net::Reason::kBadIhl, false);
  }
  {
    Bytes f = good;
    store16(&f[ip + 2], 19);
    check("total length", f, net::Reason::kBadTotalLength);
    store16(&f[ip + 2], uint16_t(good.size() - 14 + 1));
    check("total length past frame", f, net::Reason::kTruncated);
  }
  {
    Bytes f = good;
    f[ip + 10] ^= 1;
    check("ip checksum", f, net::Reason::kBadIpChecksum, false);
  }
  {
    Bytes f = good;
    store16(&f[ip + 6], 0x2000);  // MF
    check("more fragments", f, net::Reason::kFragment);
    store16(&f[ip + 6], 0x4000 | 185);  // DF with an offset is still a fragment
    check("fragment offset", f, net::Reason::kFragment);
  }
  {
    Bytes f = icmp_echo_request();
    f[34 + 2] ^= 1;
    check("icmp checksum", f, net::Reason::kBadIcmpChecksum, false);
    f = icmp_echo_request();
    store16(&f[ip + 2], 20 + 7);
    check("icmp short", f, net::Reason::kBadIcmp);
  }
  {
    Bytes f = good;
    f[tcp + 12] = 0x40;
    check("tcp offset 4", f, net::Reason::kBadTcpOffset, false);
    f[tcp + 12] = 0xf0;
    check("tcp offset past segment", f, net::Reason::kBadTcpOffset, false);
    f = good;
    store16(&f[ip + 2], 20 + 19);
    check("tcp segment short", f, net::Reason::kBadTcpOffset);
  }
  {
    Bytes f = good;
    f[tcp + 4] ^= 0x80;
    check("tcp checksum", f, net::Reason::kBadTcpChecksum, false);
    net::Packet q;
    EXPECT_EQ(parse(f, &q, false), net::Reason::kOk);  // not verified when not asked
  }
  {
    Bytes f = tcp_with_raw_options({1, 1, 1, 1}, {});
    f[tcp + 20] = 2;
    f[tcp + 21] = 5;  // MSS of length 5: the options are checked before the checksum
    check("tcp option", f, net::Reason::kBadTcpOption, false);
  }
  {
    net::ParseOptions o;
    const net::MacAddr other{{0x02, 9, 9, 9, 9, 9}};
    o.local_mac = &other;
    EXPECT_EQ(net::parse(good, o, &p), net::Reason::kNotForUs);
    EXPECT_EQ(net::parse(arp_request(false), o, &p), net::Reason::kOk);  // broadcast
    o.local_mac = &kGatewayMac;
    EXPECT_EQ(net::parse(good, o, &p), net::Reason::kOk);
    const std::array<uint32_t, 2> ours{0x0a000063, 0x0a000064};
    o.local_ips = ours;
    EXPECT_EQ(net::parse(good, o, &p), net::Reason::kNotForUs);
    EXPECT_EQ(net::parse(arp_request(false), o, &p), net::Reason::kNotForUs);
    const std::array<uint32_t, 1> vip{kVip};
    o.local_ips = vip;
    EXPECT_EQ(net::parse(good, o, &p), net::Reason::kOk);
  }
  for (int r = 0; r < int(net::Reason::kCount); ++r)
    EXPECT_STRNE(net::reason_name(net::Reason(r)), "unknown");
}

TEST(DpdkNetParse, IpOptionsAreSkippedAndPaddingIgnored) {
  Bytes f = build(base_segment());
  // Insert 4 bytes of IPv4 options (NOP NOP NOP EOL) and 6 bytes of Ethernet padding.
  f.insert(f.begin() + 34, {1, 1, 1, 0});
  f[14] = 0x46;
  store16(&f[16], uint16_t(load16(&f[16]) + 4));
  fix_ip_checksum(f);
  f.insert(f.end(), 6, 0);
  net::Packet p;
  ASSERT_EQ(parse(f, &p), net::Reason::kOk);
  EXPECT_EQ(p.l4_offset, 38u);
  EXPECT_EQ(p.payload_bytes, 0u);
  EXPECT_EQ(p.frame_end, f.size() - 6);
}

TEST(DpdkNetArp, ReplyAnswersRequestKeepingTheTag) {
  for (bool vlan : {false, true}) {
    net::Packet req;
    ASSERT_EQ(parse(arp_request(vlan), &req), net::Reason::kOk);
    ASSERT_EQ(req.kind, net::Kind::kArp);
    EXPECT_EQ(req.arp.operation, net::kArpRequest);
    EXPECT_EQ(req.arp.target_ip, kVip);
    Bytes out(64);
    const size_t n = net::build_arp_reply(req, kGatewayMac, out);
    ASSERT_EQ(n, vlan ? 46u : 42u);
    out.resize(n);
    net::Packet rep;
    ASSERT_EQ(parse(out, &rep), net::Reason::kOk);
    EXPECT_EQ(rep.has_vlan, vlan);
    if (vlan) {
      EXPECT_EQ(rep.vlan_tci, 0x2a);
    }
    EXPECT_EQ(rep.dst_mac, kClientMac);
    EXPECT_EQ(rep.src_mac, kGatewayMac);
    EXPECT_EQ(rep.arp.operation, net::kArpReply);
    EXPECT_EQ(rep.arp.sender_mac, kGatewayMac);
    EXPECT_EQ(rep.arp.sender_ip, kVip);
    EXPECT_EQ(rep.arp.target_mac, kClientMac);
    EXPECT_EQ(rep.arp.target_ip, kClient);
    // No reply to a reply, nor into a buffer too small.
    EXPECT_EQ(net::build_arp_reply(rep, kGatewayMac, out), 0u);
    Bytes small(41);
    EXPECT_EQ(net::build_arp_reply(req, kGatewayMac, small), 0u);
  }
}

TEST(DpdkNetIcmp, EchoReplyInPlaceHasValidChecksums) {
  Bytes f = icmp_echo_request();
  net::Packet p;
  ASSERT_EQ(parse(f, &p), net::Reason::kOk);
  ASSERT_EQ(p.kind, net::Kind::kIcmpEcho);
  EXPECT_EQ(p.icmp_id, 0x1234);
  EXPECT_EQ(p.icmp_seq, 1);
  ASSERT_TRUE(net::icmp_echo_reply_in_place(f, p, 63));
  EXPECT_FALSE(net::icmp_echo_reply_in_place(f, p));  // now a reply
  net::Packet r;
  ASSERT_EQ(parse(f, &r), net::Reason::kOk);  // verifies both checksums
  EXPECT_EQ(r.kind, net::Kind::kIcmpOther);
  EXPECT_EQ(r.icmp_type, 0);
  EXPECT_EQ(r.src_ip, kVip);
  EXPECT_EQ(r.dst_ip, kClient);
  EXPECT_EQ(r.src_mac, kGatewayMac);
  EXPECT_EQ(r.dst_mac, kClientMac);
  EXPECT_EQ(r.ttl, 63);
  EXPECT_EQ(r.icmp_id, 0x1234);
  EXPECT_EQ(Bytes(f.begin() + r.payload_offset, f.end()), (Bytes{'p', 'i', 'n', 'g', '!'}));
}

// A request whose reply sums to zero (type 0, identifier, sequence and data all zero, an odd
// length) needs the checksum 0xffff; an incremental update from the request's would give 0x0000,
// which receivers reject (found by packet_fuzz).
TEST(DpdkNetIcmp, EchoReplyOfAnAllZeroMessageHasAValidChecksum) {
  Bytes f = icmp_echo_request(Bytes(3, 0), 0, 0);
  net::Packet p;
  ASSERT_EQ(parse(f, &p), net::Reason::kOk);
  ASSERT_EQ(p.kind, net::Kind::kIcmpEcho);
  ASSERT_TRUE(net::icmp_echo_reply_in_place(f, p));
  EXPECT_EQ(load16(&f[p.l4_offset + 2]), 0xffff);
  net::Packet r;
  EXPECT_EQ(parse(f, &r), net::Reason::kOk);
}

// Random segments (random options, some at odd offsets, random payload, VLAN or not) with
// random rewrites: the incremental checksums equal the recomputed ones and the frame verifies.
TEST(DpdkNetRewrite, IncrementalChecksumsEqualRecomputationAfterRandomRewrites) {
  std::mt19937 rng(20261130);
  for (int iter = 0; iter < 3000; ++iter) {
    net::TcpSegment s = base_segment();
    randomize(s, rng);
    if (rng() % 2) s.vlan_tci = uint16_t(rng());
    std::array<net::SackBlock, 4> blocks;
    for (auto& b : blocks)
      b = net::SackBlock{uint32_t(rng()), uint32_t(rng())};
    if (rng() % 2) s.options.mss = uint16_t(rng());
    if (rng() % 2) s.options.timestamps = net::Timestamps{uint32_t(rng()), uint32_t(rng())};
    s.options.sack = std::span(blocks).first(rng() % (s.options.timestamps ? 3 : 4));
    Bytes payload(rng() % 64);
    for (auto& c : payload)
      c = uint8_t(rng());
    s.payload = payload;
    Bytes f;
    if (rng() % 4 == 0) {
      // A SACK option at an odd offset: NOP, SACK with one block, NOP padding.
      Bytes o = {1, 5, 10};
      for (int i = 0; i < 8; ++i)
        o.push_back(uint8_t(rng()));
      o.push_back(1);
      if (rng() % 2) o.insert(o.end(), {1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8, 0});  // odd TS too
      f = tcp_with_raw_options(o, payload);
    } else {
      f = build(s);
    }
    net::Packet p;
    ASSERT_EQ(parse(f, &p), net::Reason::kOk);
    for (int step = 0; step < 8; ++step) {
      switch (rng() % 9) {
        case 0:
          net::set_src_ip(f, p, uint32_t(rng()));
          break;
        case 1:
          net::set_dst_ip(f, p, uint32_t(rng()));
          break;
        case 2:
          net::set_src_port(f, p, uint16_t(rng()));
          break;
        case 3:
          net::set_dst_port(f, p, uint16_t(rng()));
          break;
        case 4:
          net::set_seq(f, p, uint32_t(rng()));
          break;
        case 5:
          net::set_ack(f, p, uint32_t(rng()));
          break;
        case 6:
          net::set_window(f, p, uint16_t(rng()));
          break;
        case 7:
          if (p.options.sack_count > 0) {
            net::set_sack_block(f, p, rng() % p.options.sack_count,
                                net::SackBlock{uint32_t(rng()), uint32_t(rng())});
          }
          break;
        default:
          if (p.options.has_timestamps) {
            net::set_timestamps(f, p, net::Timestamps{uint32_t(rng()), uint32_t(rng())});
          }
          break;
      }
      ASSERT_EQ(load16(&f[p.l3_offset + 10]), net::compute_ip_checksum(f, p)) << iter;
      ASSERT_EQ(load16(&f[p.l4_offset + 16]), net::compute_tcp_checksum(f, p)) << iter;
      net::Packet q;
      ASSERT_EQ(parse(f, &q), net::Reason::kOk);
      ASSERT_EQ(q.src_ip, p.src_ip);
      ASSERT_EQ(q.dst_ip, p.dst_ip);
      ASSERT_EQ(q.src_port, p.src_port);
      ASSERT_EQ(q.dst_port, p.dst_port);
      ASSERT_EQ(q.seq, p.seq);
      ASSERT_EQ(q.ack, p.ack);
      ASSERT_EQ(q.window, p.window);
      ASSERT_EQ(q.options.sack, p.options.sack);
      ASSERT_EQ(q.options.timestamps, p.options.timestamps);
    }
  }
}

// The batched rewrite of the splice path against the per-field setters: the same random
// changes to two copies of a frame (options at odd offsets included) give the same bytes,
// checksums bit for bit, and the same parsed view.
TEST(DpdkNetRewrite, SegmentRewriteMatchesPerFieldSetters) {
  std::mt19937 rng(20261201);
  for (int iter = 0; iter < 3000; ++iter) {
    net::TcpSegment s = base_segment();
    s.src_ip = uint32_t(rng());
    s.dst_ip = uint32_t(rng());
    s.seq = uint32_t(rng());
    s.ack = uint32_t(rng());
    s.window = uint16_t(rng());
    std::array<net::SackBlock, 3> blocks;
    for (auto& b : blocks)
      b = net::SackBlock{uint32_t(rng()), uint32_t(rng())};
    if (rng() % 2) s.options.timestamps = net::Timestamps{uint32_t(rng()), uint32_t(rng())};
    s.options.sack = std::span(blocks).first(rng() % (s.options.timestamps ? 3 : 4));
    Bytes payload(rng() % 64);
    for (auto& c : payload)
      c = uint8_t(rng());
    s.payload = payload;
    Bytes one;
    if (rng() % 4 == 0) {
      Bytes o = {1, 5, 10};  // SACK with one block at an odd offset
      for (int i = 0; i < 8; ++i)
        o.push_back(uint8_t(rng()));
      o.push_back(1);
      if (rng() % 2) o.insert(o.end(), {1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8, 0});  // odd TS too
      one = tcp_with_raw_options(o, payload);
    } else {
      one = build(s);
    }
    Bytes batch = one;
    net::Packet p1, p2;
    ASSERT_EQ(parse(one, &p1), net::Reason::kOk);
    ASSERT_EQ(parse(batch, &p2), net::Reason::kOk);
    net::SegmentRewrite rw(batch, p2);
    const int steps = 1 + int(rng() % 12);
    for (int step = 0; step < steps; ++step) {
      const uint32_t v = uint32_t(rng());
      switch (rng() % 9) {
        case 0:
          net::set_src_ip(one, p1, v);
          rw.src_ip(v);
          break;
        case 1:
          net::set_dst_ip(one, p1, v);
          rw.dst_ip(v);
          break;
        case 2:
          net::set_src_port(one, p1, uint16_t(v));
          rw.src_port(uint16_t(v));
          break;
        case 3:
          net::set_dst_port(one, p1, uint16_t(v));
          rw.dst_port(uint16_t(v));
          break;
        case 4:
          net::set_seq(one, p1, v);
          rw.seq(v);
          break;
        case 5:
          net::set_ack(one, p1, v);
          rw.ack(v);
          break;
        case 6:
          net::set_window(one, p1, uint16_t(v));
          rw.window(uint16_t(v));
          break;
        case 7:
          if (p1.options.sack_count > 0) {
            const size_t i = rng() % p1.options.sack_count;
            const net::SackBlock b{v, uint32_t(rng())};
            net::set_sack_block(one, p1, i, b);
            rw.sack_block(i, b);
          }
          break;
        default:
          if (p1.options.has_timestamps) {
            const net::Timestamps ts{v, uint32_t(rng())};
            net::set_timestamps(one, p1, ts);
            rw.timestamps(ts);
          }
          break;
      }
    }
    rw.finish();
    ASSERT_EQ(batch, one) << iter;
    ASSERT_EQ(load16(&batch[p2.l3_offset + 10]), net::compute_ip_checksum(batch, p2)) << iter;
    ASSERT_EQ(load16(&batch[p2.l4_offset + 16]), net::compute_tcp_checksum(batch, p2)) << iter;
    net::Packet q;
    ASSERT_EQ(parse(batch, &q), net::Reason::kOk);
    ASSERT_EQ(q.src_ip, p2.src_ip);
    ASSERT_EQ(q.dst_ip, p2.dst_ip);
    ASSERT_EQ(q.src_port, p2.src_port);
    ASSERT_EQ(q.dst_port, p2.dst_port);
    ASSERT_EQ(q.seq, p2.seq);
    ASSERT_EQ(q.ack, p2.ack);
    ASSERT_EQ(q.window, p2.window);
    ASSERT_EQ(q.options.sack, p2.options.sack);
    ASSERT_EQ(q.options.timestamps, p2.options.timestamps);
  }
}

// Every prefix of valid frames, each in a buffer of exactly its size so that ASan reports any
// read past it, is either truncated or (past the IPv4 total length) a valid parse.
TEST(DpdkNetParse, TruncationAtEveryLengthIsTruncatedOrValid) {
  net::TcpSegment s = base_segment();
  s.vlan_tci = 5;
  s.options.mss = 1400;
  s.options.timestamps = net::Timestamps{9, 10};
  const std::array<net::SackBlock, 2> blocks{{{1, 2}, {3, 4}}};
  s.options.sack = blocks;
  const Bytes payload(100, 'x');
  s.payload = payload;
  Bytes padded_arp = arp_request(true);
  padded_arp.resize(60, 0);
  for (const Bytes& frame : {build(s), build(base_segment()), icmp_echo_request(), padded_arp}) {
    net::Packet full;
    ASSERT_EQ(parse(frame, &full), net::Reason::kOk);
    for (size_t len = 0; len <= frame.size(); ++len) {
      std::unique_ptr<uint8_t[]> copy(new uint8_t[len ? len : 1]);
      std::copy(frame.begin(), frame.begin() + len, copy.get());
      net::Packet p;
      const net::Reason r = net::parse(std::span<const uint8_t>(copy.get(), len), {}, &p);
      if (len >= full.frame_end) {
        EXPECT_EQ(r, net::Reason::kOk) << len;
      } else {
        EXPECT_EQ(r, net::Reason::kTruncated) << len;
      }
    }
  }
}

TEST(DpdkNetBuild, RefusesOversizedOptionsAndSmallBuffers) {
  net::TcpSegment s = base_segment();
  std::array<net::SackBlock, 5> five{};
  s.options.sack = five;
  EXPECT_FALSE(net::tcp_options_bytes(s.options));
  s.options.sack = {};
  const Bytes payload(100, 'y');
  s.payload = payload;
  Bytes out(14 + 20 + 20 + 99);
  EXPECT_EQ(net::build_tcp_segment(s, out), 0u);
  out.resize(out.size() + 1);
  EXPECT_EQ(net::build_tcp_segment(s, out), out.size());
}

// The fields parse_established() fills (all but the ARP and ICMP ones and the SACK blocks).
void expect_same_tcp_fields(const net::Packet& a, const net::Packet& g) {
  EXPECT_EQ(a.kind, g.kind);
  EXPECT_EQ(a.dst_mac, g.dst_mac);
  EXPECT_EQ(a.src_mac, g.src_mac);
  EXPECT_EQ(a.has_vlan, g.has_vlan);
  EXPECT_EQ(a.vlan_tci, g.vlan_tci);
  EXPECT_EQ(a.ethertype, g.ethertype);
  EXPECT_EQ(a.l3_offset, g.l3_offset);
  EXPECT_EQ(a.l4_offset, g.l4_offset);
  EXPECT_EQ(a.payload_offset, g.payload_offset);
  EXPECT_EQ(a.payload_bytes, g.payload_bytes);
  EXPECT_EQ(a.frame_end, g.frame_end);
  EXPECT_EQ(a.ttl, g.ttl);
  EXPECT_EQ(a.protocol, g.protocol);
  EXPECT_EQ(a.ip_id, g.ip_id);
  EXPECT_EQ(a.src_ip, g.src_ip);
  EXPECT_EQ(a.dst_ip, g.dst_ip);
  EXPECT_EQ(a.src_port, g.src_port);
  EXPECT_EQ(a.dst_port, g.dst_port);
  EXPECT_EQ(a.seq, g.seq);
  EXPECT_EQ(a.ack, g.ack);
  EXPECT_EQ(a.flags, g.flags);
  EXPECT_EQ(a.window, g.window);
  const net::TcpOptions& x = a.options;
  const net::TcpOptions& y = g.options;
  EXPECT_EQ(x.has_mss, y.has_mss);
  EXPECT_EQ(x.has_window_scale, y.has_window_scale);
  EXPECT_EQ(x.sack_permitted, y.sack_permitted);
  EXPECT_EQ(x.has_timestamps, y.has_timestamps);
  EXPECT_EQ(x.mss, y.mss);
  EXPECT_EQ(x.window_scale, y.window_scale);
  EXPECT_EQ(x.sack_count, y.sack_count);
  EXPECT_EQ(x.timestamps, y.timestamps);
  EXPECT_EQ(x.sack_offset, y.sack_offset);
  EXPECT_EQ(x.timestamps_offset, y.timestamps_offset);
}

// parse_established() against parse() over random TCP frames (options of every kind, SYNs,
// VLAN tags, other destination MACs) and random corruptions of their headers, from a
// fixed seed: it takes a frame only when parse() accepts it as TCP, then with the same fields;
// and it takes every intact frame of the shape it is for.
TEST(ParseEstablished, AgreesWithParse) {
  std::mt19937 rng(20261202);
  const auto pick = [&](uint32_t n) { return uint32_t(rng() % n); };
  size_t taken = 0;
  size_t corrupt_taken = 0;
  for (int i = 0; i < 20000; ++i) {
    net::TcpSegment s = base_segment();
    randomize(s, rng);
    s.dst_ip = kVip;
    s.ttl = uint8_t(rng());
    s.ip_id = uint16_t(rng());
    if (pick(8) == 0) s.vlan_tci = uint16_t(pick(4096));
    if (pick(8) == 0) s.dst_mac = pick(2) ? kClientMac : net::kBroadcastMac;
    const net::SackBlock blocks[] = {{1, 2}, {3, 4}};
    switch (pick(6)) {
      case 0:
      case 1:
        break;
      case 2:
      case 3:
        s.options.timestamps = net::Timestamps{uint32_t(rng()), uint32_t(rng())};
        break;
      case 4:
        s.options.mss = 1460;
        s.options.window_scale = 7;
        s.options.sack_permitted = true;
        break;
      default:
        s.options.sack = std::span<const net::SackBlock>(blocks, 1 + pick(2));
        if (pick(2)) s.options.timestamps = net::Timestamps{uint32_t(rng()), 5};
        break;
    }
    const Bytes payload(pick(4) == 0 ? 0 : pick(1400), uint8_t(rng()));
    s.payload = payload;
    Bytes f = build(s);
    const bool intact = pick(3) != 0;
    if (!intact) {
      const size_t l3 = s.vlan_tci ? net::kEthernetBytes + net::kVlanBytes : net::kEthernetBytes;
      uint8_t* ip = &f[l3];
      uint8_t* tcp = ip + net::kIpv4Bytes;
      switch (pick(6)) {
        case 0:  // any bytes of the headers
          for (uint32_t k = 1 + pick(3); k-- > 0;)
            f[pick(uint32_t(std::min<size_t>(80, f.size())))] ^= uint8_t(1 + pick(255));
          break;
        case 1:  // the IPv4 total length, up to past the frame's end
          store16(ip + 2, uint16_t(pick(uint32_t(f.size() - l3) + 40)));
          break;
        case 2:  // MF or a fragment offset
          store16(ip + 6, uint16_t(load16(ip + 6) | (pick(2) ? 0x2000 : 1 + pick(0x1fff))));
          break;
        case 3:  // the TCP data offset
          tcp[12] = uint8_t(pick(16) << 4);
          break;
        case 4:  // IPv4 options (a longer IHL), any version and IHL, or the protocol
          switch (pick(3)) {
            case 0:
              ip[0] = uint8_t(0x40 | (6 + pick(10)));
              break;
            case 1:
              ip[0] = uint8_t(rng());
              break;
            default:
              ip[9] = uint8_t(rng());
              break;
          }
          break;
        default:  // cut short
          f.resize(pick(uint32_t(f.size())));
          break;
      }
      // Mostly with a header checksum that verifies, so that the other checks are reached.
      const size_t ihl_bytes = size_t(ip[0] & 0x0f) * 4;
      if (!s.vlan_tci && ihl_bytes >= net::kIpv4Bytes && f.size() >= l3 + ihl_bytes &&
          pick(4) != 0) {
        fix_ip_checksum(f);
      }
    }
    net::Packet a;
    std::memset(static_cast<void*>(&a), 0xa5, sizeof a);  // stale fields show
    net::Packet g;
    net::ParseOptions o;
    o.verify_tcp_checksum = false;
    o.local_mac = &kGatewayMac;
    const bool established = net::parse_established(f, kGatewayMac, &a);
    const net::Reason r = net::parse(f, o, &g);
    const bool shape = !s.vlan_tci && s.dst_mac == kGatewayMac && (s.flags & net::kSyn) == 0 &&
                       !s.options.mss && s.options.sack.empty();
    if (intact) {
      EXPECT_EQ(established, shape) << "frame " << i;
    }
    if (!established) continue;
    ++taken;
    if (!intact) ++corrupt_taken;
    ASSERT_EQ(r, net::Reason::kOk) << "frame " << i << ": " << net::reason_name(r);
    expect_same_tcp_fields(a, g);
  }
  // Both kinds of frame were met: the check above is not vacuous.
  EXPECT_GT(taken, 2000u);
  EXPECT_GT(corrupt_taken, 100u);
}

// rewrite_established() against SegmentRewrite making the same calls in the splice path's
// order, over random segments of the established shape and random changes, from a fixed seed:
// the same bytes, checksums bit for bit, and both checksums verify.
TEST(DpdkNetRewrite, RewriteEstablishedMatchesSegmentRewrite) {
  std::mt19937 rng(20261203);
  const auto pick = [&](uint32_t n) { return uint32_t(rng() % n); };
  for (int iter = 0; iter < 5000; ++iter) {
    net::TcpSegment s = base_segment();
    randomize(s, rng);
    s.flags &= uint8_t(~net::kSyn);
    if (pick(2)) s.options.timestamps = net::Timestamps{uint32_t(rng()), uint32_t(rng())};
    const Bytes payload(pick(64), uint8_t(rng()));
    s.payload = payload;
    const Bytes original = build(s);
    net::Packet p;
    ASSERT_TRUE(net::parse_established(original, kGatewayMac, &p));

    net::SpliceChange c;
    c.dst_mac = net::MacAddr{{2, 0, 0, 0, uint8_t(rng()), uint8_t(rng())}};
    c.src_mac = net::MacAddr{{2, 0, 0, 1, uint8_t(rng()), uint8_t(rng())}};
    // Now and then a field keeps its value: its terms still count, as in SegmentRewrite.
    c.src_ip = pick(8) ? uint32_t(rng()) : p.src_ip;
    c.dst_ip = pick(8) ? uint32_t(rng()) : p.dst_ip;
    c.src_port = pick(8) ? uint16_t(rng()) : p.src_port;
    c.dst_port = pick(8) ? uint16_t(rng()) : p.dst_port;
    c.seq = pick(8) ? uint32_t(rng()) : p.seq;
    if (p.flags & net::kAck) c.ack = uint32_t(rng());
    if (pick(2)) c.window = uint16_t(rng());
    if (p.options.has_timestamps && pick(4)) {
      c.timestamps =
          net::Timestamps{pick(2) ? uint32_t(rng()) : p.options.timestamps.value, uint32_t(rng())};
    }

    Bytes one = original;
    net::rewrite_established(one, p, c);
    Bytes other = original;
    net::Packet q = p;
    std::memcpy(other.data(), c.dst_mac.bytes.data(), 6);
    std::memcpy(other.data() + 6, c.src_mac.bytes.data(), 6);
    net::SegmentRewrite rw(other, q);
    rw.src_ip(c.src_ip);
    rw.dst_ip(c.dst_ip);
    rw.src_port(c.src_port);
    rw.dst_port(c.dst_port);
    rw.seq(c.seq);
    if (c.ack) rw.ack(*c.ack);
    if (c.window) rw.window(*c.window);
    if (c.timestamps) rw.timestamps(*c.timestamps);
    rw.finish();
    ASSERT_EQ(one, other) << "iteration " << iter;
    net::Packet r;
    ASSERT_EQ(parse(one, &r), net::Reason::kOk) << "iteration " << iter;  // both checksums
    EXPECT_EQ(r.src_ip, c.src_ip);
    EXPECT_EQ(r.dst_port, c.dst_port);
    EXPECT_EQ(r.seq, c.seq);
  }
}

}  // namespace
