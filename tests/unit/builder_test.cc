// Unit tests of FrameWriter and build_*: their frames parse back to what they were given.
#include "dataplane/session/builder.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::session {

namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;
using Status = ParseResult::Status;
using HeaderList = std::vector<std::pair<std::string, std::string>>;

using testing::kAllVersions;

// A frame read back by the parser, with header names and values decoded.
struct Reparsed {
  ParseResult result;
  Command command = Command::kSend;
  bool escaped = false;
  HeaderList headers;  // decoded
  HeaderList raw_headers;
  std::string body;

  std::optional<std::string> find(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  }
};

std::string decode(std::string_view raw, bool escaped) {
  if (!escaped) return std::string(raw);
  std::string out(raw.size(), '\0');
  std::optional<size_t> n = unescape_header(raw, out);
  if (!n) return "<unescape failed>";
  out.resize(*n);
  return out;
}

Reparsed reparse(std::string_view bytes, Version v) {
  Parser p(FrameLimits{});
  p.set_version(v);
  Reparsed out;
  out.result = p.parse(bytes);
  if (out.result.status != Status::kFrame) return out;
  const Frame& f = p.frame();
  out.command = f.command();
  out.escaped = f.escaped();
  for (size_t i = 0; i < f.header_count(); ++i) {
    Header h = f.header(i);
    out.headers.emplace_back(decode(h.name, f.escaped()), decode(h.value, f.escaped()));
    out.raw_headers.emplace_back(std::string(h.name), std::string(h.value));
  }
  out.body = std::string(f.body());
  return out;
}

// The parser accepts `bytes` as exactly one frame.
::testing::AssertionResult IsOneFrame(std::string_view bytes, const Reparsed& r) {
  if (r.result.status != Status::kFrame) {
    return ::testing::AssertionFailure()
           << "parser status " << int(r.result.status) << " error "
           << parse_error_message(r.result.error) << " for " << ::testing::PrintToString(bytes);
  }
  if (r.result.consumed != bytes.size()) {
    return ::testing::AssertionFailure()
           << "parser consumed " << r.result.consumed << " of " << bytes.size();
  }
  return ::testing::AssertionSuccess();
}

// ---- build_connected ---------------------------------------------------------------------------

TEST(BuilderTest, BuildConnectedParsesBackForEveryVersion) {
  for (Version v : kAllVersions) {
    SCOPED_TRACE(version_name(v));
    std::array<char, 256> out{};
    std::optional<std::string_view> bytes = build_connected(out, v, "sluice/0.1");
    ASSERT_TRUE(bytes.has_value());
    EXPECT_EQ(bytes->data(), out.data());
    Reparsed r = reparse(*bytes, v);
    ASSERT_TRUE(IsOneFrame(*bytes, r));
    EXPECT_EQ(r.command, Command::kConnected);
    EXPECT_FALSE(r.escaped);
    EXPECT_EQ(r.headers, (HeaderList{{"version", std::string(version_name(v))},
                                     {"heart-beat", "0,0"},
                                     {"server", "sluice/0.1"}}));
    EXPECT_TRUE(r.body.empty());
  }
}

TEST(BuilderTest, BuildConnectedWritesColonAndBackslashRaw) {
  for (Version v : kAllVersions) {
    SCOPED_TRACE(version_name(v));
    std::array<char, 256> out{};
    std::optional<std::string_view> bytes = build_connected(out, v, "sluice:1\\x");
    ASSERT_TRUE(bytes.has_value());
    EXPECT_NE(bytes->find("\nserver:sluice:1\\x\n"), std::string_view::npos) << *bytes;
    Reparsed r = reparse(*bytes, v);
    ASSERT_TRUE(IsOneFrame(*bytes, r));
    EXPECT_EQ(r.find("server"), "sluice:1\\x");
  }
}

TEST(BuilderTest, BuildConnectedFailsOnLineBreakInServer) {
  for (Version v : kAllVersions) {
    std::array<char, 256> out{};
    EXPECT_EQ(build_connected(out, v, "a\nb"), std::nullopt) << version_name(v);
    EXPECT_EQ(build_connected(out, v, "a\rb"), std::nullopt) << version_name(v);
  }
}

