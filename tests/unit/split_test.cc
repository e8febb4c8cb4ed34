// Randomized split test: any chunking of a byte stream gives the parser events of one buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::session {
namespace {

using Status = ParseResult::Status;

using testing::kAllCommands;
using testing::kAllVersions;

// One parser event, with everything a frame carries copied out of the buffer.
struct Event {
  Status status = Status::kNeedMore;
  ParseError error = ParseError::kNone;
  size_t consumed = 0;
  bool in_progress = false;  // frame_in_progress() at the final kNeedMore
  Command command = Command::kSend;
  bool escaped = false;
  std::vector<std::pair<std::string, std::string>> headers;  // raw octets
  std::string body;

  bool operator==(const Event&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Event& e) {
  switch (e.status) {
    case Status::kNeedMore:
      return os << "NeedMore(in_progress=" << e.in_progress << ")";
    case Status::kHeartbeat:
      return os << "Heartbeat(" << e.consumed << ")";
    case Status::kError:
      return os << "Error(" << parse_error_message(e.error) << ", consumed=" << e.consumed << ")";
    case Status::kFrame:
      break;
  }
  os << "Frame(" << command_name(e.command) << ", consumed=" << e.consumed
     << ", escaped=" << e.escaped << ", headers=" << ::testing::PrintToString(e.headers)
     << ", body=" << ::testing::PrintToString(e.body) << ")";
  return os;
}

Event event_of(const ParseResult& r, const Parser& p) {
  Event e;
  e.status = r.status;
  e.error = r.error;
  e.consumed = r.consumed;
  if (r.status == Status::kNeedMore) e.in_progress = p.frame_in_progress();
  if (r.status == Status::kFrame) {
    const Frame& f = p.frame();
    e.command = f.command();
    e.escaped = f.escaped();
    for (size_t i = 0; i < f.header_count(); ++i) {
      e.headers.emplace_back(std::string(f.header(i).name), std::string(f.header(i).value));
    }
    e.body = std::string(f.body());
  }
  return e;
}

// Events of parsing `bytes` as one buffer, dropping what each event consumed, until the parser
// needs more bytes (recorded, with frame_in_progress) or fails.
std::vector<Event> parse_whole(std::string_view bytes, Version v, const FrameLimits& limits) {
  Parser p(limits);
  p.set_version(v);
  std::vector<Event> events;
  for (;;) {
    ParseResult r = p.parse(bytes);
    events.push_back(event_of(r, p));
    if (r.status == Status::kNeedMore || r.status == Status::kError) return events;
    if (r.consumed == 0 || r.consumed > bytes.size()) {
      ADD_FAILURE() << "event consumed " << r.consumed << " of " << bytes.size();
      return events;
    }
    bytes.remove_prefix(r.consumed);
  }
}

enum class Chunking { kByteByByte, kSmall, kLarge };

// The same stream as the network delivers it: the caller appends chunks to a growing buffer,
// parses after each, drops `consumed` octets after each kFrame/kHeartbeat, and now and then moves
// the buffer to new storage.
std::vector<Event> parse_split(std::string_view bytes, Version v, const FrameLimits& limits,
                               Chunking chunking, std::mt19937_64& rng) {
  Parser p(limits);
  p.set_version(v);
  std::vector<Event> events;
  std::string buf;
  size_t fed = 0;
  for (;;) {
    for (;;) {
      ParseResult r = p.parse(buf);
      if (r.status == Status::kNeedMore) break;
      events.push_back(event_of(r, p));
      if (r.status == Status::kError) return events;
      if (r.consumed == 0 || r.consumed > buf.size()) {
        ADD_FAILURE() << "event consumed " << r.consumed << " of " << buf.size();
        return events;
      }
      buf.erase(0, r.consumed);
    }
    const size_t left = bytes.size() - fed;
    if (left == 0) break;
    size_t n = 1;
    switch (chunking) {
      case Chunking::kByteByByte:
        n = 1;
        break;
      case Chunking::kSmall:
        n = rng() % 9;
        break;  // 0: parse again with nothing new
      case Chunking::kLarge:
        n = 1 + rng() % left;
        break;
    }
    n = std::min(n, left);
    buf.append(bytes.substr(fed, n));
    fed += n;
    if (rng() % 16 == 0) {
      std::string moved;
      moved.reserve(buf.capacity() + 64);  // different storage
      moved = buf;
      buf.swap(moved);
    }
  }
  events.push_back(event_of(p.parse(buf), p));
  return events;
}

// Limits every generated valid frame fits in; the invalid frames are built against them.
FrameLimits stream_limits() {
  FrameLimits l;
  l.frame_bytes_max = 4096;
  l.header_count_max = 16;
  l.header_line_bytes_max = 256;
  l.body_bytes_max = 2048;
  return l;
}

// The ways a stream may end in a bad frame; each yields a known final event.
enum class Bad {
  kUnknownCommand,
  kLowercaseCommand,
  kLongCommandLine,
  kNulInCommand,
  kLoneCr,
  kNoColon,
  kEmptyName,
  kNulInHeaders,
  kInvalidEscape,
  kBadContentLength,
  kMissingNul,
  kBodyNotAllowed,
  kTooManyHeaders,
  kLineTooLong,
  kFrameTooLarge,
  kBodyTooLarge,
  kTruncated,
};
constexpr size_t kBadCount = size_t(Bad::kTruncated) + 1;

// Builds random streams of frames and heart-beats together with the events a parser must report.
class StreamGenerator {
 public:
  StreamGenerator(std::mt19937_64& rng, Version v) : rng_(rng), version_(v) {}

