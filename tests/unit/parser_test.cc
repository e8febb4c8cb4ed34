// Unit tests of the STOMP frame parser and of the header escaping helpers in stomp.h.
#include "dataplane/session/parser.h"

#include <gtest/gtest.h>

#include <random>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/session/stomp.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::session {

// Readable failure messages (PrintTo(Command) is in stomp_frames.h). Internal linkage: the
// other test files may define their own.
[[maybe_unused]] static void PrintTo(ParseError e, std::ostream* os) {
  *os << "ParseError(" << parse_error_message(e) << ")";
}
[[maybe_unused]] static void PrintTo(ParseResult::Status s, std::ostream* os) {
  static constexpr std::array<const char*, 4> kNames = {"kNeedMore", "kHeartbeat", "kFrame",
                                                        "kError"};
  *os << kNames[size_t(s)];
}

namespace {

using namespace std::string_literals;
using Status = ParseResult::Status;
using sluice::session::testing::frame;

using testing::kAllCommands;

constexpr std::array<Command, 12> kBodylessCommands = {
    Command::kConnect,     Command::kStomp, Command::kConnected,  Command::kSubscribe,
    Command::kUnsubscribe, Command::kAck,   Command::kNack,       Command::kBegin,
    Command::kCommit,      Command::kAbort, Command::kDisconnect, Command::kReceipt,
};

constexpr std::array<Command, 3> kBodyCommands = {Command::kSend, Command::kMessage,
                                                  Command::kError};

constexpr std::array<Version, 2> kEscapingVersions = {Version::k1_1, Version::k1_2};

std::string_view status_name(Status s) {
  switch (s) {
    case Status::kNeedMore:
      return "kNeedMore";
    case Status::kHeartbeat:
      return "kHeartbeat";
    case Status::kFrame:
      return "kFrame";
    case Status::kError:
      return "kError";
  }
  return "?";
}

FrameLimits make_limits(uint32_t frame_bytes, uint32_t header_count, uint32_t line_bytes,
                        uint32_t body_bytes) {
  FrameLimits l;
  l.frame_bytes_max = frame_bytes;
  l.header_count_max = header_count;
  l.header_line_bytes_max = line_bytes;
  l.body_bytes_max = body_bytes;
  return l;
}

// First event of a fresh parser given `bytes` as one buffer.
ParseResult parse_once(std::string_view bytes, Version v = Version::k1_0,
                       const FrameLimits& limits = FrameLimits{}) {
  Parser p(limits);
  p.set_version(v);
  return p.parse(bytes);
}

// First event other than kNeedMore when a fresh parser sees `bytes` grow one byte per call.
ParseResult parse_bytewise(std::string_view bytes, Version v = Version::k1_0,
                           const FrameLimits& limits = FrameLimits{}) {
  Parser p(limits);
  p.set_version(v);
  ParseResult r;
  for (size_t n = 0; n <= bytes.size(); ++n) {
    r = p.parse(bytes.substr(0, n));
    if (r.status != Status::kNeedMore) return r;
  }
  return r;
}

std::string describe(const ParseResult& r) {
  return std::string(status_name(r.status)) + " / " + std::string(parse_error_message(r.error)) +
         " / consumed " + std::to_string(r.consumed);
}

// Both a whole buffer and a byte-by-byte feed of `bytes` end in error `want`.
::testing::AssertionResult FailsWith(std::string_view bytes, ParseError want,
                                     Version v = Version::k1_0,
                                     const FrameLimits& limits = FrameLimits{}) {
  ParseResult whole = parse_once(bytes, v, limits);
  if (whole.status != Status::kError || whole.error != want) {
    return ::testing::AssertionFailure() << "whole buffer gave " << describe(whole)
                                         << ", want error " << parse_error_message(want);
  }
  ParseResult slow = parse_bytewise(bytes, v, limits);
  if (slow.status != Status::kError || slow.error != want) {
    return ::testing::AssertionFailure() << "byte-by-byte gave " << describe(slow)
                                         << ", want error " << parse_error_message(want);
  }
  return ::testing::AssertionSuccess();
}

// Both a whole buffer and a byte-by-byte feed of `bytes` yield one frame spanning all of it.
::testing::AssertionResult ParsesWhole(std::string_view bytes, Version v = Version::k1_0,
                                       const FrameLimits& limits = FrameLimits{}) {
  for (ParseResult r : {parse_once(bytes, v, limits), parse_bytewise(bytes, v, limits)}) {
    if (r.status != Status::kFrame || r.consumed != bytes.size()) {
      return ::testing::AssertionFailure()
             << "gave " << describe(r) << ", want kFrame consuming " << bytes.size();
    }
  }
  return ::testing::AssertionSuccess();
}

std::string unescaped(std::string_view raw) {
  std::string out(raw.size(), '\0');
  std::optional<size_t> n = unescape_header(raw, out);
  if (!n) return "<unescape failed>";
  out.resize(*n);
  return out;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return out;
}

// ---- Commands ----------------------------------------------------------------------------------

TEST(ParserTest, ParserParsesEveryCommand) {
  for (Command c : kAllCommands) {
    for (std::string_view eol : {"\n", "\r\n"}) {
      SCOPED_TRACE(command_name(c));
      std::string bytes = frame(command_name(c), {{"k", "v"}}, {}, eol);
      Parser p(FrameLimits{});
      ParseResult r = p.parse(bytes);
      ASSERT_EQ(r.status, Status::kFrame) << describe(r);
      EXPECT_EQ(r.consumed, bytes.size());
      EXPECT_EQ(p.frame().command(), c);
      EXPECT_EQ(p.frame().bytes(), bytes);
      EXPECT_EQ(p.frame().header_count(), 1u);
      EXPECT_EQ(p.frame().find("k"), "v");
      EXPECT_TRUE(p.frame().body().empty());
    }
  }
}

TEST(ParserTest, CommandNamesRoundTripThroughParseCommand) {
  for (Command c : kAllCommands) {
    EXPECT_EQ(parse_command(command_name(c)), c) << command_name(c);
  }
  EXPECT_EQ(parse_command("send"), std::nullopt);
  EXPECT_EQ(parse_command(""), std::nullopt);
}

TEST(ParserTest, ParserRejectsUnknownCommand) {
  for (std::string_view cmd : {"FOO", "SENDS", "SEN", "MESSAGE ", " SEND", "MESS", "X"}) {
    EXPECT_TRUE(FailsWith(std::string(cmd) + "\nk:v\n\n" + '\0', ParseError::kUnknownCommand))
        << "command line '" << cmd << "'";
  }
}

TEST(ParserTest, ParserRejectsLowercaseCommand) {
  for (Command c : kAllCommands) {
    std::string bytes = frame(lowercase(command_name(c)), {});
    EXPECT_TRUE(FailsWith(bytes, ParseError::kUnknownCommand)) << bytes;
  }
  EXPECT_TRUE(FailsWith(frame("Send", {}), ParseError::kUnknownCommand));
}

TEST(ParserTest, ParserAcceptsLongestCommandLineAtLimit) {
  // "UNSUBSCRIBE\r" is exactly kCommandLineBytesMax octets.
  ASSERT_EQ(command_name(Command::kUnsubscribe).size() + 1, Parser::kCommandLineBytesMax);
  std::string bytes = frame("UNSUBSCRIBE", {{"id", "1"}}, {}, "\r\n");
  EXPECT_TRUE(ParsesWhole(bytes));
}

TEST(ParserTest, ParserRejectsCommandLineOverLimit) {
  // One more octet than kCommandLineBytesMax before the LF.
  EXPECT_TRUE(FailsWith("UNSUBSCRIBE\r\r\nid:1\n\n"s + '\0', ParseError::kUnknownCommand));
  EXPECT_TRUE(FailsWith("UNSUBSCRIBEX\r\n\n"s + '\0', ParseError::kUnknownCommand));
  // Without any LF, the parser gives up as soon as the line cannot be a command any more.
  std::string at_limit(Parser::kCommandLineBytesMax, 'A');
  EXPECT_EQ(parse_once(at_limit).status, Status::kNeedMore);
  ParseResult over = parse_once(at_limit + "A");
  EXPECT_EQ(over.status, Status::kError);
  EXPECT_EQ(over.error, ParseError::kUnknownCommand);
}

TEST(ParserTest, ParserRejectsNulInCommandLine) {
  EXPECT_TRUE(FailsWith("SE\0ND\n\n\0"s, ParseError::kUnknownCommand));
  EXPECT_TRUE(FailsWith("SEND\0\n\n\0"s, ParseError::kUnknownCommand));
  EXPECT_TRUE(FailsWith("\0"s, ParseError::kUnknownCommand));
  // Detected before the LF arrives.
  ParseResult r = parse_once("SE\0"s);
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_EQ(r.error, ParseError::kUnknownCommand);
}

// ---- Headers -----------------------------------------------------------------------------------

TEST(ParserTest, ParserReadsHeadersWithLfLineEnds) {
  std::string bytes = frame("SEND", {{"destination", "/queue/a"}, {"receipt", "r-1"}}, "hi");
  Parser p(FrameLimits{});
  ParseResult r = p.parse(bytes);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  const Frame& f = p.frame();
  ASSERT_EQ(f.header_count(), 2u);
  EXPECT_EQ(f.header(0).name, "destination");
  EXPECT_EQ(f.header(0).value, "/queue/a");
  EXPECT_EQ(f.header(1).name, "receipt");
  EXPECT_EQ(f.header(1).value, "r-1");
  EXPECT_EQ(f.find("receipt"), "r-1");
  EXPECT_EQ(f.find_index("receipt"), 1u);
  EXPECT_EQ(f.find("absent"), std::nullopt);
  EXPECT_EQ(f.find_index("absent"), std::nullopt);
  EXPECT_EQ(f.body(), "hi");
}

TEST(ParserTest, ParserStripsCrFromCrlfLineEnds) {
  std::string bytes =
      frame("SEND", {{"destination", "/queue/a"}, {"receipt", "r-1"}}, "hi", "\r\n");
  Parser p(FrameLimits{});
  ParseResult r = p.parse(bytes);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(r.consumed, bytes.size());
  EXPECT_EQ(p.frame().command(), Command::kSend);
  ASSERT_EQ(p.frame().header_count(), 2u);
  EXPECT_EQ(p.frame().header(0).value, "/queue/a");
  EXPECT_EQ(p.frame().header(1).value, "r-1");
  EXPECT_EQ(p.frame().body(), "hi");
}

TEST(ParserTest, ParserAcceptsMixedLineEnds) {
  std::string bytes = "SEND\r\na:1\nb:2\r\n\n"s + '\0';
  Parser p(FrameLimits{});
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  EXPECT_EQ(p.frame().find("a"), "1");
  EXPECT_EQ(p.frame().find("b"), "2");
}

TEST(ParserTest, ParserReturnsFirstOfRepeatedHeaders) {
  std::string bytes = frame("MESSAGE", {{"foo", "first"}, {"foo", "second"}, {"bar", "x"}});
  for (Version v : {Version::k1_0, Version::k1_1, Version::k1_2}) {
    Parser p(FrameLimits{});
    p.set_version(v);
    ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
    EXPECT_EQ(p.frame().header_count(), 3u);
    EXPECT_EQ(p.frame().find("foo"), "first");
    EXPECT_EQ(p.frame().find_index("foo"), 0u);
    EXPECT_EQ(p.frame().header(1).value, "second");
  }
}

TEST(ParserTest, ParserSplitsHeaderOnFirstColon) {
  std::string bytes = frame("SEND", {{"url", "http://host:80/a"}});
  for (Version v : {Version::k1_0, Version::k1_2}) {
    Parser p(FrameLimits{});
    p.set_version(v);
    ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
    EXPECT_EQ(p.frame().header(0).name, "url");
    EXPECT_EQ(p.frame().header(0).value, "http://host:80/a");
  }
}

TEST(ParserTest, ParserAcceptsEmptyHeaderValue) {
  for (std::string_view eol : {"\n", "\r\n"}) {
    std::string bytes = frame("SEND", {{"empty", ""}, {"b", "::"}}, {}, eol);
    Parser p(FrameLimits{});
    ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
    EXPECT_EQ(p.frame().find("empty"), "");
    EXPECT_EQ(p.frame().find("b"), "::");
  }
}

TEST(ParserTest, ParserKeepsWhitespaceAroundHeaderColon) {
  Parser p(FrameLimits{});
  const std::string bytes = "SEND\n a : b \n\n"s + '\0';
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  EXPECT_EQ(p.frame().header(0).name, " a ");
  EXPECT_EQ(p.frame().header(0).value, " b ");
}

TEST(ParserTest, ParserRejectsHeaderLineWithoutColon) {
  EXPECT_TRUE(FailsWith("SEND\nnocolon\n\n"s + '\0', ParseError::kMalformedHeader));
  EXPECT_TRUE(FailsWith("SEND\r\na:1\r\nnocolon\r\n\r\n"s + '\0', ParseError::kMalformedHeader));
  // A lone CR is a header line with no colon, not a blank line.
  EXPECT_TRUE(FailsWith("SEND\n\r\r\n\n"s + '\0', ParseError::kMalformedHeader));
}

TEST(ParserTest, ParserRejectsHeaderWithEmptyName) {
  EXPECT_TRUE(FailsWith("SEND\n:value\n\n"s + '\0', ParseError::kMalformedHeader));
  EXPECT_TRUE(FailsWith("SEND\n:\n\n"s + '\0', ParseError::kMalformedHeader));
  EXPECT_TRUE(
      FailsWith("MESSAGE\r\n:v\r\n\r\n"s + '\0', ParseError::kMalformedHeader, Version::k1_2));
}

TEST(ParserTest, ParserRejectsNulInHeaders) {
  EXPECT_TRUE(FailsWith("SEND\nna\0me:v\n\n\0"s, ParseError::kNulInHeaders));
  EXPECT_TRUE(FailsWith("SEND\nname:v\0alue\n\n\0"s, ParseError::kNulInHeaders));
  // A NUL where the blank line should be.
  EXPECT_TRUE(FailsWith("SEND\na:b\n\0"s, ParseError::kNulInHeaders));
  EXPECT_TRUE(FailsWith("SEND\n\0"s, ParseError::kNulInHeaders));
  EXPECT_TRUE(
      FailsWith("CONNECT\r\nlogin:\0\r\n\r\n\0"s, ParseError::kNulInHeaders, Version::k1_2));
  // Detected before the line's LF arrives.
  ParseResult r = parse_once("SEND\nab\0"s);
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_EQ(r.error, ParseError::kNulInHeaders);
}

TEST(ParserTest, ParserFramePointsIntoCallerBuffer) {
  std::string bytes = frame("SEND", {{"destination", "/q"}}, "body");
  Parser p(FrameLimits{});
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  const Frame& f = p.frame();
  EXPECT_EQ(f.bytes().data(), bytes.data());
  EXPECT_EQ(f.header(0).name.data(), bytes.data() + 5);
  EXPECT_EQ(f.header(0).value.data(), bytes.data() + 17);
  EXPECT_EQ(f.body().data(), bytes.data() + 21);
}

// ---- Escaping in the parser --------------------------------------------------------------------

TEST(ParserTest, ParserDecodesDefinedEscapesFrom11) {
  std::string bytes = "MESSAGE\nna\\cme:a\\nb\\\\c\\cd\nplain:x\n\n"s + '\0';
  for (Version v : kEscapingVersions) {
    SCOPED_TRACE(version_name(v));
    Parser p(FrameLimits{});
    p.set_version(v);
    ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
    const Frame& f = p.frame();
    EXPECT_TRUE(f.escaped());
    // Frame::find compares decoded names and returns the raw value.
    std::optional<std::string_view> raw = f.find("na:me");
    ASSERT_TRUE(raw.has_value());
    EXPECT_EQ(*raw, "a\\nb\\\\c\\cd");
    EXPECT_TRUE(header_needs_unescape(*raw));
    EXPECT_EQ(unescaped(*raw), "a\nb\\c:d");
    EXPECT_EQ(unescaped(f.header(0).name), "na:me");
    EXPECT_EQ(f.find("na\\cme"), std::nullopt);
    EXPECT_EQ(f.find("plain"), "x");
  }
}

TEST(ParserTest, ParserFindsHeaderByDecodedNameWithNewline) {
  Parser p(FrameLimits{});
  p.set_version(Version::k1_1);
  const std::string bytes = "SEND\na\\nb:1\na\\\\b:2\n\n"s + '\0';
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  EXPECT_EQ(p.frame().find("a\nb"), "1");
  EXPECT_EQ(p.frame().find("a\\b"), "2");
  EXPECT_EQ(p.frame().find("anb"), std::nullopt);
}

TEST(ParserTest, ParserRejectsCrEscapeIn11) {
  EXPECT_TRUE(FailsWith("SEND\nk:a\\rb\n\n"s + '\0', ParseError::kInvalidEscape, Version::k1_1));
  EXPECT_TRUE(FailsWith("SEND\nk\\r:v\n\n"s + '\0', ParseError::kInvalidEscape, Version::k1_1));
  EXPECT_FALSE(header_escapes_valid("a\\rb", Version::k1_1));
}

TEST(ParserTest, ParserDecodesCrEscapeIn12) {
  Parser p(FrameLimits{});
  p.set_version(Version::k1_2);
  const std::string bytes = "SEND\nk\\r:a\\rb\n\n"s + '\0';
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  std::optional<std::string_view> raw = p.frame().find("k\r");
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(unescaped(*raw), "a\rb");
}

TEST(ParserTest, ParserRejectsUndefinedEscape) {
  for (Version v : kEscapingVersions) {
    SCOPED_TRACE(version_name(v));
    for (std::string_view value : {"\\t", "a\\xb", "\\C", "\\N", "\\ ", "\\'", "ok\\\\\\t"}) {
      std::string line = "k:" + std::string(value);
      EXPECT_TRUE(FailsWith("SEND\n" + line + "\n\n" + '\0', ParseError::kInvalidEscape, v))
          << line;
      EXPECT_TRUE(
          FailsWith("MESSAGE\r\n" + line + "\r\n\r\n" + '\0', ParseError::kInvalidEscape, v))
          << line;
    }
    EXPECT_TRUE(FailsWith("ACK\nk\\t:v\n\n"s + '\0', ParseError::kInvalidEscape, v));
  }
}

TEST(ParserTest, ParserRejectsTrailingBackslash) {
  for (Version v : kEscapingVersions) {
    SCOPED_TRACE(version_name(v));
    EXPECT_TRUE(FailsWith("SEND\nk:abc\\\n\n"s + '\0', ParseError::kInvalidEscape, v));
    // The CR of a CRLF line end is not the octet after the backslash.
    EXPECT_TRUE(FailsWith("SEND\r\nk:abc\\\r\n\r\n"s + '\0', ParseError::kInvalidEscape, v));
    EXPECT_TRUE(FailsWith("SEND\nk\\:v\n\n"s + '\0', ParseError::kInvalidEscape, v));
    EXPECT_TRUE(FailsWith("SEND\nk:\\\\\\\n\n"s + '\0', ParseError::kInvalidEscape, v));
  }
}

TEST(ParserTest, ParserTreatsBackslashesLiterallyIn10) {
  std::string bytes = "MESSAGE\na\\t:x\\\nb\\c:\\r\\n\\q\nc:\\\n\n"s + '\0';
  Parser p(FrameLimits{});
  ASSERT_EQ(p.version(), Version::k1_0);  // the default
  ParseResult r = p.parse(bytes);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  const Frame& f = p.frame();
  EXPECT_FALSE(f.escaped());
  EXPECT_EQ(f.find("a\\t"), "x\\");
  EXPECT_EQ(f.find("b\\c"), "\\r\\n\\q");
  EXPECT_EQ(f.find("b:"), std::nullopt);
  EXPECT_EQ(f.find("c"), "\\");
}

TEST(ParserTest, ParserNeverEscapesConnectOrConnectedFrames) {
  for (Version v : {Version::k1_0, Version::k1_1, Version::k1_2}) {
    for (Command c : {Command::kConnect, Command::kStomp, Command::kConnected}) {
      SCOPED_TRACE(std::string(command_name(c)) + " " + std::string(version_name(v)));
      std::string bytes =
          frame(command_name(c), {{"login", "a\\tb"}, {"passcode", "x\\"}, {"h\\c", "v\\r"}});
      Parser p(FrameLimits{});
      p.set_version(v);
      ParseResult r = p.parse(bytes);
      ASSERT_EQ(r.status, Status::kFrame) << describe(r);
      EXPECT_FALSE(p.frame().escaped());
      EXPECT_EQ(p.frame().find("login"), "a\\tb");
      EXPECT_EQ(p.frame().find("passcode"), "x\\");
      EXPECT_EQ(p.frame().find("h\\c"), "v\\r");
      EXPECT_EQ(p.frame().find("h:"), std::nullopt);
    }
  }
}

TEST(ParserTest, ParserEscapesOtherCommandsOnlyFrom11) {
  for (Command c : kAllCommands) {
    if (!command_escapes_headers(c)) continue;
    for (Version v : {Version::k1_0, Version::k1_1, Version::k1_2}) {
      Parser p(FrameLimits{});
      p.set_version(v);
      const std::string bytes = frame(command_name(c), {{"k", "v"}});
      ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
      EXPECT_EQ(p.frame().escaped(), v != Version::k1_0)
          << command_name(c) << " " << version_name(v);
    }
  }
  EXPECT_FALSE(command_escapes_headers(Command::kConnect));
  EXPECT_FALSE(command_escapes_headers(Command::kStomp));
  EXPECT_FALSE(command_escapes_headers(Command::kConnected));
}

// ---- Escaping helpers --------------------------------------------------------------------------

TEST(EscapingTest, HeaderEscapesValidAcceptsOnlyDefinedEscapes) {
  for (Version v : kEscapingVersions) {
    EXPECT_TRUE(header_escapes_valid("", v));
    EXPECT_TRUE(header_escapes_valid("plain:text", v));
    EXPECT_TRUE(header_escapes_valid("\\n\\c\\\\", v));
    EXPECT_TRUE(header_escapes_valid("a\\\\\\nb", v));
    EXPECT_FALSE(header_escapes_valid("\\", v));
    EXPECT_FALSE(header_escapes_valid("a\\", v));
    EXPECT_FALSE(header_escapes_valid("\\\\\\", v));
    EXPECT_FALSE(header_escapes_valid("\\t", v));
    EXPECT_FALSE(header_escapes_valid("\\R", v));
  }
  EXPECT_FALSE(header_escapes_valid("\\r", Version::k1_1));
  EXPECT_TRUE(header_escapes_valid("\\r", Version::k1_2));
}

TEST(EscapingTest, UnescapeHeaderDecodesEveryEscape) {
  std::array<char, 32> out{};
  std::string_view raw = "a\\nb\\cc\\\\d\\re";
  std::optional<size_t> n = unescape_header(raw, out);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(std::string_view(out.data(), *n), "a\nb:c\\d\re");
  n = unescape_header("plain", out);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(std::string_view(out.data(), *n), "plain");
  n = unescape_header("", out);
  EXPECT_EQ(n, 0u);
}

TEST(EscapingTest, UnescapeHeaderFailsWhenOutputTooSmall) {
  std::array<char, 4> out{};
  EXPECT_EQ(unescape_header("a\\nbc", out), 4u);  // decodes to exactly 4 octets
  EXPECT_EQ(unescape_header("a\\nbcd", out), std::nullopt);
  EXPECT_EQ(unescape_header("x", std::span<char>()), std::nullopt);
}

TEST(EscapingTest, HeaderEqualsComparesDecodedOctetsWhenEscaped) {
  EXPECT_TRUE(header_equals("a\\cb", true, "a:b"));
  EXPECT_FALSE(header_equals("a\\cb", false, "a:b"));
  EXPECT_TRUE(header_equals("a\\cb", false, "a\\cb"));
  EXPECT_FALSE(header_equals("a\\cb", true, "a\\cb"));
  EXPECT_TRUE(header_equals("\\n\\\\\\r", true, "\n\\\r"));
  EXPECT_TRUE(header_equals("plain", true, "plain"));
  EXPECT_FALSE(header_equals("plain", true, "plai"));
  EXPECT_FALSE(header_equals("plai", true, "plain"));
  EXPECT_FALSE(header_equals("a\\c", true, "a:b"));
  EXPECT_FALSE(header_equals("a\\cb", true, "a:"));
  EXPECT_FALSE(header_equals("a\\", true, "a\\"));
  EXPECT_FALSE(header_equals("a\\t", true, "a\t"));
  EXPECT_TRUE(header_equals("", true, ""));
}

TEST(EscapingTest, HeaderNeedsUnescapeOnlyWithBackslash) {
  EXPECT_FALSE(header_needs_unescape("plain:value\r\n"));
  EXPECT_FALSE(header_needs_unescape(""));
  EXPECT_TRUE(header_needs_unescape("a\\cb"));
  EXPECT_TRUE(header_needs_unescape("\\"));
  // A default view has a null data(); the sanitizer build checks it is never dereferenced.
  EXPECT_FALSE(header_needs_unescape(std::string_view{}));
  EXPECT_TRUE(header_escapes_valid(std::string_view{}, Version::k1_2));
  EXPECT_TRUE(header_equals(std::string_view{}, true, ""));
}

// ---- Bodies ------------------------------------------------------------------------------------

TEST(ParserTest, ParserReadsContentLengthBodyWithNuls) {
  std::string body = "a\0b\0\0c\n\r"s;
  std::string bytes = frame("SEND", {{"content-length", std::to_string(body.size())}}, body);
  const std::string stream = bytes + "NEXT";
  Parser p(FrameLimits{});
  ParseResult r = p.parse(stream);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(r.consumed, bytes.size());
  EXPECT_EQ(p.frame().body(), body);
  EXPECT_EQ(p.frame().body().size(), 8u);
  EXPECT_TRUE(ParsesWhole(bytes));
}

TEST(ParserTest, ParserReadsBodyUpToFirstNulWithoutContentLength) {
  std::string bytes = "SEND\n\nhello\nworld\0next\0"s;
  Parser p(FrameLimits{});
  ParseResult r = p.parse(bytes);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(r.consumed, 18u);
  EXPECT_EQ(p.frame().body(), "hello\nworld");
  EXPECT_EQ(p.frame().bytes(), "SEND\n\nhello\nworld\0"s);
}

TEST(ParserTest, ParserAcceptsEmptyBodyOnEveryBodyCommand) {
  for (Command c : kBodyCommands) {
    for (std::string_view len : {"", "0"}) {
      std::string bytes = len.empty() ? frame(command_name(c), {})
                                      : frame(command_name(c), {{"content-length", len}});
      Parser p(FrameLimits{});
      ASSERT_EQ(p.parse(bytes).status, Status::kFrame) << bytes;
      EXPECT_TRUE(p.frame().body().empty());
    }
  }
}

TEST(ParserTest, ParserAcceptsBodyOnSendMessageAndError) {
  for (Command c : kBodyCommands) {
    EXPECT_TRUE(ParsesWhole(frame(command_name(c), {}, "payload"))) << command_name(c);
    EXPECT_TRUE(ParsesWhole(frame(command_name(c), {{"content-length", "3"}}, "a\0b"s)))
        << command_name(c);
  }
}

TEST(ParserTest, ParserRejectsContentLengthBodyNotFollowedByNul) {
  EXPECT_TRUE(FailsWith("SEND\ncontent-length:2\n\nabc\0"s, ParseError::kMissingNul));
  EXPECT_TRUE(FailsWith("SEND\ncontent-length:0\n\nx\0"s, ParseError::kMissingNul));
  EXPECT_TRUE(FailsWith("SUBSCRIBE\ncontent-length:0\n\nx"s, ParseError::kMissingNul));
  // Waits for the octet after the body before deciding.
  EXPECT_EQ(parse_once("SEND\ncontent-length:2\n\nab"s).status, Status::kNeedMore);
}

TEST(ParserTest, ParserRejectsBadContentLength) {
  for (std::string_view value : {"", "-1", "1a", " 5", "5 ", "+5", "0x5", "12345678901", "1.0"}) {
    std::string bytes = "SEND\ncontent-length:" + std::string(value) + "\n\nabc" + '\0';
    EXPECT_TRUE(FailsWith(bytes, ParseError::kBadContentLength)) << "'" << value << "'";
  }
  EXPECT_TRUE(FailsWith("SEND\r\ncontent-length:1a\r\n\r\nabc\0"s, ParseError::kBadContentLength));
}

TEST(ParserTest, ParserAcceptsTenDigitContentLength) {
  Parser p(FrameLimits{});
  const std::string bytes = "SEND\ncontent-length:0000000003\n\na\0c\0"s;
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  EXPECT_EQ(p.frame().body(), "a\0c"s);
  // Ten digits that exceed the body limit are a size error, not a syntax error.
  EXPECT_TRUE(FailsWith("SEND\ncontent-length:9999999999\n\n"s, ParseError::kBodyTooLarge));
}

TEST(ParserTest, ParserUsesFirstContentLengthHeader) {
  std::string bytes = "SEND\ncontent-length:3\ncontent-length:junk\n\na\0b\0"s;
  Parser p(FrameLimits{});
  ParseResult r = p.parse(bytes);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(r.consumed, bytes.size());
  EXPECT_EQ(p.frame().body(), "a\0b"s);
  EXPECT_EQ(p.frame().find("content-length"), "3");
}

TEST(ParserTest, ParserRejectsBodyOnFrameThatMustNotHaveOne) {
  for (Command c : kBodylessCommands) {
    SCOPED_TRACE(command_name(c));
    std::string name(command_name(c));
    EXPECT_TRUE(FailsWith(frame(name, {{"id", "1"}}, "abc"), ParseError::kBodyNotAllowed));
    EXPECT_TRUE(FailsWith(frame(name, {{"id", "1"}, {"content-length", "3"}}, "abc"),
                          ParseError::kBodyNotAllowed));
    // The content-length header alone is enough to know.
    ParseResult r = parse_once(name + "\ncontent-length:3\n\n");
    EXPECT_EQ(r.status, Status::kError);
    EXPECT_EQ(r.error, ParseError::kBodyNotAllowed);
  }
}

TEST(ParserTest, ParserAcceptsZeroContentLengthOnFrameWithoutBody) {
  for (Command c : kBodylessCommands) {
    std::string bytes = frame(command_name(c), {{"id", "1"}, {"content-length", "0"}});
    EXPECT_TRUE(ParsesWhole(bytes)) << command_name(c);
  }
}

// ---- Limits ------------------------------------------------------------------------------------

TEST(ParserTest, FrameLimitsValidChecksBounds) {
  EXPECT_TRUE(FrameLimits{}.valid());
  EXPECT_TRUE(make_limits(64, 1, 16, 0).valid());
  EXPECT_TRUE(make_limits(64, 1, 64, 64).valid());
  EXPECT_FALSE(make_limits(63, 1, 16, 0).valid());
  EXPECT_FALSE(make_limits(64, 0, 16, 0).valid());
  EXPECT_FALSE(make_limits(64, 1, 15, 0).valid());
  EXPECT_FALSE(make_limits(64, 1, 65, 0).valid());
  EXPECT_FALSE(make_limits(64, 1, 16, 65).valid());
  EXPECT_FALSE(make_limits(FrameLimits::kFrameBytesCeiling + 1, 1, 16, 0).valid());
  EXPECT_FALSE(make_limits(64, FrameLimits::kHeaderCountCeiling + 1, 16, 0).valid());
}

// A SEND frame of exactly `total` octets whose body is NUL-terminated (no content-length).
std::string send_of_size(size_t total) {
  const size_t overhead = std::string_view("SEND\n\n").size() + 1;
  return "SEND\n\n" + std::string(total - overhead, 'b') + '\0';
}

// A SEND frame of exactly `total` octets with a two-digit content-length.
std::string send_with_length_of_size(size_t total) {
  const size_t overhead = std::string_view("SEND\ncontent-length:NN\n\n").size() + 1;
  const size_t body = total - overhead;
  return "SEND\ncontent-length:" + std::to_string(body) + "\n\n" + std::string(body, '\0') + '\0';
}

// A SUBSCRIBE frame of exactly `total` octets, all of them in the headers.
std::string subscribe_of_size(size_t total) {
  const size_t overhead = std::string_view("SUBSCRIBE\np:\n\n").size() + 1;
  return "SUBSCRIBE\np:" + std::string(total - overhead, 'v') + "\n\n" + '\0';
}

TEST(ParserTest, ParserAcceptsFrameAtSizeLimit) {
  const FrameLimits limits = make_limits(64, 8, 64, 64);
  ASSERT_TRUE(limits.valid());
  ASSERT_EQ(send_of_size(64).size(), 64u);
  ASSERT_EQ(send_with_length_of_size(64).size(), 64u);
  ASSERT_EQ(subscribe_of_size(64).size(), 64u);
  EXPECT_TRUE(ParsesWhole(send_of_size(64), Version::k1_0, limits));
  EXPECT_TRUE(ParsesWhole(send_with_length_of_size(64), Version::k1_0, limits));
  EXPECT_TRUE(ParsesWhole(subscribe_of_size(64), Version::k1_0, limits));
}

TEST(ParserTest, ParserRejectsFrameOverSizeLimit) {
  const FrameLimits limits = make_limits(64, 8, 64, 64);
  EXPECT_TRUE(FailsWith(send_of_size(65), ParseError::kFrameTooLarge, Version::k1_0, limits));
  EXPECT_TRUE(
      FailsWith(send_with_length_of_size(65), ParseError::kFrameTooLarge, Version::k1_0, limits));
  EXPECT_TRUE(FailsWith(subscribe_of_size(65), ParseError::kFrameTooLarge, Version::k1_0, limits));
  // Known from the headers when content-length is given; without it, once the limit is passed
  // with no NUL in sight.
  std::string headers_only = send_with_length_of_size(65);
  headers_only.resize(headers_only.find("\n\n") + 2);
  EXPECT_EQ(parse_once(headers_only, Version::k1_0, limits).error, ParseError::kFrameTooLarge);
  std::string no_nul = send_of_size(65);
  no_nul.resize(64);
  EXPECT_EQ(parse_once(no_nul, Version::k1_0, limits).error, ParseError::kFrameTooLarge);
  no_nul.resize(63);
  EXPECT_EQ(parse_once(no_nul, Version::k1_0, limits).status, Status::kNeedMore);
}

TEST(ParserTest, ParserAcceptsHeaderCountAtLimit) {
  const FrameLimits limits = make_limits(4096, 3, 256, 1024);
  EXPECT_TRUE(
      ParsesWhole(frame("SEND", {{"a", "1"}, {"b", "2"}, {"c", "3"}}), Version::k1_0, limits));
  EXPECT_TRUE(ParsesWhole(frame("SEND", {{"a", "1"}, {"b", "2"}, {"content-length", "3"}}, "x\0y"s),
                          Version::k1_0, limits));
  Parser p(limits);
  const std::string bytes = frame("SEND", {{"a", "1"}, {"b", "2"}, {"c", "3"}});
  ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
  EXPECT_EQ(p.frame().header_count(), 3u);
  EXPECT_EQ(p.frame().header(2).value, "3");
}

TEST(ParserTest, ParserRejectsHeaderCountOverLimit) {
  const FrameLimits limits = make_limits(4096, 3, 256, 1024);
  EXPECT_TRUE(FailsWith(frame("SEND", {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}}),
                        ParseError::kTooManyHeaders, Version::k1_0, limits));
  EXPECT_TRUE(FailsWith(
      frame("SEND", {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"content-length", "3"}}, "x\0y"s),
      ParseError::kTooManyHeaders, Version::k1_0, limits));
  EXPECT_TRUE(FailsWith(frame("SEND", {{"a", "1"}, {"a", "1"}, {"a", "1"}, {"a", "1"}}, {}, "\r\n"),
                        ParseError::kTooManyHeaders, Version::k1_2, limits));
}

