// Test helpers: STOMP frames as strings (with their NUL), every command and version, and
// readable GoogleTest output for commands.
#pragma once

#include <array>
#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "dataplane/session/stomp.h"

namespace sluice::session {

// Readable failure messages (GoogleTest finds it by argument-dependent lookup).
inline void PrintTo(Command c, std::ostream* os) {
  *os << command_name(c);
}

}  // namespace sluice::session

namespace sluice::session::testing {

inline constexpr std::array<Command, 15> kAllCommands = {
    Command::kConnect,   Command::kStomp,       Command::kConnected, Command::kSend,
    Command::kSubscribe, Command::kUnsubscribe, Command::kAck,       Command::kNack,
    Command::kBegin,     Command::kCommit,      Command::kAbort,     Command::kDisconnect,
    Command::kMessage,   Command::kReceipt,     Command::kError,
};
inline constexpr std::array<Version, 3> kAllVersions = {Version::k1_0, Version::k1_1,
                                                        Version::k1_2};

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
