// Frame construction with per-version header escaping.
#include "dataplane/session/builder.h"

#include <charconv>
#include <cstring>

namespace sluice::session {

FrameWriter::FrameWriter(std::span<char> out, Command command, Version version)
    : out_(out),
      command_(command),
      escaped_(version >= Version::k1_1 && command_escapes_headers(command)),
      version_(version) {
  put(command_name(command));
  put("\n");
}

void FrameWriter::put(std::string_view s) {
  if (!ok_ || s.size() > out_.size() - n_) {
    ok_ = false;
    return;
  }
  if (s.empty()) return;  // an empty view may have a null data()
  std::memcpy(out_.data() + n_, s.data(), s.size());
  n_ += s.size();
}

void FrameWriter::put_escaped(std::string_view s, bool is_name) {
  // Most values need no escaping: copy runs of plain octets whole, handle the rest one by one.
  size_t i = 0;
  while (ok_ && i < s.size()) {
    size_t j = i;
    while (j < s.size() && s[j] != '\0' && s[j] != '\n' && s[j] != '\r' && s[j] != ':' &&
           s[j] != '\\') {
      ++j;
    }
    put(s.substr(i, j - i));
    if (j == s.size()) return;
    const char c = s[j];
    i = j + 1;
    // No STOMP version can carry a NUL in a header: it would end the frame. Unescaped frames
    // (1.0, CONNECTED) cannot carry LF, CR or a name's colon at all; 1.1 has no escape for CR,
    // and a raw CR before LF would read as a line end.
    const bool fits = c != '\0' && (escaped_ ? c != '\r' || version_ >= Version::k1_2
                                             : c != '\n' && c != '\r' && !(is_name && c == ':'));
    if (!fits) {
      ok_ = false;
    } else if (!escaped_) {
      put(std::string_view(&c, 1));
    } else {
      switch (c) {
        case '\n':
          put("\\n");
          break;
        case ':':
          put("\\c");
          break;
        case '\\':
          put("\\\\");
          break;
        default:  // CR
          put("\\r");
          break;
      }
    }
  }
}

FrameWriter& FrameWriter::header(std::string_view name, std::string_view value) {
  if (name.empty()) ok_ = false;
  put_escaped(name, true);
  put(":");
  put_escaped(value, false);
  put("\n");
  return *this;
}

FrameWriter& FrameWriter::header_raw(std::string_view name, std::string_view raw_value) {
  if (name.empty() ||
      raw_value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) {
    ok_ = false;
  }
  put_escaped(name, true);
  put(":");
  put(raw_value);
  put("\n");
  return *this;
}

FrameWriter& FrameWriter::line_raw(std::string_view raw_line) {
  const size_t colon = raw_line.find(':');
  if (colon == 0 || colon == std::string_view::npos ||
      raw_line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos ||
      (escaped_ && !header_escapes_valid(raw_line, version_))) {
    ok_ = false;
  }
  put(raw_line);
  put("\n");
  return *this;
}

FrameWriter& FrameWriter::header(std::string_view name, uint64_t value) {
  char digits[20];
  auto r = std::to_chars(digits, digits + sizeof digits, value);
  return header(name, std::string_view(digits, size_t(r.ptr - digits)));
}

std::optional<std::string_view> FrameWriter::finish(std::string_view body) {
  if (!body.empty() && !command_allows_body(command_)) ok_ = false;
  if (!body.empty()) header("content-length", uint64_t(body.size()));
  put("\n");
  put(body);
  put(std::string_view("\0", 1));
  if (!ok_) return std::nullopt;
  return std::string_view(out_.data(), n_);
}

std::optional<std::string_view> build_connected(std::span<char> out, Version v,
                                                std::string_view server) {
  return build_connected(out, v, server, HeartBeat{}, {});
}

std::optional<std::string_view> build_connected(std::span<char> out, Version v,
                                                std::string_view server, HeartBeat heart_beat,
                                                std::string_view session_id) {
  // Sent for every session: assembled from constant pieces. CONNECTED is never escaped, so the
  // writer is needed only to refuse a name that could not be framed.
  constexpr std::string_view kUnframed("\r\n\0", 3);
  if (server.find_first_of(kUnframed) != std::string_view::npos ||
      session_id.find_first_of(kUnframed) != std::string_view::npos) {
    return FrameWriter(out, Command::kConnected, v).header("server", server).finish();
  }
  char hb[24];
  const std::string_view parts[] = {"CONNECTED\nversion:",
                                    version_name(v),
                                    "\nheart-beat:",
                                    format_heart_beat(hb, heart_beat),
                                    session_id.empty() ? "" : "\nsession:",
                                    session_id,
                                    "\nserver:",
                                    server,
                                    std::string_view("\n\n\0", 3)};
  size_t n = 0;
  for (std::string_view p : parts) {
    if (p.empty()) continue;
    if (p.size() > out.size() - n) return std::nullopt;
    std::memcpy(out.data() + n, p.data(), p.size());
    n += p.size();
  }
  return std::string_view(out.data(), n);
}

std::optional<std::string_view> build_receipt(std::span<char> out, Version v,
                                              std::string_view receipt_id) {
  return FrameWriter(out, Command::kReceipt, v).header("receipt-id", receipt_id).finish();
}

std::optional<std::string_view> build_receipt_raw(std::span<char> out, Version v,
                                                  std::string_view raw_receipt_id) {
  return FrameWriter(out, Command::kReceipt, v).header_raw("receipt-id", raw_receipt_id).finish();
}

std::optional<std::string_view> build_error(std::span<char> out, Version v, const ErrorFrame& e) {
  FrameWriter w(out, Command::kError, v);
  if (!e.version.empty()) w.header("version", e.version);
  w.header("message", e.message);
  if (!e.receipt_id.empty()) w.header_raw("receipt-id", e.receipt_id);
  if (!e.detail.empty()) w.header("content-type", "text/plain");
  return w.finish(e.detail);
}

}  // namespace sluice::session
