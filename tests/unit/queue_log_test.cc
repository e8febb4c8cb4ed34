// Spill log behaviour: durable appends read back in order, recovery with cursors, segment
// rollover and deletion, capacity (refuse and drop-oldest), drain-barrier events, refusals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "queue/segment_file.h"
#include "tests/unit/queue_test_util.h"

namespace sluice::queue {
namespace {

using test::append_wait;
using test::open_log;
using test::read_all;
using test::small_options;
using test::TempDir;

std::string body_of(int i, size_t n = 100) {
  std::string b(n, 'a');
  for (size_t k = 0; k < n; ++k)
    b[k] = char('a' + (i * 7 + int(k)) % 26);
  return b;
}

size_t segment_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".seg") ++n;
  return n;
}

TEST(SpillLog, AppendsBecomeDurableAndReadBackInOrderPerQueue) {
  TempDir t;
  RecoveryReport rep;
  auto log = open_log(small_options(t.path()), &rep);
  ASSERT_TRUE(log);
  log->start();
  uint64_t last_seq = 0;
  for (int i = 0; i < 90; ++i) {
    const std::string q = "q" + std::to_string(i % 3);
    const Completion c = append_wait(log->producer(uint32_t(i % 2)), uint64_t(i) + 1, "/", q,
                                     "k:" + std::to_string(i) + "\n", body_of(i));
    ASSERT_EQ(c.status, AppendStatus::kDurable);
    EXPECT_EQ(c.token, uint64_t(i + 1));
    EXPECT_GT(c.seq, last_seq);
    last_seq = c.seq;
  }
  for (int k = 0; k < 3; ++k) {
    auto recs = read_all(*log, "/", "q" + std::to_string(k));
    ASSERT_EQ(recs.size(), 30u);
    for (size_t j = 0; j < recs.size(); ++j) {
      const int i = int(j) * 3 + k;
      EXPECT_EQ(recs[j].headers, "k:" + std::to_string(i) + "\n");
      EXPECT_EQ(recs[j].body, body_of(i));
      if (j) {
        EXPECT_GT(recs[j].seq, recs[j - 1].seq);
      }
    }
  }
  EXPECT_EQ(log->metrics().appends.load(), 90u);
  EXPECT_GE(log->metrics().batches.load(), 1u);
  auto st = log->queue("/", "q1");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->messages, 30u);
  EXPECT_TRUE(read_all(*log, "/", "nope").empty());
}

TEST(SpillLog, RecoveryRebuildsBacklogsAndAppliesPersistedCursors) {
  TempDir t;
  const SpillOptions o = small_options(t.path());
  std::vector<uint64_t> seqs;
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    for (int i = 0; i < 20; ++i)
      seqs.push_back(
          append_wait(log->producer(0), uint64_t(i), "vh", "orders", "h:1\n", body_of(i)).seq);
    ASSERT_TRUE(log->mark_delivered("vh", "orders", seqs[11]));
    log->sync();
    EXPECT_EQ(log->queue("vh", "orders")->messages, 8u);
    EXPECT_EQ(log->queue("vh", "orders")->delivered_seq, seqs[11]);
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  EXPECT_TRUE(rep.issues.empty());
  EXPECT_EQ(rep.messages, 8u);
  EXPECT_EQ(rep.messages_delivered, 12u);
  auto recs = read_all(*log, "vh", "orders");
  ASSERT_EQ(recs.size(), 8u);
  EXPECT_EQ(recs[0].seq, seqs[12]);
  EXPECT_EQ(recs[0].body, body_of(12));
  // Sequence numbers keep rising across restarts.
  log->start();
  const Completion c = append_wait(log->producer(0), 99, "vh", "orders", "", "x");
  EXPECT_GT(c.seq, seqs.back());
}

