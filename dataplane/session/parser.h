// Incremental, zero-copy STOMP 1.0/1.1/1.2 frame parser. The caller owns the bytes; frames are
// views into them. Feeding a longer buffer with the same prefix resumes where the last call
// stopped, so any split of the byte stream yields the same events as one whole buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "dataplane/session/stomp.h"

namespace sluice::session {

struct Header {
  std::string_view name;   // raw octets; escaped if Frame::escaped()
  std::string_view value;  // raw octets; escaped if Frame::escaped()
};

namespace detail {
struct FrameHead;
// Offsets relative to the frame's first byte. The name is [name_off, colon_off), the value
// (colon_off, value_end): the three positions a line scan finds, stored as found.
struct HeaderSlot {
  uint32_t name_off;
  uint32_t colon_off;
  uint32_t value_end;  // one past the value: its LF, or the CR before it
  bool name_escaped;   // the name holds a backslash escape: compare it decoded
};
// Masks of one 64-byte block (bit k: byte k is LF or NUL / ':' / CR or backslash / NUL) as
// computed by every vector width this CPU supports; for the test that holds them equal. Returns
// how many.
struct HeadBlockMasks {
  uint64_t term;
  uint64_t colon;
  uint64_t odd;
  uint64_t nul;
};
size_t head_block_variants(const char* p, HeadBlockMasks* out, size_t max);
// The first NUL in p[from, to) (to >= 64; ~0 when none) as the body scan of every vector width
// this CPU supports finds it; for the test that holds them equal to memchr. Returns how many.
size_t find_nul_variants(const char* p, size_t from, size_t to, size_t* out, size_t max);
}  // namespace detail

// A parsed frame: views into the caller's buffer, valid until the caller moves or reuses those
// bytes or the parser parses again. The header table of a plain head (the common case) is
// filled by the first call that needs it (header(), find(), find_index()), not by parse():
// most frames on the hot path are only counted and forwarded. That first call writes into the
// parser's table, so a Frame is not to be read from two threads at once (the session core is
// single-threaded by design).
class Frame {
 public:
  Command command() const { return command_; }
  // True when header octets use the version's escapes (never for CONNECT/STOMP/CONNECTED, never
  // in STOMP 1.0).
  bool escaped() const { return escaped_; }
  // The frame's bytes from the first byte of the command through the terminating NUL.
  std::string_view bytes() const { return bytes_; }
  std::string_view body() const { return bytes_.substr(body_off_, body_len_); }
  size_t header_count() const { return header_count_; }
  Header header(size_t i) const;
  // First header whose decoded name equals `name` (STOMP: the first repeated header wins).
  std::optional<std::string_view> find(std::string_view name) const;
  // Index of that header, for callers that need to rewrite or unescape it.
  std::optional<size_t> find_index(std::string_view name) const;

 private:
  friend class Parser;
  // Fills the slots of a plain head from its bytes (each line "name:value" LF, checked).
  void index() const;
  void ensure_indexed() const {
    if (!indexed_) index();
  }

  std::string_view bytes_;
  detail::HeaderSlot* slots_ = nullptr;
  uint32_t header_count_ = 0;
  uint32_t first_line_ = 0;  // start of the first header line
  uint32_t body_off_ = 0;
  uint32_t body_len_ = 0;
  Command command_ = Command::kSend;
  bool escaped_ = false;
  bool names_escaped_ = false;   // some slot has name_escaped set
  mutable bool indexed_ = true;  // false: the slots are still to be filled by index()
};

struct ParseResult {
  enum class Status : uint8_t {
    kNeedMore,   // nothing complete yet; call again with more bytes appended
    kHeartbeat,  // one EOL between frames (a heart-beat); drop `consumed` bytes
    kFrame,      // `frame` is complete; drop `consumed` bytes after using it
    kError,      // `error` says what; the stream cannot be resynchronised, close it
  };
  Status status = Status::kNeedMore;
  ParseError error = ParseError::kNone;
  size_t consumed = 0;
};

// Room for a parser's header table, allocated once and lent to one parser at a time: an engine
// that makes a parser per session (a Prelude, an OwnerGreeting) keeps one per session slot, so
// that a session costs no allocation.
class HeaderTable {
 public:
  // Room for header_count_max headers.
  explicit HeaderTable(uint32_t header_count_max)
      : slots_(new detail::HeaderSlot[header_count_max]), capacity_(header_count_max) {}

  uint32_t capacity() const { return capacity_; }