// ---- build_receipt -----------------------------------------------------------------------------

TEST(BuilderTest, BuildReceiptParsesBackForEveryVersion) {
  for (Version v : kAllVersions) {
    std::array<char, 128> out{};
    std::optional<std::string_view> bytes = build_receipt(out, v, "r-17");
    ASSERT_TRUE(bytes.has_value());
    EXPECT_EQ(*bytes, "RECEIPT\nreceipt-id:r-17\n\n\0"s);
    Reparsed r = reparse(*bytes, v);
    ASSERT_TRUE(IsOneFrame(*bytes, r));
    EXPECT_EQ(r.command, Command::kReceipt);
    EXPECT_EQ(r.headers, (HeaderList{{"receipt-id", "r-17"}}));
  }
}

TEST(BuilderTest, BuildReceiptEscapesEveryOctetIn12) {
  std::array<char, 128> out{};
  const std::string id = "a:b\\c\nd\re";
  std::optional<std::string_view> bytes = build_receipt(out, Version::k1_2, id);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "RECEIPT\nreceipt-id:a\\cb\\\\c\\nd\\re\n\n\0"s);
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_TRUE(r.escaped);
  EXPECT_EQ(r.find("receipt-id"), id);
}

TEST(BuilderTest, BuildReceiptFailsOnOctetTheVersionCannotCarry) {
  std::array<char, 128> out{};
  EXPECT_EQ(build_receipt(out, Version::k1_1, "a\rb"), std::nullopt);
  EXPECT_EQ(build_receipt(out, Version::k1_0, "a\nb"), std::nullopt);
  EXPECT_EQ(build_receipt(out, Version::k1_0, "a\rb"), std::nullopt);
  EXPECT_TRUE(build_receipt(out, Version::k1_1, "a\nb").has_value());
  EXPECT_TRUE(build_receipt(out, Version::k1_0, "a:b").has_value());
}

TEST(BuilderTest, BuildReceiptRawEchoesEncodedValue) {
  std::array<char, 128> out{};
  std::optional<std::string_view> bytes = build_receipt_raw(out, Version::k1_2, "a\\cb\\\\");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "RECEIPT\nreceipt-id:a\\cb\\\\\n\n\0"s);
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.find("receipt-id"), "a:b\\");
  // In 1.0 the same octets are a literal value.
  bytes = build_receipt_raw(out, Version::k1_0, "a\\cb");
  ASSERT_TRUE(bytes.has_value());
  r = reparse(*bytes, Version::k1_0);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.find("receipt-id"), "a\\cb");
}

TEST(BuilderTest, BuildReceiptRawRejectsCrOrLf) {
  for (Version v : kAllVersions) {
    std::array<char, 128> out{};
    EXPECT_EQ(build_receipt_raw(out, v, "a\rb"), std::nullopt) << version_name(v);
    EXPECT_EQ(build_receipt_raw(out, v, "a\nb"), std::nullopt) << version_name(v);
    EXPECT_EQ(build_receipt_raw(out, v, "\n"), std::nullopt) << version_name(v);
  }
}

// ---- build_error -------------------------------------------------------------------------------

TEST(BuilderTest, LineRawCopiesAnEncodedLineAndRefusesWhatIsNotOne) {
  std::array<char, 256> buf;
  FrameWriter w(buf, Command::kSend, Version::k1_2);
  w.line_raw("destination:/queue/a").line_raw("x-odd:a\\cb\\\\c").line_raw("x-empty:");
  std::optional<std::string_view> f = w.finish("hi");
  ASSERT_TRUE(f);
  EXPECT_EQ(
      *f, "SEND\ndestination:/queue/a\nx-odd:a\\cb\\\\c\nx-empty:\ncontent-length:2\n\nhi"s + '\0');
  for (std::string_view bad : {"no-colon"sv, ":empty-name"sv, "x:bad\\tescape"sv, "x:cr\r"sv,
                               "x:lf\nmore"sv, "x:nul\0"sv}) {
    FrameWriter v(buf, Command::kSend, Version::k1_2);
    v.line_raw(bad);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_FALSE(v.finish());
  }
}