TEST(SpillLog, SegmentsRollOverAndFullyDeliveredOnesAreDeleted) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 16 << 10;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  uint64_t last = 0;
  for (int i = 0; i < 100; ++i)
    last = append_wait(log->producer(0), uint64_t(i), "/", "a", "", body_of(i, 1000)).seq;
  EXPECT_GE(log->metrics().segments_created.load(), 6u);
  EXPECT_GE(segment_files(o.dir), 6u);
  EXPECT_EQ(read_all(*log, "/", "a").size(), 100u);
  ASSERT_TRUE(log->mark_delivered("/", "a", last));
  log->sync();
  // What stays: the newest segment (it carries the sequence high-water mark) and the next one,
  // prepared ahead of time.
  EXPECT_EQ(segment_files(o.dir), 2u);
  EXPECT_EQ(log->queue("/", "a")->messages, 0u);
  log.reset();
  RecoveryReport rep2;
  log = open_log(o, &rep2);
  ASSERT_TRUE(log);
  EXPECT_TRUE(rep2.issues.empty());
  EXPECT_EQ(rep2.messages, 0u);
}

// A crash can leave segments that were created (the active one, the one prepared ahead) but
// never written: they hold nothing, so recovery removes them without reporting damage.
TEST(SpillLog, EmptySegmentsLeftByACrashAreRemovedNotReported) {
  TempDir t;
  const SpillOptions o = small_options(t.path());
  std::filesystem::create_directories(o.dir);
  for (uint64_t n : {1, 2, 3}) {
    int fd = -1;
    ASSERT_EQ(create_segment_file(o.dir, -1, n, 10 * n, o.segment_bytes, true, &fd), 0);
    ::close(fd);
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  EXPECT_TRUE(rep.issues.empty()) << rep.issues.front().reason;
  EXPECT_EQ(segment_files(o.dir), 1u);
  log->start();
  // The newest header's first_seq (30) is the sequence high-water mark.
  EXPECT_GE(append_wait(log->producer(0), 1, "/", "q", "", "x").seq, 30u);
}

// Segment 2 holds only messages of "a" and is deleted once they are delivered, while segment 1
// (a's first messages and c's only one, undelivered) stays: a's cursor must survive later
// cursor writes, or a restart would bring back a's delivered messages from segment 1.
TEST(SpillLog, CursorOutlivesOutOfOrderSegmentDeletion) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 16 << 10;  // 15 records of 1040 bytes each
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    uint64_t last_a = 0, first_b = 0;
    append_wait(log->producer(0), 0, "/", "c", "", body_of(0, 1000));
    for (int i = 1; i < 30; ++i)
      last_a = append_wait(log->producer(0), uint64_t(i), "/", "a", "", body_of(i, 1000)).seq;
    for (int i = 30; i < 50; ++i) {
      const uint64_t s =
          append_wait(log->producer(0), uint64_t(i), "/", "b", "", body_of(i, 1000)).seq;
      if (!first_b) first_b = s;
    }
    ASSERT_GE(log->metrics().segments_created.load(), 4u);
    log->mark_delivered("/", "a", last_a);
    log->sync();
    EXPECT_GE(log->metrics().segments_deleted.load(), 1u);  // segment 2
    EXPECT_TRUE(read_all(*log, "/", "a").empty());
    log->mark_delivered("/", "b", first_b);  // the cursor file is written again
    log->sync();
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  EXPECT_TRUE(read_all(*log, "/", "a").empty()) << "delivered messages came back";
  EXPECT_EQ(read_all(*log, "/", "b").size(), 19u);
  EXPECT_EQ(read_all(*log, "/", "c").size(), 1u);
}

