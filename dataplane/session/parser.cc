// Incremental STOMP frame parser. Every limit is checked against a window fixed by the bytes
// already seen, so the event produced for a byte stream never depends on how it was split. The
// one-pass scan of whole frame heads lives in frame_head.cc.
#include "dataplane/session/parser.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "base/assert.h"
#include "dataplane/session/frame_head.h"

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

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

void Frame::index() const {
  // The parser checked every line of this head: "name:value" LF, non-empty name, no CR,
  // backslash or NUL; the blank line's LF is the byte before the body. So a line's first colon
  // and first LF are all it takes, and the masks of one 64-byte block serve every line that
  // lies in it.
  const size_t head_end = body_off_ - 1;
  size_t line = first_line_;
#if defined(__SSE2__)
  detail::HeadBlock m{0, 0, 0, 0};
  size_t blk = kNotFound;
#endif
  uint32_t k = 0;
  while (k < header_count_) {
#if defined(__SSE2__)
    if (blk == kNotFound || line >= blk + 64) {
      // A block from the line's start; near the frame's end, from a zero-padded copy (the
      // padding reads as NULs, past every line of the head).
      if (line + 64 <= bytes_.size()) {
        m = detail::g_head_block(bytes_.data() + line);
      } else {
        char block[64] = {};
        std::memcpy(block, bytes_.data() + line, bytes_.size() - line);
        m = detail::g_head_block(block);
      }
      blk = line;
    }
    const uint64_t from = ~uint64_t{0} << (line - blk);
    if (const uint64_t t = m.term & from; t != 0) {
      const size_t end = blk + size_t(__builtin_ctzll(t));
      const size_t colon = blk + size_t(__builtin_ctzll(m.colon & from));
      SLUICE_ASSERT(end < head_end && colon > line && colon < end);
      slots_[k++] = detail::HeaderSlot{uint32_t(line), uint32_t(colon), uint32_t(end), false};
      line = end + 1;
      continue;
    }
    if (blk != line) {
      // The line runs past this block: again from a block at its start.
      blk = kNotFound;
      continue;
    }
    // A line longer than a block.
#endif
    const LineScan ls = scan_line(bytes_, line, head_end);
    SLUICE_ASSERT(ls.end != kNotFound && ls.colon != kNotFound && ls.colon > line);
    slots_[k++] = detail::HeaderSlot{uint32_t(line), uint32_t(ls.colon), uint32_t(ls.end), false};
    line = ls.end + 1;
  }
  SLUICE_ASSERT(line == head_end);
  indexed_ = true;
}

Header Frame::header(size_t i) const {
  SLUICE_ASSERT(i < header_count_);
  ensure_indexed();
  const detail::HeaderSlot& s = slots_[i];
  return Header{bytes_.substr(s.name_off, s.colon_off - s.name_off),
                bytes_.substr(s.colon_off + 1, s.value_end - s.colon_off - 1)};
}

