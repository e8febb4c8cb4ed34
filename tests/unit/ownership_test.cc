// Ownership table: precedence pinned > learned > placed, sticky placements, counts, and the
// state file's round trip and damage detection.
#include "control/ownership_table.h"

#include "control/state_writer.h"
#include "tests/unit/result_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::control {
namespace {

std::vector<NodeSpec> three_nodes() {
  return {NodeSpec{"a", "127.0.0.1", 1, 100}, NodeSpec{"b", "127.0.0.1", 2, 100},
          NodeSpec{"c", "127.0.0.1", 3, 100}};
}

TEST(OwnershipTest, PinnedBeatsLearnedBeatsPlaced) {
  OwnershipTable t(3);
  const QueueKey k{"/", "orders"};
  EXPECT_FALSE(t.lookup(k).has_value());
  t.place(k, 0);
  EXPECT_EQ(t.lookup(k)->node, 0);
  EXPECT_EQ(t.lookup(k)->source, OwnerSource::kPlaced);
  t.learn(k, 1);
  EXPECT_EQ(t.lookup(k)->node, 1);
  EXPECT_EQ(t.lookup(k)->source, OwnerSource::kLearned);
  t.pin(k, 2);
  EXPECT_EQ(t.lookup(k)->node, 2);
  EXPECT_EQ(t.lookup(k)->source, OwnerSource::kPinned);
  EXPECT_TRUE(t.unpin(k));
  EXPECT_EQ(t.lookup(k)->source, OwnerSource::kLearned);
  EXPECT_FALSE(t.unpin(k));
  t.forget_learned_except([](const QueueKey&) { return false; });
  EXPECT_EQ(t.lookup(k)->node, 0);
  EXPECT_EQ(t.lookup(k)->source, OwnerSource::kPlaced);
}

TEST(OwnershipTest, PlacementIsSticky) {
  OwnershipTable t(3);
  const QueueKey k{"/", "q"};
  EXPECT_EQ(t.place(k, 1), 1);
  EXPECT_EQ(t.place(k, 2), 1);
  EXPECT_EQ(t.lookup(k)->node, 1);
}

TEST(OwnershipTest, CountsBySourceAndPerNodeFollowChanges) {
  OwnershipTable t(3);
  t.place({"/", "a"}, 0);
  t.place({"/", "b"}, 0);
  t.learn({"/", "b"}, 1);
  t.pin({"/", "c"}, 2);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.count(OwnerSource::kPlaced), 2u);
  EXPECT_EQ(t.count(OwnerSource::kLearned), 1u);
  EXPECT_EQ(t.count(OwnerSource::kPinned), 1u);
  EXPECT_EQ(t.queues_per_node()[0], 1u);  // b is won by its learned owner
  EXPECT_EQ(t.queues_per_node()[1], 1u);
  EXPECT_EQ(t.queues_per_node()[2], 1u);
  t.unpin({"/", "c"});
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.queues_per_node()[2], 0u);
}

TEST(OwnershipTest, PlacementsNothingConfirmedForTheirLifetimeAreForgotten) {
  OwnershipTable t(2);
  t.track_persisted_changes();
  const QueueKey used{"/", "used"}, idle{"/", "idle"}, learned{"/", "learned"},
      pinned{"/", "pinned"}, loaded{"/", "loaded"};
  for (const QueueKey& k : {used, idle, learned, pinned}) {
    t.place(k, 0);
    t.touch_placed(k, 1000);
  }
  t.learn(learned, 1);
  t.pin(pinned, 1);
  t.set_persisted(loaded, 0, kNoNode);  // from the state file: no time yet
  (void)t.take_persisted_changes();
  t.touch_placed(used, 5000);
  EXPECT_TRUE(t.forget_unused_placed(10'999, 10'000).empty());  // the loaded one starts now
  const std::vector<QueueKey> gone = t.forget_unused_placed(11'000, 10'000);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], idle);
  EXPECT_FALSE(t.lookup(idle).has_value());
  EXPECT_EQ(t.take_persisted_changes(), gone);  // the state file follows
  // A feed's listing and a pin keep theirs; the used one and the loaded one run out later.
  EXPECT_EQ(t.lookup(learned)->source, OwnerSource::kLearned);
  EXPECT_EQ(t.find(pinned)->placed, 0u);
  const std::vector<QueueKey> later = t.forget_unused_placed(21'000, 10'000);
  EXPECT_EQ(later.size(), 2u);
  EXPECT_EQ(t.find(learned)->placed, 0u);
  EXPECT_EQ(t.find(pinned)->placed, 0u);
  EXPECT_EQ(t.count(OwnerSource::kPlaced), 2u);
}

