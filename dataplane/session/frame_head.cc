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
  auto is_term = [](__m128i v) {
    return _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')),
                        _mm_cmpeq_epi8(v, _mm_setzero_si128()));
  };
  auto is_colon = [](__m128i v) { return _mm_cmpeq_epi8(v, _mm_set1_epi8(':')); };
  auto is_odd = [&](__m128i v) {
    return _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, bs));
  };
  return HeadBlock{movemask64(is_term(v0), is_term(v1), is_term(v2), is_term(v3)),
                   movemask64(is_colon(v0), is_colon(v1), is_colon(v2), is_colon(v3)),
                   movemask64(is_odd(v0), is_odd(v1), is_odd(v2), is_odd(v3))};
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same masks with 64-byte compares, for CPUs that have AVX-512BW (chosen at start).
[[gnu::target("avx512bw")]] HeadBlock head_block_avx512(const char* p) {
  const __m512i v = _mm512_loadu_si512(p);
  return HeadBlock{_mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\n')) |
                       _mm512_cmpeq_epi8_mask(v, _mm512_setzero_si512()),
                   _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(':')),
                   _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\r')) |
                       _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\'))};
}

// And with 32-byte compares where AVX2 is the widest.
[[gnu::target("avx2")]] HeadBlock head_block_avx2(const char* p) {
  // Straight-line code: a lambda here would not inherit the target.
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  const __m256i lf = _mm256_set1_epi8('\n');
  const __m256i nul = _mm256_setzero_si256();
  const __m256i colon = _mm256_set1_epi8(':');
  const __m256i cr = _mm256_set1_epi8('\r');
  const __m256i bs = _mm256_set1_epi8('\\');
  const __m256i term_lo = _mm256_or_si256(_mm256_cmpeq_epi8(lo, lf), _mm256_cmpeq_epi8(lo, nul));
  const __m256i term_hi = _mm256_or_si256(_mm256_cmpeq_epi8(hi, lf), _mm256_cmpeq_epi8(hi, nul));
  const __m256i odd_lo = _mm256_or_si256(_mm256_cmpeq_epi8(lo, cr), _mm256_cmpeq_epi8(lo, bs));
  const __m256i odd_hi = _mm256_or_si256(_mm256_cmpeq_epi8(hi, cr), _mm256_cmpeq_epi8(hi, bs));
  return HeadBlock{uint64_t(uint32_t(_mm256_movemask_epi8(term_lo))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(term_hi))) << 32,
                   uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, colon)))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, colon)))) << 32,
                   uint64_t(uint32_t(_mm256_movemask_epi8(odd_lo))) |
                       uint64_t(uint32_t(_mm256_movemask_epi8(odd_hi))) << 32};
}

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
    if (n < max) out[n++] = HeadBlockMasks{m.term, m.colon, m.odd};
  };
  put(head_block_sse2(p));
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) put(head_block_avx2(p));
  if (__builtin_cpu_supports("avx512bw")) put(head_block_avx512(p));
#endif
  return n;
}

namespace {

// Bitmasks of up to sixteen 64-byte blocks (1 KiB) from a frame's start, computed as the scan
// reaches them. Only whole blocks inside the buffer are used: a frame nearer its end takes the
// general path.
class HeadMasks {
 public:
  static constexpr size_t kBlocks = 16;
  explicit HeadMasks(std::string_view buf) : buf_(buf) {}

