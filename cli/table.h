#pragma once
// Aligned text tables for terminal output: numbers right-aligned, text left-aligned, columns as
// wide as their widest cell (cells are cut to `max_width` with an ellipsis). Widths are terminal
// columns, not bytes: a task's program or output may hold CJK text (two columns a character),
// combining accents (none) or bytes that are not UTF-8 (one each, as a terminal shows them).
#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
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
      if (columns(d) <= max_) return d;
      return d.substr(0, bytes_within(d, max_ > 0 ? max_ - 1 : 0)) + "~";
    };
    for (size_t c = 0; c < header_.size(); ++c) w[c] = columns(header_[c]);
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < w.size(); ++c) {
        w[c] = std::max(w[c], columns(cut(r[c])));
        if (!r[c].empty() && r[c].find_first_not_of("0123456789.-%") != std::string::npos) numeric[c] = false;
      }
    auto line = [&](const std::vector<std::string>& r, bool head) {
      std::string s;
      for (size_t c = 0; c < w.size(); ++c) {
        std::string cell = c < r.size() ? (head ? r[c] : cut(r[c])) : "";
        std::string pad(w[c] - std::min(w[c], columns(cell)), ' ');
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
  // Walks s a character at a time: f(byte length, columns) for each, until f returns false. A
  // byte that does not start valid UTF-8 is one character of one column.
  template <class F>
  static void each_char(const std::string& s, F f) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
    for (size_t i = 0; i < s.size();) {
      utf8proc_int32_t cp = 0;
      const utf8proc_ssize_t n = utf8proc_iterate(p + i, utf8proc_ssize_t(s.size() - i), &cp);
      const size_t len = n > 0 ? size_t(n) : 1;
      const size_t cols = n > 0 ? size_t(std::max(0, utf8proc_charwidth(cp))) : 1;
      if (!f(len, cols)) return;
      i += len;
    }
  }
  static size_t columns(const std::string& s) {
    size_t cols = 0;
    each_char(s, [&](size_t, size_t c) { return cols += c, true; });
    return cols;
  }
  // The bytes of the longest prefix of s that fits `cols` columns, never splitting a character
  // (a combining mark stays with the character before it: it takes no column).
  static size_t bytes_within(const std::string& s, size_t cols) {
    size_t bytes = 0, used = 0;
    each_char(s, [&](size_t len, size_t c) {
      if (used + c > cols) return false;
      used += c, bytes += len;
      return true;
    });
    return bytes;
  }

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
