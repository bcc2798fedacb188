#pragma once
// Reading JSON that a user gave us: errors quoted short, nesting bounded.
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace azr::model {

// The text of a JSON error (a syntax error, or a number past a double's range, which nlohmann
// throws as out_of_range), for a user: where it is and what is wrong. nlohmann's message starts
// with its own tag ("[json.exception.parse_error.101] ") and ends with all it read of the bad
// token, which for an unterminated string is the rest of the line: kilobytes of a benchmark item
// repeated in one error. The tag goes, and the excerpt keeps its first 60 bytes and its length.
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (auto tag_end = what.find("] "); what.rfind("[json.exception", 0) == 0 && tag_end != std::string::npos)
    what.erase(0, tag_end + 2);
  constexpr std::string_view kRead = "; last read: '";
  constexpr size_t kKeep = 60;
  const size_t at = what.find(kRead);
  if (at == std::string::npos) return what;
  const size_t from = at + kRead.size();
  // The excerpt ends at the closing quote: before "; expected string literal" and the like, which
  // the parser adds where it wanted a particular token (and which may hold quotes: "expected '['"),
  // else at the end.
  size_t to = what.find("'; expected ", from);
  if (to == std::string::npos) {
    if (what.back() != '\'') return what;
    to = what.size() - 1;
  }
  const size_t read = to - from;
  if (read <= kKeep + 20) return what;  // short enough to show whole
  size_t cut = from + kKeep;
  while (cut > from && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
  return what.substr(0, cut) + "...' (" + std::to_string(read) + " bytes)" + what.substr(to + 1);
}

// Reads all of `path` into `out`, refusing more than max_bytes: a config path that names
// /dev/zero, or a multi-gigabyte file by mistake, fails at once instead of filling memory.
// Returns "" on success, else why not ("cannot open (Permission denied)", "is larger than 16 MiB",
// "read error").
inline std::string read_file_at_most(const std::string& path, size_t max_bytes, std::string& out) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot open (") + (errno ? std::strerror(errno) : "no reason given") + ")";
  out.clear();
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > max_bytes) return "is larger than " + std::to_string(max_bytes >> 20) + " MiB";
  }
  if (in.bad()) return "read error";
  return "";
}

// Parsing is iterative, but copying a value and dump() recurse once per level: a config.json
// holding 200,000 nested brackets ended the process on a stack overflow where an error message
// names the field. No file azr reads nests past a handful of levels.
constexpr int kMaxJsonNesting = 64;

struct JsonTooDeep : std::runtime_error {
  JsonTooDeep() : std::runtime_error("nests deeper than " + std::to_string(kMaxJsonNesting) + " levels") {}
};

// nlohmann::json::parse, refusing more than kMaxJsonNesting levels (JsonTooDeep) before any
// deeper value is built. Syntax errors throw nlohmann's parse_error, as parse does.
inline nlohmann::json parse_json_bounded(std::string_view text) {
  const auto within = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonNesting) throw JsonTooDeep();
    return true;
  };
  return nlohmann::json::parse(text.begin(), text.end(), within);
}

}  // namespace azr::model