TEST(BuilderTest, BuildErrorParsesBackWithEveryHeader) {
  for (Version v : kAllVersions) {
    SCOPED_TRACE(version_name(v));
    std::array<char, 512> out{};
    ErrorFrame e;
    e.message = "malformed frame";
    e.detail = "line 1\nline 2";
    e.receipt_id = "77";
    e.version = "1.1,1.2";
    std::optional<std::string_view> bytes = build_error(out, v, e);
    ASSERT_TRUE(bytes.has_value());
    Reparsed r = reparse(*bytes, v);
    ASSERT_TRUE(IsOneFrame(*bytes, r));
    EXPECT_EQ(r.command, Command::kError);
    EXPECT_EQ(r.escaped, v != Version::k1_0);
    EXPECT_EQ(r.headers, (HeaderList{{"version", "1.1,1.2"},
                                     {"message", "malformed frame"},
                                     {"receipt-id", "77"},
                                     {"content-type", "text/plain"},
                                     {"content-length", "13"}}));
    EXPECT_EQ(r.body, "line 1\nline 2");
  }
}

TEST(BuilderTest, BuildErrorWithoutDetailHasNoBodyHeaders) {
  std::array<char, 256> out{};
  ErrorFrame e;
  e.message = "bye";
  std::optional<std::string_view> bytes = build_error(out, Version::k1_2, e);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "ERROR\nmessage:bye\n\n\0"s);
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.headers, (HeaderList{{"message", "bye"}}));
  EXPECT_TRUE(r.body.empty());
}

TEST(BuilderTest, BuildErrorEscapesMessageIn12) {
  std::array<char, 256> out{};
  ErrorFrame e;
  e.message = "bad header: a\\b\r\nc";
  e.receipt_id = "r\\c1";  // raw, as it came in: decodes to "r:1"
  std::optional<std::string_view> bytes = build_error(out, Version::k1_2, e);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_NE(bytes->find("message:bad header\\c a\\\\b\\r\\nc\n"), std::string_view::npos) << *bytes;
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.find("message"), e.message);
  EXPECT_EQ(r.find("receipt-id"), "r:1");
}

TEST(BuilderTest, BuildErrorBodyWithNulsRoundTripsThroughContentLength) {
  std::array<char, 256> out{};
  ErrorFrame e;
  e.message = "x";
  const std::string detail = "a\0b\0"s;
  e.detail = detail;
  std::optional<std::string_view> bytes = build_error(out, Version::k1_1, e);
  ASSERT_TRUE(bytes.has_value());
  Reparsed r = reparse(*bytes, Version::k1_1);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.body, detail);
  EXPECT_EQ(r.find("content-length"), "4");
}

TEST(BuilderTest, BuildErrorFailsOnLineBreakIn10Message) {
  std::array<char, 256> out{};
  ErrorFrame e;
  e.message = "two\nlines";
  EXPECT_EQ(build_error(out, Version::k1_0, e), std::nullopt);
  EXPECT_TRUE(build_error(out, Version::k1_1, e).has_value());
}

// ---- FrameWriter escaping ----------------------------------------------------------------------

TEST(BuilderTest, FrameWriterEscapesEveryOctetIn12) {
  for (Command c : {Command::kMessage, Command::kError, Command::kReceipt}) {
    SCOPED_TRACE(command_name(c));
    std::array<char, 256> out{};
    const std::string name = "n:a\\m\ne\r";
    const std::string value = "x:y\\z\r\nw";
    std::optional<std::string_view> bytes =
        FrameWriter(out, c, Version::k1_2).header(name, value).finish();
    ASSERT_TRUE(bytes.has_value());
    EXPECT_EQ(*bytes,
              std::string(command_name(c)) + "\nn\\ca\\\\m\\ne\\r:x\\cy\\\\z\\r\\nw\n\n" + '\0');
    Reparsed r = reparse(*bytes, Version::k1_2);
    ASSERT_TRUE(IsOneFrame(*bytes, r));
    EXPECT_TRUE(r.escaped);
    EXPECT_EQ(r.headers, (HeaderList{{name, value}}));
  }
}

