// base/: the owned descriptor, Result<T> and the annotated mutex.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <gtest/gtest.h>

#include "base/fd.h"
#include "base/mutex.h"
#include "base/result.h"

namespace sluice {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

int open_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(FdTest, ClosesWhenItGoes) {
  int raw;
  {
    base::Fd fd(open_null());
    raw = fd.get();
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
  EXPECT_EQ(errno, EBADF);
}

TEST(FdTest, MoveHandsOverOwnership) {
  base::Fd a(open_null());
  const int raw = a.get();
  base::Fd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): what a move leaves is the point
  EXPECT_EQ(b.get(), raw);
  base::Fd c(open_null());
  const int other = c.get();
  c = std::move(b);  // c's own descriptor is closed, raw is now c's
  EXPECT_FALSE(is_open(other));
  EXPECT_EQ(c.get(), raw);
  EXPECT_TRUE(is_open(raw));
}

TEST(FdTest, ReleaseGivesUpOwnershipAndCloseReports) {
  int raw;
  {
    base::Fd fd(open_null());
    raw = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(is_open(raw));
  base::Fd again(raw);
  EXPECT_EQ(again.close(), 0);
  EXPECT_FALSE(again.valid());
  EXPECT_FALSE(is_open(raw));
  EXPECT_EQ(again.close(), 0);  // nothing left to close
}

Result<int> half(int v) {
  if (v % 2 != 0) return failure("half: " + std::to_string(v) + " is odd");
  return v / 2;
}

TEST(ResultTest, CarriesTheValueOrTheMessage) {
  Result<int> ok = half(8);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 4);
  Result<int> bad = half(7);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "half: 7 is odd");
  Result<> nothing;
  EXPECT_TRUE(nothing);
}

struct Counter {
  base::Mutex mu;
  int n SLUICE_GUARDED_BY(mu) = 0;
  void add(int times) {
    for (int i = 0; i < times; ++i) {
      base::MutexLock l(mu);
      ++n;
    }
  }
  int get() {
    base::MutexLock l(mu);
    return n;
  }
};

TEST(MutexTest, MutexLockExcludesAnotherThread) {
  Counter c;
  std::thread t([&c] { c.add(100000); });
  c.add(100000);
  t.join();
  EXPECT_EQ(c.get(), 200000);
}

}  // namespace
}  // namespace sluice
