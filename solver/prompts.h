#pragma once
// Solver prompts (azr-reference §3.3), in azr's own words with the reference's structure, each
// wrapped by model::render_r1 so the generation starts inside <think> (§3.1); or, in the compact
// style (model/chat_format.h), one instruction line and the same blocks.
#include <string>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"

namespace azr::solver {

// Deduction: the program and its input; the answer goes in an ```output block (§2.1).
// Compact style (model/chat_format.h): each is one instruction line, the same blocks, and the
// answer format, with nothing else.
std::string deduction_solver_prompt(const buffer::Task& task, model::PromptStyle style = model::PromptStyle::Paper);
// Abduction: the program and its output; the answer goes in an ```input block (§2.2).
std::string abduction_solver_prompt(const buffer::Task& task, model::PromptStyle style = model::PromptStyle::Paper);
// Induction: the first half of the pairs (inputs[:n/2], outputs[:n/2], §2.3) as ```input_k /
// ```output_k blocks and the message; never the program nor the hidden half. The answer is a
// ```python block defining `f`.
std::string induction_solver_prompt(const buffer::Task& task, model::PromptStyle style = model::PromptStyle::Paper);
// Dispatches on task.type.
std::string solver_prompt(const buffer::Task& task, model::PromptStyle style = model::PromptStyle::Paper);

// How many of an induction task's pairs the solver is shown: n/2 (§2.3; the seed's 6 → 3).
size_t induction_given_count(const buffer::Task& task);

}  // namespace azr::solver
