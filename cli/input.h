#pragma once
// An input file argument where "-" means standard input, with the name messages should use; and
// the token ids of its JSON lines.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "model/json_text.h"

namespace azr::cli {

class InputFile {
 public:
  // Throws UsageError if the file cannot be opened.
  explicit InputFile(const std::string& path) : name_(path == "-" ? "<stdin>" : path) {
    if (path == "-") return;
    // An ifstream opens a directory, and reading it ends at once: it read as an empty file.
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) throw UsageError(path + ": is a directory, not a file");
    file_.open(path, std::ios::binary);
    if (!file_) throw UsageError(path + ": cannot open file (" + std::strerror(errno) + ")");
  }
  std::istream& stream() { return file_.is_open() ? file_ : std::cin; }
  const std::string& name() const { return name_; }  // "FILE" or "<stdin>", for FILE:LINE messages

 private:
  std::ifstream file_;
  std::string name_;
};

// The JSON values of a JSON Lines input, one a line, blank lines skipped. A line that is not JSON
// is refused with FILE:LINE (a pretty-printed file's first line, "{" or "[", with what the format
// is); so is one nested past model::kMaxJsonNesting, which parsed but crashed, on the stack, the
// commands that copy or print a field back (an `id` 100,000 arrays deep). A read that fails
// part-way (EIO, a line past memory) is an error, where the loop took it for the end of the input.
class JsonLines {
 public:
  JsonLines(std::istream& in, std::string name) : in_(in), name_(std::move(name)) {}
  // The next line's value; false at the end of the input.
  bool next(nlohmann::json& value) {
    std::string line;
    while (true) {
      errno = 0;
      if (!std::getline(in_, line)) {
        // std::cin reads through stdio, whose read errors reach ferror() alone.
        if (in_.bad() || (&in_ == &std::cin && std::ferror(stdin)))
          throw UsageError(name_ + ": the read failed after line " + std::to_string(lineno_) + " (" +
                           (errno ? std::strerror(errno) : "no reason given") + ")");
        return false;
      }
      ++lineno_;
      if (line.find_first_not_of(" \t\r") != std::string::npos) break;
    }
    try {
      value = model::parse_json_bounded(line);
    } catch (const model::JsonTooDeep& e) {
      throw UsageError(where() + e.what());
    } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past a double (out_of_range)
      const size_t first = line.find_first_not_of(" \t\r");
      const std::string trimmed = line.substr(first, line.find_last_not_of(" \t\r") + 1 - first);
      throw UsageError(where() + "not valid JSON (" + model::json_error_text(e) + ")" +
                       (trimmed == "{" || trimmed == "[" ? "; the input is JSON Lines: one JSON object a line" : ""));
    }
    return true;
  }
  // "FILE:LINE: " of the line next() gave last, for messages about its fields.
  std::string where() const { return name_ + ":" + std::to_string(lineno_) + ": "; }
  size_t lineno() const { return lineno_; }

 private:
  std::istream& in_;
  std::string name_;
  size_t lineno_ = 0;
};

// One token id of a JSON line's "ids", which must be a whole number in [0, rows). Read as
// written: get<int32_t> wrapped 4294967396 to 100, and nlohmann holds a number past INT64_MAX as
// unsigned, which get<int64_t> turned into -1.
inline int32_t token_id_in_line(const nlohmann::json& v, int64_t rows, const std::string& where) {
  if (!v.is_number_integer()) throw UsageError(where + "field 'ids' must hold integers");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(rows)
                                           : v.get<int64_t>() >= 0 && v.get<int64_t>() < rows;
  if (!fits)
    throw UsageError(where + "token id " + v.dump() + " is outside [0, " + std::to_string(rows) + ")");
  return int32_t(v.get<int64_t>());
}

}  // namespace azr::cli
