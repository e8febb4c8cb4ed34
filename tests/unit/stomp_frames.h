// Test helpers: STOMP frames as strings (with their NUL), and a fixed clock for the session core.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::session::testing {

// frame("SEND", {{"destination", "/queue/a"}}, "body") -> "SEND\ndestination:/queue/a\n\nbody\0"
inline std::string frame(
    std::string_view command,
    std::initializer_list<std::pair<std::string_view, std::string_view>> headers,
    std::string_view body = {}, std::string_view eol = "\n") {
  std::string s(command);
  s += eol;
  for (const auto& [name, value] : headers) {
    s += name;
    s += ':';
    s += value;
    s += eol;
  }
  s += eol;
  s += body;
  s.push_back('\0');
  return s;
}

}  // namespace sluice::session::testing