TEST(BuilderTest, FrameWriterEscapesColonNewlineBackslashIn11) {
  std::array<char, 256> out{};
  const std::string name = "a:b\\c\nd";
  const std::string value = "::\\\\\n\n";
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kMessage, Version::k1_1).header(name, value).finish();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->find('\r'), std::string_view::npos);
  Reparsed r = reparse(*bytes, Version::k1_1);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.headers, (HeaderList{{name, value}}));
}

TEST(BuilderTest, FrameWriterFailsOnCrIn11) {
  std::array<char, 256> out{};
  FrameWriter value_cr(out, Command::kMessage, Version::k1_1);
  EXPECT_EQ(value_cr.header("k", "a\rb").finish(), std::nullopt);
  FrameWriter name_cr(out, Command::kError, Version::k1_1);
  EXPECT_EQ(name_cr.header("k\r", "v").finish(), std::nullopt);
  FrameWriter trailing_cr(out, Command::kMessage, Version::k1_1);
  EXPECT_EQ(trailing_cr.header("k", "v\r").finish(), std::nullopt);
}

TEST(BuilderTest, FrameWriterFailsOnLineBreakIn10) {
  for (std::string_view bad : {"a\nb", "a\rb", "\n", "v\r"}) {
    std::array<char, 256> out{};
    EXPECT_EQ(FrameWriter(out, Command::kMessage, Version::k1_0).header("k", bad).finish(),
              std::nullopt)
        << ::testing::PrintToString(bad);
    EXPECT_EQ(FrameWriter(out, Command::kMessage, Version::k1_0).header(bad, "v").finish(),
              std::nullopt)
        << ::testing::PrintToString(bad);
  }
}

TEST(BuilderTest, FrameWriterFailsOnColonInUnescapedName) {
  std::array<char, 256> out{};
  EXPECT_EQ(FrameWriter(out, Command::kMessage, Version::k1_0).header("a:b", "v").finish(),
            std::nullopt);
  EXPECT_EQ(FrameWriter(out, Command::kConnected, Version::k1_2).header("a:b", "v").finish(),
            std::nullopt);
}

TEST(BuilderTest, FrameWriterWritesColonAndBackslashLiterallyIn10) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kMessage, Version::k1_0).header("a\\t", "x:y\\z").finish();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "MESSAGE\na\\t:x:y\\z\n\n\0"s);
  Reparsed r = reparse(*bytes, Version::k1_0);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_FALSE(r.escaped);
  EXPECT_EQ(r.headers, (HeaderList{{"a\\t", "x:y\\z"}}));
}

TEST(BuilderTest, FrameWriterNeverEscapesConnected) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kConnected, Version::k1_2).header("session", "s:1\\2").finish();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "CONNECTED\nsession:s:1\\2\n\n\0"s);
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.find("session"), "s:1\\2");
}

// The builder must refuse what no version can carry: a NUL ends the frame, so the parser
// rejects the frame the writer produced.
TEST(BuilderTest, FrameWriterFailsOnNulInHeader) {
  for (Version v : kAllVersions) {
    SCOPED_TRACE(version_name(v));
    std::array<char, 256> out{};
    std::optional<std::string_view> bytes =
        FrameWriter(out, Command::kMessage, v).header("k", "a\0b"s).finish();
    if (bytes) {
      Reparsed r = reparse(*bytes, v);
      ADD_FAILURE() << "finish() wrote a frame the parser reads as status " << int(r.result.status)
                    << " (" << parse_error_message(r.result.error)
                    << "): " << ::testing::PrintToString(*bytes);
    }
    EXPECT_EQ(build_receipt(out, v, "r\0"s), std::nullopt);
  }
}

// ---- FrameWriter bodies, sizes, values ---------------------------------------------------------

TEST(BuilderTest, FrameWriterAddsContentLengthForBody) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kSend, Version::k1_2).header("destination", "/q").finish("hello");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "SEND\ndestination:/q\ncontent-length:5\n\nhello\0"s);
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.body, "hello");
}

