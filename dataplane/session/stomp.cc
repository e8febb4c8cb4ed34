// STOMP vocabulary: command and version tables, limit validation, escaping per version.
#include "dataplane/session/stomp.h"

#include <cstring>

namespace sluice::session {
namespace {

constexpr std::array<std::string_view, 15> kCommandNames = {
    "CONNECT", "STOMP",  "CONNECTED", "SEND",       "SUBSCRIBE", "UNSUBSCRIBE", "ACK",   "NACK",
    "BEGIN",   "COMMIT", "ABORT",     "DISCONNECT", "MESSAGE",   "RECEIPT",     "ERROR",
};

constexpr std::array<std::string_view, kVersionCount> kVersionNames = {"1.0", "1.1", "1.2"};

// Decoded octet for "\x" in version v, or -1 if the escape is undefined there.
int escape_value(char x, Version v) {
  switch (x) {
    case 'n':
      return '\n';
    case 'c':
      return ':';
    case '\\':
      return '\\';
    case 'r':
      return v >= Version::k1_2 ? '\r' : -1;
    default:
      return -1;
  }
}

}  // namespace

std::string_view command_name(Command c) {
  return kCommandNames[size_t(c)];
}

std::optional<Command> parse_command(std::string_view s) {
  // Length and first letter pick the candidate; one compare confirms it.
  auto is = [&](Command c) -> std::optional<Command> {
    if (kCommandNames[size_t(c)] == s) return c;
    return std::nullopt;
  };
  if (s.empty()) return std::nullopt;
  switch (s.size()) {
    case 3:
      return is(Command::kAck);
    case 4:
      return s[0] == 'S' ? is(Command::kSend) : is(Command::kNack);
    case 5:
      switch (s[0]) {
        case 'S':
          return is(Command::kStomp);
        case 'B':
          return is(Command::kBegin);
        case 'A':
          return is(Command::kAbort);
        default:
          return is(Command::kError);
      }
    case 6:
      return is(Command::kCommit);
    case 7:
      switch (s[0]) {
        case 'C':
          return is(Command::kConnect);
        case 'M':
          return is(Command::kMessage);
        default:
          return is(Command::kReceipt);
      }
    case 9:
      return s[0] == 'C' ? is(Command::kConnected) : is(Command::kSubscribe);
    case 10:
      return is(Command::kDisconnect);
    case 11:
      return is(Command::kUnsubscribe);
    default:
      return std::nullopt;
  }
}

bool command_allows_body(Command c) {
  return c == Command::kSend || c == Command::kMessage || c == Command::kError;
}

bool command_escapes_headers(Command c) {
  return c != Command::kConnect && c != Command::kStomp && c != Command::kConnected;
}

std::string_view version_name(Version v) {
  return kVersionNames[size_t(v)];
}

std::optional<Version> parse_version(std::string_view s) {
  for (size_t i = 0; i < kVersionCount; ++i) {
    if (kVersionNames[i] == s) return Version(i);
  }
  return std::nullopt;
}

std::optional<Version> VersionSet::highest() const {
  for (size_t i = kVersionCount; i-- > 0;) {
    if (has(Version(i))) return Version(i);
  }
  return std::nullopt;
}

std::string_view VersionSet::list() const {
  // Every subset of three versions, indexed by bits; avoids building strings at run time.
  static constexpr std::array<std::string_view, 8> kLists = {
      "", "1.0", "1.1", "1.0,1.1", "1.2", "1.0,1.2", "1.1,1.2", "1.0,1.1,1.2",
  };
  return kLists[bits_ & 7u];
}

bool FrameLimits::valid() const {
  return frame_bytes_max >= 64 && frame_bytes_max <= kFrameBytesCeiling && header_count_max >= 1 &&
         header_count_max <= kHeaderCountCeiling && header_line_bytes_max >= 16 &&
         header_line_bytes_max <= frame_bytes_max && body_bytes_max <= frame_bytes_max;
}

std::string_view parse_error_message(ParseError e) {
  switch (e) {
    case ParseError::kNone:
      return "no error";
    case ParseError::kUnknownCommand:
      return "unknown command";
    case ParseError::kFrameTooLarge:
      return "frame too large";
    case ParseError::kTooManyHeaders:
      return "too many headers";
    case ParseError::kHeaderLineTooLong:
      return "header line too long";
    case ParseError::kBodyTooLarge:
      return "body too large";
    case ParseError::kMalformedHeader:
      return "malformed header line";
    case ParseError::kInvalidEscape:
      return "undefined escape sequence in header";
    case ParseError::kBadContentLength:
      return "invalid content-length header";
    case ParseError::kMissingNul:
      return "content-length body not followed by NUL";
    case ParseError::kBodyNotAllowed:
      return "frame must not have a body";
    case ParseError::kNulInHeaders:
      return "NUL octet in frame headers";
  }
  return "unknown error";
}

bool header_needs_unescape(std::string_view raw) {
  if (raw.empty()) return false;  // an empty view may have a null data()
  return std::memchr(raw.data(), '\\', raw.size()) != nullptr;
}

bool header_escapes_valid(std::string_view raw, Version v) {
  const char* p = raw.data();
  const char* end = p + raw.size();
  while (p < end) {
    const void* hit = std::memchr(p, '\\', size_t(end - p));
    if (hit == nullptr) return true;
    p = static_cast<const char*>(hit) + 1;
    if (p == end || escape_value(*p, v) < 0) return false;
    ++p;
  }
  return true;
}

std::optional<size_t> unescape_header(std::string_view raw, std::span<char> out) {
  size_t n = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '\\') {
      // Validity was checked by the caller; \r is accepted here for whichever version allowed it.
      c = char(escape_value(raw[++i], Version::k1_2));
    }
    if (n == out.size()) return std::nullopt;
    out[n++] = c;
  }
  return n;
}

bool header_equals(std::string_view raw, bool escaped, std::string_view plain) {
  if (!escaped || raw.find('\\') == std::string_view::npos) return raw == plain;
  size_t j = 0;
  for (size_t i = 0; i < raw.size(); ++i, ++j) {
    char c = raw[i];
    if (c == '\\') {
      if (i + 1 == raw.size()) return false;
      int v = escape_value(raw[++i], Version::k1_2);
      if (v < 0) return false;
      c = char(v);
    }
    if (j == plain.size() || plain[j] != c) return false;
  }
  return j == plain.size();
}

}  // namespace sluice::session
