// Builds the frames the gateway itself sends (CONNECTED, RECEIPT, ERROR, MESSAGE, SEND) into a
// caller-provided buffer, escaping header octets as the frame's command and version require.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "dataplane/session/heart_beat.h"
#include "dataplane/session/stomp.h"

namespace sluice::session {

class FrameWriter {
 public:
  // Writes the command line. Nothing is allocated; when `out` is too small, or a header cannot be
  // represented in the frame's version, the writer fails and finish() returns nothing.
  FrameWriter(std::span<char> out, Command command, Version version);

  FrameWriter& header(std::string_view name, std::string_view value);
  FrameWriter& header(std::string_view name, uint64_t value);
  // A value already encoded for this frame's escaping (echoing a header of a frame in the same
  // version, e.g. receipt -> receipt-id). CR, LF or NUL in it fail the frame.
  FrameWriter& header_raw(std::string_view name, std::string_view raw_value);
  // A whole header line already encoded for this frame's version, without its LF: a non-empty
  // name, ':', the value. A line that is not one, or holds an escape the version does not
  // define, fails the frame.
  FrameWriter& line_raw(std::string_view raw_line);
  // Ends the headers (adding content-length when the body is not empty), writes the body and the
  // NUL. Returns the frame's bytes inside `out`; nothing for a body on a frame that may not have
  // one (only SEND, MESSAGE and ERROR may).
  std::optional<std::string_view> finish(std::string_view body = {});
  bool ok() const { return ok_; }

 private:
  void put(std::string_view s);
  void put_escaped(std::string_view s, bool is_name);

  std::span<char> out_;
  Command command_;
  size_t n_ = 0;
  bool ok_ = true;
  bool escaped_ = false;
  Version version_;
};

// CONNECTED for an agreed version: `version`, `heart-beat:0,0`, `server:<server>`.
std::optional<std::string_view> build_connected(std::span<char> out, Version v,
                                                std::string_view server);
// The same with the heart-beat the gateway agreed to and, when not empty, a `session` header.
std::optional<std::string_view> build_connected(std::span<char> out, Version v,
                                                std::string_view server, HeartBeat heart_beat,
                                                std::string_view session_id);
std::optional<std::string_view> build_receipt(std::span<char> out, Version v,
                                              std::string_view receipt_id);
// receipt-id echoed from a client frame's raw `receipt` header of the same version.
std::optional<std::string_view> build_receipt_raw(std::span<char> out, Version v,
                                                  std::string_view raw_receipt_id);
// ERROR with a `message` header, an optional `receipt-id`, an optional `version` header (for a
// failed negotiation) and a plain-text body with the detail.
struct ErrorFrame {
  std::string_view message;
  std::string_view detail;
  std::string_view receipt_id;  // empty: none; raw, as it came in the client's `receipt` header
  std::string_view version;     // empty: none
};
std::optional<std::string_view> build_error(std::span<char> out, Version v, const ErrorFrame& e);

}  // namespace sluice::session