TEST(SpillLog, QueueLimitRefusesWithSpillFullUntilDelivered) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.queue_messages_max = 5;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  uint64_t s = 0;
  for (int i = 0; i < 5; ++i)
    s = append_wait(log->producer(0), uint64_t(i), "/", "q", "", "m").seq;
  const Completion c = append_wait(log->producer(0), 5, "/", "q", "", "m");
  EXPECT_EQ(c.status, AppendStatus::kQueueFull);
  EXPECT_EQ(append_status_message(c.status).substr(0, 10), "spill full");
  EXPECT_EQ(log->metrics().refused_queue_full.load(), 1u);
  // Other queues are not affected.
  EXPECT_EQ(append_wait(log->producer(0), 6, "/", "other", "", "m").status, AppendStatus::kDurable);
  log->mark_delivered("/", "q", s);
  log->sync();
  EXPECT_EQ(append_wait(log->producer(0), 7, "/", "q", "", "m").status, AppendStatus::kDurable);
}

// The per-queue limits changed while the log runs (sluicectl set spill.queue_*_max): the next
// appends are checked against them; messages already kept stay.
TEST(SpillLog, QueueLimitsChangedWhileRunningApplyToTheNextAppends) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.queue_messages_max = 5;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  EXPECT_EQ(log->queue_limits(), (SpillLog::QueueLimits{5, o.queue_bytes_max}));
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(append_wait(log->producer(0), uint64_t(i), "/", "q", "", "m").status,
              AppendStatus::kDurable);
  // Lowered below what the queue holds: its three stay, the next is refused.
  ASSERT_TRUE(log->set_queue_limits(2, o.queue_bytes_max));
  EXPECT_EQ(append_wait(log->producer(0), 3, "/", "q", "", "m").status, AppendStatus::kQueueFull);
  EXPECT_EQ(read_all(*log, "/", "q").size(), 3u);
  // Raised above the value at start: appends go on past it.
  ASSERT_TRUE(log->set_queue_limits(8, o.queue_bytes_max));
  for (int i = 4; i < 9; ++i)
    ASSERT_EQ(append_wait(log->producer(0), uint64_t(i), "/", "q", "", "m").status,
              AppendStatus::kDurable)
        << i;
  EXPECT_EQ(append_wait(log->producer(0), 9, "/", "q", "", "m").status, AppendStatus::kQueueFull);
  // The byte limit likewise: a record larger than it is refused.
  ASSERT_TRUE(log->set_queue_limits(100, 64));
  EXPECT_EQ(append_wait(log->producer(0), 10, "/", "other", "", std::string(200, 'x')).status,
            AppendStatus::kQueueFull);
  // Zeros are refused and change nothing.
  EXPECT_FALSE(log->set_queue_limits(0, 64));
  EXPECT_FALSE(log->set_queue_limits(100, 0));
  EXPECT_EQ(log->queue_limits(), (SpillLog::QueueLimits{100, 64}));
  EXPECT_EQ(log->metrics().refused_queue_full.load(), 3u);
}

// A refusal can open a batch (a full queue's append first, while the previous batch is being
// written); the records placed after it must still go at the segment's write end, not where
// the same batch buffer wrote two batches ago.
TEST(SpillLog, RefusalsOpeningABatchDoNotMisplaceTheRecordsAfterThem) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 4 << 20;
  o.queue_messages_max = 20;
  std::vector<std::string> kept;
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    for (int i = 0; i < 20; ++i)
      ASSERT_EQ(append_wait(log->producer(0), uint64_t(i), "/", "full", "", "f").status,
                AppendStatus::kDurable);
    // Alternate: refused (queue full) and accepted, as many in flight as the ring takes.
    SpillProducer& p = log->producer(0);
    uint64_t next = 0, answered = 0;
    int misanswered = 0;
    const uint64_t total = 4000;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (answered < total && std::chrono::steady_clock::now() < deadline) {
      while (next < total) {
        const bool refused = next % 2 == 0;
        const std::string body = refused ? "r" : body_of(int(next), 300);
        // Accepted ones rotate over queues so that none reaches its limit.
        const std::string queue = refused ? "full" : "ok" + std::to_string(next % 400);
        if (p.append(next, "/", queue, "", body) != AppendResult::kQueued) break;
        ++next;
      }
      p.poll(
          [&](const Completion& c) {
            const AppendStatus want =
                c.token % 2 == 0 ? AppendStatus::kQueueFull : AppendStatus::kDurable;
            if (c.token != answered || c.status != want) ++misanswered;
            ++answered;
          },
          64);
      p.wait(20);
    }
    ASSERT_EQ(answered, total);
    EXPECT_EQ(misanswered, 0);
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  EXPECT_TRUE(rep.issues.empty()) << rep.issues[0].reason;
  EXPECT_EQ(rep.messages, 20u + 2000u);
  EXPECT_EQ(read_all(*log, "/", "full").size(), 20u);
  for (int k = 1; k < 400; k += 2) {
    const auto recs = read_all(*log, "/", "ok" + std::to_string(k));
    ASSERT_EQ(recs.size(), 10u) << "queue ok" << k;
    for (size_t j = 0; j < recs.size(); ++j)
      ASSERT_EQ(recs[j].body, body_of(k + int(j) * 400, 300)) << "queue ok" << k << " #" << j;
  }
}

