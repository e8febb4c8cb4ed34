// The frame-head fast path: the command line and headers of a frame that lies whole in the
// buffer, from 64-byte block bitmasks in one pass (SSE2, AVX2 or AVX-512BW, chosen at start).
#include "dataplane/session/frame_head.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace sluice::session::detail {
namespace {

constexpr size_t kNotFound = ~size_t{0};

}  // namespace

bool parse_content_length(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

#if defined(__SSE2__)
namespace {

inline uint64_t movemask64(__m128i a, __m128i b, __m128i c, __m128i d) {
  return uint64_t(uint32_t(_mm_movemask_epi8(a))) | uint64_t(uint32_t(_mm_movemask_epi8(b))) << 16 |
         uint64_t(uint32_t(_mm_movemask_epi8(c))) << 32 |
         uint64_t(uint32_t(_mm_movemask_epi8(d))) << 48;
}

HeadBlock head_block_sse2(const char* p) {
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i bs = _mm_set1_epi8('\\');
  const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
  const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 48));
  auto is_nul = [](__m128i v) { return _mm_cmpeq_epi8(v, _mm_setzero_si128()); };
  auto is_colon = [](__m128i v) { return _mm_cmpeq_epi8(v, _mm_set1_epi8(':')); };
  auto is_odd = [&](__m128i v) {
    return _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, bs));
  };
  auto is_lf = [](__m128i v) { return _mm_cmpeq_epi8(v, _mm_set1_epi8('\n')); };
  const uint64_t nul = movemask64(is_nul(v0), is_nul(v1), is_nul(v2), is_nul(v3));
  return HeadBlock{movemask64(is_lf(v0), is_lf(v1), is_lf(v2), is_lf(v3)) | nul,
                   movemask64(is_colon(v0), is_colon(v1), is_colon(v2), is_colon(v3)),
                   movemask64(is_odd(v0), is_odd(v1), is_odd(v2), is_odd(v3)), nul};
}

// Bit count without the POPCNT instruction (not in the x86-64 baseline, and the library call
// the compiler would make instead is outside what the session core may link).
inline unsigned popcount_swar(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555u);
  x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
  return unsigned((x * 0x0101010101010101u) >> 56);
}

// The first NUL in p[from, to) for a body: the C library's scan in the baseline copy.
inline size_t find_nul_memchr(const char* p, size_t from, size_t to) {
  const void* hit = std::memchr(p + from, '\0', to - from);
  return hit ? size_t(static_cast<const char*>(hit) - p) : kNotFound;
}

// The vector width a copy of the head scan is built for: its block masks, bit count and body
// NUL scan.
struct IsaSse2 {
  static HeadBlock block(const char* p) { return head_block_sse2(p); }
  static unsigned popcount(uint64_t x) { return popcount_swar(x); }
  static size_t find_nul(const char* p, size_t from, size_t to) {
    return find_nul_memchr(p, from, to);
  }
};

#if defined(__x86_64__) && defined(__GNUC__)
// The same masks with 64-byte compares, for CPUs that have AVX-512BW (chosen at start).
[[gnu::target("avx512bw")]] HeadBlock head_block_avx512(const char* p) {
  const __m512i v = _mm512_loadu_si512(p);
  const uint64_t nul = _mm512_cmpeq_epi8_mask(v, _mm512_setzero_si512());
  return HeadBlock{_mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\n')) | nul,
                   _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(':')),
                   _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\r')) |
                       _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\')),
                   nul};
}

