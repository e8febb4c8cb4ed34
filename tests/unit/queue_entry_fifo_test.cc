// A queue's backlog index (EntryFifo): FIFO order, lookup by seq, and entries that stay where
// they are while the backlog grows (the spill thread appends to it between a batch's completion
// and the next write, so growing must not copy it); chunks taken from, and given back to, the
// log's pool of spares (EntryChunks), which the spill thread fills while the disk works.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "queue/log_index.h"

namespace sluice::queue {
namespace {

Entry entry(uint64_t seq) {
  return Entry{seq, seq * 10, seq / 1000, uint32_t(seq % 65536), uint32_t(seq % 4096)};
}

void expect_same(const EntryFifo& f, const std::deque<Entry>& model) {
  ASSERT_EQ(f.size(), model.size());
  ASSERT_EQ(f.empty(), model.empty());
  for (size_t i = 0; i < model.size(); ++i) {
    ASSERT_EQ(f[i].seq, model[i].seq) << i;
    ASSERT_EQ(f[i].append_unix_ns, model[i].append_unix_ns) << i;
    ASSERT_EQ(f[i].segment, model[i].segment) << i;
    ASSERT_EQ(f[i].offset, model[i].offset) << i;
    ASSERT_EQ(f[i].bytes, model[i].bytes) << i;
  }
  if (!model.empty()) {
    EXPECT_EQ(f.front().seq, model.front().seq);
  }
}

TEST(EntryFifo, MatchesADequeThroughRandomPushesAndPops) {
  std::mt19937_64 rng(7);
  EntryFifo f;
  std::deque<Entry> model;
  uint64_t seq = 1;
  for (int round = 0; round < 300; ++round) {
    // Bursts longer and shorter than a chunk, so the front and back cross chunk boundaries
    // in every relation to each other, and the backlog empties now and then.
    const size_t pushes = rng() % (3 * EntryFifo::kChunkEntries);
    for (size_t i = 0; i < pushes; ++i) {
      f.push_back(entry(seq));
      model.push_back(entry(seq));
      seq += 1 + rng() % 3;
    }
    const size_t pops = std::min<size_t>(model.size(), rng() % (3 * EntryFifo::kChunkEntries + 1));
    for (size_t i = 0; i < pops; ++i) {
      ASSERT_EQ(f.front().seq, model.front().seq);
      f.pop_front();
      model.pop_front();
    }
    if (round % 50 == 0)
      while (!model.empty()) {
        f.pop_front();
        model.pop_front();
      }
    ASSERT_NO_FATAL_FAILURE(expect_same(f, model)) << "round " << round;
  }
}

TEST(EntryFifo, UpperBoundFindsTheFirstEntryAfterASeq) {
  EntryFifo f;
  EXPECT_EQ(f.upper_bound(0), 0u);
  // Seqs 10, 20, ..., with the front already past a chunk boundary.
  for (uint64_t s = 1; s <= 3000; ++s)
    f.push_back(entry(s * 10));
  for (int i = 0; i < 300; ++i)
    f.pop_front();  // front is now seq 3010
  ASSERT_EQ(f.front().seq, 3010u);
  EXPECT_EQ(f.upper_bound(0), 0u);
  EXPECT_EQ(f.upper_bound(3009), 0u);
  EXPECT_EQ(f.upper_bound(3010), 1u);
  EXPECT_EQ(f.upper_bound(3015), 1u);
  EXPECT_EQ(f.upper_bound(15000), 1200u);  // 3010..15000 are 1,200 entries
  EXPECT_EQ(f.upper_bound(29990), f.size() - 1);
  EXPECT_EQ(f.upper_bound(30000), f.size());
  EXPECT_EQ(f.upper_bound(UINT64_MAX), f.size());
  for (size_t i = 0; i < f.size(); i += 97)
    EXPECT_EQ(f[f.upper_bound(f[i].seq - 1)].seq, f[i].seq) << i;
}

TEST(EntryFifo, GrowingNeverMovesAnEntry) {
  EntryFifo f;
  f.push_back(entry(1));
  const Entry* first = &f.front();
  std::vector<const Entry*> at;
  for (uint64_t s = 2; s <= 200000; ++s) {
    f.push_back(entry(s));
    if (s % 1000 == 0) at.push_back(&f[s - 1]);
  }
  EXPECT_EQ(&f.front(), first);
  EXPECT_EQ(f.front().seq, 1u);
  for (size_t i = 0; i < at.size(); ++i) {
    EXPECT_EQ(at[i], &f[(i + 1) * 1000 - 1]) << i;
    EXPECT_EQ(at[i]->seq, (i + 1) * 1000) << i;
  }
}

std::vector<EntryChunk> fresh_chunks(size_t n) {
  std::vector<EntryChunk> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(EntryChunks::fresh());
  return v;
}

TEST(EntryChunks, TopsUpToItsTargetAndKeepsABoundedNumberOfSpares) {
  EntryChunks pool;
  EXPECT_EQ(pool.spares(), 0u);
  EXPECT_EQ(pool.missing(), EntryChunks::kTopUp);
  auto fresh = fresh_chunks(pool.missing());
  pool.add(fresh);
  EXPECT_TRUE(fresh.empty());
  EXPECT_EQ(pool.spares(), EntryChunks::kTopUp);
  EXPECT_EQ(pool.missing(), 0u);
  // Chunks given back beyond kKeepMax are freed, not kept.
  for (size_t i = 0; i < 2 * EntryChunks::kKeepMax; ++i)
    pool.give(EntryChunks::fresh());
  EXPECT_EQ(pool.spares(), EntryChunks::kKeepMax);
  pool.give(nullptr);
  EXPECT_EQ(pool.spares(), EntryChunks::kKeepMax);
  // Taking past the spares still gives a chunk (a new one).
  for (size_t i = 0; i < EntryChunks::kKeepMax + 3; ++i)
    ASSERT_NE(pool.take(), nullptr) << i;
  EXPECT_EQ(pool.spares(), 0u);
}

TEST(EntryFifo, TakesItsChunksFromThePoolAndGivesThemBackWhenEmpty) {
  EntryChunks pool;
  auto fresh = fresh_chunks(EntryChunks::kTopUp);
  std::set<const Entry*> spares;
  for (const EntryChunk& c : fresh)
    spares.insert(c.get());
  pool.add(fresh);
  EntryFifo f(&pool);
  const size_t n = 3 * EntryFifo::kChunkEntries + 1;
  for (uint64_t s = 1; s <= n; ++s)
    f.push_back(entry(s));
  EXPECT_EQ(f.chunks_held(), 4u);
  EXPECT_EQ(pool.spares(), EntryChunks::kTopUp - 4);
  for (size_t i = 0; i < n; i += EntryFifo::kChunkEntries)
    EXPECT_EQ(spares.count(&f[i]), 1u) << "entry " << i << " is not in a chunk of the pool";
  // Delivering the first chunk's entries keeps that chunk as the backlog's own spare.
  for (size_t i = 0; i < EntryFifo::kChunkEntries; ++i)
    f.pop_front();
  EXPECT_EQ(f.chunks_held(), 4u);
  EXPECT_EQ(pool.spares(), EntryChunks::kTopUp - 4);
  // A second used-up chunk goes back to the pool; so does everything once the backlog is empty.
  for (size_t i = 0; i < EntryFifo::kChunkEntries; ++i)
    f.pop_front();
  EXPECT_EQ(f.chunks_held(), 3u);
  EXPECT_EQ(pool.spares(), EntryChunks::kTopUp - 3);
  while (!f.empty())
    f.pop_front();
  EXPECT_EQ(f.chunks_held(), 0u);
  EXPECT_EQ(pool.spares(), EntryChunks::kTopUp);
}

TEST(EntryFifo, WithAPoolMatchesADequeAndNeverLosesAChunk) {
  std::mt19937_64 rng(11);
  EntryChunks pool;
  auto fresh = fresh_chunks(EntryChunks::kTopUp);
  pool.add(fresh);
  EntryFifo a(&pool), b(&pool);
  std::deque<Entry> ma, mb;
  uint64_t seq = 1;
  size_t peak = EntryChunks::kTopUp;  // chunks in existence: the most ever needed at once
  for (int round = 0; round < 300; ++round) {
    EntryFifo& f = round % 2 ? a : b;
    std::deque<Entry>& m = round % 2 ? ma : mb;
    const size_t pushes = rng() % (2 * EntryFifo::kChunkEntries);
    for (size_t i = 0; i < pushes; ++i) {
      f.push_back(entry(seq));
      m.push_back(entry(seq++));
    }
    peak = std::max(peak, a.chunks_held() + b.chunks_held());
    ASSERT_LT(peak, EntryChunks::kKeepMax);  // so the pool frees none in this test
    const size_t pops = std::min<size_t>(m.size(), rng() % (2 * EntryFifo::kChunkEntries + 1));
    for (size_t i = 0; i < pops; ++i) {
      f.pop_front();
      m.pop_front();
    }
    expect_same(a, ma);
    expect_same(b, mb);
    // Every chunk is held by a backlog or spare in the pool; new ones were made only when
    // the backlogs needed more than existed.
    ASSERT_EQ(a.chunks_held() + b.chunks_held() + pool.spares(), peak) << round;
  }
  while (!a.empty())
    a.pop_front();
  while (!b.empty())
    b.pop_front();
  EXPECT_EQ(a.chunks_held() + b.chunks_held(), 0u);
  EXPECT_EQ(pool.spares(), peak);
}

}  // namespace
}  // namespace sluice::queue