  const std::string& bytes() const { return bytes_; }
  const std::vector<Event>& expected() const { return expected_; }
  FrameLimits& limits() { return limits_; }

  size_t below(size_t n) { return size_t(rng_() % n); }
  bool percent(size_t p) { return below(100) < p; }

  void heartbeats() {
    for (size_t n = percent(50) ? below(3) : 0; n > 0; --n) {
      const bool crlf = percent(50);
      bytes_ += crlf ? "\r\n" : "\n";
      Event e;
      e.status = Status::kHeartbeat;
      e.consumed = crlf ? 2 : 1;
      expected_.push_back(e);
    }
  }

  // A random valid frame, followed by heart-beats unless `alone`.
  void valid_frame(bool alone = false) {
    const Command c = kAllCommands[below(kAllCommands.size())];
    const bool escaped = version_ != Version::k1_0 && command_escapes_headers(c);
    std::vector<std::pair<std::string, std::string>> headers;
    for (size_t n = below(6); n > 0; --n)
      headers.emplace_back(name(escaped), value(escaped));
    std::string body;
    if (command_allows_body(c)) {
      if (percent(50)) {
        body = random_octets(below(40), 0);
        if (!body.empty()) body[below(body.size())] = '\0';
        insert_content_length(headers, body.size());
      } else {
        body = random_octets(below(40), 1);
      }
    } else if (percent(25)) {
      insert_content_length(headers, 0);
    }
    const size_t start = bytes_.size();
    write_frame(command_name(c), headers, body);
    Event e;
    e.status = Status::kFrame;
    e.consumed = bytes_.size() - start;
    e.command = c;
    e.escaped = escaped;
    e.headers = std::move(headers);
    e.body = std::move(body);
    expected_.push_back(std::move(e));
    last_frame_size_ = bytes_.size() - start;
    if (!alone) heartbeats();
  }

  // Ends a valid stream; sometimes with half a CRLF heart-beat, which is not a frame.
  void end_valid() {
    if (percent(10)) bytes_ += '\r';
    expected_.push_back(Event{});
  }

