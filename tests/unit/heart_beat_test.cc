// Heart-beats: the header's numbers, the gateway's answer within its bounds, negotiation as the
// STOMP 1.2 spec gives it, and the check of an owner's answer against what the client was told.
#include "dataplane/session/heart_beat.h"

#include <gtest/gtest.h>

namespace sluice::session {
namespace {

TEST(HeartBeatTest, ParsesTwoNumbersAndRefusesAnythingElse) {
  EXPECT_EQ(parse_heart_beat("0,0"), (HeartBeat{0, 0}));
  EXPECT_EQ(parse_heart_beat("3000,2000"), (HeartBeat{3000, 2000}));
  EXPECT_EQ(parse_heart_beat("4294967295,1"), (HeartBeat{4294967295u, 1}));
  for (std::string_view bad : {"", ",", "1,", ",1", "1", "1;2", " 1,2", "1,2 ", "-1,2",
                               "4294967296,0", "12345678901,0", "1,2,3", "a,b"}) {
    EXPECT_EQ(parse_heart_beat(bad), std::nullopt) << bad;
  }
}

TEST(HeartBeatTest, FormatsAsTheHeaderWritesIt) {
  char out[24];
  EXPECT_EQ(format_heart_beat(out, HeartBeat{0, 0}), "0,0");
  EXPECT_EQ(format_heart_beat(out, HeartBeat{4294967295u, 10}), "4294967295,10");
}

TEST(HeartBeatTest, AnswerEchoesTheClientsRatesWithinTheBounds) {
  // sx answers what the client wants to receive (cy), sy what it can send (cx).
  EXPECT_EQ(answer_heart_beat(HeartBeat{3000, 2000}, 1000, 60000), (HeartBeat{2000, 3000}));
  EXPECT_EQ(answer_heart_beat(HeartBeat{100, 0}, 1000, 60000), (HeartBeat{0, 1000}));
  EXPECT_EQ(answer_heart_beat(HeartBeat{0, 900000}, 1000, 60000), (HeartBeat{60000, 0}));
  EXPECT_EQ(answer_heart_beat(HeartBeat{0, 0}, 1000, 60000), (HeartBeat{0, 0}));
  // Heart-beats off.
  EXPECT_EQ(answer_heart_beat(HeartBeat{3000, 2000}, 1000, 0), (HeartBeat{0, 0}));
}

TEST(HeartBeatTest, NegotiationTakesTheLargerOrNone) {
  // Spec example: client 10,100 (can send every 10 ms, wants every 100), server 50,20.
  EXPECT_EQ(negotiate(HeartBeat{10, 100}, HeartBeat{50, 20}), (HeartBeatIntervals{20, 100}));
  EXPECT_EQ(negotiate(HeartBeat{0, 100}, HeartBeat{50, 20}), (HeartBeatIntervals{0, 100}));
  EXPECT_EQ(negotiate(HeartBeat{10, 100}, HeartBeat{0, 0}), (HeartBeatIntervals{0, 0}));
}

TEST(HeartBeatTest, OwnerAnswerIsJudgedByWhatEachSideWouldDo) {
  const HeartBeat client{3000, 2000};
  const HeartBeat told{2000, 3000};
  EXPECT_EQ(check_owner_heart_beat(client, told, told), HeartBeatCheck::kSame);
  // The owner wants the client every 1 s, the client was told 3 s: the owner would drop it.
  EXPECT_EQ(check_owner_heart_beat(client, told, HeartBeat{2000, 1000}), HeartBeatCheck::kSame)
      << "max(cx, 1000) is still 3000: the client's own rate rules";
  EXPECT_EQ(
      check_owner_heart_beat(HeartBeat{500, 2000}, HeartBeat{2000, 3000}, HeartBeat{2000, 1000}),
      HeartBeatCheck::kOwnerStricter);
  // The client was told none from it, but the owner expects beats.
  EXPECT_EQ(check_owner_heart_beat(client, HeartBeat{2000, 0}, told),
            HeartBeatCheck::kOwnerStricter);
  // The owner sends less often than the client was told (or never).
  EXPECT_EQ(check_owner_heart_beat(client, told, HeartBeat{5000, 3000}),
            HeartBeatCheck::kOwnerSlower);
  EXPECT_EQ(check_owner_heart_beat(client, told, HeartBeat{0, 3000}), HeartBeatCheck::kOwnerSlower);
  // The owner beats more often and expects less: nobody gives up.
  EXPECT_EQ(check_owner_heart_beat(client, told, HeartBeat{2000, 6000}),
            HeartBeatCheck::kOtherwise);
}

}  // namespace
}  // namespace sluice::session
