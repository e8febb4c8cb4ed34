// Deterministic choices for fuzz targets, derived from the input itself (splitmix64 seeded by an
// FNV-1a hash), so a crashing input replays exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::fuzz {

class Rng {
 public:
  explicit Rng(std::string_view data) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : data)
      h = (h ^ c) * 1099511628211ull;
    state_ = h;
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return size_t(next() % n); }

 private:
  uint64_t state_ = 0;
};

}  // namespace sluice::fuzz
