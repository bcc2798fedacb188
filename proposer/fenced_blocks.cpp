#include "proposer/fenced_blocks.h"

#include <pcre2.h>

#include "proposer/r1_answer.h"
#include "proposer/regex.h"

namespace azr::proposer {

std::vector<FencedBlock> fenced_blocks(std::string_view text) {
  // The opening fence's info string runs to the end of its line; the content is lazy up to the
  // next fence, with the newline before the closing fence dropped (the reference's `\n?```).
  static const Regex block(R"(```([^\n`]*)\n(.*?)\n?```)", PCRE2_DOTALL);
  std::vector<FencedBlock> out;
  for (const auto& m : block.find_all(text))
    out.push_back({strip(m.group(text, 1)), std::string(m.group(text, 2))});
  return out;
}

std::vector<std::string> blocks_tagged(std::string_view text, std::string_view tag) {
  std::vector<std::string> out;
  for (auto& b : fenced_blocks(text))
    if (b.info == tag) out.push_back(std::move(b.content));
  return out;
}

bool is_code_info(std::string_view info) {
  return info.empty() || info == "python" || info == "py" || info == "python3";
}

std::optional<std::string> reference_first_code_block(std::string_view text) {
  static const Regex code(R"(```(?:python\s*)?\n?(.*?)\n?```)", PCRE2_DOTALL);
  auto m = code.search(text);
  if (!m) return std::nullopt;
  return std::string(m->group(text, 1));
}

}  // namespace azr::proposer
