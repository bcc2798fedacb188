#pragma once
// Prompts `azr eval --model` shows the model.
//   r1     (self-play models, the default): the problem wrapped by model::render_r1, so the
//          generation starts inside <think> and the answer goes in <answer> ... </answer>;
//          math asks for the final answer in \boxed{} inside the answer.
//   boxed  (base models): plain text, "<problem>\nPlease reason step by step, and put your final
//          answer within \boxed{}." -- no wrapper.
//   compact (models trained on the task engine's compact prompts, e.g. azr bootstrap's): the r1
//          bodies in the compact wrapper "User: ... Assistant: <think>".
// CRUXEval-O/I use the solver's own deduction/abduction prompts (solver/prompts.h, already
// wrapped) on a buffer::Task made from the item: the paper wording for r1 and boxed, the compact
// one for compact; they are the self-play task types. Code: the benchmark prompt in a ```python
// block, asking for the complete program in a ```python block (wrapped for r1 and compact).
#include <string>
#include <string_view>

#include "eval/benchmarks.h"

namespace azr::eval {

enum class Template { R1, Boxed, Compact };
Template parse_template(std::string_view s);  // "r1" | "boxed" | "compact"; throws std::invalid_argument

inline constexpr std::string_view kBoxedInstruction =
    "Please reason step by step, and put your final answer within \\boxed{}.";

std::string math_prompt(std::string_view problem, Template t);
std::string code_prompt(std::string_view problem_prompt, Template t);
std::string cruxeval_prompt(const BenchItem& item, bool output_prediction, Template t = Template::R1);
// Dispatches on the benchmark's category.
std::string item_prompt(const Benchmark& b, const BenchItem& item, Template t);

}  // namespace azr::eval