// Direct batches rewrite the block they start in (its earlier records included) and pad to a
// whole block; buffered ones write just their records. Both must leave the same records: every
// one readable while the log runs and after a restart, across segment rollovers.
void write_mixed_sizes_and_reopen(const SpillOptions& o, bool expect_direct) {
  const int n = 600;
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    SpillProducer& p = log->producer(0);
    uint64_t next = 0, answered = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (answered < uint64_t(n) && std::chrono::steady_clock::now() < deadline) {
      // Sizes from 1 byte to 3 KiB, so batches start anywhere within a block.
      while (next < uint64_t(n) &&
             p.append(next, "/", "q" + std::to_string(next % 3), "k:v\n",
                      body_of(int(next), 1 + (next * 997) % 3000)) == AppendResult::kQueued)
        ++next;
      p.poll(
          [&](const Completion& c) {
            EXPECT_EQ(c.status, AppendStatus::kDurable) << c.token;
            ++answered;
          },
          64);
      p.wait(20);
    }
    ASSERT_EQ(answered, uint64_t(n));
    const SpillMetrics& m = log->metrics();
    EXPECT_GT(m.segments_created.load(), 3u);
    EXPECT_GT(m.batches.load(), 0u);
    EXPECT_EQ(m.batches_direct.load(), expect_direct ? m.batches.load() : 0u);
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(read_all(*log, "/", "q" + std::to_string(k)).size(), size_t(n / 3));
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  EXPECT_TRUE(rep.issues.empty()) << rep.issues[0].reason;
  EXPECT_EQ(rep.messages, uint64_t(n));
  for (int k = 0; k < 3; ++k) {
    const auto recs = read_all(*log, "/", "q" + std::to_string(k));
    ASSERT_EQ(recs.size(), size_t(n / 3));
    for (size_t j = 0; j < recs.size(); ++j) {
      const int i = k + 3 * int(j);
      ASSERT_EQ(recs[j].headers, "k:v\n");
      ASSERT_EQ(recs[j].body, body_of(i, 1 + (size_t(i) * 997) % 3000)) << "message " << i;
    }
  }
}

TEST(SpillLog, DirectWritesLeaveEveryRecordIntact) {
  TempDir t("/tmp");  // a disk file system: O_DIRECT for real, not tmpfs
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 256 << 10;
  write_mixed_sizes_and_reopen(o, true);
}

TEST(SpillLog, BufferedWritesWhenDirectIsOffOrTheSegmentSizeIsNotWholeBlocks) {
  {
    TempDir t("/tmp");
    SpillOptions o = small_options(t.path());
    o.segment_bytes = 256 << 10;
    o.direct_io = false;
    write_mixed_sizes_and_reopen(o, false);
  }
  TempDir t("/tmp");
  SpillOptions o = small_options(t.path());
  o.segment_bytes = (256 << 10) + 512;
  write_mixed_sizes_and_reopen(o, false);
}