  // Appends a bad frame (and junk after it that must never be looked at).
  void bad_frame(Bad kind) {
    ParseError want = ParseError::kNone;
    switch (kind) {
      case Bad::kUnknownCommand: {
        static constexpr std::array<std::string_view, 6> kNames = {"FOO",   "SENDS", "SEN",
                                                                   " SEND", "ACK ",  "MESAGE"};
        write_frame(kNames[below(kNames.size())], plain_headers(below(3)), {});
        want = ParseError::kUnknownCommand;
        break;
      }
      case Bad::kLowercaseCommand: {
        std::string name(command_name(kAllCommands[below(kAllCommands.size())]));
        for (char& ch : name)
          ch = char(ch - 'A' + 'a');
        write_frame(name, plain_headers(below(3)), {});
        want = ParseError::kUnknownCommand;
        break;
      }
      case Bad::kLongCommandLine:
        bytes_ += std::string(Parser::kCommandLineBytesMax + 1 + below(4), 'A') + eol() + eol();
        bytes_ += '\0';
        want = ParseError::kUnknownCommand;
        break;
      case Bad::kNulInCommand:
        bytes_ += std::string("SEND").insert(below(5), 1, '\0') + eol() + eol();
        bytes_ += '\0';
        want = ParseError::kUnknownCommand;
        break;
      case Bad::kLoneCr:
        bytes_ += "\rSEND\n\n";
        bytes_ += '\0';
        want = ParseError::kUnknownCommand;
        break;
      case Bad::kNoColon:
        write_bad_header(std::string("novalue").substr(0, 1 + below(7)));
        want = ParseError::kMalformedHeader;
        break;
      case Bad::kEmptyName:
        write_bad_header(":" + value(false));
        want = ParseError::kMalformedHeader;
        break;
      case Bad::kNulInHeaders:
        if (percent(30)) {
          // A NUL where the blank line should be.
          bytes_ += "SEND" + eol() + "a:b" + eol();
          bytes_ += '\0';
        } else {
          std::string line = "name:value";
          line.insert(below(line.size() + 1), 1, '\0');
          write_bad_header(line);
        }
        want = ParseError::kNulInHeaders;
        break;
      case Bad::kInvalidEscape: {
        static constexpr std::array<std::string_view, 5> kBad = {"\\t", "\\", "x\\q", "\\\\\\",
                                                                 "\\C"};
        std::string bad(kBad[below(kBad.size())]);
        if (version_ == Version::k1_1 && percent(30)) bad = "\\r";
        const std::string line = percent(50) ? "k:v" + bad : "k" + bad + ":v";
        const Command c = percent(50) ? Command::kMessage : Command::kAck;
        bytes_ += std::string(command_name(c)) + eol() + "ok:1" + eol() + line + eol() + eol();
        bytes_ += '\0';
        want = ParseError::kInvalidEscape;
        break;
      }
      case Bad::kBadContentLength: {
        static constexpr std::array<std::string_view, 8> kBad = {"",   "-1", "1a",  " 5",
                                                                 "5 ", "+5", "0x5", "12345678901"};
        write_frame("SEND", {{"content-length", std::string(kBad[below(kBad.size())])}}, "abc");
        want = ParseError::kBadContentLength;
        break;
      }
      case Bad::kMissingNul:
        if (percent(70)) {
          const size_t n = below(10);
          std::string body = random_octets(n + 1 + below(3), 0);
          body[n] = 'x';
          bytes_ +=
              "MESSAGE" + eol() + "content-length:" + std::to_string(n) + eol() + eol() + body;
        } else {
          bytes_ += "SUBSCRIBE" + eol() + "content-length:0" + eol() + eol() + "x";
        }
        want = ParseError::kMissingNul;
        break;
      case Bad::kBodyNotAllowed:
        if (percent(50)) {
          write_frame("SUBSCRIBE", {{"id", "1"}}, random_octets(1 + below(5), 1));
        } else {
          bytes_ += "ACK" + eol() + "content-length:" + std::to_string(1 + below(99)) + eol() +
                    eol() + "abc";
        }
        want = ParseError::kBodyNotAllowed;
        break;
      case Bad::kTooManyHeaders:
        write_frame("SEND", plain_headers(limits_.header_count_max + 1 + below(3)), {});
        want = ParseError::kTooManyHeaders;
        break;
      case Bad::kLineTooLong:
        write_frame("SEND",
                    {{"k", std::string(limits_.header_line_bytes_max - 1 + below(40), 'v')}}, {});
        want = ParseError::kHeaderLineTooLong;
        break;
      case Bad::kFrameTooLarge:
        switch (below(3)) {
          case 0: {
            // Header lines within their own limit that together overflow the frame.
            std::vector<std::pair<std::string, std::string>> headers;
            for (char ch = 'a'; ch < 'a' + 16; ++ch) {
              headers.emplace_back(std::string(1, ch), std::string(253, 'v'));
            }
            write_frame("SUBSCRIBE", headers, {});
            break;
          }
          case 1:
            limits_.body_bytes_max = limits_.frame_bytes_max;
            write_frame("SEND", {}, std::string(limits_.frame_bytes_max, 'b'));
            break;
          default:
            limits_.body_bytes_max = limits_.frame_bytes_max;
            write_frame("SEND", {{"content-length", std::to_string(limits_.frame_bytes_max - 20)}},
                        std::string(limits_.frame_bytes_max - 20, '\0'));
            break;
        }
        want = ParseError::kFrameTooLarge;
        break;
      case Bad::kBodyTooLarge:
        if (percent(50)) {
          write_frame("SEND", {}, std::string(limits_.body_bytes_max + 1 + below(10), 'b'));
        } else {
          const size_t n = limits_.body_bytes_max + 1 + below(10);
          write_frame("MESSAGE", {{"content-length", std::to_string(n)}}, std::string(n, '\0'));
        }
        want = ParseError::kBodyTooLarge;
        break;
      case Bad::kTruncated: {
        // A valid frame cut short: the stream ends with a frame in progress.
        const size_t start = bytes_.size();
        valid_frame(/*alone=*/true);
        expected_.pop_back();
        bytes_.resize(start + 1 + below(last_frame_size_ - 1));
        Event e;
        e.in_progress = true;
        expected_.push_back(e);
        return;
      }
    }
    Event e;
    e.status = Status::kError;
    e.error = want;
    expected_.push_back(e);
    if (percent(50)) bytes_ += "SEND\n\njunk";
  }