// A SEND frame whose only header line ("k:vvv...") is `line` octets long.
std::string send_with_line(size_t line, std::string_view eol) {
  return "SEND" + std::string(eol) + "k:" + std::string(line - 2, 'v') + std::string(eol) +
         std::string(eol) + '\0';
}

TEST(ParserTest, ParserAcceptsHeaderLineAtLimit) {
  const FrameLimits limits = make_limits(4096, 8, 16, 1024);
  for (std::string_view eol : {"\n", "\r\n"}) {
    EXPECT_TRUE(ParsesWhole(send_with_line(16, eol), Version::k1_0, limits));
    const std::string bytes = send_with_line(16, eol);
    Parser p(limits);
    ASSERT_EQ(p.parse(bytes).status, Status::kFrame);
    EXPECT_EQ(p.frame().header(0).value.size(), 14u);
  }
  // The command line does not count as a header line.
  EXPECT_TRUE(ParsesWhole("UNSUBSCRIBE\r\n\r\n"s + '\0', Version::k1_0, make_limits(64, 1, 16, 0)));
}

TEST(ParserTest, ParserRejectsHeaderLineOverLimit) {
  const FrameLimits limits = make_limits(4096, 8, 16, 1024);
  for (std::string_view eol : {"\n", "\r\n"}) {
    EXPECT_TRUE(
        FailsWith(send_with_line(17, eol), ParseError::kHeaderLineTooLong, Version::k1_0, limits));
  }
  // Known once the line cannot end in time, without waiting for its LF.
  EXPECT_EQ(parse_once("SEND\nk:" + std::string(16, 'v'), Version::k1_0, limits).error,
            ParseError::kHeaderLineTooLong);
  EXPECT_EQ(parse_once("SEND\nk:" + std::string(14, 'v') + "\r", Version::k1_0, limits).status,
            Status::kNeedMore);
}