// How many descriptors this process holds on each segment file of `dir` (/proc/self/fd).
std::map<std::string, int> segment_descriptors(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, int> n;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".seg") n[fs::canonical(e.path()).string()] = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (ec) continue;
    const auto it = n.find(target.string());
    if (it != n.end()) ++it->second;
  }
  return n;
}

TEST(SpillLog, ASealedSegmentKeepsOnlyTheReadersDescriptor) {
  RecoveryReport rep;
  TempDir t("/tmp");  // a disk file system: segments are written through an O_DIRECT descriptor
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 256 << 10;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  const int n = 300;  // about 600 KiB: two segments sealed, a third being written
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(
        append_wait(log->producer(0), uint64_t(i), "/", "q", "k:v\n", body_of(i, 2000)).status,
        AppendStatus::kDurable)
        << i;
  ASSERT_GT(log->metrics().batches_direct.load(), 0u);
  ASSERT_GE(log->metrics().segments_created.load(), 3u);
  const auto fds = segment_descriptors(o.dir);
  int written = 0, one = 0;
  for (const auto& [path, count] : fds) {
    EXPECT_GE(count, 1) << path;
    EXPECT_LE(count, 2) << path;
    written += count == 2;
    one += count == 1;
  }
  // Only the segment being written keeps its write descriptor; the sealed ones (and a prepared
  // one, if any) hold the one their readers use.
  EXPECT_EQ(written, 1);
  EXPECT_GE(one, 2);
  // Reading through the remaining descriptors still works.
  const auto recs = read_all(*log, "/", "q");
  ASSERT_EQ(recs.size(), size_t(n));
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(recs[size_t(i)].body, body_of(i, 2000)) << i;
}

TEST(SpillLog, DropOldestKeepsTheNewestAndSurvivesRestart) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.queue_messages_max = 5;
  o.on_full = OnFull::kDropOldest;
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    for (int i = 0; i < 8; ++i)
      ASSERT_EQ(append_wait(log->producer(0), uint64_t(i), "/", "q", "", body_of(i)).status,
                AppendStatus::kDurable);
    EXPECT_EQ(log->metrics().dropped.load(), 3u);
    auto recs = read_all(*log, "/", "q");
    ASSERT_EQ(recs.size(), 5u);
    EXPECT_EQ(recs[0].body, body_of(3));
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  auto recs = read_all(*log, "/", "q");
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0].body, body_of(3));
}

TEST(SpillLog, MaxBytesRefusesNewSegmentsThenRecoversAfterDelivery) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 16 << 10;
  o.max_bytes = 3 * o.segment_bytes;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  int ok = 0;
  uint64_t last = 0;
  AppendStatus refused = AppendStatus::kDurable;
  for (int i = 0; i < 200 && refused == AppendStatus::kDurable; ++i) {
    const Completion c = append_wait(log->producer(0), uint64_t(i), "/", "q", "", body_of(i, 1000));
    if (c.status == AppendStatus::kDurable) {
      ++ok;
      last = c.seq;
    } else {
      refused = c.status;
    }
  }
  EXPECT_EQ(refused, AppendStatus::kSpillFull);
  EXPECT_GT(ok, 20);
  EXPECT_LE(log->metrics().disk_bytes.load(), o.max_bytes);
  EXPECT_EQ(log->metrics().refused_spill_full.load(), 1u);
  EXPECT_EQ(read_all(*log, "/", "q").size(), size_t(ok));
  log->mark_delivered("/", "q", last);
  log->sync();
  EXPECT_EQ(append_wait(log->producer(0), 1000, "/", "q", "", "x").status, AppendStatus::kDurable);
}