// And with 32-byte compares where AVX2 is the widest.
[[gnu::target("avx2")]] HeadBlock head_block_avx2(const char* p) {
  // Straight-line code: a lambda here would not inherit the target.
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  const __m256i lf = _mm256_set1_epi8('\n');
  const __m256i zero = _mm256_setzero_si256();
  const __m256i colon = _mm256_set1_epi8(':');
  const __m256i cr = _mm256_set1_epi8('\r');
  const __m256i bs = _mm256_set1_epi8('\\');
  const __m256i nul_lo = _mm256_cmpeq_epi8(lo, zero);
  const __m256i nul_hi = _mm256_cmpeq_epi8(hi, zero);
  const __m256i term_lo = _mm256_or_si256(_mm256_cmpeq_epi8(lo, lf), nul_lo);
  const __m256i term_hi = _mm256_or_si256(_mm256_cmpeq_epi8(hi, lf), nul_hi);
  const __m256i odd_lo = _mm256_or_si256(_mm256_cmpeq_epi8(lo, cr), _mm256_cmpeq_epi8(lo, bs));
  const __m256i odd_hi = _mm256_or_si256(_mm256_cmpeq_epi8(hi, cr), _mm256_cmpeq_epi8(hi, bs));
  return HeadBlock{uint64_t(uint32_t(_mm256_movemask_epi8(term_lo))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(term_hi))) << 32,
                   uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, colon)))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, colon)))) << 32,
                   uint64_t(uint32_t(_mm256_movemask_epi8(odd_lo))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(odd_hi))) << 32,
                   uint64_t(uint32_t(_mm256_movemask_epi8(nul_lo))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(nul_hi))) << 32};
}

// The body's NUL scan for one vector width: nul_mask(p), bit k set where p[k] (of 64 bytes) is
// NUL, and any_nul128(p), whether any of 128 bytes is.
struct NulAvx2 {
  [[gnu::target("avx2,bmi")]] static uint64_t nul_mask(const char* p) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    return uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, zero)))) |
           uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, zero)))) << 32;
  }
  // Their unsigned minimum is zero where any byte is.
  [[gnu::target("avx2,bmi")]] static bool any_nul128(const char* p) {
    const auto* v = reinterpret_cast<const __m256i*>(p);
    const __m256i m =
        _mm256_min_epu8(_mm256_min_epu8(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)),
                        _mm256_min_epu8(_mm256_loadu_si256(v + 2), _mm256_loadu_si256(v + 3)));
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(m, _mm256_setzero_si256())) != 0;
  }
};

struct NulAvx512 {
  [[gnu::target("avx512bw,bmi")]] static uint64_t nul_mask(const char* p) {
    const __m512i v = _mm512_loadu_si512(p);
    return _mm512_testn_epi8_mask(v, v);
  }
  [[gnu::target("avx512bw,bmi")]] static bool any_nul128(const char* p) {
    const __m512i m = _mm512_min_epu8(_mm512_loadu_si512(p), _mm512_loadu_si512(p + 64));
    return _mm512_testn_epi8_mask(m, m) != 0;
  }
};

// The first NUL in p[from, to) (kNotFound: none), inline in the frame scan rather than a
// library call: 128 bytes a step, then at most two 64-byte blocks, the last one ending at `to`
// and masked below what is left. Reads only p[min(from, to - 64), to), so needs to >= 64.
template <typename V>
[[gnu::always_inline]] inline size_t find_nul_vector(const char* p, size_t from, size_t to) {
  size_t i = from;
  for (; i + 128 <= to; i += 128) {
    if (V::any_nul128(p + i)) {
      const uint64_t a = V::nul_mask(p + i);
      return a != 0 ? i + size_t(__builtin_ctzll(a))
                    : i + 64 + size_t(__builtin_ctzll(V::nul_mask(p + i + 64)));
    }
  }
  while (i < to) {
    const size_t at = i + 64 <= to ? i : to - 64;
    const uint64_t m = V::nul_mask(p + at) & (~uint64_t{0} << (i - at));
    if (m != 0) return at + size_t(__builtin_ctzll(m));
    i = at + 64;
  }
  return kNotFound;
}

struct IsaAvx2 {
  static HeadBlock block(const char* p) { return head_block_avx2(p); }
  static size_t find_nul(const char* p, size_t from, size_t to) {
    return to >= 64 ? find_nul_vector<NulAvx2>(p, from, to) : find_nul_memchr(p, from, to);
  }
  [[gnu::target("popcnt")]] static unsigned popcount(uint64_t x) {
    return unsigned(__builtin_popcountll(x));
  }
};
struct IsaAvx512 {
  static HeadBlock block(const char* p) { return head_block_avx512(p); }
  static size_t find_nul(const char* p, size_t from, size_t to) {
    return to >= 64 ? find_nul_vector<NulAvx512>(p, from, to) : find_nul_memchr(p, from, to);
  }
  [[gnu::target("popcnt")]] static unsigned popcount(uint64_t x) {
    return unsigned(__builtin_popcountll(x));
  }
};