TEST(OwnershipTest, ForgetLearnedKeepsWhatTheFeedStillReports) {
  OwnershipTable t(3);
  t.learn({"/", "x"}, 0);
  t.learn({"/", "y"}, 1);
  EXPECT_EQ(t.forget_learned_except([](const QueueKey& k) { return k.queue == "y"; }).size(), 1u);
  EXPECT_FALSE(t.lookup({"/", "x"}).has_value());
  EXPECT_EQ(t.lookup({"/", "y"})->node, 1);
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-ownership-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ownership";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string read() {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void write(const std::string& s) { std::ofstream(path_, std::ios::binary) << s; }

  std::string dir_, path_;
  std::vector<NodeSpec> nodes_ = three_nodes();
};

TEST_F(StateFileTest, MissingFileIsAFirstStart) {
  OwnershipTable t(3);
  auto r = load_ownership(t, nodes_, path_);
  ASSERT_EQ(error_of(r), "");
  EXPECT_EQ(t.size(), 0u);
}

TEST_F(StateFileTest, RoundTripKeepsPlacedAndPinnedWithOddNames) {
  OwnershipTable t(3);
  t.place({"/", "orders"}, 1);
  t.place({"vh 1", "with space%and\nnewline"}, 2);
  t.pin({"/", "orders"}, 0);
  t.learn({"/", "learned-only"}, 2);  // not persisted: the feed brings it back
  ASSERT_EQ(error_of(save_ownership(t, nodes_, path_)), "");
  OwnershipTable u(3);
  auto r = load_ownership(u, nodes_, path_);
  ASSERT_EQ(error_of(r), "");
  EXPECT_EQ(r->placed, 2u);
  EXPECT_EQ(r->pinned, 1u);
  EXPECT_EQ(u.lookup({"/", "orders"})->node, 0);
  EXPECT_EQ(u.lookup({"/", "orders"})->source, OwnerSource::kPinned);
  EXPECT_EQ(u.find({"/", "orders"})->placed, 1);
  EXPECT_EQ(u.lookup({"vh 1", "with space%and\nnewline"})->node, 2);
  EXPECT_FALSE(u.lookup({"/", "learned-only"}).has_value());
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
}

TEST_F(StateFileTest, EntriesOfRemovedNodesAreReportedNotLoaded) {
  OwnershipTable t(3);
  t.place({"/", "on-c"}, 2);
  t.place({"/", "on-a"}, 0);
  ASSERT_EQ(error_of(save_ownership(t, nodes_, path_)), "");
  std::vector<NodeSpec> fewer = {nodes_[0], nodes_[1]};
  OwnershipTable u(2);
  auto r = load_ownership(u, fewer, path_);
  ASSERT_EQ(error_of(r), "");
  ASSERT_EQ(r->dropped.size(), 1u);
  EXPECT_NE(r->dropped[0].find("on-c"), std::string::npos);
  EXPECT_TRUE(u.lookup({"/", "on-a"}).has_value());
}

TEST_F(StateFileTest, EveryTruncationIsDetectedAndACopyIsKept) {
  OwnershipTable t(3);
  for (int i = 0; i < 20; ++i)
    t.place({"/", "q" + std::to_string(i)}, NodeIndex(i % 3));
  ASSERT_EQ(error_of(save_ownership(t, nodes_, path_)), "");
  const std::string whole = read();
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    write(whole.substr(0, cut));
    OwnershipTable u(3);
    auto r = load_ownership(u, nodes_, path_);
    ASSERT_FALSE(r.has_value()) << "cut at " << cut;
    EXPECT_EQ(r.error().file, path_);
    EXPECT_EQ(u.size(), 0u) << "a damaged file must not load half";
    EXPECT_TRUE(std::filesystem::exists(path_ + ".corrupt"));
  }
}

TEST_F(StateFileTest, EveryFlippedByteIsDetected) {
  OwnershipTable t(3);
  for (int i = 0; i < 5; ++i)
    t.place({"/", "q" + std::to_string(i)}, NodeIndex(i % 3));
  ASSERT_EQ(error_of(save_ownership(t, nodes_, path_)), "");
  const std::string whole = read();
  for (size_t at = 0; at < whole.size(); ++at) {
    std::string bad = whole;
    bad[at] = char(bad[at] ^ 0x01);
    write(bad);
    OwnershipTable u(3);
    auto r = load_ownership(u, nodes_, path_);
    ASSERT_FALSE(r.has_value()) << "flip at " << at;
    EXPECT_NE(r.error().message.find("damaged"), std::string::npos);
  }
}

