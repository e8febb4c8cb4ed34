// The Internet checksum, summed 8 bytes at a time in native order (RFC 1071 section 2(B):
// the one's-complement sum does not depend on byte order, so one swap at the end suffices).
#include "dataplane/dpdk/net/checksum.h"

#include <bit>
#include <cstring>

namespace sluice::dpdk::net {

uint64_t checksum_add(std::span<const uint8_t> bytes, uint64_t sum) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  // Each 64-bit word adds as two 32-bit halves into a 64-bit accumulator: no carry is lost
  // for any buffer under 2^32 words, and the end-around carry is applied in checksum_fold.
  uint64_t acc = 0;
  while (n >= 32) {
    uint64_t w[4];
    std::memcpy(w, p, sizeof(w));
    acc += (w[0] & 0xffffffffu) + (w[0] >> 32) + (w[1] & 0xffffffffu) + (w[1] >> 32);
    acc += (w[2] & 0xffffffffu) + (w[2] >> 32) + (w[3] & 0xffffffffu) + (w[3] >> 32);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    acc += (w & 0xffffffffu) + (w >> 32);
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    acc += w;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    acc += w;
    p += 2;
    n -= 2;
  }
  if (n == 1) {
    // The odd byte is the high byte of a big-endian word padded with zero.
    const uint8_t pad[2] = {p[0], 0};
    uint16_t w;
    std::memcpy(&w, pad, 2);
    acc += w;
  }
  // Fold the native-order sum to 16 bits, then turn it into the big-endian value.
  uint16_t native = checksum_fold(acc);
  if constexpr (std::endian::native == std::endian::little) {
    native = uint16_t((native >> 8) | (native << 8));
  }
  return sum + native;
}

}  // namespace sluice::dpdk::net