HeadBlockFn pick_head_block() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw")) return head_block_avx512;
  if (__builtin_cpu_supports("avx2")) return head_block_avx2;
  return head_block_sse2;
}
#endif

}  // namespace

// Chosen once when the program loads; every variant gives the same masks (tested).
#if defined(__x86_64__) && defined(__GNUC__)
const HeadBlockFn g_head_block = pick_head_block();
#else
const HeadBlockFn g_head_block = head_block_sse2;
#endif

size_t head_block_variants(const char* p, HeadBlockMasks* out, size_t max) {
  size_t n = 0;
  auto put = [&](HeadBlock m) {
    if (n < max) out[n++] = HeadBlockMasks{m.term, m.colon, m.odd, m.nul};
  };
  put(head_block_sse2(p));
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) put(head_block_avx2(p));
  if (__builtin_cpu_supports("avx512bw")) put(head_block_avx512(p));
#endif
  return n;
}

size_t find_nul_variants(const char* p, size_t from, size_t to, size_t* out, size_t max) {
  size_t n = 0;
  auto put = [&](size_t at) {
    if (n < max) out[n++] = at;
  };
  put(IsaSse2::find_nul(p, from, to));
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi")) {
    put(IsaAvx2::find_nul(p, from, to));
  }
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("bmi")) {
    put(IsaAvx512::find_nul(p, from, to));
  }
#endif
  return n;
}

namespace {

// Bitmasks of up to sixteen 64-byte blocks (1 KiB) from a frame's start, computed as the scan
// reaches them. Only whole blocks inside the buffer are used: a frame nearer its end takes the
// general path.
template <typename Isa>
class HeadMasks {
 public:
  static constexpr size_t kBlocks = 16;
  explicit HeadMasks(std::string_view buf) : buf_(buf) {}

  // First set bit of the mask at or after p; kNotFound past the last whole block.
  size_t next(const uint64_t* m, size_t p) {
    size_t b = p >> 6;
    if (b >= have_ && !ensure(b)) return kNotFound;
    uint64_t w = m[b] & (~uint64_t{0} << (p & 63));
    while (w == 0) {
      if (++b >= have_ && !ensure(b)) return kNotFound;
      w = m[b];
    }
    return b * 64 + size_t(__builtin_ctzll(w));
  }
  // First set bit in [p, end), for an end the scan has already reached (its block is computed).
  size_t first_in(const uint64_t* m, size_t p, size_t end) const {
    if (p >= end) return kNotFound;
    size_t b = p >> 6;
    const size_t last = (end - 1) >> 6;
    uint64_t w = m[b] & (~uint64_t{0} << (p & 63));
    while (w == 0) {
      if (++b > last) return kNotFound;
      w = m[b];
    }
    const size_t found = b * 64 + size_t(__builtin_ctzll(w));
    return found < end ? found : kNotFound;
  }

  // Entries below have_ are written before they are read; not zeroed, to keep setup cheap.
  uint64_t term[kBlocks];   // LF or NUL
  uint64_t colon[kBlocks];  // ':'
  uint64_t odd[kBlocks];    // CR or backslash
  uint64_t nul[kBlocks];    // NUL

  // Computes blocks up to b; false when b lies past the last whole block.
  bool ensure(size_t b) {
    while (have_ <= b) {
      if (have_ == kBlocks || (have_ + 1) * 64 > buf_.size()) return false;
      const HeadBlock m = Isa::block(buf_.data() + have_ * 64);
      term[have_] = m.term;
      colon[have_] = m.colon;
      odd[have_] = m.odd;
      nul[have_] = m.nul;
      ++have_;
    }
    return true;
  }

