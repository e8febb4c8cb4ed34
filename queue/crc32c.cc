// CRC32C: hardware path (SSE4.2 crc32 instruction, three interleaved streams so recovery is not
// limited by the instruction's 3-cycle latency) and a portable slicing-by-8 table fallback.
#include "queue/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice::queue {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t s = 1; s < 8; ++s)
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};
constexpr Tables kTables;

#if defined(__x86_64__)
// Multiplies a CRC by x^(8*len) mod P (shifting it past `len` zero bytes), used to combine the
// interleaved streams. Done with the table; only called once per large block.
uint32_t shift_zeros(uint32_t crc, size_t len) {
  // len is a fixed block size; a plain byte loop over zeros is cheap relative to the block.
  for (size_t i = 0; i < len; ++i)
    crc = (crc >> 8) ^ kTables.t[0][crc & 0xFF];
  return crc;
}

// The 3-way split: three streams of kStream bytes each, combined by shifting a stream's CRC past
// the bytes that follow it. The shift for a fixed length is linear, so it is precomputed as a
// table of 4 x 256 entries. Two stream lengths: large blocks for big records, small ones so
// that 1 KiB records also get the three streams.
template <size_t kStream>
struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ShiftTable() {
    for (size_t b = 0; b < 4; ++b)
      for (uint32_t v = 0; v < 256; ++v)
        t[b][v] = shift_zeros(v << (8 * b), kStream);
  }
  uint32_t apply(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t hw_run(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

template <size_t kStream>
__attribute__((target("sse4.2"))) uint32_t hw_blocks(uint32_t crc, const uint8_t*& p, size_t& n) {
  static const ShiftTable<kStream> shift;
  while (n >= 3 * kStream) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kStream; i += 8) {
      uint64_t va, vb, vc;
      std::memcpy(&va, p + i, 8);
      std::memcpy(&vb, p + kStream + i, 8);
      std::memcpy(&vc, p + 2 * kStream + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      c = _mm_crc32_u64(c, vc);
    }
    // crc(A|B) = shift(crc(A), |B|) ^ crc0(B) for the raw (no pre/post inversion) register.
    uint32_t r = shift.apply(uint32_t(a)) ^ uint32_t(b);
    crc = shift.apply(r) ^ uint32_t(c);
    p += 3 * kStream;
    n -= 3 * kStream;
  }
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t hw_three(uint32_t crc, const uint8_t* p, size_t n) {
  crc = hw_blocks<4096>(crc, p, n);
  crc = hw_blocks<256>(crc, p, n);
  return hw_run(crc, p, n);
}
#endif

}  // namespace

uint32_t crc32c_table(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  const auto& t = kTables.t;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
    --n;
  }
  return ~c;
}

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c_hardware(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  return ~hw_three(~crc, static_cast<const uint8_t*>(data), n);
#else
  return crc32c_table(crc, data, n);
#endif
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  if (crc32c_hardware_available()) return crc32c_hardware(crc, data, n);
  return crc32c_table(crc, data, n);
}

}  // namespace sluice::queue
