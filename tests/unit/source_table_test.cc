// The engine's per-source session counts: limits, and removal that keeps probe runs intact.
#include "dataplane/uring/source_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace sluice::uring::detail {
namespace {

TEST(SourceTable, CountsUpToTheLimit) {
  SourceTable t;
  t.init(16);
  EXPECT_EQ(t.add(7, 2), 1u);
  EXPECT_EQ(t.add(7, 2), 2u);
  EXPECT_EQ(t.add(7, 2), 0u);  // refused, nothing added
  EXPECT_EQ(t.count(7), 2u);
  t.remove(7);
  EXPECT_EQ(t.add(7, 2), 2u);
}

TEST(SourceTable, MatchesAModelUnderRandomChurn) {
  SourceTable t;
  t.init(512);
  std::map<uint32_t, uint32_t> model;
  std::mt19937 rng(5);
  uint32_t live = 0;
  for (int i = 0; i < 200000; ++i) {
    // Few distinct addresses with colliding homes: runs form and break.
    const uint32_t addr = rng() % 300;
    if (rng() % 2 == 0 && live < 512) {
      const uint32_t got = t.add(addr, 3);
      const uint32_t want = model[addr] < 3 ? model[addr] + 1 : 0;
      ASSERT_EQ(got, want) << "add " << addr << " at step " << i;
      if (got != 0) {
        model[addr] = got;
        ++live;
      }
    } else if (model[addr] > 0) {
      t.remove(addr);
      --model[addr];
      --live;
    }
    ASSERT_EQ(t.count(addr), model[addr]) << "step " << i;
  }
  for (auto& [addr, n] : model)
    ASSERT_EQ(t.count(addr), n) << addr;
}

}  // namespace
}  // namespace sluice::uring::detail
