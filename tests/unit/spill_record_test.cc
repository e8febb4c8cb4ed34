// The headers a spilled SEND keeps: STOMP 1.2 encoding whatever the client spoke.
#include "dataplane/session/spill_record.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

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

}  // namespace
}  // namespace sluice::session