TEST(ParserTest, ParserAcceptsBodyAtLimit) {
  const FrameLimits limits = make_limits(4096, 8, 256, 32);
  EXPECT_TRUE(ParsesWhole(frame("SEND", {}, std::string(32, 'b')), Version::k1_0, limits));
  EXPECT_TRUE(ParsesWhole(frame("SEND", {{"content-length", "32"}}, std::string(32, '\0')),
                          Version::k1_0, limits));
  const FrameLimits no_body = make_limits(64, 8, 16, 0);
  EXPECT_TRUE(ParsesWhole(frame("SEND", {}), Version::k1_0, no_body));
  EXPECT_TRUE(ParsesWhole(frame("SEND", {{"content-length", "0"}}), Version::k1_0, no_body));
}

TEST(ParserTest, ParserRejectsBodyOverLimit) {
  const FrameLimits limits = make_limits(4096, 8, 256, 32);
  EXPECT_TRUE(FailsWith(frame("SEND", {}, std::string(33, 'b')), ParseError::kBodyTooLarge,
                        Version::k1_0, limits));
  EXPECT_TRUE(FailsWith(frame("SEND", {{"content-length", "33"}}, std::string(33, '\0')),
                        ParseError::kBodyTooLarge, Version::k1_0, limits));
  // Known from content-length before the body arrives; without it, at the 33rd body octet.
  EXPECT_EQ(parse_once("SEND\ncontent-length:33\n\n", Version::k1_0, limits).error,
            ParseError::kBodyTooLarge);
  EXPECT_EQ(parse_once("SEND\n\n" + std::string(33, 'b'), Version::k1_0, limits).error,
            ParseError::kBodyTooLarge);
  EXPECT_EQ(parse_once("SEND\n\n" + std::string(32, 'b'), Version::k1_0, limits).status,
            Status::kNeedMore);
  const FrameLimits no_body = make_limits(64, 8, 16, 0);
  EXPECT_TRUE(FailsWith(frame("SEND", {}, "x"), ParseError::kBodyTooLarge, Version::k1_0, no_body));
  EXPECT_TRUE(FailsWith(frame("SEND", {{"content-length", "1"}}, "x"), ParseError::kBodyTooLarge,
                        Version::k1_0, no_body));
}

