// In-place field rewrites with incremental checksum updates (RFC 1624).
#include "dataplane/dpdk/net/rewrite.h"

#include "base/assert.h"
#include "dataplane/dpdk/net/bytes.h"
#include "dataplane/dpdk/net/checksum.h"

namespace sluice::dpdk::net {

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