  // First set bit of the mask at or after p; kNotFound past the last whole block.
  [[gnu::always_inline]] size_t next(const uint64_t* m, size_t p) {
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
  [[gnu::always_inline]] size_t first_in(const uint64_t* m, size_t p, size_t end) const {
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

  // Computes blocks up to b; false when b lies past the last whole block.
  bool ensure(size_t b) {
    while (have_ <= b) {
      if (have_ == kBlocks || (have_ + 1) * 64 > buf_.size()) return false;
      const HeadBlock m = g_head_block(buf_.data() + have_ * 64);
      const uint64_t t = m.term, c = m.colon, o = m.odd;
      term[have_] = t;
      colon[have_] = c;
      odd[have_] = o;
      ++have_;
    }
    return true;
  }

 private:
  std::string_view buf_;
  size_t have_ = 0;
};

// Calls fn(position) for every set bit of m in [from, to), in order; the blocks are computed.
template <typename Fn>
[[gnu::always_inline]] inline void for_each_bit(const uint64_t* m, size_t from, size_t to,
                                                Fn&& fn) {
  if (from >= to) return;
  const size_t first = from >> 6;
  const size_t last = (to - 1) >> 6;
  for (size_t b = first; b <= last; ++b) {
    uint64_t w = m[b];
    if (b == first) w &= ~uint64_t{0} << (from & 63);
    if (b == last && (to & 63) != 0) w &= (uint64_t{1} << (to & 63)) - 1;
    while (w != 0) {
      fn(b * 64 + size_t(__builtin_ctzll(w)));
      w &= w - 1;
    }
  }
}

// The header lines of a frame head, from the masks. kPlainLf: lines end in a bare LF and no CR
// or backslash occurs (checked once for the whole head at the end, not per line); otherwise each
// line may end in CR LF. False when anything else is found: the caller takes a slower path.
struct HeadLines {
  size_t body_start = 0;
  uint32_t count = 0;
  int64_t length = -1;
};

// The common case in one sweep: lines end in a bare LF, and the head holds no CR, backslash or
// NUL. The blank line is found first (a terminator right after a terminator); then every line
// end and every colon of the head are listed, and lines are cut from the lists. Unlike a walk
// from line to line, no step waits for the previous line's end. False: a slower path decides.
bool plain_head(std::string_view buf, HeadMasks& h, size_t first, const FrameLimits& limits,
                HeaderSlot* slots, HeadLines* out) {
  // Lists sized for ordinary heads; a longer head takes the line-by-line path.
  constexpr size_t kLinesMax = 64;
  constexpr size_t kColonsMax = 128;
  size_t blank = kNotFound;
  uint64_t carry = 0;  // bit 0: the last byte of the previous block is a terminator
  for (size_t b = 0;; ++b) {
    if (!h.ensure(b)) return false;
    const uint64_t t = h.term[b];
    uint64_t pairs = t & ((t << 1) | carry);
    if (b == (first >> 6)) pairs &= ~uint64_t{0} << (first & 63);
    if (b < (first >> 6)) pairs = 0;
    if (pairs != 0) {
      blank = b * 64 + size_t(__builtin_ctzll(pairs));
      break;
    }
    carry = t >> 63;
  }
  // blank is the LF of the empty line; the last header line ends at blank - 1.
  if (blank >= limits.frame_bytes_max - 1 || buf[blank] != '\n') return false;
  if (h.first_in(h.odd, 0, blank) != kNotFound) return false;

  uint32_t ends[kLinesMax];
  size_t n_ends = 0;
  bool overflow = false;
  for_each_bit(h.term, first, blank, [&](size_t pos) {
    if (n_ends == kLinesMax) {
      overflow = true;
      return;
    }
    ends[n_ends++] = uint32_t(pos);
  });
  uint32_t colons[kColonsMax];
  size_t n_colons = 0;
  for_each_bit(h.colon, first, blank, [&](size_t pos) {
    if (n_colons == kColonsMax) {
      overflow = true;
      return;
    }
    colons[n_colons++] = uint32_t(pos);
  });
  if (overflow || n_ends > limits.header_count_max) return false;

  int64_t length = -1;
  size_t start = first;
  size_t j = 0;
  for (size_t k = 0; k < n_ends; ++k) {
    const size_t end = ends[k];
    if (buf[end] != '\n' || end - start > limits.header_line_bytes_max) return false;
    while (j < n_colons && colons[j] < start)
      ++j;
    if (j == n_colons || colons[j] >= end || colons[j] == start) return false;
    const size_t colon_at = colons[j];
    const std::string_view name(buf.data() + start, colon_at - start);
    const std::string_view value(buf.data() + colon_at + 1, end - colon_at - 1);
    if (length < 0 && name == "content-length" && !parse_content_length(value, &length))
      return false;
    slots[k] = HeaderSlot{uint32_t(start), uint32_t(name.size()), uint32_t(colon_at + 1),
                          uint32_t(value.size()), false};
    start = end + 1;
  }
  out->body_start = blank + 1;
  out->count = uint32_t(n_ends);
  out->length = length;
  return true;
}

template <bool kPlainLf>
bool scan_head_lines(std::string_view buf, HeadMasks& h, size_t first, const FrameLimits& limits,
                     HeaderSlot* slots, HeadLines* out) {
  const size_t frame_cap = limits.frame_bytes_max - 1;
  uint32_t count = 0;
  int64_t length = -1;
  size_t line = first;
  for (;;) {
    const size_t i = h.next(h.term, line);
    if (i == kNotFound || i >= frame_cap || buf[i] == '\0') return false;
    size_t end = i;
    if constexpr (!kPlainLf) {
      if (const size_t o = h.first_in(h.odd, line, i); o != kNotFound) {
        // Only a CR ending the line is ordinary; escapes and stray CRs take the general path.
        if (o != i - 1 || buf[o] != '\r') return false;
        end = o;
      }
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
    slots[count++] = HeaderSlot{uint32_t(line), uint32_t(name.size()), uint32_t(colon_at + 1),
                                uint32_t(value.size()), false};
    line = i + 1;
  }
  if constexpr (kPlainLf) {
    if (h.first_in(h.odd, first, out->body_start) != kNotFound) return false;
  }
  out->count = count;
  out->length = length;
  return true;
}

}  // namespace

bool scan_frame_head(std::string_view buf, const FrameLimits& limits, HeaderSlot* slots,
                     FrameHead* out) {
  HeadMasks h(buf);
  const size_t cmd_end = h.next(h.term, 0);
  if (cmd_end == kNotFound || cmd_end > kCommandLineBytesMax || buf[cmd_end] == '\0') {
    return false;
  }
  size_t cmd_len = cmd_end;
  if (const size_t o = h.first_in(h.odd, 0, cmd_end); o != kNotFound) {
    if (o != cmd_end - 1 || buf[o] != '\r') return false;
    cmd_len = o;
  }
  const std::optional<Command> c = parse_command(buf.substr(0, cmd_len));
  if (!c) return false;
  HeadLines lines;
  if (!plain_head(buf, h, cmd_end + 1, limits, slots, &lines) &&
      !scan_head_lines<false>(buf, h, cmd_end + 1, limits, slots, &lines)) {
    return false;
  }
  *out = FrameHead{*c, lines.body_start, lines.count, lines.length};
  return true;
}
#endif

}  // namespace sluice::session::detail