 private:
  std::string eol() { return percent(50) ? "\r\n" : "\n"; }

  // Name octets: escapes of the version where the frame escapes, else anything but ':' CR LF NUL.
  std::string name(bool escaped) {
    for (;;) {
      std::string s = escaped ? escaped_text(1 + below(6), "abcdefghij-_.")
                              : literal_text(1 + below(6), "abcxyz-_.\\ #");
      if (s != "content-length") return s;
    }
  }

  std::string value(bool escaped) {
    return escaped ? escaped_text(below(12), "abcdefghij0123456789:/ .-_=")
                   : literal_text(below(12), "abcxyz0189:/ .\\t\xc3\xa9");
  }

  std::string literal_text(size_t n, std::string_view alphabet) {
    std::string s;
    for (size_t i = 0; i < n; ++i)
      s += alphabet[below(alphabet.size())];
    return s;
  }

  // Octets from `alphabet` mixed with escape sequences defined for the version.
  std::string escaped_text(size_t n, std::string_view alphabet) {
    static constexpr std::array<std::string_view, 4> kEscapes = {"\\n", "\\c", "\\\\", "\\r"};
    const size_t escapes = version_ == Version::k1_2 ? 4 : 3;
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      if (percent(25)) {
        s += kEscapes[below(escapes)];
      } else {
        s += alphabet[below(alphabet.size())];
      }
    }
    return s;
  }

  // Body octets in [lowest, 255].
  std::string random_octets(size_t n, unsigned lowest) {
    std::string s(n, '\0');
    for (char& ch : s)
      ch = char(lowest + below(256 - lowest));
    return s;
  }

  std::vector<std::pair<std::string, std::string>> plain_headers(size_t n) {
    std::vector<std::pair<std::string, std::string>> headers;
    for (size_t i = 0; i < n; ++i)
      headers.emplace_back("h" + std::to_string(i), "v");
    return headers;
  }

  void insert_content_length(std::vector<std::pair<std::string, std::string>>& headers, size_t n) {
    std::string digits = std::to_string(n);
    if (percent(10)) digits.insert(0, 1 + below(10 - digits.size()), '0');
    headers.insert(headers.begin() + std::ptrdiff_t(below(headers.size() + 1)),
                   {"content-length", digits});
  }

  // Each line ends in LF or CRLF at random.
  void write_frame(std::string_view command,
                   const std::vector<std::pair<std::string, std::string>>& headers,
                   std::string_view body) {
    bytes_ += command;
    bytes_ += eol();
    for (const auto& [n, v] : headers)
      bytes_ += n + ":" + v + eol();
    bytes_ += eol();
    bytes_ += body;
    bytes_ += '\0';
  }

  void write_bad_header(std::string_view line) {
    const Command c = kAllCommands[below(kAllCommands.size())];
    bytes_ +=
        std::string(command_name(c)) + eol() + "a:1" + eol() + std::string(line) + eol() + eol();
    bytes_ += '\0';
  }

