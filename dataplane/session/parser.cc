// Incremental STOMP frame parser. Every limit is checked against a window fixed by the bytes
// already seen, so the event produced for a byte stream never depends on how it was split.
#include "dataplane/session/parser.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "dataplane/session/assert.h"

namespace sluice::session {
namespace {

constexpr size_t kNotFound = ~size_t{0};

// Result of scanning a header or command line: where it ends, and what it contains before that.
struct LineScan {
  size_t end = kNotFound;    // index of the first LF or NUL
  size_t colon = kNotFound;  // index of the first ':' before end
  size_t cr = kNotFound;     // index of the first CR before end
  bool backslash = false;    // a '\\' before end
};

// Scans buf[from, to) for the first LF or NUL, noting the first ':' and CR and any backslash
// before it. Header lines are short, so this replaces several memchr calls (each a function call
// and a setup) with one pass of 16-byte compares; it never reads past buf's end.
LineScan scan_line(std::string_view buf, size_t from, size_t to) {
  LineScan s;
  const char* base = buf.data();
  size_t i = from;
#if defined(__SSE2__)
  const __m128i lf = _mm_set1_epi8('\n');
  const __m128i nul = _mm_setzero_si128();
  const __m128i colon = _mm_set1_epi8(':');
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i bs = _mm_set1_epi8('\\');
  // Whole blocks may extend past `to` (bits beyond it are masked off) but never past buf's end.
  while (i < to && i + 16 <= buf.size()) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i));
    uint32_t term =
        uint32_t(_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, lf), _mm_cmpeq_epi8(v, nul))));
    const size_t valid = std::min<size_t>(16, to - i);
    const uint32_t in_range = valid == 16 ? 0xffffu : (1u << valid) - 1;
    term &= in_range;
    // Only bytes before the terminator (or before `to`) belong to this line.
    const uint32_t before = term ? (1u << __builtin_ctz(term)) - 1 : in_range;
    const uint32_t colons = uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, colon))) & before;
    const uint32_t crs = uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, cr))) & before;
    const uint32_t bss = uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, bs))) & before;
    if (colons && s.colon == kNotFound) s.colon = i + size_t(__builtin_ctz(colons));
    if (crs && s.cr == kNotFound) s.cr = i + size_t(__builtin_ctz(crs));
    s.backslash |= bss != 0;
    if (term) {
      s.end = i + size_t(__builtin_ctz(term));
      return s;
    }
    i += 16;
  }
#endif
  for (; i < to; ++i) {
    const char c = base[i];
    if (c == '\n' || c == '\0') {
      s.end = i;
      return s;
    }
    if (c == ':' && s.colon == kNotFound) s.colon = i;
    if (c == '\r' && s.cr == kNotFound) s.cr = i;
    if (c == '\\') s.backslash = true;
  }
  return s;
}

#if defined(__SSE2__)
inline uint64_t movemask64(__m128i a, __m128i b, __m128i c, __m128i d) {
  return uint64_t(uint32_t(_mm_movemask_epi8(a))) | uint64_t(uint32_t(_mm_movemask_epi8(b))) << 16 |
         uint64_t(uint32_t(_mm_movemask_epi8(c))) << 32 |
         uint64_t(uint32_t(_mm_movemask_epi8(d))) << 48;
}

// Masks of one 64-byte block for the frame-head fast path: bit k describes byte k.
struct HeadBlock {
  uint64_t term;   // LF or NUL
  uint64_t colon;  // ':'
  uint64_t odd;    // CR or backslash
};

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

