// STOMP vocabulary shared by the codec, the prelude and the spill session: commands, protocol
// versions, frame limits, parse errors, and header escaping for each version.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace sluice::session {

enum class Command : uint8_t {
  kConnect,
  kStomp,
  kConnected,
  kSend,
  kSubscribe,
  kUnsubscribe,
  kAck,
  kNack,
  kBegin,
  kCommit,
  kAbort,
  kDisconnect,
  kMessage,
  kReceipt,
  kError,
};

std::string_view command_name(Command c);
std::optional<Command> parse_command(std::string_view s);
// Only SEND, MESSAGE and ERROR may carry a body (STOMP 1.2 "Frames and Headers").
bool command_allows_body(Command c);
// CONNECT, STOMP and CONNECTED never escape header octets (STOMP 1.2 "Value Encoding").
bool command_escapes_headers(Command c);

enum class Version : uint8_t { k1_0 = 0, k1_1 = 1, k1_2 = 2 };
inline constexpr size_t kVersionCount = 3;
std::string_view version_name(Version v);
std::optional<Version> parse_version(std::string_view s);

// A set of versions, as configured ("versions = [\"1.1\", \"1.2\"]") or offered by a client in
// accept-version.
class VersionSet {
 public:
  constexpr VersionSet() = default;
  static constexpr VersionSet all() { return VersionSet(0b111); }
  constexpr void add(Version v) { bits_ |= uint8_t(1u << unsigned(v)); }
  constexpr bool has(Version v) const { return (bits_ >> unsigned(v)) & 1u; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool operator==(const VersionSet&) const = default;
  constexpr VersionSet operator&(VersionSet o) const { return VersionSet(bits_ & o.bits_); }
  std::optional<Version> highest() const;
  // "1.0,1.1,1.2": comma separated, as in the ERROR frame's `version` header.
  std::string_view list() const;

 private:
  constexpr explicit VersionSet(uint8_t bits) : bits_(bits) {}
  uint8_t bits_ = 0;
};

// Limits on a single frame. Named defaults; every one is a config key (frame_bytes_max, ...).
struct FrameLimits {
  static constexpr uint32_t kFrameBytesMax = 1u << 20;  // whole frame, command to NUL
  static constexpr uint32_t kHeaderCountMax = 64;
  static constexpr uint32_t kHeaderLineBytesMax = 8u << 10;  // one "name:value" line
  static constexpr uint32_t kBodyBytesMax = 1u << 20;
  // Hard ceilings for configured values: keeps every offset in 32 bits.
  static constexpr uint32_t kFrameBytesCeiling = 64u << 20;
  static constexpr uint32_t kHeaderCountCeiling = 1024;

  uint32_t frame_bytes_max = kFrameBytesMax;
  uint32_t header_count_max = kHeaderCountMax;
  uint32_t header_line_bytes_max = kHeaderLineBytesMax;
  uint32_t body_bytes_max = kBodyBytesMax;

  bool valid() const;
  bool operator==(const FrameLimits&) const = default;
};

enum class ParseError : uint8_t {
  kNone,
  kUnknownCommand,
  kFrameTooLarge,
  kTooManyHeaders,
  kHeaderLineTooLong,
  kBodyTooLarge,
  kMalformedHeader,   // a header line without ':' or with an empty name
  kInvalidEscape,     // an escape sequence the frame's version does not define
  kBadContentLength,  // not a decimal number
  kMissingNul,        // content-length bytes not followed by NUL
  kBodyNotAllowed,    // a body on a frame other than SEND, MESSAGE, ERROR
  kNulInHeaders,      // a NUL octet before the blank line that ends the headers
};

// Short text fit for the `message` header of a STOMP ERROR frame.
std::string_view parse_error_message(ParseError e);

// Header escaping. `escaped` says whether the frame's command and version escape at all.
bool header_needs_unescape(std::string_view raw);
// Checks that every backslash starts an escape defined for the version.
bool header_escapes_valid(std::string_view raw, Version v);
// Writes the decoded value of a valid escaped string into out; returns its size, or nothing if
// out is too small. Precondition: header_escapes_valid(raw, v).
std::optional<size_t> unescape_header(std::string_view raw, std::span<char> out);
// Compares a raw (possibly escaped) header octet string with a plain string.
bool header_equals(std::string_view raw, bool escaped, std::string_view plain);

}  // namespace sluice::session
