// sluice::Result<T>: what setup and control code returns when it can fail. tl::expected
// (Debian's libexpected-dev) has C++23's std::expected interface, which g++ 12 lacks; moving to
// std::expected is a change of this header. The error is a message that names what failed: the
// key, the file and line, or the node.
#pragma once

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace sluice {

struct Error {
  std::string message;
};

template <class T = void>
using Result = tl::expected<T, Error>;

// `return failure("limits: frame_bytes_max must be ...");` in a function returning Result<T>.
inline tl::unexpected<Error> failure(std::string message) {
  return tl::unexpected<Error>(Error{std::move(message)});
}

}  // namespace sluice
