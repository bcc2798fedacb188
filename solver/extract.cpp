#include "solver/extract.h"

#include <pcre2.h>

#include <optional>

#include "proposer/fenced_blocks.h"
#include "proposer/r1_answer.h"
#include "proposer/regex.h"

namespace azr::solver {
namespace {

using proposer::Regex;
using proposer::strip;

struct Found {
  std::string text, source;
};

// The last match's first group, stripped.
std::optional<std::string> last_group(const Regex& re, std::string_view text) {
  auto all = re.find_all(text);
  if (all.empty()) return std::nullopt;
  return strip(all.back().group(text, 1));
}

// §3.4.4 for `field` = "input" or "output": the last ```field block, then `# Field:` lines,
// then a `field(...)` call, then <field> tags, then "the field is …", then the whole answer.
// (The order is the reference's; the exact patterns of the fallbacks are azr's.)
Found field_answer(std::string_view answer, const std::string& field) {
  auto blocks = proposer::blocks_tagged(answer, field);
  if (!blocks.empty()) return {strip(blocks.back()), "block"};
  const Regex comment("^[ \\t]*#[ \\t]*" + field + "[ \\t]*:(.*)$", PCRE2_MULTILINE | PCRE2_CASELESS);
  if (auto s = last_group(comment, answer)) return {*s, "comment"};
  const Regex call("(?<![\\w.])" + field + "\\((.*)\\)", 0);
  if (auto s = last_group(call, answer)) return {*s, "call"};
  const Regex tag("<" + field + ">(.*?)</" + field + ">", PCRE2_DOTALL | PCRE2_CASELESS);
  if (auto s = last_group(tag, answer)) return {*s, "tag"};
  const Regex phrase("\\bthe " + field + " is:?[ \\t]*(.*?)\\.?[ \\t]*$", PCRE2_MULTILINE | PCRE2_CASELESS);
  if (auto s = last_group(phrase, answer)) return {*s, "phrase"};
  return {strip(answer), "whole"};
}

// Induction (§2.3): the last code block; none → empty answer (graded wrong, format unaffected).
Found program_answer(std::string_view answer) {
  std::optional<std::string> last;
  for (auto& b : proposer::fenced_blocks(answer))
    if (proposer::is_code_info(b.info)) last = std::move(b.content);
  if (!last) return {"", ""};
  return {*last, "block"};
}

}  // namespace

Extraction extract_answer(buffer::TaskType type, std::string_view generation) {
  Extraction e;
  const std::string text = proposer::with_think_prefix(generation);
  std::optional<std::string> answer = proposer::last_answer(text);
  if (!answer) {
    e.reason = "no_answer";
    return e;
  }
  Found f = type == buffer::TaskType::Deduction   ? field_answer(*answer, "output")
            : type == buffer::TaskType::Abduction ? field_answer(*answer, "input")
                                                  : program_answer(*answer);
  e.answer = std::move(f.text);
  e.source = std::move(f.source);
  e.format_ok = proposer::r1_format_ok(text);
  e.reason = e.format_ok ? "ok" : "format";
  return e;
}

}  // namespace azr::solver
