#include "proposer/r1_answer.h"

#include <pcre2.h>

#include "proposer/regex.h"

namespace azr::proposer {

std::string judged_text(std::string_view generation) {
  return "<think>" + std::string(generation.substr(0, generation.find("Assistant:")));
}

bool r1_format_ok(std::string_view text) {
  static const Regex format(R"(<think>.*?</think>\s*<answer>.*?</answer>)", PCRE2_DOTALL);
  return format.search(text, 0, /*anchored=*/true).has_value();
}

std::optional<std::string> last_answer(std::string_view text) {
  constexpr std::string_view open = "<answer>", close = "</answer>";
  size_t start = text.rfind(open);
  if (start == std::string_view::npos) return std::nullopt;
  start += open.size();
  return std::string(text.substr(start, text.find(close, start) - start));
}

std::string strip(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace azr::proposer
