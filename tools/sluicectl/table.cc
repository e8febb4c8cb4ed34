// Aligned tables and key: value lines for sluicectl's human output.
#include "tools/sluicectl/table.h"

#include <algorithm>

namespace sluice::sluicectl {
namespace {

constexpr std::string_view kColumnGap = "   ";

// Columns a terminal gives the text: UTF-8 continuation bytes take none (wide characters are
// rare enough in queue names to be ignored).
size_t display_width(std::string_view s) {
  return size_t(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

void pad_to(std::string& out, size_t used, size_t width) {
  if (used < width) out.append(width - used, ' ');
}

}  // namespace

std::string printable(std::string_view text) {
  if (text.empty()) return "-";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size(), "-");
  for (std::string& cell : row)
    cell = printable(cell);
  rows_.push_back(std::move(row));
}

std::string Table::render() const {
  std::vector<size_t> widths(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], display_width(row[i]));
  };
  measure(header_);
  for (const auto& row : rows_)
    measure(row);
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) {
        pad_to(out, display_width(row[i]), widths[i]);
        out += kColumnGap;
      }
    }
    out += '\n';
  };
  line(header_);
  for (const auto& row : rows_)
    line(row);
  return out;
}

std::string key_value_lines(const std::vector<std::pair<std::string, std::string>>& lines) {
  size_t width = 0;
  for (const auto& [key, value] : lines)
    width = std::max(width, display_width(key) + 1);
  std::string out;
  for (const auto& [key, value] : lines) {
    out += key;
    out += ':';
    pad_to(out, display_width(key) + 1, width);
    out += ' ';
    out += printable(value);
    out += '\n';
  }
  return out;
}

}  // namespace sluice::sluicectl
