#include "eval/task_eval.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "buffer/task_jsonl.h"
#include "model/generate.h"
#include "solver/extract.h"
#include "solver/grade.h"
#include "solver/prompts.h"

namespace azr::eval {

TaskEvalResult evaluate_solver(model::Transformer& m, const model::Tokenizer& tok, const std::vector<buffer::Task>& tasks,
                               sandbox::Pool& pool, const TaskEvalSettings& s) {
  TaskEvalResult res;
  model::SamplingParams p = model::sampling_defaults(m, tok);
  p.temperature = 0.f;  // greedy, as the paper evaluates
  p.max_new_tokens = s.max_tokens;
  std::vector<std::string> texts;
  const size_t batch = size_t(std::max(1, s.batch_size));
  for (size_t start = 0; start < tasks.size(); start += batch) {
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = start; i < std::min(tasks.size(), start + batch); i++)
      prompts.push_back(tok.encode(solver::solver_prompt(tasks[i], s.prompt_style)));
    for (model::Completion& c : model::generate(m, prompts, p, &tok)) texts.push_back(std::move(c.text));
  }
  std::vector<solver::Answer> answers;
  for (size_t i = 0; i < tasks.size(); i++) {
    const size_t t = size_t(tasks[i].type);
    res.tasks[t]++;
    const solver::Extraction e = solver::extract_answer(tasks[i].type, texts[i]);
    if (!e.format_ok) continue;
    res.format_ok[t]++;
    answers.push_back({i, e.answer});
  }
  solver::GradeSettings gs;
  gs.limits = s.limits;
  const std::vector<solver::Grade> grades = solver::grade(pool, tasks, answers, gs);
  for (size_t a = 0; a < grades.size(); a++)
    if (grades[a].correct) res.correct[size_t(tasks[answers[a].task].type)]++;
  return res;
}

std::vector<buffer::Task> load_tasks_jsonl(const std::string& path) {
  // An ifstream opens a directory, which then reads as no lines: held-out accuracy over no tasks.
  // (A pipe, `<(zcat tasks.jsonl.gz)`, is read as a file.)
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) throw std::runtime_error(path + ": no such file");
  if (status.type() == std::filesystem::file_type::directory)
    throw std::runtime_error(path + ": a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the task file (" + std::strerror(errno) + ")");
  // azr buffer import's reader: every bad line named, not the first alone.
  std::vector<buffer::Task> tasks;
  const buffer::ImportReport read = buffer::read_jsonl(in, path, /*skip_invalid=*/true, tasks);
  if (read.invalid > 0)
    throw std::runtime_error(path + ": " + std::to_string(read.invalid) + " invalid line(s):" +
                             buffer::listed_errors(read));
  // An empty file is no error: `azr bootstrap` with bootstrap.heldout_per_type = 0 writes one,
  // and the next command is given it. The callers say that no held-out accuracy follows.
  return tasks;
}

}  // namespace azr::eval
