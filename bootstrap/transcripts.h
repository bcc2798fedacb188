#pragma once
// Task transcripts for the warm start: a (prompt, response) pair in EXACTLY the formats of the
// task engine (proposer/prompts.h, solver/prompts.h for the prompts; the responses are what
// proposer/parse.h and solver/extract.h read back), made from tasks that the program generator
// (bootstrap/program_gen.h) wrote with zero human data. A new tiny model is trained on these by
// next-token prediction (bootstrap/warm_start.h) so it knows the formats before self-play.
//
// The response is what follows the prompt's "<think>": a short fixed thought (the tiny model
// cannot reason in words; the think block is a format element), "</think>", and the <answer>
// block with the fenced blocks the parsers expect. Deduction and abduction proposers share one
// thought: with a thought per type, a 0.8M-parameter model warm-started for 1000 steps on paper
// prompts mostly wrote the other type's thought and then no valid program (bootstrap of
// 2026-11-21); the type only has to steer the program, not the words before it.
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"

namespace azr::bootstrap {

struct Transcript {
  std::string prompt;
  std::string response;  // what follows the prompt's "<think>"
};

// Deduction/abduction: prompt = proposer::code_proposer_prompt(task.type, references), response =
// thought, </think>, <answer>, ```python task.program, ```input task.input, </answer>.
// Induction: prompt = proposer::induction_proposer_prompt(task.program, n = task.inputs.size()),
// response = n ```input blocks (task.inputs) and a ```message block (task.message); `references`
// is unused. Throws std::invalid_argument for an induction task without inputs.
// `style` is the task engine's prompt wording (model/chat_format.h), as the trainer will use it.
Transcript proposer_transcript(const buffer::Task& task, const std::vector<buffer::Task>& references,
                               model::PromptStyle style = model::PromptStyle::Paper);

// Solver: prompt = solver::solver_prompt(task); response: deduction an ```output block with
// task.output, abduction an ```input block with task.input, induction a ```python block with
// task.program.
Transcript solver_transcript(const buffer::Task& task, model::PromptStyle style = model::PromptStyle::Paper);

// The fixed thought of each role and type (exposed for tests and logs).
std::string proposer_thought(buffer::TaskType type);
std::string solver_thought(buffer::TaskType type);

}  // namespace azr::bootstrap
