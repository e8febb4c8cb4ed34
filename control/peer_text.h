// Text that came from a peer (a broker's error, an HTTP reason, a URL part) made fit for one
// error or log line: control bytes become '?', and long text is cut with "...".
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::control {

// Text that came from a peer is cut to this many bytes in an error or log line.
inline constexpr size_t kQuotedBytesMax = 200;

inline std::string printable(std::string_view s, size_t max) {
  std::string out;
  const size_t n = std::min(s.size(), max);
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out.push_back(c < 0x20 || c == 0x7f ? '?' : char(c));
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace sluice::control
