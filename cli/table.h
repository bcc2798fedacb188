#pragma once
// Aligned text tables for terminal output: numbers right-aligned, text left-aligned, columns as
// wide as their widest cell (cells are cut to `max_width` with an ellipsis).
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

namespace azr::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header, size_t max_width = 48) : header_(std::move(header)), max_(max_width) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  void print(std::ostream& out) const {
    std::vector<size_t> w(header_.size(), 0);
    std::vector<bool> numeric(header_.size(), true);
    auto cut = [&](const std::string& s) {
      std::string d = display(s);
      if (d.size() <= max_) return d;
      size_t n = max_ - 1;
      while (n > 0 && (static_cast<unsigned char>(d[n]) & 0xC0) == 0x80) --n;  // never split a UTF-8 character
      return d.substr(0, n) + "~";
    };
    for (size_t c = 0; c < header_.size(); ++c) w[c] = header_[c].size();
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < w.size(); ++c) {
        w[c] = std::max(w[c], cut(r[c]).size());
        if (!r[c].empty() && r[c].find_first_not_of("0123456789.-%") != std::string::npos) numeric[c] = false;
      }
    auto line = [&](const std::vector<std::string>& r, bool head) {
      std::string s;
      for (size_t c = 0; c < w.size(); ++c) {
        std::string cell = c < r.size() ? (head ? r[c] : cut(r[c])) : "";
        std::string pad(w[c] - std::min(w[c], cell.size()), ' ');
        s += (numeric[c] && !head) ? pad + cell : cell + pad;
        if (c + 1 < w.size()) s += "  ";
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out << s << '\n';
    };
    line(header_, true);
    for (const auto& r : rows_) line(r, false);
  }

 private:
  // One line per cell: newlines and tabs shown as escapes so rows stay rows.
  static std::string display(const std::string& s) {
    std::string out;
    for (char ch : s) {
      if (ch == '\n') out += "\\n";
      else if (ch == '\t') out += "\\t";
      else if (ch == '\r') out += "\\r";
      else out += ch;
    }
    return out;
  }
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  size_t max_;
};

}  // namespace azr::cli