// ---- Heart-beats -------------------------------------------------------------------------------

TEST(ParserTest, ParserReportsLfHeartbeat) {
  Parser p(FrameLimits{});
  ParseResult r = p.parse("\nSEND");
  EXPECT_EQ(r.status, Status::kHeartbeat);
  EXPECT_EQ(r.consumed, 1u);
  EXPECT_FALSE(p.frame_in_progress());
}

TEST(ParserTest, ParserReportsCrlfHeartbeat) {
  Parser p(FrameLimits{});
  ParseResult r = p.parse("\r\n\n");
  EXPECT_EQ(r.status, Status::kHeartbeat);
  EXPECT_EQ(r.consumed, 2u);
  EXPECT_FALSE(p.frame_in_progress());
}

TEST(ParserTest, ParserWaitsAfterLoneCr) {
  Parser p(FrameLimits{});
  ParseResult r = p.parse("\r");
  EXPECT_EQ(r.status, Status::kNeedMore);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_FALSE(p.frame_in_progress());
  r = p.parse("\r\n");
  EXPECT_EQ(r.status, Status::kHeartbeat);
  EXPECT_EQ(r.consumed, 2u);
}

TEST(ParserTest, ParserRejectsCrNotFollowedByLf) {
  EXPECT_TRUE(FailsWith("\rSEND\n\n"s + '\0', ParseError::kUnknownCommand));
  EXPECT_TRUE(FailsWith("\r\r\n", ParseError::kUnknownCommand));
}

