// Strict reading of TOML tables and values for the config loader: types, ranges, unknown keys.
#include "control/config_reader.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

namespace sluice::control::config_detail {
namespace {

constexpr size_t kNameBytesMax = 64;

std::string_view type_name(const toml::node& n) {
  constexpr std::string_view kNames[] = {
      "nothing",   "a table", "an array", "a string",   "an integer", "a floating-point number",
      "a boolean", "a date",  "a time",   "a date-time"};
  static_assert(std::size(kNames) == size_t(toml::node_type::date_time) + 1);
  return kNames[size_t(n.type())];
}

bool has_line_breaks_or_nul(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Dotted quad, four decimal octets without leading zeros (which some parsers read as octal).
std::optional<std::array<uint8_t, 4>> parse_ipv4(std::string_view s) {
  std::array<uint8_t, 4> out{};
  for (size_t i = 0; i < 4; ++i) {
    size_t dot = i < 3 ? s.find('.') : s.size();
    if (dot == std::string_view::npos) return std::nullopt;
    std::string_view part = s.substr(0, dot);
    if (!all_digits(part) || part.size() > 3 || (part.size() > 1 && part[0] == '0')) {
      return std::nullopt;
    }
    int v = 0;
    for (char c : part) {
      v = v * 10 + (c - '0');
    }
    if (v > 255) return std::nullopt;
    out[i] = uint8_t(v);
    s.remove_prefix(i < 3 ? dot + 1 : dot);
  }
  return out;
}

// RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens; the last label is
// not all digits, so that a mistyped address is not taken for a name.
bool valid_hostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::string_view last;
  while (true) {
    size_t dot = s.find('.');
    std::string_view label = s.substr(0, dot);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (!ok) return false;
    }
    last = label;
    if (dot == std::string_view::npos) break;
    s.remove_prefix(dot + 1);
  }
  return !all_digits(last);
}

bool looks_numeric(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '.' || (c >= '0' && c <= '9'); });
}

// Parses "HOST:PORT"; the error says what is wrong.
Result<ListenAddress> parse_host_port(std::string_view s) {
  if (!s.empty() && s.front() == '[') {
    return failure("IPv6 addresses are not supported yet; use an IPv4 address or a host name");
  }
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos)
    return failure("must be HOST:PORT, e.g. \"127.0.0.1:61613\"");
  std::string_view host = s.substr(0, colon);
  std::string_view port = s.substr(colon + 1);
  if (host.find(':') != std::string_view::npos) {
    return failure("IPv6 addresses are not supported yet; use an IPv4 address or a host name");
  }
  if (host.empty()) return failure("must be HOST:PORT with a host, e.g. \"127.0.0.1:61613\"");
  if (looks_numeric(host) ? !parse_ipv4(host) : !valid_hostname(host)) {
    return failure("host \"" + std::string(host) +
                   "\" is neither an IPv4 address nor a valid host name");
  }
  uint32_t p = 0;
  if (!all_digits(port) || port.size() > 5)
    return failure("port must be a number between 1 and 65535");
  for (char c : port) {
    p = p * 10 + uint32_t(c - '0');
  }
  if (p < 1 || p > 65535) return failure("port must be between 1 and 65535");
  return ListenAddress{std::string(host), uint16_t(p)};
}

}  // namespace

void fail(uint32_t line, std::string key, std::string message) {
  throw Invalid{line, std::move(key), std::move(message)};
}

uint32_t line_of(const toml::node& n) {
  return n.source().begin.line;
}

void wrong_type(const toml::node& n, std::string key, std::string_view expected) {
  fail(line_of(n), std::move(key),
       "must be " + std::string(expected) + ", not " + std::string(type_name(n)));
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > kNameBytesMax) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Table::Table(const toml::table& t, std::string path, const std::string& where,
             std::initializer_list<std::string_view> known)
    : t_(t), path_(std::move(path)) {
  const toml::key* unknown = nullptr;
  for (auto&& [k, v] : t_) {
    if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
    if (unknown == nullptr || line_of_key(k, v) < line_of_key(*unknown, *t_.get(unknown->str()))) {
      unknown = &k;
    }
  }
  if (unknown != nullptr) {
    std::string allowed;
    for (std::string_view k : known) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(k);
    }
    fail(line_of_key(*unknown, *t_.get(unknown->str())), key(unknown->str()),
         "unknown key; the keys allowed in " + where + " are: " + allowed);
  }
}

