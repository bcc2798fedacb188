#pragma once
// Helpers shared by the tokenizer differential test and benchmark: shell quoting for the node and
// python3 commands they run, JSONL line reading, and a self-deleting temporary directory.
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace azr::tokdiff {

namespace fs = std::filesystem;

// Single-quoted for /bin/sh.
inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace azr::tokdiff