TEST(ParserTest, ParserReportsHeartbeatsBetweenFrames) {
  const std::string send = frame("SEND", {}, "a");
  const std::string ack = frame("ACK", {{"id", "1"}});
  std::string stream = "\n" + send + "\r\n\n" + ack + "\n";
  Parser p(FrameLimits{});
  std::string_view rest = stream;
  std::vector<std::string> events;
  for (;;) {
    ParseResult r = p.parse(rest);
    if (r.status == Status::kNeedMore || r.status == Status::kError) break;
    events.push_back(
        std::string(status_name(r.status)) + ":" + std::to_string(r.consumed) +
        (r.status == Status::kFrame ? ":" + std::string(command_name(p.frame().command())) : ""));
    rest.remove_prefix(r.consumed);
  }
  EXPECT_TRUE(rest.empty());
  ASSERT_EQ(send.size(), 8u);
  ASSERT_EQ(ack.size(), 11u);
  EXPECT_EQ(events, (std::vector<std::string>{"kHeartbeat:1", "kFrame:8:SEND", "kHeartbeat:2",
                                              "kHeartbeat:1", "kFrame:11:ACK", "kHeartbeat:1"}));
}

TEST(ParserTest, ParserNeedsMoreOnEmptyBuffer) {
  Parser p(FrameLimits{});
  ParseResult r = p.parse({});
  EXPECT_EQ(r.status, Status::kNeedMore);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_FALSE(p.frame_in_progress());
}

