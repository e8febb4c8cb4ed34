// Memory for the large arrays the spill log builds at recovery (each segment's message index,
// each queue's backlog) and for recovery's read windows. A block of 2 MiB or more is its own
// mapping with transparent huge pages asked for (MADV_HUGEPAGE), so filling it costs one page
// fault per 2 MiB rather than one per 4 KiB: with a million recovered messages those faults
// were a third of recovery's time (bench/RESULTS.md "Spill log", recovery). Smaller blocks come
// from operator new as usual. Nothing else changes: where the kernel has no huge page to give, the
// mapping is made of small pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::queue {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// `bytes` of uninitialised memory; throws std::bad_alloc when there is none.
void* huge_alloc(size_t bytes);
// Frees what huge_alloc(bytes) returned (the same `bytes`).
void huge_free(void* p, size_t bytes) noexcept;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(huge_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { huge_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A byte buffer from huge_alloc, not zeroed (recovery reads into it before it looks at it).
class ByteWindow {
 public:
  ByteWindow() = default;
  ByteWindow(const ByteWindow&) = delete;
  ByteWindow& operator=(const ByteWindow&) = delete;
  ~ByteWindow() {
    if (p_) huge_free(p_, size_);
  }
  // At least `bytes` long; the contents are lost when it grows.
  void reserve(size_t bytes) {
    if (bytes <= size_) return;
    if (p_) huge_free(p_, size_);
    p_ = nullptr;
    size_ = 0;
    p_ = static_cast<uint8_t*>(huge_alloc(bytes));
    size_ = bytes;
  }
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sluice::queue
