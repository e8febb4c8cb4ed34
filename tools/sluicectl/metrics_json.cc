// Parser of Prometheus sample lines: name, optional {labels} (quoted values with \\, \" and \n
// escapes), value, optional timestamp.
#include "tools/sluicectl/metrics_json.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <utility>

namespace sluice::sluicectl {
namespace {

bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}
bool blank(char c) {
  return c == ' ' || c == '\t';
}

// The sample's value as JSON, or nullopt when the token is not a number.
std::optional<nlohmann::ordered_json> value_json(std::string_view token) {
  if (token.empty()) return std::nullopt;
  const std::string text(token);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  if (std::isnan(v)) return nlohmann::ordered_json("NaN");
  if (std::isinf(v)) return nlohmann::ordered_json(v > 0 ? "+Inf" : "-Inf");
  // Whole values print as 3, not 3.0; 2^53 keeps every such double exact.
  if (v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) {
    return nlohmann::ordered_json(static_cast<int64_t>(v));
  }
  return nlohmann::ordered_json(v);
}

// Key and value of one sample line, or an error saying what is wrong with it.
Result<std::pair<std::string, nlohmann::ordered_json>> sample(std::string_view line) {
  size_t i = 0;
  if (!name_start(line[0])) return failure("a sample must start with a metric name");
  while (i < line.size() && name_char(line[i]))
    ++i;
  if (i < line.size() && line[i] == '{') {
    bool quoted = false;
    for (++i; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '\\') {
        ++i;  // the escaped byte, whatever it is
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (i >= line.size()) return failure("the label set has no closing '}'");
    ++i;
  }
  std::string key(line.substr(0, i));
  if (i >= line.size() || !blank(line[i])) return failure("no value after " + key);
  while (i < line.size() && blank(line[i]))
    ++i;
  const size_t value_start = i;
  while (i < line.size() && !blank(line[i]))
    ++i;
  const std::string_view token = line.substr(value_start, i - value_start);
  std::optional<nlohmann::ordered_json> value = value_json(token);
  if (!value)
    return failure("the value of " + key + " is not a number: \"" + std::string(token) + "\"");
  return std::make_pair(std::move(key), std::move(*value));
}

}  // namespace

Result<nlohmann::ordered_json> metrics_to_json(std::string_view text) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    while (!line.empty() && (line.back() == '\r' || blank(line.back())))
      line.remove_suffix(1);
    while (!line.empty() && blank(line.front()))
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    auto s = sample(line);
    if (!s) return failure("metrics line " + std::to_string(line_no) + ": " + s.error().message);
    auto& [key, value] = *s;
    out[key] = std::move(value);
  }
  return out;
}

}  // namespace sluice::sluicectl
