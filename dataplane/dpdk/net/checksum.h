// The Internet checksum (RFC 1071), the IPv4 pseudo-header sum and incremental updates
// (RFC 1624). Values are host-order numbers of the big-endian 16-bit fields on the wire.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::dpdk::net {

// One's-complement partial sum of `bytes` added to `sum`, not folded. Chain calls for
// scattered data only when every piece but the last has an even length.
uint64_t checksum_add(std::span<const uint8_t> bytes, uint64_t sum = 0);

// Folds a partial sum to 16 bits (end-around carry); not inverted. Inline, as the updates
// below: the splice path calls them several times per packet. No loop: in x + rotr(x, 16) the
// high half holds the two halves' sum plus the carry out of the low half, the end-around carry
// (Linux's csum_fold does the same); a 64-bit sum is first folded to 32 bits the same way. The
// result is the carry loop's: each step keeps the value modulo 0xffff, and only 0 folds to 0.
// 2^32 and 2^64 are 1 modulo 0xffff, so words of any width whose 16-bit parts lie at even
// offsets may be summed whole.
inline uint16_t checksum_fold32(uint32_t sum) {
  return uint16_t((sum + std::rotr(sum, 16)) >> 16);
}
inline uint16_t checksum_fold(uint64_t sum) {
  const uint32_t low = uint32_t(sum);
  const uint32_t folded = low + uint32_t(sum >> 32);
  return checksum_fold32(folded + (folded < low));
}

// The checksum field value for `bytes` (whose own checksum field must be zero).
inline uint16_t internet_checksum(std::span<const uint8_t> bytes) {
  return uint16_t(~checksum_fold(checksum_add(bytes)));
}

// True when `bytes`, including their checksum field, sum to all ones.
inline bool checksum_ok(std::span<const uint8_t> bytes, uint64_t sum = 0) {
  return checksum_fold(checksum_add(bytes, sum)) == 0xffff;
}

// Partial sum of the TCP/UDP pseudo-header for IPv4; addresses in host order, `l4_bytes` the
// length of the TCP or UDP header plus payload.
inline uint64_t pseudo_header_sum(uint32_t src_ip, uint32_t dst_ip, uint8_t protocol,
                                  uint16_t l4_bytes) {
  return uint64_t(src_ip >> 16) + (src_ip & 0xffff) + (dst_ip >> 16) + (dst_ip & 0xffff) +
         protocol + l4_bytes;
}

// RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for a 16-bit field changing from `old_value` to
// `new_value`.
inline uint16_t checksum_update16(uint16_t check, uint16_t old_value, uint16_t new_value) {
  const uint64_t sum = uint64_t(uint16_t(~check)) + uint16_t(~old_value) + new_value;
  return uint16_t(~checksum_fold(sum));
}

// The same for a 32-bit field (an address or a sequence number): both halves at once.
inline uint16_t checksum_update32(uint16_t check, uint32_t old_value, uint32_t new_value) {
  const uint64_t sum = uint64_t(uint16_t(~check)) + uint16_t(~(old_value >> 16)) +
                       uint16_t(~old_value) + (new_value >> 16) + (new_value & 0xffff);
  return uint16_t(~checksum_fold(sum));
}

}  // namespace sluice::dpdk::net
