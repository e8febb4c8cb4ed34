// SLUICE_ASSERT, for every module: invariant checks that stay on in release builds
// (TIGER_STYLE: assertions are for programmer errors; bad input is handled as an operating
// error, never asserted).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace sluice::detail {
[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "sluice: assertion failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}
}  // namespace sluice::detail

#define SLUICE_ASSERT(expr)                                     \
  do {                                                          \
    if (__builtin_expect(!(expr), 0)) [[unlikely]]              \
      ::sluice::detail::assert_fail(#expr, __FILE__, __LINE__); \
  } while (0)