TEST(BuilderTest, FrameWriterOmitsContentLengthForEmptyBody) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kMessage, Version::k1_1).header("a", "b").finish();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "MESSAGE\na:b\n\n\0"s);
  EXPECT_EQ(bytes->find("content-length"), std::string_view::npos);
}

// A default std::string_view has a null data(). Copying it must not pass that pointer to memcpy:
// undefined behaviour, which the sanitizer build (UBSan, halting on error) reports.
TEST(BuilderTest, FrameWriterAcceptsEmptyViewsWithNullData) {
  std::array<char, 64> out{};
  std::optional<std::string_view> bytes = FrameWriter(out, Command::kReceipt, Version::k1_2)
                                              .header("receipt-id", std::string_view{})
                                              .finish(std::string_view{});
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "RECEIPT\nreceipt-id:\n\n\0"s);
}

TEST(BuilderTest, FrameWriterBodyWithNulsRoundTrips) {
  std::array<char, 256> out{};
  const std::string body = "\0\0\n\r\0x"s;
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kMessage, Version::k1_0).finish(body);
  ASSERT_TRUE(bytes.has_value());
  Reparsed r = reparse(*bytes, Version::k1_0);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.body, body);
  EXPECT_EQ(r.headers, (HeaderList{{"content-length", "6"}}));
}

TEST(BuilderTest, FrameWriterWritesIntegerHeadersInDecimal) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes = FrameWriter(out, Command::kMessage, Version::k1_2)
                                              .header("zero", uint64_t{0})
                                              .header("n", uint64_t{42})
                                              .header("max", std::numeric_limits<uint64_t>::max())
                                              .finish();
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(*bytes, "MESSAGE\nzero:0\nn:42\nmax:18446744073709551615\n\n\0"s);
}

TEST(BuilderTest, FrameWriterFailsOnEmptyHeaderName) {
  std::array<char, 256> out{};
  FrameWriter w(out, Command::kMessage, Version::k1_2);
  EXPECT_TRUE(w.ok());
  w.header("", "v");
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.finish(), std::nullopt);
  EXPECT_EQ(FrameWriter(out, Command::kMessage, Version::k1_2).header_raw("", "v").finish(),
            std::nullopt);
}

TEST(BuilderTest, FrameWriterAcceptsEmptyHeaderValue) {
  std::array<char, 256> out{};
  std::optional<std::string_view> bytes =
      FrameWriter(out, Command::kMessage, Version::k1_2).header("k", "").finish();
  ASSERT_TRUE(bytes.has_value());
  Reparsed r = reparse(*bytes, Version::k1_2);
  ASSERT_TRUE(IsOneFrame(*bytes, r));
  EXPECT_EQ(r.headers, (HeaderList{{"k", ""}}));
}

TEST(BuilderTest, FrameWriterStaysFailedAfterFailure) {
  std::array<char, 256> out{};
  FrameWriter w(out, Command::kMessage, Version::k1_0);
  w.header("k", "a\nb");
  EXPECT_FALSE(w.ok());
  w.header("good", "value");
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.finish("body"), std::nullopt);
}

// Every frame fits in exactly its own size and fails in anything smaller.
TEST(BuilderTest, BuildersFailWhenOutputTooSmall) {
  ErrorFrame e;
  e.message = "oops: bad";
  e.detail = "some detail";
  e.receipt_id = "9";
  e.version = "1.2";
  using Build = std::optional<std::string_view> (*)(std::span<char>, const ErrorFrame&);
  const std::array<std::pair<const char*, Build>, 4> builders = {{
      {"connected",
       [](std::span<char> out, const ErrorFrame&) {
         return build_connected(out, Version::k1_2, "sluice");
       }},
      {"receipt", [](std::span<char> out,
                     const ErrorFrame&) { return build_receipt(out, Version::k1_2, "a:b"); }},
      {"error", [](std::span<char> out,
                   const ErrorFrame& err) { return build_error(out, Version::k1_2, err); }},
      {"writer",
       [](std::span<char> out, const ErrorFrame&) {
         return FrameWriter(out, Command::kMessage, Version::k1_2)
             .header("destination", "/q:1")
             .header("n", uint64_t{123})
             .finish("payload");
       }},
  }};
  for (const auto& [what, build] : builders) {
    SCOPED_TRACE(what);
    std::vector<char> big(1024);
    std::optional<std::string_view> full = build(big, e);
    ASSERT_TRUE(full.has_value());
    const std::string expected(*full);
    std::vector<char> exact(expected.size());
    std::optional<std::string_view> fits = build(exact, e);
    ASSERT_TRUE(fits.has_value());
    EXPECT_EQ(*fits, expected);
    for (size_t n = 0; n < expected.size(); ++n) {
      std::vector<char> small(n);
      EXPECT_EQ(build(small, e), std::nullopt) << "output of " << n << " octets";
    }
  }
}

