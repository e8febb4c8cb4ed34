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
  // Octets copied as they are, in one piece: headers are mostly runs with nothing to escape.
  void put_run(const char* p, size_t n) {
    if (n == 0) return;
    if (n > out_.size() - n_) {
      ok_ = false;
      n_ = out_.size();
      return;
    }
    std::memcpy(out_.data() + n_, p, n);
    n_ += n;
  }
  bool ok() const { return ok_; }
  std::string_view view() const { return {out_.data(), n_}; }

 private:
  std::span<char> out_;
  size_t n_ = 0;
  bool ok_ = true;
};

// The octets STOMP 1.2 escapes in a header, and their escapes.
constexpr char escape_of(char c) {
  switch (c) {
    case '\\':
      return '\\';
    case '\n':
      return 'n';
    case '\r':
      return 'r';
    case ':':
      return 'c';
    default:
      return 0;
  }
}

// Octets of a header that uses no escapes (STOMP 1.0): everything 1.2 escapes is escaped.
void put_plain(Out& o, std::string_view s) {
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char e = escape_of(s[i]);
    if (e == 0) continue;
    o.put_run(s.data() + run, i - run);
    o.put2('\\', e);
    run = i + 1;
  }
  o.put_run(s.data() + run, s.size() - run);
}

// Octets already escaped for 1.1 or 1.2: their escapes mean the same in 1.2; a raw CR (which 1.1
// allows inside a value) becomes \r.
void put_escaped(Out& o, std::string_view s) {
  while (true) {
    const void* cr = s.empty() ? nullptr : std::memchr(s.data(), '\r', s.size());
    if (cr == nullptr) break;
    const size_t at = size_t(static_cast<const char*>(cr) - s.data());
    o.put_run(s.data(), at);
    o.put2('\\', 'r');
    s.remove_prefix(at + 1);
  }
  o.put_run(s.data(), s.size());
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
