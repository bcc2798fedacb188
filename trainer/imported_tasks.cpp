#include "trainer/imported_tasks.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "buffer/task_jsonl.h"
#include "proposer/banned_words.h"

#include "proposer/import_scan.h"
#include "solver/grade.h"
#include "trainer/model_setup.h"

namespace azr::trainer {

std::vector<std::string> imported_task_problems(sandbox::Pool& pool, const std::vector<buffer::Task>& tasks,
                                                const std::string& file, const std::vector<int64_t>& lines,
                                                const sandbox::Limits& limits,
                                                const std::vector<std::string>& banned_words) {
  std::vector<buffer::Task> as_graded;
  std::vector<solver::Answer> answers;
  for (const buffer::Task& t : tasks) {
    buffer::Task g = t;
    if (t.type == buffer::TaskType::Induction) {
      g.inputs.insert(g.inputs.end(), t.inputs.begin(), t.inputs.end());
      g.outputs.insert(g.outputs.end(), t.outputs.begin(), t.outputs.end());
      answers.push_back({as_graded.size(), t.program});
    } else {
      g.type = buffer::TaskType::Abduction;
      answers.push_back({as_graded.size(), t.input});
    }
    as_graded.push_back(std::move(g));
  }
  solver::GradeSettings gs;
  gs.limits = limits;
  // One round: imported tasks are meant to pass, and a passing one runs every pair either way;
  // first-pair-first would only add a second round's wait (the message is the same).
  gs.induction_first_pair_first = false;
  const std::vector<solver::Grade> grades = solver::grade(pool, as_graded, answers, gs);
  std::vector<std::string> problems;
  for (size_t i = 0; i < tasks.size(); i++) {
    const std::string where = fmt::format("{}:{}: ", file, i < lines.size() ? lines[i] : int64_t(i + 1));
    if (const auto banned = proposer::find_banned_import(tasks[i].program, banned_words))
      problems.push_back(where + "the program imports " + banned->module + " (banned: " + banned->word + ")");
    else if (grades[i].reason == "internal_error")
      problems.push_back(where + "the sandbox could not run it (" + grades[i].detail + ")");
    else if (tasks[i].type == buffer::TaskType::Deduction &&
             (grades[i].reason == "timeout" || grades[i].reason == "memory" || grades[i].reason == "output_too_large"))
      continue;
    else if (grades[i].reason == "not_a_literal")
      problems.push_back(where + "the input is not a literal argument list (" + grades[i].detail + ")");
    else if (!grades[i].correct)
      problems.push_back(where + "the program does not give the task's " +
                         (tasks[i].type == buffer::TaskType::Induction ? "outputs" : "output") + " (" +
                         grades[i].reason + (grades[i].detail.empty() ? "" : ": " + grades[i].detail) + ")");
  }
  return problems;
}

std::vector<buffer::Task> read_checked_imports(const std::string& file, const sandbox::Limits& limits, int workers,
                                               std::string* ignored) {
  std::ifstream in(file);
  if (!std::filesystem::is_regular_file(file) || !in)
    throw UserError("seeding.import_tasks: " + file + ": no such file, not a file or not readable");
  std::vector<buffer::Task> tasks;
  buffer::ImportReport read;
  try {
    read = buffer::read_jsonl(in, file, false, tasks);
  } catch (const buffer::BufferError& e) {
    throw UserError(std::string("seeding.import_tasks: ") + e.what());
  }
  sandbox::PoolOptions po;
  po.workers = workers;
  sandbox::Pool pool(po);
  const std::vector<std::string> problems =
      imported_task_problems(pool, tasks, file, read.task_lines, limits, proposer::default_banned_words());
  if (!problems.empty()) {
    std::string msg = fmt::format(
        "seeding.import_tasks: {} of {} task(s) are not what the run could use; nothing imported (fix or drop them):",
        problems.size(), tasks.size());
    for (const std::string& p : problems) msg += "\n  " + p;
    throw UserError(msg);
  }
  if (ignored) *ignored = buffer::ignored_fields_text(read);
  return tasks;
}

}  // namespace azr::trainer
