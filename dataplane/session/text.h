// A fixed-capacity text buffer for composing ERROR details without allocating; output that does
// not fit is cut, never overflowed.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice::session::detail {

template <size_t N>
class Text {
 public:
  Text& operator<<(std::string_view s) {
    size_t k = std::min(s.size(), N - n_);
    std::memcpy(buf_.data() + n_, s.data(), k);
    n_ += k;
    return *this;
  }
  Text& operator<<(uint64_t v) {
    char d[20];
    auto r = std::to_chars(d, d + sizeof d, v);
    return *this << std::string_view(d, size_t(r.ptr - d));
  }
  std::string_view view() const { return std::string_view(buf_.data(), n_); }
  void clear() { n_ = 0; }

 private:
  std::array<char, N> buf_;  // written before read
  size_t n_ = 0;
};

}  // namespace sluice::session::detail
