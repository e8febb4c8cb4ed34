// Crash test: a child process (spill_crash_child) appends from 12 producer threads and prints
// each append once it is reported durable; it is SIGKILLed at a random moment, 100 times with
// fixed seeds. After each kill the log is recovered here and checked: every message reported
// durable is present, intact and has the sequence number reported; every message present is
// intact (CRC and content) and whole; each producer's surviving messages are contiguous (no
// hole, nothing from an unfinished batch half-present); delivered messages stay delivered.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/queue_test_util.h"

#ifndef SPILL_CRASH_CHILD
#error "SPILL_CRASH_CHILD must name the child executable"
#endif

namespace sluice::queue {
namespace {

constexpr int kIterations = 100;
constexpr int kRunsPerDirectory = 10;  // then a fresh directory
constexpr uint32_t kProducers = 12;
constexpr int kKillAfterMsMax = 150;
// One kill in kFromStartEvery is timed from the child's start, so it can land while the log is
// opened and recovered; the others from its ready line, so they land among the appends.
constexpr int kFromStartEvery = 4;
constexpr std::chrono::milliseconds kReadyTimeout{20000};
constexpr uint64_t kSeed = 20261130;

std::string crash_body(uint64_t producer, uint64_t index) {  // as in spill_crash_child.cc
  std::mt19937_64 rng(producer * 1000003u + index);
  std::string b(size_t(rng() % 3000), '\0');
  for (char& c : b)
    c = char('a' + rng() % 26);
  return b;
}

using Key = std::pair<uint64_t, uint64_t>;  // (producer id, index)

// Runs the child and SIGKILLs it `kill_after_ms` after its start (`from_start`) or after it
// printed its ready line (the log open and recovered); returns what it printed.
std::string run_child(const std::string& dir, uint64_t run, uint64_t seed, int kill_after_ms,
                      bool from_start) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  const std::string run_s = std::to_string(run), seed_s = std::to_string(seed),
                    prod_s = std::to_string(kProducers);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execl(SPILL_CRASH_CHILD, SPILL_CRASH_CHILD, dir.c_str(), run_s.c_str(), seed_s.c_str(),
            prod_s.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[65536];
  const auto start = std::chrono::steady_clock::now();
  const auto after = std::chrono::milliseconds(kill_after_ms);
  // Until the ready line arrives the kill waits at most kReadyTimeout (bounded either way).
  auto kill_at = from_start ? start + after : start + kReadyTimeout;
  bool killed = false, ready = from_start;
  for (;;) {
    if (!ready && out.find("R\n") != std::string::npos) {
      ready = true;
      kill_at = std::chrono::steady_clock::now() + after;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!killed && now >= kill_at) {
      ::kill(pid, SIGKILL);  // only the child this test started
      killed = true;
    }
    const int wait_ms =
        killed ? 1000
               : int(std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count());
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, std::max(wait_ms, 0));
    if (r > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;  // EOF: the child is gone
      out.append(buf, size_t(n));
    } else if (killed && r == 0) {
      break;  // bounded: never wait for ever
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child ended on its own (status " << status << ")";
  EXPECT_TRUE(ready) << "the child never opened its log within " << kReadyTimeout.count() << " ms";
  return out;
}

TEST(SpillCrash, EveryReportedAppendSurvivesSigkillAndNothingPartialDoes) {
  std::mt19937_64 rng(kSeed);
  std::unique_ptr<test::TempDir> base;
  std::map<Key, uint64_t> reported;  // reported durable, not yet delivered: seq
  std::set<Key> delivered;
  uint64_t total_reported = 0, total_seen = 0, torn = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < kIterations; ++it) {
    if (it % kRunsPerDirectory == 0) {
      base.reset();
      base = std::make_unique<test::TempDir>("/tmp");  // a real disk, not tmpfs
      reported.clear();
      delivered.clear();
    }
    const std::string dir = base->path() + "/spill";
    const int kill_ms = int(rng() % kKillAfterMsMax);
    const bool from_start = it % kFromStartEvery == 0;
    const std::string out = run_child(dir, uint64_t(it) + 1, rng(), kill_ms, from_start);
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (lines.eof()) break;     // last line without its newline: cut by the kill
      if (line == "R") continue;  // the ready line
      unsigned long long id, idx, seq;
      ASSERT_EQ(std::sscanf(line.c_str(), "D %llu %llu %llu", &id, &idx, &seq), 3) << line;
      reported[{id, idx}] = seq;
      ++total_reported;
    }

    SpillOptions o;
    o.dir = dir;
    o.segment_bytes = 256 << 10;
    o.max_bytes = 1ull << 30;
    o.record_bytes_max = 16 << 10;
    o.batch_bytes_max = 64 << 10;
    RecoveryReport rep;
    auto opened = SpillLog::open(o, &rep);
    ASSERT_TRUE(opened) << opened.error().message;
    std::unique_ptr<SpillLog> log = std::move(*opened);
    for (const RecoveryIssue& i : rep.issues) {
      ASSERT_TRUE(i.torn_tail) << "iteration " << it
                               << ": a crash damaged more than the tail: " << i.path << " at "
                               << i.offset << ": " << i.reason;
      ++torn;
    }
    std::map<uint64_t, std::vector<uint64_t>> by_producer;  // id -> indices in seq order
    std::set<Key> present;
    for (const QueueStats& q : log->queues()) {
      for (const auto& r : test::read_all(*log, q.vhost, q.queue)) {
        unsigned long long id, idx;
        ASSERT_EQ(std::sscanf(r.headers.c_str(), "p:%llu\ni:%llu\n", &id, &idx), 2);
        ASSERT_EQ(r.body, crash_body(id, idx)) << "damaged message " << id << "/" << idx;
        ASSERT_TRUE(present.insert({id, idx}).second) << "duplicate " << id << "/" << idx;
        ASSERT_FALSE(delivered.count({id, idx})) << "delivered message came back";
        auto rep_it = reported.find({id, idx});
        if (rep_it != reported.end()) {
          ASSERT_EQ(rep_it->second, r.seq);
        }
        by_producer[id].push_back(idx);
        ++total_seen;
      }
    }
    for (const auto& [key, seq] : reported)
      ASSERT_TRUE(present.count(key))
          << "iteration " << it << ": message " << key.first << "/" << key.second << " (seq " << seq
          << ") was reported durable and is gone";
    for (const auto& [id, idxs] : by_producer)
      for (size_t k = 1; k < idxs.size(); ++k)
        ASSERT_EQ(idxs[k], idxs[k - 1] + 1) << "hole in producer " << id << "'s messages";

    // Deliver a random prefix of some queues, so cursors and deletion cross crashes too.
    for (const QueueStats& q : log->queues()) {
      if (q.messages == 0 || rng() % 2) continue;
      const auto recs = test::read_all(*log, q.vhost, q.queue);
      const size_t upto = size_t(rng() % recs.size());
      log->mark_delivered(q.vhost, q.queue, recs[upto].seq);
      for (size_t k = 0; k <= upto; ++k) {
        unsigned long long id, idx;
        std::sscanf(recs[k].headers.c_str(), "p:%llu\ni:%llu\n", &id, &idx);
        delivered.insert({id, idx});
        reported.erase({id, idx});
      }
    }
    log->start();
    log->sync();
    log.reset();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "crash test: %d kills, %llu appends reported durable, %llu messages checked, "
      "%llu torn tails repaired, %.1f s\n",
      kIterations, static_cast<unsigned long long>(total_reported),
      static_cast<unsigned long long>(total_seen), static_cast<unsigned long long>(torn), secs);
  EXPECT_GT(total_reported, uint64_t(kIterations));  // the test did exercise something
}

}  // namespace
}  // namespace sluice::queue