 private:
  friend class Parser;
  std::unique_ptr<detail::HeaderSlot[]> slots_;
  uint32_t capacity_;
};

class Parser {
 public:
  // Longest command line accepted ("UNSUBSCRIBE" plus CR).
  static constexpr size_t kCommandLineBytesMax = 12;

  // Allocates the header table once, sized by limits.header_count_max.
  explicit Parser(const FrameLimits& limits);
  // Uses `table` (capacity at least limits.header_count_max), which must outlive the parser and
  // serve no other parser meanwhile; allocates nothing.
  Parser(const FrameLimits& limits, HeaderTable& table);

  // Version negotiated for this connection; selects the escaping rules. Default 1.0 (no escapes).
  void set_version(Version v) { version_ = v; }
  Version version() const { return version_; }
  const FrameLimits& limits() const { return limits_; }

  // `buf` starts at the first byte not yet consumed. Between calls the caller may only append
  // bytes (or move the whole buffer); after kHeartbeat/kFrame it drops `consumed` bytes from the
  // front. After kError the parser stays in error until reset().
  ParseResult parse(std::string_view buf);
  const Frame& frame() const { return frame_; }

  // Forget any partial frame (e.g. when the caller discards the stream).
  void reset();
  // True when bytes of a frame (not just heart-beats) have been seen but the frame is not done:
  // the engine arms the frame deadline while this holds.
  bool frame_in_progress() const { return state_ != State::kGap && state_ != State::kError; }
  // True once the headers of the frame in progress are complete and its body is still arriving.
  bool in_body() const { return state_ == State::kBody; }
  // The frame in progress, headers only (empty body), over the same `buf` as the last parse();
  // valid while in_body(). Lets the prelude bind before a large body has arrived.
  const Frame& head(std::string_view buf);

 private:
  enum class State : uint8_t { kGap, kCommand, kHeaders, kBody, kError };

  ParseResult fail(ParseError e);
#if defined(__SSE2__)
  // The bitmask pass over the head of a frame starting at buf[0]; `scan` holds the same bytes
  // as buf, padded to a whole block when buf is shorter. False: the general path decides.
  bool parse_fast(std::string_view buf, std::string_view scan, ParseResult* out);
#endif
  // Every state and every frame the fast path in parse() leaves (kept out of line, so that
  // path stays short).
  [[gnu::noinline]] ParseResult parse_general(std::string_view buf);
  // What parse() does not do inline: short buffers (a padded copy for the bitmask pass), the
  // states between a frame's first bytes and its end, heart-beats.
  [[gnu::noinline]] ParseResult parse_rest(std::string_view buf);
  ParseResult scan_command(std::string_view buf);
  ParseResult scan_headers(std::string_view buf);
  ParseResult end_headers(std::string_view buf);
  ParseResult scan_body(std::string_view buf);
  // The frame of a head the bitmask pass accepted (detail::scan_frame_head: a frame starting at
  // buf[0] whose command line and headers lie whole in buf and hold nothing unusual), its NUL
  // at nul_index, straight from it: the state stays kGap.
  ParseResult complete_fast(std::string_view buf, const detail::FrameHead& head, size_t nul_index);
  // Takes such a head as the frame in progress, its body to be scanned by end_headers().
  void adopt(const detail::FrameHead& head);
  // adopt(), then end_headers(): a head the bitmask pass accepted whose body is not all in buf.
  [[gnu::noinline]] ParseResult body_pending(std::string_view buf, const detail::FrameHead& head);
  ParseResult complete(std::string_view buf, size_t nul_index);
  bool take_header(std::string_view buf, size_t line_end, ParseError* error);

  FrameLimits limits_;
  Version version_ = Version::k1_0;
  State state_ = State::kGap;
  ParseError error_ = ParseError::kNone;
  bool escaped_ = false;
  Command command_ = Command::kSend;
  size_t pos_ = 0;         // next byte to examine
  size_t line_start_ = 0;  // start of the header line being scanned
  // What the scanned part of that line holds (it may arrive in pieces).
  size_t line_colon_ = 0;
  size_t line_cr_ = 0;
  bool line_backslash_ = false;
  size_t body_start_ = 0;
  int64_t content_length_ = -1;
  uint32_t header_count_ = 0;
  bool names_escaped_ = false;
  bool indexed_ = true;  // false: the fast path left the slots of a plain head to Frame::index()
  size_t first_line_ = 0;
  std::unique_ptr<detail::HeaderSlot[]> owned_;  // empty when the table is lent
  detail::HeaderSlot* slots_;
  Frame frame_;
};

}  // namespace sluice::session
