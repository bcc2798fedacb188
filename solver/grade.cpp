#include "solver/grade.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "sandbox/checks.h"
#include "sandbox/work_key.h"
#include "solver/literal_parses.h"

namespace azr::solver {
namespace sb = azr::sandbox;

namespace {

std::string detail_of(const sb::CallResult& r) {
  if (r.message.empty()) return r.error_type;
  if (r.error_type.empty()) return r.message;
  return r.error_type + ": " + r.message;
}

// A failed execution as a grade reason.
std::string failure_reason(const sb::CallResult& r) {
  switch (r.status) {
    case sb::Status::Ok: return "ok";
    case sb::Status::Error:
      if (r.error_type == sb::kUnrepresentable) return "unrepresentable";
      if (r.error_type == sb::kInputError) return "not_a_literal";
      return "exception";
    case sb::Status::Timeout: return "timeout";
    case sb::Status::Memory: return "memory";
    case sb::Status::OutputLimit: return "output_too_large";
    case sb::Status::Violation: return "violation";
    case sb::Status::Crashed: return "crashed";
    case sb::Status::Internal: return "internal_error";
  }
  return "internal_error";
}

// Parse failures of a literal: the parser's own errors mean "not a literal"; a limit hit while
// parsing (a pathological answer) is reported as that limit.
std::string literal_failure(const sb::CallResult& r) {
  if (r.status == sb::Status::Error) return "not_a_literal";
  return failure_reason(r);
}

Grade internal(std::string why) { return Grade{false, 0, "internal_error", std::move(why)}; }

// A task's output that did not parse: lost by the sandbox (internal_error, masked in training),
// else the task's own doing (not a literal, or a limit hit when parsed alone): bad_task.
Grade gold_failure(const sb::CallResult& gold) {
  if (gold.status == sb::Status::Internal) return internal(detail_of(gold));
  return Grade{false, 0, "bad_task", "task output: " + detail_of(gold)};
}

}  // namespace

std::vector<Grade> grade(sb::Pool& pool, const std::vector<buffer::Task>& tasks, const std::vector<Answer>& answers,
                         const GradeSettings& s) {
  // Jobs per answer:
  //   deduction  none of its own: the answer and the task's output are literals to parse
  //   abduction  RunProgram(task program, answer); the task's output is a literal to parse
  //   induction  RunProgram(answer, hidden input k) for each k; the hidden outputs are literals
  // Shared (GradeSettings::share_jobs), a run asked for again (8 rollouts that wrote the same
  // answer) is one job. The literals are parsed in ParseLiterals jobs (LiteralParses), which run
  // no program: a task's output never shares a child with the program whose output it judges.
  // Job numbers index `res`, the results of every round in order (GradeSettings::
  // induction_first_pair_first adds a second round); `base` is where this round's start there.
  constexpr size_t kNotRun = SIZE_MAX;  // an induction pair left out after its first failed
  std::vector<sb::Job> jobs;
  size_t base = 0;
  std::unordered_map<sb::WorkKey, size_t, sb::WorkKeyHash> job_of_run;  // shared: (program, input, mode) -> job
  std::vector<size_t> runs;  // every answer's runs' jobs, in order
  auto job_for = [&](const std::string& program, const std::string& input, sb::InputMode mode) {
    size_t job = base + jobs.size();
    if (s.share_jobs)
      job = job_of_run.try_emplace(sb::WorkKey{program, input, static_cast<int>(mode)}, job).first->second;
    if (job == base + jobs.size()) jobs.push_back(sb::run_program_job(program, {input}, s.limits, mode));
    return job;
  };
  auto add_run = [&](const std::string& program, const std::string& input, sb::InputMode mode) {
    runs.push_back(job_for(program, input, mode));
  };
  LiteralParses literals(s.share_jobs, s.limits);
  std::vector<size_t> first(answers.size());    // where its runs start in `runs`
  std::vector<size_t> literal(answers.size());  // where its literals start in `slots` (deduction: answer, gold)
  std::vector<Grade> out(answers.size());
  std::vector<bool> skip(answers.size(), false);
  std::vector<size_t> slots;  // every answer's literals' slots in LiteralParses, in order
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& t = tasks.at(answers[i].task);
    first[i] = runs.size();
    const std::string& a = answers[i].text;
    switch (t.type) {
      case buffer::TaskType::Deduction:
        literal[i] = slots.size();
        slots.push_back(literals.add(a));
        slots.push_back(literals.add(t.output));
        break;
      case buffer::TaskType::Abduction:
        add_run(t.program, a, s.abduction_input_mode);
        literal[i] = slots.size();
        slots.push_back(literals.add(t.output));
        break;
      case buffer::TaskType::Induction: {
        size_t n = std::min(t.inputs.size(), t.outputs.size());
        size_t h0 = t.inputs.size() / 2;
        if (t.inputs.size() != t.outputs.size() || h0 >= n) {
          out[i] = Grade{false, 0, "bad_task", "induction task has no hidden pairs"};
          skip[i] = true;
          break;
        }
        for (size_t k = h0; k < n; ++k)
          if (k == h0 || !s.induction_first_pair_first) add_run(a, t.inputs[k], sb::InputMode::Literal);
          else runs.push_back(kNotRun);  // the second round's, if the first pair is reproduced
        literal[i] = slots.size();
        for (size_t k = h0; k < n; ++k) slots.push_back(literals.add(t.outputs[k]));
        break;
      }
    }
    literals.end_group();
  }
  const size_t programs = jobs.size();
  for (sb::Job& j : literals.jobs()) jobs.push_back(std::move(j));
  std::vector<sb::JobResult> res = pool.run(std::move(jobs));
  literals.take({std::make_move_iterator(res.begin() + static_cast<std::ptrdiff_t>(programs)),
                 std::make_move_iterator(res.end())},
                [&pool](std::vector<sb::Job> alone) { return pool.run(std::move(alone)); });
  // The k-th run of answer i: its call, or null if the job did not give exactly one.
  auto ran = [&](size_t i, size_t k = 0) -> const sb::CallResult* {
    const sb::JobResult& r = res[runs[first[i] + k]];
    return r.calls.size() == 1 ? &r.calls[0] : nullptr;
  };
  auto parsed = [&](size_t i, size_t k = 0) -> const sb::CallResult& { return literals[slots[literal[i] + k]]; };
  // An induction pair's grade; "hidden k: " starts the detail of one not reproduced.
  auto pair_grade = [&](size_t i, size_t k) {
    const auto& t = tasks[answers[i].task];
    const size_t h0 = t.inputs.size() / 2;
    const sb::CallResult* run = ran(i, k);
    const sb::CallResult& gold = parsed(i, k);
    Grade pair;
    if (gold.status != sb::Status::Ok) pair = gold_failure(gold);
    else if (!run) pair = internal("no call result");
    else if (run->status != sb::Status::Ok) pair = Grade{false, 0, failure_reason(*run), detail_of(*run)};
    else if (!sb::python_equal(*run->value, *gold.value))
      pair = Grade{false, 0, "wrong", "f(" + t.inputs[h0 + k].substr(0, 100) + ") = " + run->repr.substr(0, 100)};
    else pair = Grade{true, 1, "ok", ""};
    if (!pair.correct) pair.detail = "hidden " + std::to_string(k) + ": " + pair.detail;
    return pair;
  };

