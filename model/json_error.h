#pragma once
// The text of a JSON error, for a user: where it is and what is wrong. nlohmann's message starts
// with its own tag ("[json.exception.parse_error.101] ") and ends with all it read of the bad
// token, which for an unterminated string is the rest of the line: kilobytes of a benchmark item
// repeated in one error. The tag goes, and the excerpt keeps its first 60 bytes and its length.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace azr::model {

inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (auto tag_end = what.find("] "); what.rfind("[json.exception", 0) == 0 && tag_end != std::string::npos)
    what.erase(0, tag_end + 2);
  constexpr std::string_view kRead = "; last read: '";
  constexpr size_t kKeep = 60;
  const size_t at = what.find(kRead);
  if (at == std::string::npos || what.back() != '\'') return what;
  const size_t from = at + kRead.size();
  const size_t read = what.size() - 1 - from;
  if (read <= kKeep + 20) return what;  // short enough to show whole
  size_t cut = from + kKeep;
  while (cut > from && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
  return what.substr(0, cut) + "...' (" + std::to_string(read) + " bytes)";
}

}  // namespace azr::model