// ---- Incremental parsing -----------------------------------------------------------------------

TEST(ParserTest, ParserNeedsMoreUntilFrameIsComplete) {
  const std::vector<std::string> frames = {
      frame("SEND", {{"destination", "/q"}, {"receipt", "1"}}, "hello"),
      frame("SEND", {{"destination", "/q"}}, "hello", "\r\n"),
      frame("MESSAGE", {{"content-length", "4"}, {"a", "b"}}, "\0\n\r\0"s),
      frame("SUBSCRIBE", {{"id", "0"}, {"destination", "/q"}}),
      frame("UNSUBSCRIBE", {{"content-length", "0"}}, {}, "\r\n"),
  };
  for (const std::string& bytes : frames) {
    SCOPED_TRACE(bytes);
    Parser p(FrameLimits{});
    p.set_version(Version::k1_2);
    for (size_t n = 1; n < bytes.size(); ++n) {
      ParseResult r = p.parse(std::string_view(bytes).substr(0, n));
      ASSERT_EQ(r.status, Status::kNeedMore) << "prefix " << n << ": " << describe(r);
      EXPECT_EQ(r.consumed, 0u);
      EXPECT_TRUE(p.frame_in_progress()) << "prefix " << n;
    }
    ParseResult r = p.parse(bytes);
    ASSERT_EQ(r.status, Status::kFrame) << describe(r);
    EXPECT_EQ(r.consumed, bytes.size());
    EXPECT_EQ(p.frame().bytes(), bytes);
    EXPECT_FALSE(p.frame_in_progress());
  }
}

TEST(ParserTest, ParserResumesAfterCallerMovesBuffer) {
  Parser p(FrameLimits{});
  std::string first = "SEND\ndestina";
  ASSERT_EQ(p.parse(first).status, Status::kNeedMore);
  std::string second = first + "tion:/queue/a\n\nbo";
  ASSERT_EQ(p.parse(second).status, Status::kNeedMore);
  first.clear();
  std::string third = second + "dy" + '\0';
  second.assign(second.size(), 'X');  // the old bytes must no longer be looked at
  ParseResult r = p.parse(third);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(r.consumed, third.size());
  EXPECT_EQ(p.frame().find("destination"), "/queue/a");
  EXPECT_EQ(p.frame().body(), "body");
}

TEST(ParserTest, ParserParsesConsecutiveFramesAfterDroppingConsumed) {
  std::string a = frame("SEND", {{"n", "1"}}, "one");
  std::string b = frame("SEND", {{"n", "2"}, {"content-length", "3"}}, "t\0o"s);
  std::string c = frame("DISCONNECT", {{"receipt", "r"}});
  std::string buf = a + b + c;
  Parser p(FrameLimits{});
  for (const std::string* expected : {&a, &b, &c}) {
    ParseResult r = p.parse(buf);
    ASSERT_EQ(r.status, Status::kFrame) << describe(r);
    EXPECT_EQ(r.consumed, expected->size());
    EXPECT_EQ(p.frame().bytes(), *expected);
    buf.erase(0, r.consumed);
  }
  EXPECT_TRUE(buf.empty());
  EXPECT_EQ(p.parse(buf).status, Status::kNeedMore);
}

TEST(ParserTest, ParserStaysInErrorUntilReset) {
  Parser p(FrameLimits{});
  ParseResult r = p.parse("BOGUS\n\n"s + '\0');
  ASSERT_EQ(r.status, Status::kError);
  ASSERT_EQ(r.error, ParseError::kUnknownCommand);
  std::string good = frame("SEND", {}, "x");
  for (std::string_view next :
       {std::string_view(good), std::string_view("\n"), std::string_view()}) {
    r = p.parse(next);
    EXPECT_EQ(r.status, Status::kError);
    EXPECT_EQ(r.error, ParseError::kUnknownCommand);
    EXPECT_EQ(r.consumed, 0u);
  }
  p.reset();
  r = p.parse(good);
  EXPECT_EQ(r.status, Status::kFrame);
  EXPECT_EQ(r.consumed, good.size());
  EXPECT_EQ(p.frame().body(), "x");
}