 private:
  std::string_view buf_;
  size_t have_ = 0;
};

struct HeadLines {
  size_t body_start = 0;
  uint32_t count = 0;
  int64_t length = -1;
  // The last 64-byte block the scan made masks for (kNotFound: none kept) and its NULs, so the
  // body's first bytes need not be scanned again.
  size_t block = kNotFound;
  uint64_t block_nul = 0;
};

// parse_content_length() of buf[from, to), eight digits at a time when eight bytes can be read
// there: the hot path meets this value in every SEND from most clients.
[[gnu::always_inline]] inline bool content_length_digits(std::string_view buf, size_t from,
                                                         size_t to, int64_t* out) {
  const size_t n = to - from;
  if (n == 0 || n > 8 || from + 8 > buf.size()) {
    return parse_content_length(buf.substr(from, n), out);
  }
  uint64_t v;
  std::memcpy(&v, buf.data() + from, 8);  // little-endian: the first digit in the low byte
  v <<= 8 * (8 - n);                      // the digits in the high bytes, zeros below
  const uint64_t pad = n == 8 ? 0 : ~uint64_t{0} >> (8 * n);  // the low 8 - n bytes
  v |= 0x3030303030303030u & pad;                             // '0' there: adds nothing
  // Every byte in '0'..'9': no byte below '0' (borrow into bit 7 after the subtract, as the
  // bytes are ASCII) and none above '9' (adding 0x46 carries into bit 7).
  const uint64_t d = v - 0x3030303030303030u;
  if (((d | (v + 0x4646464646464646u) | v) & 0x8080808080808080u) != 0) return false;
  // Pairs, quads, then the whole: the most significant digit is in the low byte.
  uint64_t x = (d * 10) + (d >> 8);
  x = ((x & 0x000000ff000000ffu) * (100 + (1000000ull << 32)) +
       ((x >> 16) & 0x000000ff000000ffu) * (1 + (10000ull << 32))) >>
      32;
  *out = int64_t(x);
  return true;
}

// The common case, checked a whole 64-byte word at a time rather than line by line: lines end in
// a bare LF and the head holds no CR, backslash or NUL. Per word of the head, with
//   E the line ends, S the line starts (the byte after a terminator), C the colons, and
//   R = N + S, N the bytes that are neither terminator nor colon,
// the carry from each line start runs through N and stops at the line's first colon, or at its
// LF when it has none. So R & E flags a line without a colon, C & S a line with an empty name,
// and R & C is every line's first colon (for content-length). The blank line is the first
// terminator right after a terminator. The words are computed and walked one after the other,
// the state in registers, until it is found; `m` holds the first word's masks. The slots are
// left for Frame::index(): a lookup fills them when it first needs them. False: the
// line-by-line path decides.
template <typename Isa>
[[gnu::always_inline]] inline bool plain_head(std::string_view buf, HeadBlock m, size_t first,
                                              const FrameLimits& limits, HeadLines* out) {
  // The command line is at most 13 bytes, so the head starts in the first word.
  constexpr unsigned kClNameBytes = 14;  // "content-length"
  const char* const p = buf.data();
  const size_t base_end = std::min<size_t>(buf.size() >> 6, HeadMasks<Isa>::kBlocks) << 6;
  uint64_t bad = 0;
  uint64_t region = ~uint64_t{0} << first;
  uint64_t t_prev = 0;  // the terminators of the previous word
  uint64_t starts_prev = 0;
  unsigned char add_carry = 0;  // the carry of R out of the previous word
  uint64_t count = 0;
  size_t cl_colon = kNotFound;  // the first colon of the first line named content-length
  size_t base = 0;
  uint64_t pairs;
  for (;;) {
    const uint64_t t = m.term;
    // Every byte after a terminator; in the first word that includes `first`, after the LF
    // that ends the command line.
    const uint64_t starts_all = (t << 1) | (t_prev >> 63);
    pairs = t & starts_all & region;
    region &= (pairs & (~pairs + 1)) - 1;  // bits below the blank line's LF, if in this word
    const uint64_t starts = starts_all & region;
    const uint64_t ends = t & region;
    const uint64_t colons = m.colon & region;
    const uint64_t plain = region & ~t & ~colons;
    unsigned long long r;
    add_carry = _addcarry_u64(add_carry, plain, starts, &r);
    bad |= ((m.odd | m.nul) & region) | (colons & starts) | (r & ends);
    count += Isa::popcount(ends);
    // A first colon 14 bytes after a line start: a name as long as "content-length".
    const uint64_t name14 =
        r & colons & ((starts << kClNameBytes) | (starts_prev >> (64 - kClNameBytes)));
    starts_prev = starts;
    if (name14 != 0 && cl_colon == kNotFound) [[unlikely]] {
      for (uint64_t w = name14; w != 0; w &= w - 1) {
        const size_t at = base + size_t(__builtin_ctzll(w));
        if (std::memcmp(p + at - kClNameBytes, "content-length", kClNameBytes) == 0) {
          cl_colon = at;
          break;
        }
      }
    }
    if (pairs != 0) break;
    t_prev = t;
    base += 64;
    if (base >= base_end) return false;
    m = Isa::block(p + base);
    region = ~uint64_t{0};
  }
  // blank is the LF of the empty line (a NUL there is left to the general path). A head no
  // longer than the line limit holds no line over it; longer heads are checked line by line.
  const size_t blank = base + size_t(__builtin_ctzll(pairs));
  if (bad != 0 || count > limits.header_count_max || blank >= limits.frame_bytes_max - 1 ||
      p[blank] != '\n' || blank - first > limits.header_line_bytes_max) {
    return false;
  }
  int64_t length = -1;
  if (cl_colon != kNotFound) {
    // The value ends at the first terminator after the colon, before `blank`: from the masks
    // of the last two words (no load on the path to the next frame), else from the bytes.
    const size_t from = cl_colon + 1;
    size_t end;
    if (cl_colon >= base) {
      end = base + size_t(__builtin_ctzll(m.term & (~uint64_t{0} << (cl_colon - base))));
    } else if (cl_colon + 64 >= base) {
      const uint64_t w = t_prev & (~uint64_t{0} << (cl_colon + 64 - base));
      end =
          w != 0 ? base - 64 + size_t(__builtin_ctzll(w)) : base + size_t(__builtin_ctzll(m.term));
    } else {
      end = size_t(static_cast<const char*>(std::memchr(p + from, '\n', blank - cl_colon)) - p);
    }
    if (!content_length_digits(buf, from, end, &length)) return false;
  }
  out->body_start = blank + 1;
  out->count = uint32_t(count);
  out->length = length;
  out->block = base;
  out->block_nul = m.nul;
  return true;
}

// Line by line from the masks, for heads whose lines may end in CR LF. Fills the slots.
template <typename Isa>
bool crlf_head(std::string_view buf, HeadMasks<Isa>& h, size_t first, const FrameLimits& limits,
               HeaderSlot* slots, HeadLines* out) {
  const size_t frame_cap = limits.frame_bytes_max - 1;
  uint32_t count = 0;
  int64_t length = -1;
  size_t line = first;
  for (;;) {
    const size_t i = h.next(h.term, line);
    if (i == kNotFound || i >= frame_cap || buf[i] == '\0') return false;
    size_t end = i;
    if (const size_t o = h.first_in(h.odd, line, i); o != kNotFound) {
      // Only a CR ending the line is ordinary; escapes and stray CRs take the general path.
      if (o != i - 1 || buf[o] != '\r') return false;
      end = o;
    }
    if (end - line > limits.header_line_bytes_max) return false;
    if (end == line) {
      out->body_start = i + 1;
      break;
    }
    const size_t colon_at = h.first_in(h.colon, line, end);
    if (count == limits.header_count_max || colon_at == kNotFound || colon_at == line) {
      return false;
    }
    const std::string_view name(buf.data() + line, colon_at - line);
    const std::string_view value(buf.data() + colon_at + 1, end - colon_at - 1);
    if (length < 0 && name == "content-length" && !parse_content_length(value, &length))
      return false;
    slots[count++] = HeaderSlot{uint32_t(line), uint32_t(colon_at), uint32_t(end), false};
    line = i + 1;
  }
  out->count = count;
  out->length = length;
  return true;
}

// The index of the NUL ending a frame whose head scan_head() accepted, as the incremental path's
// end_headers() and scan_body() would find it; kNoFrameEnd when the frame is not all in buf or
// breaks a limit (that path then gives the error).
template <typename Isa>
[[gnu::always_inline]] inline size_t end_of_frame(std::string_view buf, const FrameLimits& limits,
                                                  Command c, const HeadLines& lines) {
  const bool body_allowed = c == Command::kSend || command_allows_body(c);
  const size_t body_start = lines.body_start;
  if (lines.length >= 0) {
    const size_t nul = body_start + size_t(lines.length);
    if ((lines.length > 0 && !body_allowed) || lines.length > int64_t(limits.body_bytes_max) ||
        nul + 1 > limits.frame_bytes_max || nul >= buf.size() || buf[nul] != '\0') {
      return kNoFrameEnd;
    }
    return nul;
  }
  if (!body_allowed) {
    return body_start < buf.size() && buf[body_start] == '\0' ? body_start : kNoFrameEnd;
  }
  // As scan_body(): the NUL may come no later than `last`.
  const size_t last =
      std::min(body_start + limits.body_bytes_max, size_t(limits.frame_bytes_max) - 1);
  const size_t to = std::min(buf.size(), last + 1);
  if (body_start >= to) return kNoFrameEnd;
  size_t from = body_start;
  if (lines.block != kNotFound && body_start < lines.block + 64) {
    // The head's last block: its NUL mask is already made.
    const uint64_t w = lines.block_nul & (~uint64_t{0} << (body_start - lines.block));
    if (w != 0) {
      const size_t nul = lines.block + size_t(__builtin_ctzll(w));
      return nul < to ? nul : kNoFrameEnd;
    }
    from = lines.block + 64;
    if (from >= to) return kNoFrameEnd;
  }
  const size_t nul = Isa::find_nul(buf.data(), from, to);
  return nul != kNotFound ? nul : kNoFrameEnd;
}

template <typename Isa, bool kFindEnd>
[[gnu::always_inline]] inline bool scan_head(
    std::string_view buf, const FrameLimits& limits, HeaderSlot* slots, FrameHead* out,
    bool (*by_lines)(std::string_view, size_t, const FrameLimits&, HeaderSlot*, HeadLines*)) {
  if (buf.size() < 64) return false;
  const HeadBlock m = Isa::block(buf.data());
  const uint64_t t0 = m.term;
  if (t0 == 0) return false;
  const size_t cmd_end = size_t(__builtin_ctzll(t0));
  if (cmd_end > kCommandLineBytesMax || ((m.nul >> cmd_end) & 1) != 0) return false;
  size_t cmd_len = cmd_end;
  if (const uint64_t o = m.odd & ((uint64_t{1} << cmd_end) - 1); o != 0) {
    if (o != uint64_t{1} << (cmd_end - 1) || buf[cmd_end - 1] != '\r') return false;
    cmd_len = cmd_end - 1;
  }
  // SEND, the frame that matters for throughput, without the general lookup (which is left
  // until after the head, so no vector state lives across the call).
  const bool send = cmd_len == 4 && std::memcmp(buf.data(), "SEND", 4) == 0;
  const size_t first = cmd_end + 1;
  HeadLines lines;
  bool indexed = false;
  if (!plain_head<Isa>(buf, m, first, limits, &lines)) [[unlikely]] {
    // CR LF line ends (or something the general path must judge): line by line. Into a copy,
    // so that `lines` never has its address taken and stays in registers.
    HeadLines by;
    if (!by_lines(buf, first, limits, slots, &by)) return false;
    lines = by;
    indexed = true;
  }
  Command c = Command::kSend;
  if (!send) {
    const std::optional<Command> named = parse_command(buf.substr(0, cmd_len));
    if (!named) return false;
    c = *named;
  }
  const size_t nul = kFindEnd ? end_of_frame<Isa>(buf, limits, c, lines) : kNoFrameEnd;
  *out = FrameHead{c, first, lines.body_start, lines.count, lines.length, indexed, nul};
  return true;
}

// One copy of the whole head scan per vector width, everything inlined into it, so the
// per-block mask code is not an indirect call. The line-by-line scan is a function of its own:
// its 1 KiB of masks would otherwise widen the common path's stack frame.
[[gnu::noinline, gnu::flatten]] bool head_by_lines_sse2(std::string_view buf, size_t first,
                                                        const FrameLimits& limits,
                                                        HeaderSlot* slots, HeadLines* lines) {
  HeadMasks<IsaSse2> h(buf);
  return crlf_head(buf, h, first, limits, slots, lines);
}

[[gnu::flatten]] bool scan_frame_head_sse2(std::string_view buf, const FrameLimits& limits,
                                           HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaSse2, false>(buf, limits, slots, out, head_by_lines_sse2);
}

[[gnu::flatten]] bool scan_frame_sse2(std::string_view buf, const FrameLimits& limits,
                                      HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaSse2, true>(buf, limits, slots, out, head_by_lines_sse2);
}

#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::noinline, gnu::flatten, gnu::target("avx2,popcnt,bmi,bmi2")]] bool head_by_lines_avx2(
    std::string_view buf, size_t first, const FrameLimits& limits, HeaderSlot* slots,
    HeadLines* lines) {
  HeadMasks<IsaAvx2> h(buf);
  return crlf_head(buf, h, first, limits, slots, lines);
}

