// sluice-load's summary and verdict: what fails a run (the exit code) and the JSON fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/sluice-load/report.h"

namespace sluice::load {
namespace {

class LoadReport : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.consumer_connections = 1;
    o_.queues = 1;
  }
  // Sends n acknowledged messages from producer 0 to queue 0; delivers all but `skip`.
  void run(Checker& c, uint64_t n, uint64_t skip = ~uint64_t(0)) {
    for (uint64_t i = 0; i < n; ++i)
      c.on_acknowledged(0, 0, c.next_seq(0, 0));
    for (uint64_t i = 0; i < n; ++i)
      if (i != skip) c.on_received(0, 0, 0, i);
  }
  LoadOptions o_;
  RunStats stats_;
};

TEST_F(LoadReport, ACleanRunPasses) {
  Checker c(1, 1);
  run(c, 100);
  const Summary s = summarize(o_, c, stats_, 2.0);
  EXPECT_TRUE(s.failures.empty());
  const nlohmann::json j = nlohmann::json::parse(format_json(o_, s));
  EXPECT_EQ(j["result"], "ok");
  EXPECT_EQ(j["sent"], 100);
  EXPECT_EQ(j["lost"], 0);
  EXPECT_DOUBLE_EQ(j["throughput_msg_s"].get<double>(), 50.0);
  EXPECT_EQ(j["queues"][0]["name"], "sluice-load-0");
  EXPECT_EQ(j["queues"][0]["received"], 100);
  EXPECT_NE(format_text(o_, s).find("result: ok"), std::string::npos);
}

TEST_F(LoadReport, LossOfAnAcknowledgedMessageFailsTheRun) {
  Checker c(1, 1);
  run(c, 100, /*skip=*/42);
  const Summary s = summarize(o_, c, stats_, 1.0);
  ASSERT_EQ(s.failures.size(), 1u);
  EXPECT_NE(s.failures[0].find("acknowledged messages were lost"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(format_json(o_, s));
  EXPECT_EQ(j["result"], "failed");
  EXPECT_EQ(j["lost"], 1);
  EXPECT_EQ(j["lost_acknowledged"], 1);
}

TEST_F(LoadReport, ErrorsFailOnlyBeyondTheThreshold) {
  Checker c(1, 1);
  run(c, 10);
  stats_.error("connection closed by the peer");
  EXPECT_FALSE(summarize(o_, c, stats_, 1.0).failures.empty());
  o_.max_errors = 1;
  EXPECT_TRUE(summarize(o_, c, stats_, 1.0).failures.empty());
}

TEST_F(LoadReport, MissingReceiptsAndDuplicatesAreErrors) {
  Checker c(1, 1);
  run(c, 10);
  c.next_seq(0, 0);           // sent, never receipted nor delivered
  c.on_received(0, 0, 0, 3);  // a duplicate
  const Summary s = summarize(o_, c, stats_, 1.0);
  EXPECT_EQ(s.unconfirmed, 1u);
  EXPECT_EQ(s.errors, 2u);
  EXPECT_EQ(s.totals.lost, 1u);
  EXPECT_EQ(s.totals.lost_acknowledged, 0u);
  EXPECT_FALSE(s.failures.empty());
}

TEST_F(LoadReport, NothingSentFails) {
  Checker c(1, 1);
  EXPECT_FALSE(summarize(o_, c, stats_, 0).failures.empty());
}

}  // namespace
}  // namespace sluice::load