// spill.max_bytes set while the log runs (sluicectl set, a reload): a raise lets a full log take
// appends again, a lowering refuses new segments once the one in use is full, and nothing that
// was acknowledged is removed either way.
TEST(SpillLog, MaxBytesChangedWhileRunningAppliesToTheNextSegment) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 16 << 10;
  o.max_bytes = 3 * o.segment_bytes;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  EXPECT_EQ(log->max_bytes(), o.max_bytes);
  int next = 0, durable = 0;
  // Appends 1000-byte bodies until one is refused; returns how many were durable.
  auto fill = [&] {
    int ok = 0;
    for (int n = 0; n < 400; ++n, ++next) {
      const Completion c =
          append_wait(log->producer(0), uint64_t(next), "/", "q", "", body_of(next, 1000));
      if (c.status != AppendStatus::kDurable) {
        EXPECT_EQ(c.status, AppendStatus::kSpillFull);
        ++next;
        return ok;
      }
      ++ok;
    }
    ADD_FAILURE() << "never refused";
    return ok;
  };
  const int first = fill();
  EXPECT_GT(first, 20);
  durable += first;
  // Raised: the full log takes appends again, up to the new size.
  ASSERT_TRUE(log->set_max_bytes(6 * o.segment_bytes));
  const int second = fill();
  EXPECT_GT(second, 20);
  durable += second;
  EXPECT_LE(log->metrics().disk_bytes.load(), 6 * o.segment_bytes);
  EXPECT_GT(log->metrics().disk_bytes.load(), 3 * o.segment_bytes);
  // Lowered below what the segments take: nothing is removed, and appends stay refused.
  ASSERT_TRUE(log->set_max_bytes(2 * o.segment_bytes));
  EXPECT_EQ(append_wait(log->producer(0), uint64_t(next), "/", "q", "", body_of(next, 1000)).status,
            AppendStatus::kSpillFull);
  ++next;
  EXPECT_EQ(read_all(*log, "/", "q").size(), size_t(durable));
  // Under two segments is refused and changes nothing.
  EXPECT_FALSE(log->set_max_bytes(2 * o.segment_bytes - 1));
  EXPECT_EQ(log->max_bytes(), 2 * o.segment_bytes);
  EXPECT_EQ(log->metrics().refused_spill_full.load(), 3u);
}

TEST(SpillLog, MaxBytesDropOldestDropsTheOldestSegment) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.segment_bytes = 16 << 10;
  o.max_bytes = 3 * o.segment_bytes;
  o.on_full = OnFull::kDropOldest;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(append_wait(log->producer(0), uint64_t(i), "/", "q", "", body_of(i, 1000)).status,
              AppendStatus::kDurable);
  EXPECT_GT(log->metrics().dropped.load(), 100u);
  EXPECT_LE(log->metrics().disk_bytes.load(), o.max_bytes);
  auto recs = read_all(*log, "/", "q");
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.back().body, body_of(199, 1000));
  EXPECT_EQ(recs.size() + log->metrics().dropped.load(), 200u);
}

TEST(SpillLog, BacklogEventsMarkTheDrainBarrier) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  std::mutex mu;
  std::vector<std::string> events;
  o.on_backlog = [&](const BacklogEvent& e) {
    std::lock_guard<std::mutex> l(mu);
    events.push_back(std::string(e.queue) + (e.nonempty ? "+" : "-"));
  };
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    const uint64_t a1 = append_wait(log->producer(0), 1, "/", "a", "", "1").seq;
    const uint64_t a2 = append_wait(log->producer(0), 2, "/", "a", "", "2").seq;
    append_wait(log->producer(0), 3, "/", "b", "", "3");
    log->mark_delivered("/", "a", a1);
    log->sync();
    {
      std::lock_guard<std::mutex> l(mu);
      EXPECT_EQ(events, (std::vector<std::string>{"a+", "b+"}));
    }
    log->mark_delivered("/", "a", a2);
    log->sync();
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(events, (std::vector<std::string>{"a+", "b+", "a-"}));
    events.clear();
  }
  RecoveryReport rep;
  auto log = open_log(o, &rep);  // b still has a backlog: reported at open
  ASSERT_TRUE(log);
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(events, (std::vector<std::string>{"b+"}));
}

