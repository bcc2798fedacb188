#pragma once
// A small RAII wrapper over PCRE2 for the response parsers. PCRE2 rather than std::regex: the
// parsers run lazy `(.*?)` patterns over whole model generations, which libstdc++'s recursive
// matcher can overflow the stack on. Subjects are model text, so invalid UTF-8 must not be an
// error (PCRE2_MATCH_INVALID_UTF); \w is Unicode-aware (PCRE2_UCP) as in Python's `re`. Patterns
// are JIT-compiled: build a Regex once (a function-local static), not per subject.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace azr::proposer {

class Regex {
 public:
  struct Match {
    size_t begin = 0, end = 0;
    // Capture groups 1..n as (begin, end); an unset group is (npos, npos).
    std::vector<std::pair<size_t, size_t>> groups;
    std::string_view group(std::string_view subject, size_t i) const;
  };

  // `flags` are PCRE2 compile options (PCRE2_DOTALL, PCRE2_MULTILINE, ...); UTF/UCP are added.
  explicit Regex(std::string_view pattern, uint32_t flags = 0);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The first match at or after `start`; `anchored` requires it to begin exactly at `start`.
  std::optional<Match> search(std::string_view subject, size_t start = 0, bool anchored = false) const;
  // Every non-overlapping match, left to right (Python's re.finditer).
  std::vector<Match> find_all(std::string_view subject) const;
  // Replaces every match with `replacement` taken literally.
  std::string replace_all(std::string_view subject, std::string_view replacement) const;

  // Every match in this process through PCRE2's interpreter, not the JIT: the baseline of
  // bench/response_parse_bench.cpp (the results are the same either way).
  static void interpret_only(bool on);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

// Escapes `text` for literal use inside a pattern.
std::string regex_escape(std::string_view text);

}  // namespace azr::proposer