std::string Table::key(std::string_view k) const {
  return path_.empty() ? std::string(k) : path_ + "." + std::string(k);
}

uint32_t Table::line() const {
  return path_.empty() ? 0 : line_of(t_);
}

const toml::node* Table::get(std::string_view k) const {
  return t_.get(k);
}

uint32_t Table::line_of_or_table(std::string_view k) const {
  const toml::node* n = t_.get(k);
  return n != nullptr ? line_of(*n) : line();
}

void Table::fail_at(std::string_view k, std::string message) const {
  fail(line_of_or_table(k), key(k), std::move(message));
}

std::optional<std::string> Table::string(std::string_view k) const {
  const toml::node* n = t_.get(k);
  if (n == nullptr) return std::nullopt;
  const toml::value<std::string>* s = n->as_string();
  if (s == nullptr) wrong_type(*n, key(k), "a string");
  return s->get();
}

std::optional<std::string> Table::header_value(std::string_view k) const {
  std::optional<std::string> s = string(k);
  if (s && has_line_breaks_or_nul(*s)) fail_at(k, "must not contain CR, LF or NUL");
  return s;
}

std::optional<std::string> Table::path(std::string_view k, size_t bytes_max) const {
  std::optional<std::string> s = string(k);
  if (!s) return s;
  if (s->empty()) fail_at(k, "must not be empty");
  if (s->find('\0') != std::string::npos) fail_at(k, "must not contain NUL");
  if (s->size() > bytes_max) {
    fail_at(k, "must be at most " + std::to_string(bytes_max) + " bytes long");
  }
  return s;
}

std::optional<int64_t> Table::integer(std::string_view k, int64_t lo, int64_t hi) const {
  const toml::node* n = t_.get(k);
  if (n == nullptr) return std::nullopt;
  const toml::value<int64_t>* i = n->as_integer();
  if (i == nullptr) wrong_type(*n, key(k), "an integer");
  if (i->get() < lo || i->get() > hi) {
    fail_at(k, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return i->get();
}

std::optional<bool> Table::boolean(std::string_view k) const {
  const toml::node* n = t_.get(k);
  if (n == nullptr) return std::nullopt;
  const toml::value<bool>* b = n->as_boolean();
  if (b == nullptr) wrong_type(*n, key(k), "a boolean (true or false)");
  return b->get();
}

std::optional<std::vector<Item>> Table::strings(std::string_view k) const {
  const toml::node* n = t_.get(k);
  if (n == nullptr) return std::nullopt;
  const toml::array* a = n->as_array();
  if (a == nullptr) wrong_type(*n, key(k), "an array of strings");
  std::vector<Item> out;
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::node& e = *a->get(i);
    const toml::value<std::string>* s = e.as_string();
    if (s == nullptr) wrong_type(e, key(k) + "[" + std::to_string(i) + "]", "a string");
    out.push_back(Item{s->get(), line_of(e)});
  }
  return out;
}

std::optional<Table> Table::table(std::string_view k,
                                  std::initializer_list<std::string_view> known) const {
  const toml::node* n = t_.get(k);
  if (n == nullptr) return std::nullopt;
  const toml::table* t = n->as_table();
  if (t == nullptr) wrong_type(*n, key(k), "a table");
  return Table(*t, key(k), "[" + key(k) + "]", known);
}

uint32_t Table::line_of_key(const toml::key& k, const toml::node& v) {
  uint32_t l = k.source().begin.line;
  return l != 0 ? l : line_of(v);
}

std::optional<ListenAddress> read_address(const Table& t, std::string_view k) {
  std::optional<std::string> s = t.string(k);
  if (!s) return std::nullopt;
  Result<ListenAddress> a = parse_host_port(*s);
  if (!a) t.fail_at(k, a.error().message);
  return *a;
}

std::optional<uint32_t> ipv4_value(std::string_view s) {
  const std::optional<std::array<uint8_t, 4>> v = parse_ipv4(s);
  if (!v) return std::nullopt;
  return uint32_t((*v)[0]) << 24 | uint32_t((*v)[1]) << 16 | uint32_t((*v)[2]) << 8 | (*v)[3];
}

bool is_loopback(std::string_view host) {
  if (host == "localhost") return true;
  std::optional<std::array<uint8_t, 4>> v4 = parse_ipv4(host);
  return v4 && (*v4)[0] == 127;
}

}  // namespace sluice::control::config_detail
