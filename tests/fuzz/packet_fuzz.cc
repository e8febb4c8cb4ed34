// libFuzzer target for the DPDK engine's packet layer: any bytes are parsed as a frame; a valid
// TCP segment is then rewritten field by field (choices derived from the input) and after each
// rewrite the incremental checksums must equal full recomputation and the frame must parse
// again with the new values. Echo requests and ARP requests are answered and the answers parsed.
//
// Input: the frame itself (seeds in corpus/packet are Ethernet frames).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "dataplane/dpdk/net/build.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/dpdk/net/packet.h"
#include "dataplane/dpdk/net/rewrite.h"
#include "tests/fuzz/fuzz_rng.h"

namespace {

namespace net = sluice::dpdk::net;
uint16_t load16(const uint8_t* b) {
  return uint16_t(b[0] << 8 | b[1]);
}

constexpr size_t kRewritesMax = 16;

void check_same(const net::Packet& a, const net::Packet& b) {
  if (a.kind != b.kind || a.src_ip != b.src_ip || a.dst_ip != b.dst_ip ||
      a.src_port != b.src_port || a.dst_port != b.dst_port || a.seq != b.seq || a.ack != b.ack ||
      a.window != b.window || a.options.sack_count != b.options.sack_count ||
      a.options.sack != b.options.sack || a.options.timestamps != b.options.timestamps ||
      a.payload_offset != b.payload_offset || a.payload_bytes != b.payload_bytes) {
    __builtin_trap();
  }
}

// A checksum field updated incrementally (RFC 1624) equals the recomputed one, but for zero:
// one's-complement arithmetic has two, 0x0000 and 0xffff, and a sender may put either (a field
// of 0xffff verifies). An update keeps the form the frame came with; the receiver's sum is the
// same for both, which the parse below checks.
bool same_checksum(uint16_t stored, uint16_t computed) {
  const auto zero = [](uint16_t v) { return v == 0x0000 || v == 0xffff; };
  return stored == computed || (zero(stored) && zero(computed));
}

void check_checksums(std::span<const uint8_t> f, const net::Packet& p) {
  if (!same_checksum(load16(f.data() + p.l3_offset + 10), net::compute_ip_checksum(f, p))) {
    __builtin_trap();
  }
  if (!same_checksum(load16(f.data() + p.l4_offset + 16), net::compute_tcp_checksum(f, p))) {
    __builtin_trap();
  }
  net::Packet q;
  if (net::parse(f, {}, &q) != net::Reason::kOk) __builtin_trap();
  check_same(p, q);
}

void rewrite_tcp(std::vector<uint8_t>& frame, net::Packet& p, sluice::fuzz::Rng& rng) {
  const std::span<uint8_t> f(frame);
  for (size_t step = 0; step < kRewritesMax; ++step) {
    const uint32_t v = uint32_t(rng.next());
    switch (rng.below(9)) {
      case 0:
        net::set_src_ip(f, p, v);
        break;
      case 1:
        net::set_dst_ip(f, p, v);
        break;
      case 2:
        net::set_src_port(f, p, uint16_t(v));
        break;
      case 3:
        net::set_dst_port(f, p, uint16_t(v));
        break;
      case 4:
        net::set_seq(f, p, v);
        break;
      case 5:
        net::set_ack(f, p, v);
        break;
      case 6:
        net::set_window(f, p, uint16_t(v));
        break;
      case 7:
        if (p.options.sack_count > 0) {
          net::set_sack_block(f, p, rng.below(p.options.sack_count),
                              net::SackBlock{v, uint32_t(rng.next())});
        }
        break;
      default:
        if (p.options.has_timestamps) {
          net::set_timestamps(f, p, net::Timestamps{v, uint32_t(rng.next())});
        }
        break;
    }
    check_checksums(f, p);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  net::Packet p;
  const net::Reason unverified = net::parse(input, net::ParseOptions{false, nullptr, {}}, &p);
  const net::Reason r = net::parse(input, {}, &p);
  if (r >= net::Reason::kCount || unverified >= net::Reason::kCount) __builtin_trap();
  // Verifying the TCP checksum can only turn a valid parse into kBadTcpChecksum.
  if (r != unverified && !(unverified == net::Reason::kOk && r == net::Reason::kBadTcpChecksum)) {
    __builtin_trap();
  }
  if (r != net::Reason::kOk) return 0;
  if (p.frame_end > size || p.payload_offset + p.payload_bytes > p.frame_end) __builtin_trap();

  sluice::fuzz::Rng rng(std::string_view(reinterpret_cast<const char*>(data), size));
  switch (p.kind) {
    case net::Kind::kTcp: {
      std::vector<uint8_t> frame(input.begin(), input.end());
      rewrite_tcp(frame, p, rng);
      break;
    }
    case net::Kind::kIcmpEcho: {
      std::vector<uint8_t> frame(input.begin(), input.end());
      if (!net::icmp_echo_reply_in_place(frame, p)) __builtin_trap();
      net::Packet q;
      if (net::parse(frame, {}, &q) != net::Reason::kOk || q.icmp_type != 0) __builtin_trap();
      break;
    }
    case net::Kind::kArp: {
      uint8_t out[64];
      const size_t n = net::build_arp_reply(p, net::MacAddr{{2, 0, 0, 0, 0, 1}}, out);
      if ((n != 0) != (p.arp.operation == net::kArpRequest)) __builtin_trap();
      net::Packet q;
      if (n != 0 && (net::parse(std::span<const uint8_t>(out, n), {}, &q) != net::Reason::kOk ||
                     q.arp.operation != net::kArpReply || q.arp.target_ip != p.arp.sender_ip)) {
        __builtin_trap();
      }
      break;
    }
    default:
      break;
  }
  return 0;
}
