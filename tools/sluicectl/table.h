// sluicectl's human output: aligned tables with a header row (like `kubectl get`) and aligned
// "key: value" lines. Cells are made printable so a queue name cannot break the layout.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::sluicectl {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  // A row with fewer cells than the header is padded with "-"; extra cells are dropped.
  void add(std::vector<std::string> row);
  size_t rows() const { return rows_.size(); }
  // Columns separated by three spaces; the last column is not padded.
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "key:  value" lines, values aligned one space after the longest key.
std::string key_value_lines(const std::vector<std::pair<std::string, std::string>>& lines);

// Control bytes become \xNN and an empty text "-", so every cell is one visible word or more.
std::string printable(std::string_view text);

}  // namespace sluice::sluicectl
