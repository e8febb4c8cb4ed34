// Big-endian loads and stores on packet bytes (private to the packet layer).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace sluice::dpdk::net::detail {

// One unaligned move and a byte swap each: the parse and the rewrites of every frame go
// through these, and the byte-by-byte form is not always merged into one access.
inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap16(v);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  return v;
}
inline void store16(uint8_t* p, uint16_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}
inline void store32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

}  // namespace sluice::dpdk::net::detail
