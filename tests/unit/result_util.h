// Test helpers for sluice::Result.
#pragma once

#include <string>

#include "base/result.h"

namespace sluice {

// The error's text, or "" when `r` holds a value: `EXPECT_EQ(error_of(r), "")` prints why it
// failed.
template <class T>
std::string error_of(const Result<T>& r) {
  return r ? std::string() : r.error().to_string();
}

}  // namespace sluice
