#pragma once
// An input file argument where "-" means standard input, with the name messages should use.
#include <filesystem>
#include <fstream>
#include <iostream>
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
    if (!file_) throw UsageError(path + ": cannot open file");
  }
  std::istream& stream() { return file_.is_open() ? file_ : std::cin; }
  const std::string& name() const { return name_; }  // "FILE" or "<stdin>", for FILE:LINE messages

 private:
  std::ifstream file_;
  std::string name_;
};

}  // namespace azr::cli
