// PlacementBudget: per client address, at most N placements a minute, a fresh budget each
// minute, 0 meaning no limit.
#include "dataplane/session/placement_budget.h"

#include <gtest/gtest.h>

namespace sluice::session {
namespace {

constexpr Nanos kSecond = 1000 * kNanosPerMilli;

TEST(PlacementBudgetTest, AnAddressGetsItsBudgetEachMinute) {
  PlacementBudget b(3);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(b.take(0x0a000001, 1 * kSecond)) << i;
  EXPECT_FALSE(b.take(0x0a000001, 2 * kSecond));
  EXPECT_FALSE(b.take(0x0a000001, 60 * kSecond));
  EXPECT_TRUE(b.take(0x0a000001, 61 * kSecond));  // a minute after the window began
}

TEST(PlacementBudgetTest, OtherAddressesKeepTheirOwn) {
  PlacementBudget b(1);
  EXPECT_TRUE(b.take(0x0a000001, 0));
  EXPECT_FALSE(b.take(0x0a000001, 0));
  int allowed = 0;
  for (uint32_t a = 2; a < 102; ++a)
    allowed += b.take(0x0a000000 + a, 0) ? 1 : 0;
  // 100 addresses over 4096 slots: nearly all have a slot of their own.
  EXPECT_GE(allowed, 95);
}

TEST(PlacementBudgetTest, ZeroMeansNoLimit) {
  PlacementBudget b(0);
  for (int i = 0; i < 10'000; ++i)
    ASSERT_TRUE(b.take(1, 0));
}

}  // namespace
}  // namespace sluice::session