TEST(SpillLog, ProducerRefusalsAreImmediateAndCounted) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.producer_ring_depth = 2;
  o.producer_arena_bytes = 10 << 10;
  RecoveryReport rep;
  auto log = open_log(o, &rep);  // not started: nothing is consumed
  ASSERT_TRUE(log);
  SpillProducer& p = log->producer(0);
  EXPECT_EQ(p.append(1, "/", "q", "", std::string(9000, 'x')), AppendResult::kTooLarge);
  EXPECT_EQ(p.append(1, "", "q", "", "x"), AppendResult::kBadName);
  EXPECT_EQ(p.append(1, "/", std::string(kQueueBytesMax + 1, 'q'), "", "x"),
            AppendResult::kBadName);
  EXPECT_EQ(p.append(1, "/", "q", "", std::string(6000, 'x')), AppendResult::kQueued);
  EXPECT_EQ(p.append(2, "/", "q", "", std::string(6000, 'x')), AppendResult::kArenaFull);
  EXPECT_EQ(p.append(3, "/", "q", "", "small"), AppendResult::kQueued);
  EXPECT_EQ(p.append(4, "/", "q", "", "small"), AppendResult::kRingFull);
  EXPECT_EQ(log->metrics().refused_arena_full.load(), 1u);
  EXPECT_EQ(log->metrics().refused_ring_full.load(), 1u);
  EXPECT_EQ(log->metrics().refused_too_large.load(), 1u);
  log->start();
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 100 && tokens.size() < 2; ++i) {
    p.poll([&](const Completion& c) { tokens.push_back(c.token); }, 8);
    if (tokens.size() < 2) p.wait(100);
  }
  EXPECT_EQ(tokens, (std::vector<uint64_t>{1, 3}));
  // The arena wrapped and has room again.
  EXPECT_EQ(append_wait(p, 5, "/", "q", "", std::string(6000, 'y')).status, AppendStatus::kDurable);
}

// Batched wake: append() leaves waking the spill thread to publish() or arm_notify(). Each
// round waits for the thread to fall asleep, appends 1-3 records, then publishes them one way or
// the other: were either not to wake it, the round's completions would never come.
TEST(SpillLog, BatchedAppendsReachASleepingSpillThreadAtPublishOrArmNotify) {
  TempDir t;
  RecoveryReport rep;
  auto log = open_log(small_options(t.path()), &rep);
  ASSERT_TRUE(log);
  log->start();
  SpillProducer& p = log->producer(0);
  p.set_batched_wake(true);
  uint64_t token = 0;
  for (int round = 0; round < 60; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the thread sleeps idle
    const int records = 1 + round % 3;
    for (int i = 0; i < records; ++i) {
      ++token;
      ASSERT_EQ(p.append(token, "/", "q", "", body_of(int(token))), AppendResult::kQueued);
    }
    const bool by_publish = round % 2 == 0;
    if (by_publish) p.publish();
    int seen = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (seen < records && std::chrono::steady_clock::now() < until) {
      seen +=
          int(p.poll([&](const Completion& c) { EXPECT_EQ(c.status, AppendStatus::kDurable); }, 8));
      if (seen == records) break;
      if (by_publish) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // no arm_notify()
      } else {
        p.wait(100);  // arm_notify() publishes
      }
    }
    ASSERT_EQ(seen, records) << "round " << round
                             << (by_publish ? ", publish()" : ", arm_notify()");
  }
  EXPECT_EQ(p.in_flight(), 0u);
}

