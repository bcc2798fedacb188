#pragma once
// A model's solver accuracy on a fixed set of tasks (a held-out set the program generator made,
// or any exported buffer): greedy answers to the task engine's own solver prompts, extracted and
// graded in the sandbox exactly as training grades them. The bootstrap reports it before and
// after the warm start; the trainer every eval.every steps (eval.heldout_tasks).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "sandbox/pool.h"

namespace azr::eval {

struct TaskEvalSettings {
  int32_t max_tokens = 256;
  int batch_size = 16;
  sandbox::Limits limits;
  model::PromptStyle prompt_style = model::PromptStyle::Paper;  // the solver prompts' wording
};

struct TaskEvalResult {
  std::array<int64_t, 3> tasks{};     // by buffer::TaskType
  std::array<int64_t, 3> correct{};
  std::array<int64_t, 3> format_ok{};
  double accuracy(int type) const { return tasks[size_t(type)] ? double(correct[size_t(type)]) / double(tasks[size_t(type)]) : 0; }
  double format_rate(int type) const {
    return tasks[size_t(type)] ? double(format_ok[size_t(type)]) / double(tasks[size_t(type)]) : 0;
  }
};

TaskEvalResult evaluate_solver(model::Transformer& model, const model::Tokenizer& tokenizer,
                               const std::vector<buffer::Task>& tasks, sandbox::Pool& pool,
                               const TaskEvalSettings& settings = {});

// Tasks from a JSONL file as `azr buffer export` writes it (none from an empty one). Throws
// std::runtime_error naming the file and its bad lines, or saying it is missing or a directory.
std::vector<buffer::Task> load_tasks_jsonl(const std::string& path);

}  // namespace azr::eval