// Random headers in every version and command: the writer either fails because the octets cannot
// be carried, or writes a frame the parser reads back to the same decoded headers and body.
TEST(BuilderTest, FrameWriterOutputParsesBackOrFailsForRandomHeaders) {
  std::mt19937_64 rng(20240611);
  const std::string alphabet = "ab:\\\r\nz-/ 9";
  auto random_text = [&](size_t min_len) {
    std::string s(min_len + rng() % 6, ' ');
    for (char& c : s)
      c = alphabet[rng() % alphabet.size()];
    return s;
  };
  constexpr std::array<Command, 15> kCommands = {
      Command::kConnect,   Command::kStomp,       Command::kConnected, Command::kSend,
      Command::kSubscribe, Command::kUnsubscribe, Command::kAck,       Command::kNack,
      Command::kBegin,     Command::kCommit,      Command::kAbort,     Command::kDisconnect,
      Command::kMessage,   Command::kReceipt,     Command::kError,
  };
  size_t written = 0;
  size_t refused = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    const Version v = kAllVersions[rng() % kAllVersions.size()];
    const Command c = kCommands[rng() % kCommands.size()];
    const bool escaped = v != Version::k1_0 && command_escapes_headers(c);
    HeaderList headers;
    bool representable = true;
    for (size_t i = rng() % 4; i > 0; --i) {
      std::string name = random_text(1);
      std::string value = random_text(0);
      if (name == "content-length") continue;
      for (const std::string* s : {&name, &value}) {
        if (escaped) {
          if (v == Version::k1_1 && s->find('\r') != std::string::npos) representable = false;
        } else if (s->find_first_of("\r\n") != std::string::npos) {
          representable = false;
        }
      }
      if (!escaped && name.find(':') != std::string::npos) representable = false;
      headers.emplace_back(std::move(name), std::move(value));
    }
    std::string body;
    if (command_allows_body(c) && rng() % 2) {
      body.resize(rng() % 8);
      for (char& b : body)
        b = char(rng() % 4);  // NUL and other control octets
    }
    std::array<char, 512> out{};
    FrameWriter w(out, c, v);
    for (const auto& [name, value] : headers)
      w.header(name, value);
    std::optional<std::string_view> bytes = w.finish(body);
    const std::string context = std::string(command_name(c)) + " " + std::string(version_name(v)) +
                                " " + ::testing::PrintToString(headers);
    if (!representable) {
      EXPECT_EQ(bytes, std::nullopt) << context;
      ++refused;
      continue;
    }
    ASSERT_TRUE(bytes.has_value()) << context;
    ++written;
    Reparsed r = reparse(*bytes, v);
    ASSERT_TRUE(IsOneFrame(*bytes, r)) << context;
    EXPECT_EQ(r.command, c);
    EXPECT_EQ(r.escaped, escaped);
    HeaderList want = headers;
    if (!body.empty()) want.emplace_back("content-length", std::to_string(body.size()));
    EXPECT_EQ(r.headers, want) << context;
    EXPECT_EQ(r.body, body) << context;
  }
  // Both outcomes were exercised, so the loop above tested something.
  EXPECT_GT(written, 500u);
  EXPECT_GT(refused, 500u);
}

}  // namespace
}  // namespace sluice::session
