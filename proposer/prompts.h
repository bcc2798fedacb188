#pragma once
// Proposer prompts (azr-reference §3.2), written in azr's own words with the reference's
// structure, each wrapped by model::render_r1 so the generation starts inside <think> (§3.1);
// or, in the compact style (model/chat_format.h), one instruction line and the same blocks.
#include <string>
#include <string_view>
#include <vector>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"
#include "sandbox/limits.h"
#include "proposer/banned_words.h"

namespace azr::proposer {

// Deduction (the solver will predict the output) or abduction (it will predict the input):
// the task header, code/input requirements, the ```python + ```input output format, the
// evaluation criteria with the banned words, and the K `references` as <snippet_k> blocks with
// ```python / ```input / ```output (§2.1, §3.2). Sampling the K references is the caller's job.
//
// azr decision: the reference swaps the "Difficulty" criterion between the two prompts
// (abduction says "predicting the output", deduction "predicting your input", §3.2 quirk).
// azr fixes it: each prompt names the thing its solver has to predict.
//
// Compact style (model/chat_format.h): "Write a new Python function `f` and one input for it; the
// solver will deduce its output|an input from its output." + the answer format + the same
// <snippet_k> references. The banned words are not listed (validation still rejects them).
//
// The paper style states the time limit the sandbox enforces (`time_limit_seconds`, the CPU
// budget of a validation run; the reference's prompt said 10 s, its executor's timeout) and that
// inputs are literals, as validation requires (sandbox::InputMode::Literal).
std::string code_proposer_prompt(buffer::TaskType type, const std::vector<buffer::Task>& references,
                                 const std::vector<std::string>& banned_words = default_banned_words(),
                                 model::PromptStyle style = model::PromptStyle::Paper,
                                 double time_limit_seconds = sandbox::Limits{}.cpu_seconds);

// Induction: asks for `num_inputs` inputs, each in its own ```input block, and a ```message
// block, for `program`, shown with the suffix "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)" (§2.3).
// Compact style: one line asking for the inputs and the message, then the program's block.
// The paper style says the inputs are literals, as for the other types.
std::string induction_proposer_prompt(std::string_view program, int num_inputs = 10,
                                      model::PromptStyle style = model::PromptStyle::Paper);

}  // namespace azr::proposer
