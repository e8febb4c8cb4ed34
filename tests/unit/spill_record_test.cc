// The headers a spilled SEND keeps: STOMP 1.2 encoding whatever the client spoke.
#include "dataplane/session/spill_record.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "dataplane/session/parser.h"

namespace sluice::session {
namespace {

std::string headers_of(Version v, const std::string& frame) {
  Parser p{FrameLimits{}};
  p.set_version(v);
  ParseResult r = p.parse(frame);
  EXPECT_EQ(r.status, ParseResult::Status::kFrame);
  std::array<char, 4096> out;
  auto h = spill_record_headers(p.frame(), out);
  EXPECT_TRUE(h.has_value());
  return h ? std::string(*h) : std::string();
}

TEST(SpillRecordHeaders, Stomp12IsKeptAsItCame) {
  EXPECT_EQ(
      headers_of(Version::k1_2,
                 std::string("SEND\ndestination:/queue/a\\cb\nx:1\\n2\\r\\\\\n\nbody") + '\0'),
      "destination:/queue/a\\cb\nx:1\\n2\\r\\\\\n");
}

TEST(SpillRecordHeaders, Stomp10OctetsAreEscapedAs12) {
  // 1.0 has no escapes: a backslash and a colon in a value are octets, which 1.2 escapes.
  EXPECT_EQ(headers_of(Version::k1_0,
                       std::string("SEND\ndestination:/queue/q\nurl:http://h\\x\n\n") + '\0'),
            "destination:/queue/q\nurl:http\\c//h\\\\x\n");
}

TEST(SpillRecordHeaders, Stomp11CrLfLinesAndOrderKept) {
  EXPECT_EQ(headers_of(Version::k1_1,
                       std::string("SEND\r\ndestination:/queue/q\r\nb:2\r\na:1\\c\r\n\r\n") + '\0'),
            "destination:/queue/q\nb:2\na:1\\c\n");
}

TEST(SpillRecordHeaders, TooSmallABufferIsRefused) {
  Parser p{FrameLimits{}};
  p.set_version(Version::k1_2);
  const std::string frame = std::string("SEND\ndestination:/queue/q\n\n") + '\0';
  ASSERT_EQ(p.parse(frame).status, ParseResult::Status::kFrame);
  std::array<char, 8> out;
  EXPECT_FALSE(spill_record_headers(p.frame(), out).has_value());
}

// The encoding spelled out octet by octet, as the spec states it: what spill_record_headers must
// give for any header.
std::string reference_headers(const Frame& f) {
  std::string out;
  auto put = [&](std::string_view s) {
    for (char c : s) {
      if (f.escaped()) {
        out += c == '\r' ? std::string("\\r") : std::string(1, c);
      } else if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == ':') {
        out += "\\c";
      } else {
        out += c;
      }
    }
  };
  for (size_t i = 0; i < f.header_count(); ++i) {
    put(f.header(i).name);
    out += ':';
    put(f.header(i).value);
    out += '\n';
  }
  return out;
}

// Random headers full of octets to escape, at the start, the end and next to each other, in each
// version, written into a buffer that fits exactly and into one an octet short.
TEST(SpillRecordHeaders, MatchesTheOctetByOctetEncodingAndRefusesOneOctetShort) {
  std::mt19937 rng(20261202);
  // The parser takes no CR inside a header line, in any version.
  const std::string plain_octets = "ab:\\\x7f\xff ";  // 1.0: octets, backslash and colon too
  const std::string escaped_octets[] = {"a", "b", "\\n", "\\r", "\\c", "\\\\", " "};
  for (int round = 0; round < 600; ++round) {
    const Version v = round % 3 == 0   ? Version::k1_0
                      : round % 3 == 1 ? Version::k1_1
                                       : Version::k1_2;
    std::string frame = "SEND\ndestination:/queue/q\n";
    const int headers = int(rng() % 4);
    for (int h = 0; h < headers; ++h) {
      std::string name = "h" + std::to_string(h), value;
      const int octets = int(rng() % 12);
      for (int k = 0; k < octets; ++k) {
        if (v == Version::k1_0) {
          value += plain_octets[rng() % plain_octets.size()];
        } else if (v == Version::k1_1) {
          // 1.1 has no \r escape.
          const std::string& e = escaped_octets[rng() % std::size(escaped_octets)];
          value += e == "\\r" ? "\\n" : e;
        } else {
          value += escaped_octets[rng() % std::size(escaped_octets)];
        }
      }
      frame += name + ":" + value + "\n";
    }
    frame += std::string("\n") + '\0';
    Parser p{FrameLimits{}};
    p.set_version(v);
    ASSERT_EQ(p.parse(frame).status, ParseResult::Status::kFrame) << frame;
    const std::string want = reference_headers(p.frame());
    std::vector<char> out(want.size());
    const auto fit = spill_record_headers(p.frame(), out);
    ASSERT_TRUE(fit.has_value()) << frame;
    EXPECT_EQ(std::string(*fit), want) << frame;
    out.resize(want.size() - 1);
    EXPECT_FALSE(spill_record_headers(p.frame(), out).has_value()) << frame;
  }
}

}  // namespace
}  // namespace sluice::session
