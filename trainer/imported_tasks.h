#pragma once
// The tasks a run imports as seeds (seeding.import_tasks) are checked as the run would use them:
// each program must give the outputs its task says, in the sandbox, and import nothing a proposer
// may not. A task whose output is wrong can never be solved (every rollout is graded wrong, its
// learnability is 0 for the run's life), and one importing a banned module is a task the
// proposer is penalised for writing. They were taken unchecked.
//
// The check reuses the solver's grading, with the task's own fields as the answer:
//   deduction, abduction  graded as abduction with the task's input as the answer (the program
//                         runs on it, the result is compared by value with the output);
//   induction             graded with the task's program as the answer, every pair hidden
//                         (inputs and outputs given twice: grading runs the second half).
#include <cstdint>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "sandbox/checks.h"
#include "sandbox/pool.h"

namespace azr::trainer {

// One "FILE:LINE: why" per task that fails, in file order; `lines[i]` is task i's line. A
// deduction task's program that hits a limit is not a problem: grading never runs it (the
// solver's answer is compared with the output), and a run with larger limits wrote it.
std::vector<std::string> imported_task_problems(sandbox::Pool& pool, const std::vector<buffer::Task>& tasks,
                                                const std::string& file, const std::vector<int64_t>& lines,
                                                const sandbox::Limits& limits,
                                                const std::vector<std::string>& banned_words);

// The tasks of `file` (seeding.import_tasks), read and checked with a pool of its own
// (`workers`), before the run's directory or model exist. Throws UserError naming the key and
// every bad line: the format's, then imported_task_problems'. `ignored`, if given, gets the fields
// the lines had that are not in the format (buffer::ignored_fields_text; "" for none).
std::vector<buffer::Task> read_checked_imports(const std::string& file, const sandbox::Limits& limits, int workers,
                                               std::string* ignored = nullptr);

}  // namespace azr::trainer
