// Memory a worker sizes at start from its limits: address space reserved once (MAP_NORESERVE,
// so only touched pages cost memory) and slots of it handed to sessions; a slot given back is
// returned to the kernel (MADV_DONTNEED), so an idle spliced session holds none of it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::uring::detail {

class Region {
 public:
  Region() = default;
  ~Region() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  bool map(size_t bytes) {
    bytes_ = bytes == 0 ? 4096 : bytes;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base_ = static_cast<char*>(p);
    return true;
  }
  char* at(size_t off) const { return base_ + off; }
  // Gives the pages of [off, off + len) back; `off` page-aligned.
  void release(size_t off, size_t len) { madvise(base_ + off, len, MADV_DONTNEED); }
  size_t bytes() const { return bytes_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

inline size_t page_round(size_t n) {
  return (n + 4095) & ~size_t(4095);
}

struct NoObject {};

// `count` slots, each an object T and `stride` bytes of the region. Free slots are reused last
// in, first out; the kHotSlots most recently freed keep their pages (a busy worker reuses them
// without a madvise and a page fault per session), the rest are given back to the kernel.
template <typename T = NoObject>
class SlotPool {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kHotSlots = 64;

  bool init(uint32_t count, size_t bytes_per_slot) {
    stride_ = page_round(bytes_per_slot);
    objects_ = std::make_unique<T[]>(count);
    dirty_.assign(count, false);
    free_.reserve(count);
    for (uint32_t i = count; i > 0; --i)
      free_.push_back(i - 1);
    count_ = count;
    return region_.map(stride_ * count);
  }
  uint32_t take() {
    if (free_.empty()) return kNone;
    uint32_t i = free_.back();
    free_.pop_back();
    dirty_[i] = true;
    return i;
  }
  void give(uint32_t i) {
    free_.push_back(i);
    if (free_.size() > kHotSlots) {
      const uint32_t cold = free_[free_.size() - 1 - kHotSlots];
      if (dirty_[cold]) {
        region_.release(stride_ * cold, stride_);
        dirty_[cold] = false;
      }
    }
  }
  T& object(uint32_t i) { return objects_[i]; }
  char* bytes(uint32_t i) { return region_.at(stride_ * i); }
  uint32_t used() const { return count_ - uint32_t(free_.size()); }
  uint32_t count() const { return count_; }

 private:
  std::unique_ptr<T[]> objects_;
  std::vector<uint32_t> free_;
  std::vector<bool> dirty_;  // touched since its pages were last given back
  Region region_;
  size_t stride_ = 0;
  uint32_t count_ = 0;
};

}  // namespace sluice::uring::detail
