#pragma once
// An input file argument where "-" means standard input, with the name messages should use; and
// the token ids of its JSON lines.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"

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
