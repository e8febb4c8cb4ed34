#include "queue/huge_pages.h"

#include <sys/mman.h>

#include <new>

namespace sluice::queue {
namespace {

size_t mapped_bytes(size_t bytes) {
  return (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
}

}  // namespace

void* huge_alloc(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  // Huge pages need 2 MiB alignment: map one huge page more, then unmap the ends.
  const size_t len = mapped_bytes(bytes);
  const size_t over = len + kHugePageBytes;
  void* m = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  // The offsets are computed on the address, the pointers by arithmetic on the mapping.
  char* const base = static_cast<char*>(m);
  const uintptr_t start = reinterpret_cast<uintptr_t>(m);
  const size_t head = ((start + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1)) - start;
  if (head > 0) ::munmap(base, head);
  if (const size_t tail = over - head - len; tail > 0) ::munmap(base + head + len, tail);
  void* p = base + head;
  ::madvise(p, len, MADV_HUGEPAGE);  // a hint: without it (or on failure) small pages serve
  return p;
}

void huge_free(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
    return;
  }
  ::munmap(p, mapped_bytes(bytes));
}

}  // namespace sluice::queue
