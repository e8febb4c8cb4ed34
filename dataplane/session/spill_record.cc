#include "dataplane/session/spill_record.h"

#include <cstring>

#include "dataplane/session/parser.h"

namespace sluice::session {

namespace {

class Out {
 public:
  explicit Out(std::span<char> out) : out_(out) {}
  void put(char c) {
    if (n_ < out_.size()) {
      out_[n_++] = c;
    } else {
      ok_ = false;
    }
  }
  void put2(char a, char b) {
    put(a);
    put(b);
  }
  bool ok() const { return ok_; }
  std::string_view view() const { return {out_.data(), n_}; }

 private:
  std::span<char> out_;
  size_t n_ = 0;
  bool ok_ = true;
};

// Octets of a header that uses no escapes (STOMP 1.0): everything 1.2 escapes is escaped.
void put_plain(Out& o, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '\\':
        o.put2('\\', '\\');
        break;
      case '\n':
        o.put2('\\', 'n');
        break;
      case '\r':
        o.put2('\\', 'r');
        break;
      case ':':
        o.put2('\\', 'c');
        break;
      default:
        o.put(c);
    }
  }
}

// Octets already escaped for 1.1 or 1.2: their escapes mean the same in 1.2; a raw CR (which 1.1
// allows inside a value) becomes \r.
void put_escaped(Out& o, std::string_view s) {
  for (char c : s) {
    if (c == '\r') {
      o.put2('\\', 'r');
    } else {
      o.put(c);
    }
  }
}

}  // namespace

std::optional<std::string_view> spill_record_headers(const Frame& frame, std::span<char> out) {
  Out o(out);
  const bool escaped = frame.escaped();
  for (size_t i = 0; i < frame.header_count(); ++i) {
    const Header h = frame.header(i);
    if (escaped) {
      put_escaped(o, h.name);
      o.put(':');
      put_escaped(o, h.value);
    } else {
      put_plain(o, h.name);
      o.put(':');
      put_plain(o, h.value);
    }
    o.put('\n');
  }
  if (!o.ok()) return std::nullopt;
  return o.view();
}

}  // namespace sluice::session
