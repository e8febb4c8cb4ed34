// Health state machine: HAProxy rise/fall semantics, passive failures, parameter changes.
#include "control/health.h"

#include <gtest/gtest.h>

namespace sluice::control {
namespace {

TEST(HealthTest, StartsUpAndAFirstFailureTakesANodeThatNeverAnsweredDown) {
  HealthTracker h(2, 3);
  EXPECT_EQ(h.state(), HealthState::kUp);
  EXPECT_TRUE(h.on_failure());
  EXPECT_EQ(h.state(), HealthState::kDown);
}

TEST(HealthTest, UpNodeGoesDownAfterFallConsecutiveFailures) {
  HealthTracker h(2, 3);
  h.on_success();
  EXPECT_FALSE(h.on_failure());
  EXPECT_FALSE(h.on_failure());
  EXPECT_EQ(h.state(), HealthState::kUp);
  EXPECT_TRUE(h.on_failure());
  EXPECT_EQ(h.state(), HealthState::kDown);
}

TEST(HealthTest, ASuccessWhileUpRestoresTheFullMargin) {
  HealthTracker h(2, 3);
  h.on_success();
  h.on_failure();
  h.on_failure();
  h.on_success();
  EXPECT_FALSE(h.on_failure());
  EXPECT_FALSE(h.on_failure());
  EXPECT_TRUE(h.on_failure());
}

TEST(HealthTest, DownNodeComesUpAfterRiseConsecutiveSuccesses) {
  HealthTracker h(3, 2);
  h.on_failure();
  ASSERT_EQ(h.state(), HealthState::kDown);
  EXPECT_FALSE(h.on_success());
  EXPECT_FALSE(h.on_success());
  EXPECT_TRUE(h.on_success());
  EXPECT_EQ(h.state(), HealthState::kUp);
}

TEST(HealthTest, AFailureWhileDownRestartsTheCount) {
  HealthTracker h(3, 2);
  h.on_failure();
  h.on_success();
  h.on_success();
  h.on_failure();
  EXPECT_FALSE(h.on_success());
  EXPECT_FALSE(h.on_success());
  EXPECT_TRUE(h.on_success());
}

TEST(HealthTest, PassiveFailuresCountTowardFallLikeProbeFailures) {
  // Workers report refused or timed-out connects through on_failure too.
  HealthTracker h(1, 2);
  h.on_success();
  h.on_failure();               // probe
  EXPECT_TRUE(h.on_failure());  // passive report
  EXPECT_EQ(h.state(), HealthState::kDown);
}

TEST(HealthTest, RiseAndFallOfOne) {
  HealthTracker h(1, 1);
  h.on_success();
  EXPECT_TRUE(h.on_failure());
  EXPECT_TRUE(h.on_success());
}

TEST(HealthTest, NewParametersKeepTheStateAndApplyFromNow) {
  HealthTracker h(2, 5);
  h.on_success();
  h.set_params(2, 2);
  EXPECT_EQ(h.state(), HealthState::kUp);
  EXPECT_FALSE(h.on_failure());
  EXPECT_TRUE(h.on_failure());
  h.set_params(4, 2);
  EXPECT_EQ(h.state(), HealthState::kDown);
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(h.on_success());
  EXPECT_TRUE(h.on_success());
}

}  // namespace
}  // namespace sluice::control
