// Disk-full test: the spill log on a 4 MiB tmpfs the test mounts itself, filled up by a filler
// file. Appends are refused with a "spill full" status, nothing durable is damaged (checked by
// recovering), and appends succeed again once the filler is deleted. Needs root (CI runs as
// root); without it the test fails and says why, it does not skip.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "tests/unit/queue_test_util.h"

namespace sluice::queue {
namespace {

constexpr uint64_t kFsBytes = 4 << 20;
constexpr size_t kBodyBytes = 4000;
constexpr int kAppendsMax = 2000;  // bound: 4 MiB cannot hold this many

class SpillDiskFull : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "the disk-full test mounts a tmpfs and needs root (CI runs as "
                                  "root); run it as root";
    char tmpl[] = "/tmp/sluice-diskfull-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr) << std::strerror(errno);
    mnt_ = tmpl;
    const std::string opts = "size=" + std::to_string(kFsBytes);
    ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, opts.c_str()), 0)
        << "mount -t tmpfs -o " << opts << " " << mnt_ << ": " << std::strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(mnt_.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
    if (!mnt_.empty()) ::rmdir(mnt_.c_str());
  }

  SpillOptions options(bool preallocate) const {
    SpillOptions o;
    o.dir = mnt_ + "/spill";
    o.segment_bytes = 512 << 10;
    o.max_bytes = 1ull << 30;  // the file system, not the option, is what runs out
    o.record_bytes_max = 16 << 10;
    o.batch_bytes_max = 64 << 10;
    o.producer_ring_depth = 16;
    o.producer_arena_bytes = 64 << 10;
    o.preallocate = preallocate;
    return o;
  }

  // Leaves `leave` bytes free on the file system.
  void fill(uint64_t leave) {
    struct statvfs v;
    ASSERT_EQ(::statvfs(mnt_.c_str(), &v), 0);
    const uint64_t free_bytes = uint64_t(v.f_bavail) * v.f_frsize;
    ASSERT_GT(free_bytes, leave);
    std::ofstream f(filler(), std::ios::binary);
    std::string chunk(4096, 'f');
    for (uint64_t n = 0; n + 4096 <= free_bytes - leave; n += 4096)
      f.write(chunk.data(), std::streamsize(chunk.size()));
    f.close();
  }
  std::string filler() const { return mnt_ + "/filler"; }

  // Appends until the first refusal; returns (seq -> body) of the durable ones and the
  // refusal.
  AppendStatus fill_log(SpillLog& log, int first, std::map<uint64_t, std::string>* durable) {
    for (int i = first; i < first + kAppendsMax; ++i) {
      const std::string body(kBodyBytes, char('a' + i % 26));
      const Completion c = test::append_wait(log.producer(0), uint64_t(i), "/", "full", "", body);
      if (c.status != AppendStatus::kDurable) return c.status;
      (*durable)[c.seq] = body;
    }
    return AppendStatus::kDurable;
  }

  void expect_exactly(SpillLog& log, const std::map<uint64_t, std::string>& durable) {
    std::map<uint64_t, std::string> got;
    for (auto& r : test::read_all(log, "/", "full"))
      got[r.seq] = r.body;
    EXPECT_EQ(got.size(), durable.size());
    EXPECT_TRUE(got == durable) << "recovered messages differ from the durable ones";
  }

  void run(bool preallocate) {
    const SpillOptions o = options(preallocate);
    std::map<uint64_t, std::string> durable;
    {
      RecoveryReport rep;
      auto log = test::open_log(o, &rep);
      ASSERT_TRUE(log);
      log->start();
      ASSERT_EQ(test::append_wait(log->producer(0), 0, "/", "full", "", "first").status,
                AppendStatus::kDurable);
      durable.clear();
      for (auto& r : test::read_all(*log, "/", "full"))
        durable[r.seq] = r.body;
      // Less room than a segment: the next segment (or, without preallocation, the next
      // writes) cannot get space.
      ASSERT_NO_FATAL_FAILURE(fill(200 << 10));
      const AppendStatus refused = fill_log(*log, 1, &durable);
      EXPECT_EQ(refused, AppendStatus::kDiskFull);
      EXPECT_EQ(append_status_message(refused).substr(0, 10), "spill full");
      EXPECT_GT(log->metrics().refused_disk.load(), 0u);
      EXPECT_GT(log->metrics().disk_errors.load(), 0u);
      // Still full: refused again, and the log is unharmed.
      EXPECT_NE(test::append_wait(log->producer(0), 5000, "/", "full", "",
                                  std::string(kBodyBytes * 3, 'z'))
                    .status,
                AppendStatus::kDurable);
      expect_exactly(*log, durable);
    }
    {
      RecoveryReport rep;  // recovery on the full disk: nothing durable damaged
      auto log = test::open_log(o, &rep);
      ASSERT_TRUE(log);
      for (const RecoveryIssue& i : rep.issues)
        ADD_FAILURE() << "recovery issue on the full disk: " << i.path << ": " << i.reason;
      expect_exactly(*log, durable);
      // Space freed: appends succeed again.
      ASSERT_EQ(::unlink(filler().c_str()), 0);
      log->start();
      for (int i = 0; i < 50; ++i) {
        const std::string body(kBodyBytes, char('A' + i % 26));
        const Completion c =
            test::append_wait(log->producer(0), 10000 + uint64_t(i), "/", "full", "", body);
        ASSERT_EQ(c.status, AppendStatus::kDurable) << "append " << i << " after freeing space";
        durable[c.seq] = body;
      }
    }
    RecoveryReport rep;
    auto log = test::open_log(o, &rep);
    ASSERT_TRUE(log);
    EXPECT_TRUE(rep.issues.empty());
    expect_exactly(*log, durable);
  }

  std::string mnt_;
  bool mounted_ = false;
};

TEST_F(SpillDiskFull, PreallocatedSegmentsRefuseWhenNoSegmentFitsAndRecoverAfterFreeing) {
  run(true);
}

// Without preallocation the write itself hits ENOSPC: the failed batch is answered with the
// error, its bytes are given back, and it does not come back after recovery.
TEST_F(SpillDiskFull, FailedWritesAreRefusedLeaveNoTraceAndRecoverAfterFreeing) {
  run(false);
}

}  // namespace
}  // namespace sluice::queue
