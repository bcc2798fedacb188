#pragma once
// Solver answer extraction (azr-reference §3.4). The answer is returned verbatim as model text:
// grading happens later, in the sandbox (METHOD.md azr decision: no eval in the trainer).
//
// Reason codes: "no_answer" (no <answer>, §3.4.2), "no_code_block" (induction: the answer holds
// no code block; the reference's parse_code_function fails and the format score is 0), "format"
// (the answer exists but the <think>…</think><answer>…</answer> regex fails, §3.4.3), "ok". Only
// "ok" means format_ok; the answer is still extracted for "format" (for logs; the reference does
// not evaluate it, §6.1). The text judged ends at a turn the model invents (judged_text).
#include <string>
#include <string_view>

#include "buffer/task_buffer.h"

namespace azr::solver {

struct Extraction {
  bool format_ok = false;
  std::string answer;
  std::string reason;
  // Where the answer came from: "block" (the fenced block), then the fallbacks of §3.4.4:
  // "comment" (`# Output: …`), "call" (`output(…)`), "tag" (`<output>…</output>`),
  // "phrase" ("the output is …"), "whole" (the whole answer text); "" when there is no answer.
  std::string source;
};

// `generation` is what the model wrote after the prompt's "<think>".
// Deduction: the LAST ```output block; abduction: the LAST ```input block, each with the §3.4.4
// fallbacks in the reference's order. Induction: the LAST ```python (or bare ```) block,
// dedented, no fallback (§2.3).
Extraction extract_answer(buffer::TaskType type, std::string_view generation);

}  // namespace azr::solver
