// Strict reading of TOML tables and values for the config loader; private to control/ (config.cc).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/config.h"

// toml++ 3.3 asserts a precondition that its table-header parser does not establish: "[=]" aborts
// a build with assertions (fixed upstream in marzer/tomlplusplus#301). Without the assertion the
// parser reports a normal syntax error, so its assertions are turned off here, and NDEBUG is hidden
// while it is included so that clang does not turn them into optimiser assumptions instead.
// Matters only when toml++ is compiled header-only into the files that include this header; the
// packaged shared library is built without them. Include this header before anything else that
// includes toml++, so that every inclusion sees the same settings.
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) static_assert(true)
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")

namespace sluice::control::config_detail {

// Thrown by the readers and caught in parse_config only: start-up code, where an exception keeps
// every check a single line.
struct Invalid {
  uint32_t line;
  std::string key;
  std::string message;
};

[[noreturn]] void fail(uint32_t line, std::string key, std::string message);
uint32_t line_of(const toml::node& n);
[[noreturn]] void wrong_type(const toml::node& n, std::string key, std::string_view expected);

// [A-Za-z0-9._-]{1,64}: safe in logs, metrics labels, message ids and file names.
bool valid_name(std::string_view s);
inline constexpr std::string_view kNameRule = "must be 1 to 64 characters from A-Z a-z 0-9 . _ -";

// A string of an array, with its own line for messages.
struct Item {
  std::string value;
  uint32_t line;
};

// One TOML table and its dotted path. Refuses, on construction, every key it was not told about,
// and reads the known ones with their types and ranges. Refers to the table, which must outlive it.
class Table {
 public:
  Table(const toml::table& t, std::string path, const std::string& where,
        std::initializer_list<std::string_view> known);

  std::string key(std::string_view k) const;
  // The table's header line; 0 for the top level, which has no line of its own.
  uint32_t line() const;
  const toml::node* get(std::string_view k) const;
  // For a key that must be there, or that is wrong only in combination with others.
  uint32_t line_of_or_table(std::string_view k) const;
  [[noreturn]] void fail_at(std::string_view k, std::string message) const;

  std::optional<std::string> string(std::string_view k) const;
  // A string that goes into a STOMP header or a log line as it is.
  std::optional<std::string> header_value(std::string_view k) const;
  std::optional<std::string> path(std::string_view k, size_t bytes_max = 4095) const;
  std::optional<int64_t> integer(std::string_view k, int64_t lo, int64_t hi) const;
  std::optional<bool> boolean(std::string_view k) const;
  std::optional<std::vector<Item>> strings(std::string_view k) const;
  std::optional<Table> table(std::string_view k,
                             std::initializer_list<std::string_view> known) const;

 private:
  static uint32_t line_of_key(const toml::key& k, const toml::node& v);

  const toml::table& t_;
  std::string path_;
};

// Reads "HOST:PORT" (an IPv4 address or a host name); nothing when the key is absent.
std::optional<ListenAddress> read_address(const Table& t, std::string_view k);
// "localhost" or 127.x.x.x.
bool is_loopback(std::string_view host);

// A dotted-quad IPv4 literal as a host-order number.
std::optional<uint32_t> ipv4_value(std::string_view s);

// Sections read in files of their own (config_spill.cc, config_dpdk.cc).
void read_spill(const Table& root, GatewayConfig* c);
void read_drain(const Table& root, GatewayConfig* c);
void read_dpdk(const Table& root, GatewayConfig* c);

}  // namespace sluice::control::config_detail