TEST(ParserTest, ParserResetDiscardsPartialFrame) {
  Parser p(FrameLimits{});
  ASSERT_EQ(p.parse("SEND\ncontent-length:50\n\nabc").status, Status::kNeedMore);
  EXPECT_TRUE(p.frame_in_progress());
  p.reset();
  EXPECT_FALSE(p.frame_in_progress());
  std::string ack = frame("ACK", {{"id", "7"}});
  ParseResult r = p.parse(ack);
  ASSERT_EQ(r.status, Status::kFrame) << describe(r);
  EXPECT_EQ(p.frame().command(), Command::kAck);
  EXPECT_EQ(p.frame().find("id"), "7");
}

TEST(ParserTest, ParserReportsFrameInProgressOnlyInsideFrame) {
  Parser p(FrameLimits{});
  EXPECT_FALSE(p.frame_in_progress());
  ASSERT_EQ(p.parse("\r").status, Status::kNeedMore);
  EXPECT_FALSE(p.frame_in_progress());  // a heart-beat half, not a frame
  ASSERT_EQ(p.parse("\r\n").status, Status::kHeartbeat);
  EXPECT_FALSE(p.frame_in_progress());
  ASSERT_EQ(p.parse("S").status, Status::kNeedMore);
  EXPECT_TRUE(p.frame_in_progress());
  ASSERT_EQ(p.parse("SEND\n\nbody").status, Status::kNeedMore);
  EXPECT_TRUE(p.frame_in_progress());
  ASSERT_EQ(p.parse("SEND\n\nbody\0"s).status, Status::kFrame);
  EXPECT_FALSE(p.frame_in_progress());
}

// ---- Error messages ----------------------------------------------------------------------------

TEST(ParserTest, ParseErrorMessageDescribesEveryError) {
  const std::array<ParseError, 12> errors = {
      ParseError::kNone,
      ParseError::kUnknownCommand,
      ParseError::kFrameTooLarge,
      ParseError::kTooManyHeaders,
      ParseError::kHeaderLineTooLong,
      ParseError::kBodyTooLarge,
      ParseError::kMalformedHeader,
      ParseError::kInvalidEscape,
      ParseError::kBadContentLength,
      ParseError::kMissingNul,
      ParseError::kBodyNotAllowed,
      ParseError::kNulInHeaders,
  };
  std::set<std::string_view> seen;
  for (ParseError e : errors) {
    std::string_view m = parse_error_message(e);
    EXPECT_FALSE(m.empty()) << int(e);
    // Fit for a header value in every version: nothing that would end the line.
    EXPECT_EQ(m.find_first_of(std::string_view("\r\n\0", 3)), std::string_view::npos) << m;
    EXPECT_TRUE(seen.insert(m).second) << "duplicate message: " << m;
  }
}

// The frame-head fast path takes frames that lie in whole 64-byte blocks of the buffer; the
// padding (heart-beats after the frame) puts short frames there too. Its header table is filled
// on first lookup; what it gives must match the byte-by-byte path exactly.
constexpr std::string_view kBlockPadding =
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n";

struct FrameView {
  ParseResult result;
  Command command = Command::kSend;
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::optional<std::string>> found;  // find() of each name in `names`
  std::string body;
};

FrameView view_of(Parser& p, ParseResult r, std::span<const std::string_view> names) {
  FrameView v;
  v.result = r;
  if (r.status != Status::kFrame) return v;
  const Frame& f = p.frame();
  v.command = f.command();
  // find() first: the lookup that fills the table must see the same headers as header(i).
  for (std::string_view n : names) {
    std::optional<std::string_view> got = f.find(n);
    v.found.push_back(got ? std::optional<std::string>(std::string(*got)) : std::nullopt);
  }
  for (size_t i = 0; i < f.header_count(); ++i)
    v.headers.emplace_back(std::string(f.header(i).name), std::string(f.header(i).value));
  v.body = std::string(f.body());
  return v;
}

::testing::AssertionResult FastPathMatchesBytewise(std::string_view frame_bytes,
                                                   std::span<const std::string_view> names,
                                                   const FrameLimits& limits = FrameLimits{}) {
  const std::string padded = std::string(frame_bytes) + std::string(kBlockPadding);
  Parser whole(limits);
  whole.set_version(Version::k1_2);
  const FrameView fast = view_of(whole, whole.parse(padded), names);
  Parser slow(limits);
  slow.set_version(Version::k1_2);
  ParseResult r;
  for (size_t n = 0; n <= frame_bytes.size(); ++n) {
    r = slow.parse(frame_bytes.substr(0, n));
    if (r.status != Status::kNeedMore) break;
  }
  const FrameView bytewise = view_of(slow, r, names);
  if (fast.result.status != bytewise.result.status || fast.result.error != bytewise.result.error ||
      fast.result.consumed != bytewise.result.consumed || fast.command != bytewise.command ||
      fast.headers != bytewise.headers || fast.found != bytewise.found ||
      fast.body != bytewise.body) {
    return ::testing::AssertionFailure()
           << "whole buffer gave " << describe(fast.result) << " with "
           << ::testing::PrintToString(fast.headers) << ", byte-by-byte "
           << describe(bytewise.result) << " with " << ::testing::PrintToString(bytewise.headers);
  }
  return ::testing::AssertionSuccess();
}

TEST(ParserTest, FastPathHeaderTableMatchesBytewiseParse) {
  const std::array<std::string_view, 5> names = {"destination", "content-length", "receipt",
                                                 "x-app-header-1", "missing"};
  std::vector<std::string> frames = {
      "SEND\ndestination:/queue/a\ncontent-length:3\nreceipt:r-1\n\nabc"s + '\0',
      "SEND\n\n"s + '\0',
      "SEND\ndestination:/queue/a:b::c\nempty:\nx-app-header-1:v\n\nbody"s + '\0',
      // Names as long as "content-length" that are not it, before and after it.
      "SEND\nx-app-header-1:1\ncontent-lengtX:9\ncontent-length:2\nx-app-header-2:2\n\nab"s + '\0',
      "SEND\ncontent-length:2\ncontent-length:junk\n\nab"s + '\0',
      "MESSAGE\nsubscription:0\nmessage-id:7\ndestination:/queue/a\n\nhello"s + '\0',
      "SUBSCRIBE\nid:0\ndestination:/queue/orders\nack:client-individual\n\n"s + '\0',
  };
  // A head that spans several blocks, with line ends on both sides of block boundaries.
  std::string many = "SEND\n";
  for (int i = 0; i < 40; ++i)
    many += "x-app-header-" + std::to_string(i) + ":" + std::string(size_t(i % 7), 'v') + ":\n";
  frames.push_back(many + "destination:/queue/many\n\n" + '\0');
  // content-length of every digit count, with and without leading zeros.
  for (std::string value : {"0", "7", "12", "123", "0004", "00005", "000006", "0000007", "00000008",
                            "000000009", "0000000010"}) {
    const size_t n = std::stoul(value);
    frames.push_back("SEND\ndestination:/queue/a\ncontent-length:" + value + "\n\n" +
                     std::string(n, 'b') + '\0');
  }
  for (const std::string& f : frames)
    EXPECT_TRUE(FastPathMatchesBytewise(f, names)) << ::testing::PrintToString(f);
}