TEST(SpillLog, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir t;
  RecoveryReport rep;
  auto a = open_log(small_options(t.path()), &rep);
  ASSERT_TRUE(a);
  auto b = SpillLog::open(small_options(t.path()), &rep);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("another sluiced"), std::string::npos) << b.error().message;
}

TEST(SpillLog, BadOptionsAreRefusedWithTheirName) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.max_bytes = o.segment_bytes;
  RecoveryReport rep;
  auto opened = SpillLog::open(o, &rep);
  ASSERT_FALSE(opened);
  const std::string& error = opened.error().message;
  EXPECT_NE(error.find("spill.max_bytes"), std::string::npos) << error;
}

TEST(SpillLog, ConcurrentProducersGetTheirCompletionsInOrder) {
  TempDir t;
  SpillOptions o = small_options(t.path());
  o.producers = 4;
  RecoveryReport rep;
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  log->start();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t pi = 0; pi < 4; ++pi)
    threads.emplace_back([&, pi] {
      SpillProducer& p = log->producer(pi);
      uint64_t next = 1, expect = 1;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (expect <= 500 && std::chrono::steady_clock::now() < deadline) {
        while (next <= 500 && p.append(next, "/", "q" + std::to_string(pi), "",
                                       body_of(int(next))) == AppendResult::kQueued)
          ++next;
        p.poll(
            [&](const Completion& c) {
              if (c.token != expect || c.status != AppendStatus::kDurable) ++failures;
              ++expect;
            },
            64);
        p.wait(50);
      }
      if (expect != 501) ++failures;
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int pi = 0; pi < 4; ++pi) {
    auto recs = read_all(*log, "/", "q" + std::to_string(pi));
    ASSERT_EQ(recs.size(), 500u);
    for (int i = 0; i < 500; ++i)
      ASSERT_EQ(recs[size_t(i)].body, body_of(i + 1));
  }
}

// A write still in flight when its process died completes afterwards, and its open file
// description lives until it has. Recovery waits for the writer's lock on each segment, so it
// never reads a segment while such a write lands. Here a child holds the writer's lock on a
// segment in place of that description.
TEST(SpillLog, RecoveryWaitsUntilTheLastWriterOfASegmentIsGone) {
  TempDir t;
  const SpillOptions o = small_options(t.path());
  {
    RecoveryReport rep;
    auto log = open_log(o, &rep);
    ASSERT_TRUE(log);
    log->start();
    ASSERT_EQ(append_wait(log->producer(0), 1, "/", "q", "k:1\n", body_of(1)).status,
              AppendStatus::kDurable);
  }
  std::string seg;
  for (const auto& e : std::filesystem::directory_iterator(o.dir))
    if (e.path().extension() == ".seg") seg = e.path().string();
  ASSERT_FALSE(seg.empty());

  int locked[2], release[2];
  ASSERT_EQ(::pipe(locked), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(seg.c_str(), O_WRONLY | O_CLOEXEC);
    char c = hold_writer_lock(fd) ? 'L' : 'x';
    if (::write(locked[1], &c, 1) != 1) ::_exit(2);
    if (::read(release[0], &c, 1) != 1) ::_exit(3);
    ::_exit(0);  // the description, and the lock with it, goes with the process
  }
  char c = 0;
  ASSERT_EQ(::read(locked[0], &c, 1), 1);
  ASSERT_EQ(c, 'L');

  std::atomic<bool> opened{false};
  std::unique_ptr<SpillLog> log;
  RecoveryReport rep;
  std::thread opener([&] {
    log = open_log(o, &rep);
    opened = true;
  });
  // Recovery cannot get past the locked segment, however long we give it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool opened_while_locked = opened.load();
  ASSERT_EQ(::write(release[1], "r", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  opener.join();
  EXPECT_FALSE(opened_while_locked);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(log);
  EXPECT_EQ(rep.messages, 1u);
  for (int fd : {locked[0], locked[1], release[0], release[1]})
    ::close(fd);
}

}  // namespace
}  // namespace sluice::queue