std::optional<size_t> Frame::find_index(std::string_view name) const {
  ensure_indexed();
  for (size_t i = 0; i < header_count_; ++i) {
    const detail::HeaderSlot& s = slots_[i];
    const size_t len = s.colon_off - s.name_off;
    if (names_escaped_ && s.name_escaped) {
      if (header_equals(bytes_.substr(s.name_off, len), true, name)) return i;
    } else if (len == name.size() &&
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
    : limits_(limits),
      owned_(new detail::HeaderSlot[limits.header_count_max]),
      slots_(owned_.get()) {
  SLUICE_ASSERT(limits_.valid());
}

Parser::Parser(const FrameLimits& limits, HeaderTable& table)
    : limits_(limits), slots_(table.slots_.get()) {
  SLUICE_ASSERT(limits_.valid());
  SLUICE_ASSERT(table.capacity() >= limits.header_count_max);
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
#if defined(__SSE2__)
  // Most frames arrive whole with plain headers: between frames, with a frame's first bytes
  // (not a heart-beat) in hand, one bitmask pass that finds the head and the frame's end, and
  // no state switch. Everything else is out of line (parse_rest), so that this path saves and
  // restores few registers. The general incremental path gives the same result for every
  // input the bitmask pass accepts.
  if (state_ == State::kGap && buf.size() >= 64 && buf[0] != '\n' && buf[0] != '\r') {
    detail::FrameHead head;
    if (detail::scan_frame(buf, limits_, slots_, &head)) {
      if (head.nul != detail::kNoFrameEnd) return complete_fast(buf, head, head.nul);
      return body_pending(buf, head);
    }
    state_ = State::kCommand;
    pos_ = 0;
  }
#endif
  return parse_rest(buf);
}

ParseResult Parser::parse_rest(std::string_view buf) {
#if defined(__SSE2__)
  if (state_ == State::kGap && !buf.empty() && buf.size() < 64 && buf[0] != '\n' &&
      buf[0] != '\r') {
    // A frame shorter than one block (a CONNECT, a CONNECTED, a short SEND) is scanned from a
    // zero-padded copy. The padding cannot complete a head the bytes do not hold: a NUL ends
    // a line but never a head, and where a head needs one more byte than buf has, the scan
    // finds a NUL there and leaves the frame to the general path. The frame itself is taken
    // from buf.
    char block[64] = {};
    std::memcpy(block, buf.data(), buf.size());
    ParseResult r;
    if (parse_fast(buf, std::string_view(block, sizeof block), &r)) return r;
    state_ = State::kCommand;
    pos_ = 0;
  }
#endif
  return parse_general(buf);
}

#if defined(__SSE2__)
ParseResult Parser::body_pending(std::string_view buf, const detail::FrameHead& head) {
  adopt(head);
  return end_headers(buf);
}
#endif

#if defined(__SSE2__)
bool Parser::parse_fast(std::string_view buf, std::string_view scan, ParseResult* out) {
  detail::FrameHead head;
  if (!detail::scan_frame_head(scan, limits_, slots_, &head)) return false;
  // The head lies in buf: its blank line's LF is a byte of buf, never padding.
  SLUICE_ASSERT(head.body_start <= buf.size());
  if (const size_t nul = detail::frame_end(buf, limits_, head); nul != detail::kNoFrameEnd) {
    *out = complete_fast(buf, head, nul);
  } else {
    adopt(head);
    *out = end_headers(buf);
  }
  return true;
}
#endif

ParseResult Parser::parse_general(std::string_view buf) {
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
      // The bitmask pass in parse() left this frame to the line-by-line scan.
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
  names_escaped_ = false;
  indexed_ = true;
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
  detail::HeadBlock m{0, 0, 0, 0};
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
        m = detail::g_head_block(buf.data() + pos_);
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
    if (content_length_ > 0 && command_ != Command::kSend && !command_allows_body(command_)) {
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
inline ParseResult Parser::complete_fast(std::string_view buf, const detail::FrameHead& head,
                                         size_t nul_index) {
  frame_.bytes_ = std::string_view(buf.data(), nul_index + 1);
  frame_.slots_ = slots_;
  frame_.header_count_ = head.count;
  frame_.body_off_ = uint32_t(head.body_start);
  frame_.body_len_ = uint32_t(nul_index - head.body_start);
  frame_.command_ = head.command;
  // SEND escapes its headers: no call into the command table for the common frame.
  frame_.escaped_ = version_ >= Version::k1_1 &&
                    (head.command == Command::kSend || command_escapes_headers(head.command));
  frame_.names_escaped_ = false;
  frame_.indexed_ = head.indexed;
  frame_.first_line_ = uint32_t(head.first_line);
  return ParseResult{ParseResult::Status::kFrame, ParseError::kNone, nul_index + 1};
}

void Parser::adopt(const detail::FrameHead& head) {
  command_ = head.command;
  // SEND escapes its headers: no call into the command table for the common frame.
  escaped_ = version_ >= Version::k1_1 &&
             (command_ == Command::kSend || command_escapes_headers(command_));
  header_count_ = head.count;
  names_escaped_ = false;
  indexed_ = head.indexed;
  first_line_ = head.first_line;
  content_length_ = head.length;
  body_start_ = pos_ = head.body_start;
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
    if (!detail::parse_content_length(value, &content_length_)) {
      *error = ParseError::kBadContentLength;
      return false;
    }
  }
  names_escaped_ |= name_escaped;
  slots_[header_count_++] =
      detail::HeaderSlot{uint32_t(line_start_), uint32_t(colon), uint32_t(line_end), name_escaped};
  return true;
}

inline ParseResult Parser::scan_body(std::string_view buf) {
  if (content_length_ >= 0) {
    size_t nul = body_start_ + size_t(content_length_);
    if (buf.size() <= nul) return ParseResult{};
    if (buf[nul] != '\0') return fail(ParseError::kMissingNul);
    return complete(buf, nul);
  }
  if (command_ != Command::kSend && !command_allows_body(command_)) {
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
  frame_.slots_ = slots_;
  frame_.header_count_ = header_count_;
  frame_.body_off_ = uint32_t(body_start_);
  frame_.body_len_ = 0;
  frame_.command_ = command_;
  frame_.escaped_ = escaped_;
  frame_.names_escaped_ = names_escaped_;
  frame_.indexed_ = indexed_;
  frame_.first_line_ = uint32_t(first_line_);
  return frame_;
}

inline ParseResult Parser::complete(std::string_view buf, size_t nul_index) {
  frame_.bytes_ = buf.substr(0, nul_index + 1);
  frame_.slots_ = slots_;
  frame_.header_count_ = header_count_;
  frame_.body_off_ = uint32_t(body_start_);
  frame_.body_len_ = uint32_t(nul_index - body_start_);
  frame_.command_ = command_;
  frame_.escaped_ = escaped_;
  frame_.names_escaped_ = names_escaped_;
  frame_.indexed_ = indexed_;
  frame_.first_line_ = uint32_t(first_line_);
  state_ = State::kGap;
  pos_ = 0;
  return ParseResult{ParseResult::Status::kFrame, ParseError::kNone, nul_index + 1};
}

}  // namespace sluice::session