TEST(ParserTest, FastPathRejectsWhatBytewiseParseRejects) {
  const std::array<std::string_view, 1> names = {"destination"};
  std::vector<std::string> frames;
  for (std::string_view value :
       {"", "1a", "a1", "+1", " 1", "1 ", "-1", "12345678901", "1/", "1:", "\x80", "99999999"}) {
    frames.push_back("SEND\ndestination:/queue/a\ncontent-length:" + std::string(value) + "\n\nx" +
                     '\0');
  }
  frames.push_back("SEND\ndestination:/queue/a\nnocolon\n\n"s + '\0');
  frames.push_back("SEND\ndestination:/queue/a\n:value\n\n"s + '\0');
  frames.push_back("SEND\ndestination:/queue/a\nna\0me:v\n\n\0"s);
  frames.push_back("SEND\ndestination:/queue/a\nname:v\0alue\n\n\0"s);
  frames.push_back("SEND\ndestination:/queue/a\nname:va\rlue\n\n\0"s);
  frames.push_back("SEND\ndestination:/queue/a\nna\\qme:value\n\n\0"s);
  frames.push_back("SEND\ndestination:/queue/a\ncontent-length:1\n\nxy\0"s);
  frames.push_back("SUBSCRIBE\ndestination:/queue/a\ncontent-length:1\n\nx\0"s);
  for (const std::string& f : frames)
    EXPECT_TRUE(FastPathMatchesBytewise(f, names)) << ::testing::PrintToString(f);
}

// The fast path checks a head 64 bytes at a time: a defect, or the content-length line, must
// count wherever it falls in a block, including the first bytes of a later block (the ones the
// command line covers in the first block).
TEST(ParserTest, FastPathJudgesEveryOffsetOfMultiBlockHeads) {
  const std::array<std::string_view, 2> names = {"destination", "content-length"};
  const std::array<std::string, 7> defects = {"name:va\rlue\n"s,
                                              "name:v\0alue\n"s,
                                              "na\\qme:value\n"s,
                                              "nocolon\n"s,
                                              ":value\n"s,
                                              "content-length:1x\n"s,
                                              "content-length:12345678901\n"s};
  for (size_t pad = 0; pad < 200; ++pad) {
    const std::string lead = "SEND\ndestination:/queue/a\nx-pad:" + std::string(pad, 'p') + "\n";
    // The content-length line at this offset: the body holds a NUL before its end, so a
    // missed content-length gives a different frame.
    const std::string body = "ab\0cd"s;
    EXPECT_TRUE(
        FastPathMatchesBytewise(lead + "content-length:5\nreceipt:r\n\n" + body + '\0', names))
        << "pad " << pad;
    EXPECT_TRUE(
        FastPathMatchesBytewise(lead + "content-length:0000000005\n\n" + body + '\0', names))
        << "pad " << pad;
    for (const std::string& d : defects) {
      EXPECT_TRUE(FastPathMatchesBytewise(lead + d + "receipt:r\n\nx" + '\0', names))
          << "pad " << pad << " defect " << ::testing::PrintToString(d);
    }
  }
}

// The fast path looks for the NUL of a body without content-length first in the masks of the
// head's last block, then from the next block on: the NUL must be found wherever the head ends
// and the body's end falls, and a NUL past the body limit must be the same error.
TEST(ParserTest, FastPathFindsTheNulOfEveryBodyAtEveryOffset) {
  const std::array<std::string_view, 1> names = {"destination"};
  FrameLimits tight;
  tight.body_bytes_max = 40;
  for (size_t pad = 0; pad < 140; ++pad) {
    const std::string lead = "SEND\ndestination:/queue/a\nx-pad:" + std::string(pad, 'p') + "\n\n";
    for (size_t body : {0, 1, 2, 30, 39, 40, 41, 63, 64, 65, 127, 128, 129, 200}) {
      const std::string frame = lead + std::string(body, 'b') + '\0';
      EXPECT_TRUE(FastPathMatchesBytewise(frame, names)) << "pad " << pad << " body " << body;
      EXPECT_TRUE(FastPathMatchesBytewise(frame, names, tight))
          << "pad " << pad << " body " << body << " (body limit 40)";
    }
  }
}

TEST(ParserTest, HeadOfFastPathFrameAnswersLookupsWhileBodyArrives) {
  const std::string head = "SEND\ndestination:/queue/orders\ncontent-length:200\nreceipt:r\n\n";
  const std::string bytes = head + std::string(40, 'b');  // body incomplete, head in one block
  ASSERT_GE(bytes.size(), 64u);
  Parser p(FrameLimits{});
  ASSERT_EQ(p.parse(bytes).status, Status::kNeedMore);
  ASSERT_TRUE(p.in_body());
  const Frame& f = p.head(bytes);
  EXPECT_EQ(f.header_count(), 3u);
  EXPECT_EQ(f.find("destination"), "/queue/orders");
  EXPECT_EQ(f.find_index("receipt"), 2u);
  EXPECT_EQ(f.header(1).name, "content-length");
  EXPECT_EQ(f.header(1).value, "200");
  EXPECT_EQ(f.body(), "");
}

}  // namespace
}  // namespace sluice::session

#if defined(__SSE2__)
namespace sluice::session {
namespace {

// The frame-head fast path computes its masks with SSE2, AVX2 or AVX-512BW, whichever the CPU
// has: every variant the CPU supports must agree with a byte-by-byte reference.
TEST(HeadBlockTest, EveryVectorWidthGivesTheReferenceMasks) {
  std::mt19937_64 rng(20261130);
  const char alphabet[] = {'\n', '\0', ':', '\r', '\\', 'a', 'Z', '0', ' ', char(0x80), char(0xff)};
  size_t variants = 0;
  for (int round = 0; round < 20000; ++round) {
    char block[64];
    for (char& c : block)
      c = alphabet[rng() % sizeof alphabet];
    uint64_t term = 0, colon = 0, odd = 0, nul = 0;
    for (unsigned k = 0; k < 64; ++k) {
      const uint64_t bit = uint64_t{1} << k;
      if (block[k] == '\n' || block[k] == '\0') term |= bit;
      if (block[k] == ':') colon |= bit;
      if (block[k] == '\r' || block[k] == '\\') odd |= bit;
      if (block[k] == '\0') nul |= bit;
    }
    detail::HeadBlockMasks got[4];
    variants = detail::head_block_variants(block, got, 4);
    ASSERT_GE(variants, 1u);
    for (size_t v = 0; v < variants; ++v) {
      ASSERT_EQ(got[v].term, term) << "variant " << v << " round " << round;
      ASSERT_EQ(got[v].colon, colon) << "variant " << v << " round " << round;
      ASSERT_EQ(got[v].odd, odd) << "variant " << v << " round " << round;
      ASSERT_EQ(got[v].nul, nul) << "variant " << v << " round " << round;
    }
  }
  RecordProperty("variants", int(variants));
}

// The body's NUL scan (128 bytes a step, then overlapping 64-byte blocks up to the end) must
// find what memchr finds for every start, end and NUL position, including none.
TEST(HeadBlockTest, EveryVectorWidthFindsTheBodyNulAsMemchr) {
  std::mt19937_64 rng(20261201);
  std::vector<char> buf(700);
  size_t variants = 0;
  for (int round = 0; round < 20000; ++round) {
    for (char& c : buf)
      c = char('a' + rng() % 26);
    const size_t to = 64 + rng() % (buf.size() - 63);
    const size_t from = rng() % (to + 1);
    // None, one, or two NULs (the first counts), placed anywhere in the buffer: some before
    // `from` or at and past `to`, where they must be ignored.
    const int nuls = int(rng() % 3);
    for (int k = 0; k < nuls; ++k)
      buf[rng() % buf.size()] = '\0';
    const void* hit = std::memchr(buf.data() + from, '\0', to - from);
    const size_t want = hit ? size_t(static_cast<const char*>(hit) - buf.data()) : ~size_t{0};
    size_t got[4];
    variants = detail::find_nul_variants(buf.data(), from, to, got, 4);
    ASSERT_GE(variants, 1u);
    for (size_t v = 0; v < variants; ++v) {
      ASSERT_EQ(got[v], want) << "variant " << v << " from " << from << " to " << to;
    }
  }
  RecordProperty("variants", int(variants));
}

}  // namespace
}  // namespace sluice::session
#endif
