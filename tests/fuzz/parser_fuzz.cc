// libFuzzer target for the STOMP frame parser: one stream, parsed whole and in pieces, must give
// the same events, and every header of every frame must read back within the frame's bytes.
//
// Input: byte 0 chooses the options, the rest is the byte stream.
//   bits 0-1  version: 0 = 1.0, 1 = 1.1, 2 and 3 = 1.2
//   bit  2    small frame limits (else FrameLimits defaults)
//   bits 3-4  pieces: 0 = 1..16 bytes, 1 = single bytes, 2 = 1..4096 bytes, 3 = three pieces
//   bit  5    with small limits: body_bytes_max 0
// Seeds in corpus/parser start with 0x02 (STOMP 1.2, default limits, pieces of 1..16 bytes), but
// *_1_1 (0x01) and *_small_limits (0x04).
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"
#include "tests/fuzz/fuzz_rng.h"

namespace {

namespace ss = sluice::session;

// Large enough for any frame the default limits accept, small enough to keep runs fast.
constexpr size_t kStreamBytesMax = 256u << 10;

using sluice::fuzz::Rng;

struct Options {
  ss::Version version;
  ss::FrameLimits limits;
  unsigned pieces;
};

Options options_from(uint8_t b) {
  Options o;
  static constexpr ss::Version kVersions[4] = {ss::Version::k1_0, ss::Version::k1_1,
                                               ss::Version::k1_2, ss::Version::k1_2};
  o.version = kVersions[b & 3u];
  if (b & 4u) {
    o.limits.frame_bytes_max = 256;
    o.limits.header_count_max = 4;
    o.limits.header_line_bytes_max = 32;
    o.limits.body_bytes_max = (b & 32u) ? 0 : 128;
  }
  o.pieces = (b >> 3) & 3u;
  return o;
}

// One parse event, reduced to what must not depend on how the stream was split.
struct Event {
  ss::ParseResult::Status status;
  ss::ParseError error;
  size_t consumed;
  uint64_t frame_digest;
  bool operator==(const Event&) const = default;
};

uint64_t mix(uint64_t h, uint64_t v) {
  return (h ^ v) * 0x100000001b3ull + (v << 7);
}

// Decoded header octets; a decoded string is never longer than its raw form, which a header
// line limit (at most kHeaderLineBytesMax under both option sets) bounds.
std::array<char, ss::FrameLimits::kHeaderLineBytesMax> g_name;
std::array<char, ss::FrameLimits::kHeaderLineBytesMax> g_value;
volatile uint64_t g_sink;

// Reads every header of the frame the way callers do, checks the views stay inside the frame,
// and returns a digest of the frame's layout.
uint64_t touch_frame(const ss::Frame& f, std::string_view buf, size_t consumed) {
  std::string_view bytes = f.bytes();
  if (bytes.data() != buf.data() || bytes.size() != consumed || bytes.empty() ||
      bytes.back() != '\0') {
    __builtin_trap();
  }
  auto inside = [&](std::string_view s) {
    return s.data() >= bytes.data() && s.data() + s.size() <= bytes.data() + bytes.size();
  };
  std::string_view body = f.body();
  if (!inside(body) || body.data() + body.size() != bytes.data() + bytes.size() - 1) {
    __builtin_trap();
  }
  uint64_t h = mix(uint64_t(f.command()), f.escaped());
  h = mix(h, uint64_t(body.data() - bytes.data()));
  h = mix(h, body.size());
  h = mix(h, f.header_count());
  uint64_t sum = 0;
  for (size_t i = 0; i < f.header_count(); ++i) {
    ss::Header hd = f.header(i);
    if (!inside(hd.name) || !inside(hd.value) || hd.name.empty()) __builtin_trap();
    h = mix(h, uint64_t(hd.name.data() - bytes.data()));
    h = mix(h, hd.name.size());
    h = mix(h, uint64_t(hd.value.data() - bytes.data()));
    h = mix(h, hd.value.size());
    for (char c : hd.value)
      sum += uint8_t(c);
    std::string_view name = hd.name;
    if (f.escaped()) {
      if (ss::header_needs_unescape(hd.name)) {
        std::optional<size_t> n = ss::unescape_header(hd.name, g_name);
        if (!n || *n > hd.name.size()) __builtin_trap();
        name = std::string_view(g_name.data(), *n);
        // The decoded name compares equal to its raw form.
        if (!ss::header_equals(hd.name, true, name)) __builtin_trap();
      }
      if (ss::header_needs_unescape(hd.value)) {
        std::optional<size_t> n = ss::unescape_header(hd.value, g_value);
        if (!n || *n > hd.value.size()) __builtin_trap();
        for (size_t k = 0; k < *n; ++k)
          sum += uint8_t(g_value[k]);
      }
    }
    // The first header with this decoded name wins, so it is this one or an earlier one.
    std::optional<size_t> first = f.find_index(name);
    if (!first || *first > i) __builtin_trap();
    std::optional<std::string_view> found = f.find(name);
    if (!found || found->data() != f.header(*first).value.data()) __builtin_trap();
  }
  g_sink = g_sink + sum;
  return h;
}

// Records frames, heart-beats and the error; drops consumed bytes as a caller does.
class Recorder {
 public:
  explicit Recorder(const Options& o) : parser_(o.limits) { parser_.set_version(o.version); }