  std::mt19937_64& rng_;
  Version version_;
  std::string bytes_;
  std::vector<Event> expected_;
  FrameLimits limits_ = stream_limits();
  size_t last_frame_size_ = 0;
};

// Parses `bytes` whole and in several chunkings; every chunking must match the whole parse.
::testing::AssertionResult SplitsMatchWhole(std::string_view bytes, Version v,
                                            const FrameLimits& limits,
                                            const std::vector<Event>& whole, std::mt19937_64& rng) {
  const std::array<Chunking, 3> chunkings = {
      bytes.size() <= 4096 ? Chunking::kByteByByte : Chunking::kLarge, Chunking::kSmall,
      Chunking::kLarge};
  for (Chunking chunking : chunkings) {
    std::vector<Event> split = parse_split(bytes, v, limits, chunking, rng);
    if (split != whole) {
      return ::testing::AssertionFailure()
             << "chunking " << int(chunking) << " gave " << ::testing::PrintToString(split)
             << "\nwhole buffer gave " << ::testing::PrintToString(whole)
             << "\nbytes: " << ::testing::PrintToString(std::string(bytes));
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr int kValidStreamsPerVersion = 1500;
constexpr int kBadStreamsPerVersion = 800;
constexpr int kTightStreamsPerVersion = 600;

TEST(SplitTest, SplitParseMatchesWholeParseForValidStreams) {
  size_t frames = 0;
  for (Version v : kAllVersions) {
    std::mt19937_64 rng(0x5107ce00u + unsigned(v));
    for (int i = 0; i < kValidStreamsPerVersion; ++i) {
      StreamGenerator gen(rng, v);
      gen.heartbeats();
      for (size_t n = 1 + gen.below(6); n > 0; --n)
        gen.valid_frame();
      gen.end_valid();
      const FrameLimits limits = gen.percent(50) ? FrameLimits{} : gen.limits();
      std::vector<Event> whole = parse_whole(gen.bytes(), v, limits);
      ASSERT_EQ(whole, gen.expected()) << "version " << version_name(v) << " stream " << i << ": "
                                       << ::testing::PrintToString(gen.bytes());
      ASSERT_TRUE(SplitsMatchWhole(gen.bytes(), v, limits, whole, rng))
          << "version " << version_name(v) << " stream " << i;
      for (const Event& e : whole)
        frames += e.status == Status::kFrame;
    }
  }
  EXPECT_GE(frames, size_t(3 * kValidStreamsPerVersion));
}

TEST(SplitTest, SplitParseMatchesWholeParseForStreamsEndingInBadFrame) {
  std::array<size_t, kBadCount> seen{};
  for (Version v : kAllVersions) {
    std::mt19937_64 rng(0xbadf00d0u + unsigned(v));
    for (int i = 0; i < kBadStreamsPerVersion; ++i) {
      StreamGenerator gen(rng, v);
      gen.heartbeats();
      for (size_t n = gen.below(4); n > 0; --n)
        gen.valid_frame();
      Bad kind = Bad(gen.below(kBadCount));
      if (kind == Bad::kInvalidEscape && v == Version::k1_0) kind = Bad::kNoColon;
      ++seen[size_t(kind)];
      gen.bad_frame(kind);
      std::vector<Event> whole = parse_whole(gen.bytes(), v, gen.limits());
      ASSERT_EQ(whole, gen.expected())
          << "version " << version_name(v) << " stream " << i << " bad kind " << int(kind) << ": "
          << ::testing::PrintToString(gen.bytes());
      ASSERT_TRUE(SplitsMatchWhole(gen.bytes(), v, gen.limits(), whole, rng))
          << "version " << version_name(v) << " stream " << i << " bad kind " << int(kind);
    }
  }
  for (size_t k = 0; k < kBadCount; ++k)
    EXPECT_GT(seen[k], 10u) << "bad kind " << k;
}

// Random limits near the sizes of the generated frames: frames land just under and just over
// every limit, and whatever the parser decides must not depend on the chunking.
TEST(SplitTest, SplitParseMatchesWholeParseUnderTightLimits) {
  std::map<ParseError, size_t> endings;
  size_t frames = 0;
  for (Version v : kAllVersions) {
    std::mt19937_64 rng(0x7164700u + unsigned(v));
    for (int i = 0; i < kTightStreamsPerVersion; ++i) {
      StreamGenerator gen(rng, v);
      for (size_t n = 1 + gen.below(5); n > 0; --n)
        gen.valid_frame();
      gen.end_valid();
      FrameLimits limits;
      limits.frame_bytes_max = uint32_t(64 + gen.below(64));
      limits.header_line_bytes_max = uint32_t(16 + gen.below(24));
      limits.header_count_max = uint32_t(1 + gen.below(6));
      limits.body_bytes_max = uint32_t(gen.below(limits.frame_bytes_max + 1));
      ASSERT_TRUE(limits.valid());
      std::vector<Event> whole = parse_whole(gen.bytes(), v, limits);
      ASSERT_TRUE(SplitsMatchWhole(gen.bytes(), v, limits, whole, rng))
          << "version " << version_name(v) << " stream " << i;
      ++endings[whole.back().error];
      for (const Event& e : whole)
        frames += e.status == Status::kFrame;
    }
  }
  // The limits were hit, each kind of them, and frames still got through.
  EXPECT_GT(frames, 100u);
  for (ParseError e : {ParseError::kNone, ParseError::kFrameTooLarge, ParseError::kTooManyHeaders,
                       ParseError::kHeaderLineTooLong, ParseError::kBodyTooLarge}) {
    EXPECT_GT(endings[e], 5u) << parse_error_message(e);
  }
}

}  // namespace
}  // namespace sluice::session
