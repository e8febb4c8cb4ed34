// Sessions per client address (limits.sessions_per_source_max): a fixed open-addressing table
// sized at start, linear probing with backward-shift deletion, so it never allocates or fills
// with tombstones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::uring::detail {

class SourceTable {
 public:
  // Room for `sources` distinct addresses at most half full.
  void init(uint32_t sources) {
    size_t n = 16;
    while (n < size_t(sources) * 2)
      n <<= 1;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
  }
  // The address's count after adding one, or 0 when `max` is already reached (nothing added).
  uint32_t add(uint32_t addr, uint32_t max) {
    size_t i = home(addr);
    while (slots_[i].count != 0 && slots_[i].addr != addr)
      i = (i + 1) & mask_;
    if (slots_[i].count >= max) return 0;
    slots_[i].addr = addr;
    return ++slots_[i].count;
  }
  void remove(uint32_t addr) {
    size_t i = home(addr);
    while (slots_[i].count != 0 && slots_[i].addr != addr)
      i = (i + 1) & mask_;
    if (slots_[i].count == 0) return;
    if (--slots_[i].count != 0) return;
    // Backward shift: move later members of the run into the hole.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].count != 0; j = (j + 1) & mask_) {
      size_t h = home(slots_[j].addr);
      bool movable = hole <= j ? (h <= hole || h > j) : (h <= hole && h > j);
      if (movable) {
        slots_[hole] = slots_[j];
        slots_[j] = Slot{};
        hole = j;
      }
    }
  }
  uint32_t count(uint32_t addr) const {
    for (size_t i = home(addr); slots_[i].count != 0; i = (i + 1) & mask_)
      if (slots_[i].addr == addr) return slots_[i].count;
    return 0;
  }

 private:
  struct Slot {
    uint32_t addr = 0;
    uint32_t count = 0;
  };
  size_t home(uint32_t addr) const {
    return (uint64_t(addr) * 0x9E3779B97F4A7C15ull >> 32) & mask_;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace sluice::uring::detail