[[gnu::noinline, gnu::flatten, gnu::target("avx512bw,popcnt,bmi,bmi2")]] bool head_by_lines_avx512(
    std::string_view buf, size_t first, const FrameLimits& limits, HeaderSlot* slots,
    HeadLines* lines) {
  HeadMasks<IsaAvx512> h(buf);
  return crlf_head(buf, h, first, limits, slots, lines);
}

[[gnu::flatten, gnu::target("avx2,popcnt,bmi,bmi2")]] bool scan_frame_head_avx2(
    std::string_view buf, const FrameLimits& limits, HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaAvx2, false>(buf, limits, slots, out, head_by_lines_avx2);
}

[[gnu::flatten, gnu::target("avx512bw,popcnt,bmi,bmi2")]] bool scan_frame_head_avx512(
    std::string_view buf, const FrameLimits& limits, HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaAvx512, false>(buf, limits, slots, out, head_by_lines_avx512);
}

[[gnu::flatten, gnu::target("avx2,popcnt,bmi,bmi2")]] bool scan_frame_avx2(
    std::string_view buf, const FrameLimits& limits, HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaAvx2, true>(buf, limits, slots, out, head_by_lines_avx2);
}

[[gnu::flatten, gnu::target("avx512bw,popcnt,bmi,bmi2")]] bool scan_frame_avx512(
    std::string_view buf, const FrameLimits& limits, HeaderSlot* slots, FrameHead* out) {
  return scan_head<IsaAvx512, true>(buf, limits, slots, out, head_by_lines_avx512);
}