using HeadBlockFn = HeadBlock (*)(const char*);
HeadBlockFn pick_head_block() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw")) return head_block_avx512;
  if (__builtin_cpu_supports("avx2")) return head_block_avx2;
  return head_block_sse2;
}
// Chosen once when the program loads; every variant gives the same masks (tested).
const HeadBlockFn g_head_block = pick_head_block();
#else
constexpr HeadBlock (*g_head_block)(const char*) = head_block_sse2;
#endif
#endif

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// content-length: 1 to 10 decimal digits, nothing else.
bool parse_length(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Header Frame::header(size_t i) const {
  SLUICE_ASSERT(i < header_count_);
  const detail::HeaderSlot& s = slots_[i];
  return Header{bytes_.substr(s.name_off, s.name_len), bytes_.substr(s.value_off, s.value_len)};
}

std::optional<size_t> Frame::find_index(std::string_view name) const {
  for (size_t i = 0; i < header_count_; ++i) {
    const detail::HeaderSlot& s = slots_[i];
    if (s.name_escaped) {
      if (header_equals(bytes_.substr(s.name_off, s.name_len), true, name)) return i;
    } else if (s.name_len == name.size() &&
               std::memcmp(bytes_.data() + s.name_off, name.data(), name.size()) == 0) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<std::string_view> Frame::find(std::string_view name) const {
  if (auto i = find_index(name)) return header(*i).value;
  return std::nullopt;
}

Parser::Parser(const FrameLimits& limits)
    : limits_(limits), slots_(new detail::HeaderSlot[limits.header_count_max]) {
  SLUICE_ASSERT(limits_.valid());
}

void Parser::reset() {
  state_ = State::kGap;
  error_ = ParseError::kNone;
  pos_ = 0;
}

ParseResult Parser::fail(ParseError e) {
  state_ = State::kError;
  error_ = e;
  return ParseResult{ParseResult::Status::kError, e, 0};
}

ParseResult Parser::parse(std::string_view buf) {
  switch (state_) {
    case State::kError:
      return ParseResult{ParseResult::Status::kError, error_, 0};
    case State::kGap:
      if (buf.empty()) return ParseResult{};
      if (buf[0] == '\n') return ParseResult{ParseResult::Status::kHeartbeat, ParseError::kNone, 1};
      if (buf[0] == '\r') {
        if (buf.size() < 2) return ParseResult{};
        if (buf[1] == '\n') {
          return ParseResult{ParseResult::Status::kHeartbeat, ParseError::kNone, 2};
        }
        return fail(ParseError::kUnknownCommand);
      }
#if defined(__SSE2__)
      // Most frames arrive whole with plain headers: one bitmask pass. Anything unusual, or a
      // frame not yet all there, goes through the general incremental path, which gives the
      // same result for every input the fast path accepts.
      if (head_fast(buf)) return end_headers(buf);
#endif
      state_ = State::kCommand;
      pos_ = 0;
      return scan_command(buf);
    case State::kCommand:
      return scan_command(buf);
    case State::kHeaders:
      return scan_headers(buf);
    case State::kBody:
      return scan_body(buf);
  }
  return fail(ParseError::kUnknownCommand);
}

ParseResult Parser::scan_command(std::string_view buf) {
  // The LF must come within the longest command plus CR.
  size_t cap = kCommandLineBytesMax + 1;
  size_t to = std::min(buf.size(), cap);
  size_t i = scan_line(buf, pos_, to).end;
  if (i == kNotFound) {
    if (buf.size() >= cap) return fail(ParseError::kUnknownCommand);
    pos_ = to;
    return ParseResult{};
  }
  if (buf[i] == '\0') return fail(ParseError::kUnknownCommand);
  std::optional<Command> c = parse_command(strip_cr(buf.substr(0, i)));
  if (!c) return fail(ParseError::kUnknownCommand);
  command_ = *c;
  escaped_ = version_ >= Version::k1_1 && command_escapes_headers(command_);
  header_count_ = 0;
  content_length_ = -1;
  line_start_ = pos_ = i + 1;
  line_colon_ = line_cr_ = kNotFound;
  line_backslash_ = false;
  state_ = State::kHeaders;
  return scan_headers(buf);
}

ParseResult Parser::scan_headers(std::string_view buf) {
  // The blank line ending the headers must leave room for at least the NUL.
  const size_t frame_cap = limits_.frame_bytes_max - 1;
#if defined(__SSE2__)
  // Masks of the 64-byte block starting at blk; one block serves the several lines inside it,
  // so the loop over lines does not branch on each 16 bytes.
  HeadBlock m{0, 0, 0};
  size_t blk = kNotFound;
#endif
  for (;;) {
    // LF index bound: line content (<= limit) plus an optional CR.
    const size_t line_cap = line_start_ + limits_.header_line_bytes_max + 2;
    const size_t cap = std::min(frame_cap, line_cap);
    size_t i = kNotFound;
#if defined(__SSE2__)
    // Whole blocks while they lie inside buf; the tail goes through scan_line below. Bytes past
    // cap may be looked at, but a terminator there is the same limit error as not finding one.
    while (pos_ < cap) {
      if (blk == kNotFound || pos_ >= blk + 64) {
        if (pos_ + 64 > buf.size()) break;
        m = g_head_block(buf.data() + pos_);
        blk = pos_;
      }
      const uint64_t from = ~uint64_t{0} << (pos_ - blk);
      const uint64_t term = m.term & from;
      const uint64_t range = term ? from & ((uint64_t{1} << __builtin_ctzll(term)) - 1) : from;
      const uint64_t colons = m.colon & range;
      if (colons && line_colon_ == kNotFound) line_colon_ = blk + size_t(__builtin_ctzll(colons));
      // CRs and backslashes are rare (a CR ending each line of a CRLF frame): tell them apart
      // one by one.
      for (uint64_t w = m.odd & range; w != 0; w &= w - 1) {
        const size_t at = blk + size_t(__builtin_ctzll(w));
        if (buf[at] != '\r') {
          line_backslash_ = true;
        } else if (line_cr_ == kNotFound) {
          line_cr_ = at;
        }
      }
      if (term) {
        i = blk + size_t(__builtin_ctzll(term));
        break;
      }
      pos_ = blk + 64;
    }
    if (i != kNotFound && i >= cap) {
      return fail(line_cap <= frame_cap ? ParseError::kHeaderLineTooLong
                                        : ParseError::kFrameTooLarge);
    }
#endif
    if (i == kNotFound) {
      const size_t to = std::min(buf.size(), cap);
      const LineScan ls = scan_line(buf, pos_, to);
      // A line may arrive in pieces: keep what the earlier pieces showed.
      if (line_colon_ == kNotFound) line_colon_ = ls.colon;
      if (line_cr_ == kNotFound) line_cr_ = ls.cr;
      line_backslash_ |= ls.backslash;
      i = ls.end;
      if (i == kNotFound) {
        if (buf.size() >= cap) {
          return fail(line_cap <= frame_cap ? ParseError::kHeaderLineTooLong
                                            : ParseError::kFrameTooLarge);
        }
        pos_ = std::max(pos_, to);
        return ParseResult{};
      }
    }
    if (buf[i] == '\0') return fail(ParseError::kNulInHeaders);
    // A CR may only be the one that ends the line.
    const bool crlf = line_cr_ == i - 1 && i > line_start_;
    if (line_cr_ != kNotFound && !crlf) return fail(ParseError::kMalformedHeader);
    const size_t line_end = crlf ? i - 1 : i;
    if (line_end - line_start_ > limits_.header_line_bytes_max) {
      return fail(ParseError::kHeaderLineTooLong);
    }
    if (line_end == line_start_) {
      body_start_ = pos_ = i + 1;
      break;
    }
    ParseError e = ParseError::kNone;
    if (!take_header(buf, line_end, &e)) return fail(e);
    line_start_ = pos_ = i + 1;
    line_colon_ = line_cr_ = kNotFound;
    line_backslash_ = false;
  }
  return end_headers(buf);
}

inline ParseResult Parser::end_headers(std::string_view buf) {
  if (content_length_ >= 0) {
    if (content_length_ > 0 && !command_allows_body(command_)) {
      return fail(ParseError::kBodyNotAllowed);
    }
    if (content_length_ > int64_t(limits_.body_bytes_max)) return fail(ParseError::kBodyTooLarge);
    if (body_start_ + size_t(content_length_) + 1 > limits_.frame_bytes_max) {
      return fail(ParseError::kFrameTooLarge);
    }
  }
  state_ = State::kBody;
  return scan_body(buf);
}

#if defined(__SSE2__)
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
                detail::HeaderSlot* slots, HeadLines* out) {
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
    if (length < 0 && name == "content-length" && !parse_length(value, &length)) return false;
    slots[k] = detail::HeaderSlot{uint32_t(start), uint32_t(name.size()), uint32_t(colon_at + 1),
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
                     detail::HeaderSlot* slots, HeadLines* out) {
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
    if (length < 0 && name == "content-length" && !parse_length(value, &length)) return false;
    slots[count++] = detail::HeaderSlot{uint32_t(line), uint32_t(name.size()),
                                        uint32_t(colon_at + 1), uint32_t(value.size()), false};
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

size_t detail::head_block_variants(const char* p, HeadBlockMasks* out, size_t max) {
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

bool Parser::head_fast(std::string_view buf) {
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
  if (!plain_head(buf, h, cmd_end + 1, limits_, slots_.get(), &lines) &&
      !scan_head_lines<false>(buf, h, cmd_end + 1, limits_, slots_.get(), &lines)) {
    return false;
  }
  command_ = *c;
  escaped_ = version_ >= Version::k1_1 && command_escapes_headers(command_);
  header_count_ = lines.count;
  content_length_ = lines.length;
  body_start_ = pos_ = lines.body_start;
  return true;
}
#endif

inline bool Parser::take_header(std::string_view buf, size_t line_end, ParseError* error) {
  if (header_count_ == limits_.header_count_max) {
    *error = ParseError::kTooManyHeaders;
    return false;
  }
  const size_t colon = line_colon_;
  if (colon == kNotFound || colon == line_start_ || colon >= line_end) {
    *error = ParseError::kMalformedHeader;
    return false;
  }
  const std::string_view name = buf.substr(line_start_, colon - line_start_);
  const std::string_view value = buf.substr(colon + 1, line_end - colon - 1);
  const bool name_escaped = escaped_ && line_backslash_ && header_needs_unescape(name);
  if (escaped_ && line_backslash_ &&
      (!header_escapes_valid(name, version_) || !header_escapes_valid(value, version_))) {
    *error = ParseError::kInvalidEscape;
    return false;
  }
  if (content_length_ < 0 &&
      (name_escaped ? header_equals(name, true, "content-length") : name == "content-length")) {
    if (!parse_length(value, &content_length_)) {
      *error = ParseError::kBadContentLength;
      return false;
    }
  }
  slots_[header_count_++] =
      detail::HeaderSlot{uint32_t(line_start_), uint32_t(name.size()), uint32_t(colon + 1),
                         uint32_t(value.size()), name_escaped};
  return true;
}

inline ParseResult Parser::scan_body(std::string_view buf) {
  if (content_length_ >= 0) {
    size_t nul = body_start_ + size_t(content_length_);
    if (buf.size() <= nul) return ParseResult{};
    if (buf[nul] != '\0') return fail(ParseError::kMissingNul);
    return complete(buf, nul);
  }
  if (!command_allows_body(command_)) {
    if (buf.size() <= body_start_) return ParseResult{};
    if (buf[body_start_] != '\0') return fail(ParseError::kBodyNotAllowed);
    return complete(buf, body_start_);
  }
  // The NUL may come no later than this index.
  const size_t body_cap = body_start_ + limits_.body_bytes_max;
  const size_t frame_cap = limits_.frame_bytes_max - 1;
  const size_t last = std::min(body_cap, frame_cap);
  const size_t to = std::min(buf.size(), last + 1);
  if (pos_ < to) {
    const void* hit = std::memchr(buf.data() + pos_, '\0', to - pos_);
    if (hit) return complete(buf, size_t(static_cast<const char*>(hit) - buf.data()));
  }
  if (buf.size() > last) {
    return fail(body_cap < frame_cap ? ParseError::kBodyTooLarge : ParseError::kFrameTooLarge);
  }
  pos_ = to;
  return ParseResult{};
}

const Frame& Parser::head(std::string_view buf) {
  SLUICE_ASSERT(state_ == State::kBody && buf.size() >= body_start_);
  frame_.bytes_ = buf.substr(0, body_start_);
  frame_.slots_ = slots_.get();
  frame_.header_count_ = header_count_;
  frame_.body_off_ = uint32_t(body_start_);
  frame_.body_len_ = 0;
  frame_.command_ = command_;
  frame_.escaped_ = escaped_;
  return frame_;
}

inline ParseResult Parser::complete(std::string_view buf, size_t nul_index) {
  frame_.bytes_ = buf.substr(0, nul_index + 1);
  frame_.slots_ = slots_.get();
  frame_.header_count_ = header_count_;
  frame_.body_off_ = uint32_t(body_start_);
  frame_.body_len_ = uint32_t(nul_index - body_start_);
  frame_.command_ = command_;
  frame_.escaped_ = escaped_;
  state_ = State::kGap;
  pos_ = 0;
  return ParseResult{ParseResult::Status::kFrame, ParseError::kNone, nul_index + 1};
}

}  // namespace sluice::session