  if (s.induction_first_pair_first) {
    // The second round: the other hidden pairs of each answer whose first one did not decide it
    // (reproduced, or lost by the sandbox, which decides only where no other pair fails).
    base = res.size();
    jobs.clear();  // moved into the first round's run
    for (size_t i = 0; i < answers.size(); ++i) {
      const auto& t = tasks[answers[i].task];
      if (skip[i] || t.type != buffer::TaskType::Induction) continue;
      const Grade p0 = pair_grade(i, 0);
      if (!p0.correct && p0.reason != "internal_error") continue;
      const size_t h0 = t.inputs.size() / 2;
      for (size_t k = 1; k < t.inputs.size() - h0; ++k)
        runs[first[i] + k] = job_for(answers[i].text, t.inputs[h0 + k], sb::InputMode::Literal);
    }
    if (!jobs.empty()) {
      std::vector<sb::JobResult> more = pool.run(std::move(jobs));
      res.insert(res.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
  }

  for (size_t i = 0; i < answers.size(); ++i) {
    if (skip[i]) continue;
    const auto& t = tasks[answers[i].task];
    Grade& g = out[i];
    switch (t.type) {
      case buffer::TaskType::Deduction: {
        const sb::CallResult& ans = parsed(i, 0);
        const sb::CallResult& gold = parsed(i, 1);
        if (gold.status != sb::Status::Ok) {
          g = gold_failure(gold);
          break;
        }
        if (ans.status != sb::Status::Ok) {
          g = Grade{false, 0, literal_failure(ans), detail_of(ans)};
          break;
        }
        bool eq = sb::python_equal(*ans.value, *gold.value);
        g = eq ? Grade{true, 1, "ok", ""} : Grade{false, 0, "wrong", ans.repr.substr(0, 200)};
        break;
      }
      case buffer::TaskType::Abduction: {
        const sb::CallResult* run = ran(i);
        const sb::CallResult& gold = parsed(i);
        if (!run) {
          g = internal("no call result");
          break;
        }
        if (gold.status != sb::Status::Ok) {
          g = gold_failure(gold);
          break;
        }
        if (run->status != sb::Status::Ok) {
          g = Grade{false, 0, failure_reason(*run), detail_of(*run)};
          break;
        }
        bool eq = sb::python_equal(*run->value, *gold.value);
        g = eq ? Grade{true, 1, "ok", ""} : Grade{false, 0, "wrong", "f(answer) = " + run->repr.substr(0, 200)};
        break;
      }
      case buffer::TaskType::Induction: {
        size_t h0 = t.inputs.size() / 2, h = t.inputs.size() - h0;
        size_t right = 0;
        g = Grade{true, 0, "ok", ""};
        // A pair the sandbox failed on decides nothing: another pair that is wrong makes the
        // answer wrong (the trainer masks internal_error, so it must not hide a known failure).
        std::optional<Grade> lost;
        for (size_t k = 0; k < h; ++k) {
          if (runs[first[i] + k] == kNotRun) continue;  // the first pair failed: it decides
          const Grade pair = pair_grade(i, k);
          if (pair.correct) {
            ++right;
          } else if (pair.reason == "internal_error") {
            if (!lost) lost = pair;
          } else if (g.correct) {  // the first failing pair decides the reason
            g.correct = false;
            g.reason = pair.reason;
            g.detail = pair.detail;
          }
        }
        if (g.correct && lost) g = *lost;
        g.accuracy = static_cast<double>(right) / static_cast<double>(h);
        break;
      }
    }
  }
  return out;
}

std::vector<Grade> grade(sb::Pool& pool, const std::vector<buffer::Task>& tasks, const std::vector<std::string>& answers,
                         const GradeSettings& s) {
  if (tasks.size() != answers.size()) throw std::invalid_argument("grade: one answer per task");
  std::vector<Answer> a(answers.size());
  for (size_t i = 0; i < answers.size(); ++i) a[i] = Answer{i, answers[i]};
  return grade(pool, tasks, a, s);
}

}  // namespace azr::solver