  // Parses buf (the bytes not yet consumed) until it needs more; false after an error.
  bool run(std::string_view buf, size_t* start) {
    for (;;) {
      std::string_view rest = buf.substr(*start);
      ss::ParseResult r = parser_.parse(rest);
      switch (r.status) {
        case ss::ParseResult::Status::kNeedMore:
          if (r.consumed != 0) __builtin_trap();
          return true;
        case ss::ParseResult::Status::kError:
          if (r.error == ss::ParseError::kNone) __builtin_trap();
          events_.push_back(Event{r.status, r.error, r.consumed, 0});
          return false;
        case ss::ParseResult::Status::kHeartbeat:
          if (r.consumed != 1 && r.consumed != 2) __builtin_trap();
          events_.push_back(Event{r.status, r.error, r.consumed, 0});
          break;
        case ss::ParseResult::Status::kFrame:
          events_.push_back(
              Event{r.status, r.error, r.consumed, touch_frame(parser_.frame(), rest, r.consumed)});
          break;
      }
      if (r.consumed == 0 || r.consumed > rest.size()) __builtin_trap();
      *start += r.consumed;
    }
  }

  const std::vector<Event>& events() const { return events_; }
  bool in_progress() const { return parser_.frame_in_progress(); }

 private:
  ss::Parser parser_;
  std::vector<Event> events_;
};

size_t piece_size(const Options& o, Rng& rng, size_t left, size_t total) {
  switch (o.pieces) {
    case 0:
      return std::min(left, 1 + rng.below(16));
    case 1:
      return 1;
    case 2:
      return std::min(left, 1 + rng.below(4096));
    default:
      return std::min(left, total / 3 + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size - 1 > kStreamBytesMax) return 0;
  const Options o = options_from(data[0]);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  Recorder whole(o);
  size_t whole_start = 0;
  const bool whole_ok = whole.run(stream, &whole_start);

  // The pieces arrive in a separate buffer whose unfed tail is poisoned, so ASan reports any
  // read past the bytes the parser was given.
  const size_t n = stream.size();
  std::unique_ptr<char[]> copy(new char[n + 1]);
  std::memcpy(copy.get(), stream.data(), n);
  ASAN_POISON_MEMORY_REGION(copy.get(), n + 1);
  Recorder pieces(o);
  Rng rng(stream);
  size_t fed = 0;
  size_t start = 0;
  bool pieces_ok = true;
  while (fed < n && pieces_ok) {
    const size_t k = piece_size(o, rng, n - fed, n);
    ASAN_UNPOISON_MEMORY_REGION(copy.get() + fed, k);
    fed += k;
    pieces_ok = pieces.run(std::string_view(copy.get(), fed), &start);
  }
  ASAN_UNPOISON_MEMORY_REGION(copy.get(), n + 1);

  if (whole_ok != pieces_ok || whole.events() != pieces.events()) __builtin_trap();
  if (whole_ok && (whole_start != start || whole.in_progress() != pieces.in_progress())) {
    __builtin_trap();
  }
  return 0;
}
