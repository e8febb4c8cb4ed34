// sluice::Result<T>: what setup and control code returns when it can fail. tl::expected
// (Debian's libexpected-dev) has C++23's std::expected interface, which g++ 12 lacks; moving to
// std::expected is a change of this header. The error is a message that names what failed: the
// key, the file and line, or the node.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace sluice {

struct Error {
  std::string message;
  // Where, for an error in a file (a config, a state file): the file, the 1-based line (0 when
  // it is not tied to a line) and the dotted key ("nodes[1].weight"). Empty otherwise, when the
  // message names what failed itself.
  std::string file;
  uint32_t line = 0;
  std::string key;

  // "sluice.toml:12: nodes[1].weight: must be between 1 and 10000": the parts that are set.
  std::string to_string() const {
    std::string s;
    if (!file.empty()) {
      s = file;
      if (line != 0) s += ":" + std::to_string(line);
      s += ": ";
    }
    if (!key.empty()) s += key + ": ";
    return s + message;
  }
};

template <class T = void>
using Result = tl::expected<T, Error>;

// `return failure("limits: frame_bytes_max must be ...");` in a function returning Result<T>.
inline tl::unexpected<Error> failure(std::string message) {
  return tl::unexpected<Error>(Error{std::move(message)});
}

// An error in a file, at a line (0: none) and a key (empty: none).
inline tl::unexpected<Error> failure_in(std::string file, uint32_t line, std::string key,
                                        std::string message) {
  return tl::unexpected<Error>(Error{std::move(message), std::move(file), line, std::move(key)});
}

}  // namespace sluice
