// The owner's first frame: CONNECTED stripped, ERROR forwarded, anything else a protocol error.
#include "dataplane/session/owner_greeting.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/stomp_frames.h"

namespace sluice::session {
namespace {

using testing::frame;

TEST(OwnerGreetingTest, ConnectedIsStrippedAndLaterBytesAreLeft) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  std::string connected = frame("CONNECTED", {{"version", "1.2"}, {"server", "RabbitMQ/3.10"}});
  std::string later = frame("RECEIPT", {{"receipt-id", "1"}});
  GreetingResult r = g.on_bytes(connected + later);
  EXPECT_EQ(r.kind, GreetingResult::Kind::kStrip);
  EXPECT_EQ(r.consumed, connected.size());
}

TEST(OwnerGreetingTest, HeartBeatEolsBeforeConnectedAreStrippedWithIt) {
  OwnerGreeting g(FrameLimits{}, Version::k1_1);
  std::string in = "\r\n\n" + frame("CONNECTED", {{"version", "1.1"}});
  GreetingResult r = g.on_bytes(in);
  EXPECT_EQ(r.kind, GreetingResult::Kind::kStrip);
  EXPECT_EQ(r.consumed, in.size());
}

TEST(OwnerGreetingTest, ConnectedWithoutVersionMeans10) {
  OwnerGreeting g10(FrameLimits{}, Version::k1_0);
  EXPECT_EQ(g10.on_bytes(frame("CONNECTED", {{"session", "s"}})).kind,
            GreetingResult::Kind::kStrip);
  OwnerGreeting g12(FrameLimits{}, Version::k1_2);
  EXPECT_EQ(g12.on_bytes(frame("CONNECTED", {{"session", "s"}})).kind,
            GreetingResult::Kind::kProtocolError);
}

TEST(OwnerGreetingTest, ConnectedWithAnotherVersionIsAProtocolError) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  GreetingResult r = g.on_bytes(frame("CONNECTED", {{"version", "1.1"}}));
  ASSERT_EQ(r.kind, GreetingResult::Kind::kProtocolError);
  EXPECT_NE(r.to_client.find("ERROR\n"), std::string::npos);
  EXPECT_NE(r.to_client.find("message:bad response from owner"), std::string::npos);
}

TEST(OwnerGreetingTest, ErrorIsForwardedByteForByte) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  std::string err = frame("ERROR", {{"message", "Access refused for user 'x'"}}, "detail", "\r\n");
  std::string in = err + "trailing";
  GreetingResult r = g.on_bytes(in);
  ASSERT_EQ(r.kind, GreetingResult::Kind::kForwardError);
  EXPECT_EQ(r.to_client, err);
  EXPECT_EQ(r.consumed, err.size());
}

TEST(OwnerGreetingTest, AnyOtherFirstFrameIsAProtocolError) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  GreetingResult r = g.on_bytes(frame("MESSAGE", {{"destination", "/queue/a"}}, "x"));
  EXPECT_EQ(r.kind, GreetingResult::Kind::kProtocolError);
  EXPECT_FALSE(r.reason.empty());
}

TEST(OwnerGreetingTest, GarbageIsAProtocolError) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  EXPECT_EQ(g.on_bytes("HTTP/1.1 400 Bad Request\r\n").kind, GreetingResult::Kind::kProtocolError);
}

TEST(OwnerGreetingTest, SplitConnectedNeedsMoreThenStrips) {
  OwnerGreeting g(FrameLimits{}, Version::k1_2);
  std::string c = frame("CONNECTED", {{"version", "1.2"}});
  for (size_t n = 0; n < c.size(); ++n) {
    ASSERT_EQ(g.on_bytes(std::string_view(c).substr(0, n)).kind, GreetingResult::Kind::kNeedMore)
        << n;
  }
  EXPECT_EQ(g.on_bytes(c).kind, GreetingResult::Kind::kStrip);
}

}  // namespace
}  // namespace sluice::session