TEST_F(StateFileTest, SaveIntoAMissingDirectoryFailsAndNamesTheFile) {
  OwnershipTable t(3);
  t.place({"/", "q"}, 0);
  auto e = save_ownership(t, nodes_, dir_ + "/no/such/dir/ownership");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().file.find("/no/such/dir/ownership"), std::string::npos);
  EXPECT_NE(e.error().message.find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace sluice::control

namespace sluice::control {
namespace {

TEST(OwnershipTest, TracksKeysWhosePersistedSourcesChanged) {
  OwnershipTable t(3);
  t.place({"/", "before-tracking"}, 0);
  t.track_persisted_changes();
  EXPECT_TRUE(t.take_persisted_changes().empty());
  t.place({"/", "a"}, 1);
  t.place({"/", "a"}, 2);  // sticky: nothing changes
  t.learn({"/", "b"}, 1);  // learned entries are not persisted
  t.pin({"/", "c"}, 0);
  t.unpin({"/", "c"});
  std::vector<QueueKey> changed = t.take_persisted_changes();
  EXPECT_EQ(changed, (std::vector<QueueKey>{{"/", "a"}, {"/", "c"}, {"/", "c"}}));
  EXPECT_TRUE(t.take_persisted_changes().empty());
  // A copy brought up to date key by key holds the same persisted entries.
  OwnershipTable copy(3);
  copy.set_persisted({"/", "a"}, 1, kNoNode);
  copy.set_persisted({"/", "c"}, kNoNode, 0);
  copy.set_persisted({"/", "c"}, kNoNode, kNoNode);
  EXPECT_EQ(copy.size(), 1u);
  EXPECT_EQ(copy.lookup({"/", "a"})->node, 1);
  EXPECT_EQ(copy.count(OwnerSource::kPinned), 0u);
}

TEST_F(StateFileTest, WriterRendersFromItsCopyWhatTheTableHolds) {
  OwnershipTable t(3);
  t.track_persisted_changes();
  std::mutex m;
  int writes = 0;
  StateWriter writer(path_, 3, [&](const Result<>& e) {
    EXPECT_EQ(error_of(e), "");
    std::lock_guard<std::mutex> lock(m);
    ++writes;
  });
  auto submit_changes = [&] {
    std::vector<PersistedChange> changes;
    for (QueueKey& k : t.take_persisted_changes()) {
      const OwnershipTable::Entry* e = t.find(k);
      changes.push_back({std::move(k), e ? e->placed : kNoNode, e ? e->pinned : kNoNode});
    }
    writer.submit(std::move(changes), nodes_);
    writer.wait_idle();
  };
  for (int i = 0; i < 200; ++i)
    t.place({"/", "q" + std::to_string(i)}, NodeIndex(i % 3));
  t.pin({"/", "q7"}, 2);
  submit_changes();
  t.unpin({"/", "q7"});
  t.pin({"vh", "pinned-only"}, 1);
  t.learn({"/", "learned"}, 0);
  submit_changes();
  const std::string from_writer = read();
  // The same entries as the table renders itself; line order follows each table's own hashing,
  // so both files are loaded and compared entry by entry.
  OwnershipTable a(3), b(3);
  ASSERT_EQ(error_of(save_ownership(t, nodes_, path_)), "");
  ASSERT_EQ(error_of(load_ownership(b, nodes_, path_)), "");
  write(from_writer);
  ASSERT_EQ(error_of(load_ownership(a, nodes_, path_)), "");
  EXPECT_EQ(a.size(), 201u);
  EXPECT_EQ(a.size(), b.size());
  b.for_each([&](const QueueKey& k, const OwnershipTable::Entry& e) {
    const OwnershipTable::Entry* x = a.find(k);
    ASSERT_NE(x, nullptr) << k.queue;
    EXPECT_EQ(x->placed, e.placed) << k.queue;
    EXPECT_EQ(x->pinned, e.pinned) << k.queue;
  });
  std::lock_guard<std::mutex> lock(m);
  EXPECT_EQ(writes, 2);
}

}  // namespace
}  // namespace sluice::control
