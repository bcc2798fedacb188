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

// The last match's first group that is not empty, stripped (an empty one, `# Output:` with
// nothing after it, leaves the fallbacks after it their turn).
std::optional<std::string> last_group(const Regex& re, std::string_view text) {
  auto all = re.find_all(text);
  for (auto m = all.rbegin(); m != all.rend(); ++m)
    if (std::string s = strip(m->group(text, 1)); !s.empty()) return s;
  return std::nullopt;
}

// The solver's own fallbacks of one field, compiled once (the `# Field:` lines and tags are the
// proposer's too: proposer::comment_values, tag_values). A value may start on the line after
// "the input is:", as the reference's `\s*` lets it; it is captured in a lookahead, so a marker
// on that next line still starts a match of its own.
struct FieldFallbacks {
  explicit FieldFallbacks(const std::string& field)
      : call("(?<![\\w.])" + field + "\\((.*)\\)", 0),
        phrase("\\bthe " + field + " is:?(?=\\s*(\\S.*?)\\.?[ \\t]*$)", PCRE2_MULTILINE | PCRE2_CASELESS) {}
  Regex call, phrase;
};

// §3.4.4 for `field` = "input" or "output": the last ```field block, then `# Field:` lines,
// then a `field(...)` call, then <field> tags, then "the field is …", then the whole answer.
// (The order is the reference's; the exact patterns of the fallbacks are azr's.)
Found field_answer(std::string_view answer, const std::string& field) {
  auto blocks = proposer::blocks_tagged(answer, field);
  if (!blocks.empty()) return {strip(blocks.back()), "block"};
  static const FieldFallbacks input("input"), output("output");
  const FieldFallbacks& f = field == "input" ? input : output;
  if (auto v = proposer::comment_values(answer, field); !v.empty()) return {v.back(), "comment"};
  if (auto s = last_group(f.call, answer)) return {*s, "call"};
  if (auto v = proposer::tag_values(answer, field); !v.empty()) return {v.back(), "tag"};
  if (auto s = last_group(f.phrase, answer)) return {*s, "phrase"};
  return {strip(answer), "whole"};
}

// Induction (§2.3): the last code block, dedented; none → nullopt (the reference's
// parse_code_function fails, and so does the format: reward -1).
std::optional<Found> program_answer(std::string_view answer) {
  std::optional<std::string> last;
  for (auto& b : proposer::fenced_blocks(answer))
    if (proposer::is_code_info(b.info)) last = std::move(b.content);
  if (!last) return std::nullopt;
  return Found{proposer::program_text(*last), "block"};
}

}  // namespace

Extraction extract_answer(buffer::TaskType type, std::string_view generation) {
  Extraction e;
  const std::string text = proposer::judged_text(generation);
  std::optional<std::string> answer = proposer::last_answer(text);
  if (!answer) {
    e.reason = "no_answer";
    return e;
  }
  std::optional<Found> program;
  if (type == buffer::TaskType::Induction && !(program = program_answer(*answer))) {
    e.reason = "no_code_block";
    return e;
  }
  Found f = type == buffer::TaskType::Deduction   ? field_answer(*answer, "output")
            : type == buffer::TaskType::Abduction ? field_answer(*answer, "input")
                                                  : std::move(*program);
  e.answer = std::move(f.text);
  e.source = std::move(f.source);
  e.format_ok = proposer::r1_format_ok(text);
  e.reason = e.format_ok ? "ok" : "format";
  return e;
}

}  // namespace azr::solver