// The widest copy this CPU runs: [0] the head only, [1] the head and the frame's end.
ScanFrameHeadFn pick_scan(bool find_end) {
  __builtin_cpu_init();
  const bool bits = __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2");
  if (bits && __builtin_cpu_supports("avx512bw")) {
    return find_end ? scan_frame_avx512 : scan_frame_head_avx512;
  }
  if (bits && __builtin_cpu_supports("avx2"))
    return find_end ? scan_frame_avx2 : scan_frame_head_avx2;
  return find_end ? scan_frame_sse2 : scan_frame_head_sse2;
}
#endif

}  // namespace

size_t frame_end(std::string_view buf, const FrameLimits& limits, const FrameHead& head) {
  HeadLines lines;
  lines.body_start = head.body_start;
  lines.count = head.count;
  lines.length = head.length;
  return end_of_frame<IsaSse2>(buf, limits, head.command, lines);
}

#if defined(__x86_64__) && defined(__GNUC__)
const ScanFrameHeadFn g_scan_frame_head = pick_scan(false);
const ScanFrameHeadFn g_scan_frame = pick_scan(true);
#else
const ScanFrameHeadFn g_scan_frame_head = scan_frame_head_sse2;
const ScanFrameHeadFn g_scan_frame = scan_frame_sse2;
#endif
#endif

}  // namespace sluice::session::detail
