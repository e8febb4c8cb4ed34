// The huge-page allocator behind recovery's arrays and read windows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "queue/huge_pages.h"

namespace sluice::queue {
namespace {

TEST(HugePages, SmallBlocksComeFromOperatorNewAndBigOnesAreAlignedTo2MiB) {
  void* small = huge_alloc(1000);
  ASSERT_NE(small, nullptr);
  std::memset(small, 0xab, 1000);
  huge_free(small, 1000);

  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 4096}) {
    auto* p = static_cast<uint8_t*>(huge_alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
    // Every byte of the block is writable (the mapping covers it, rounded up).
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[0], 0x5a);
    EXPECT_EQ(p[bytes - 1], 0x5a);
    huge_free(p, bytes);
  }
  huge_free(nullptr, kHugePageBytes);  // as free(nullptr): nothing
}

TEST(HugePages, AVectorKeepsItsContentsAcrossTheSwitchToHugeBlocks) {
  struct Item {
    uint64_t a, b, c, d;
  };
  std::vector<Item, HugePageAllocator<Item>> v;
  const size_t n = 3 * kHugePageBytes / sizeof(Item);  // grows through small and big blocks
  for (size_t i = 0; i < n; ++i)
    v.push_back({i, ~i, i * 7, i ^ 0x55});
  ASSERT_EQ(v.size(), n);
  EXPECT_GE(v.capacity() * sizeof(Item), kHugePageBytes);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(v[i].a, i);
    ASSERT_EQ(v[i].b, ~i);
    ASSERT_EQ(v[i].c, i * 7);
    ASSERT_EQ(v[i].d, i ^ 0x55);
  }
  v.erase(v.begin(), v.begin() + long(n / 2));
  v.shrink_to_fit();  // back below 2 MiB: from operator new again
  ASSERT_EQ(v.size(), n - n / 2);
  EXPECT_EQ(v.front().a, n / 2);
  EXPECT_EQ(v.back().a, n - 1);
}

TEST(HugePages, AByteWindowGrowsOnlyWhenAskedForMore) {
  ByteWindow w;
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.data(), nullptr);
  w.reserve(4096);
  ASSERT_NE(w.data(), nullptr);
  EXPECT_EQ(w.size(), 4096u);
  std::memset(w.data(), 1, w.size());
  const uint8_t* before = w.data();
  w.reserve(100);  // already big enough: the same block
  EXPECT_EQ(w.data(), before);
  EXPECT_EQ(w.size(), 4096u);
  w.reserve(8u << 20);
  EXPECT_EQ(w.size(), size_t(8) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % kHugePageBytes, 0u);
  std::memset(w.data(), 2, w.size());
  EXPECT_EQ(w.data()[w.size() - 1], 2);
}

}  // namespace
}  // namespace sluice::queue
