#include "solver/grade.h"

#include <stdexcept>
#include <utility>

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

sb::Job parse_job(std::vector<std::string> literals, const sb::Limits& limits) {
  sb::Job j;
  j.op = sb::protocol::Op::ParseLiterals;
  j.inputs = std::move(literals);
  j.limits = limits;
  return j;
}

sb::Job run_job(const std::string& program, const std::string& input, const sb::Limits& limits,
               sb::InputMode mode = sb::InputMode::Literal) {
  sb::Job j;
  j.op = sb::protocol::Op::RunProgram;
  j.program = program;
  j.inputs = {input};
  j.input_mode = mode;
  j.limits = limits;
  return j;
}

const sb::CallResult* only_call(const sb::JobResult& r, size_t n = 1, size_t k = 0) {
  return r.calls.size() == n ? &r.calls[k] : nullptr;
}

Grade internal(std::string why) { return Grade{false, 0, "internal_error", std::move(why)}; }

}  // namespace

std::vector<Grade> grade(sb::Pool& pool, const std::vector<buffer::Task>& tasks, const std::vector<Answer>& answers,
                         const GradeSettings& s) {
  // Job layout per answer:
  //   deduction  1 job: ParseLiterals [answer, gold]
  //   abduction  2 jobs: RunProgram(task program, answer), ParseLiterals [gold]
  //   induction  h + 1 jobs: RunProgram(answer, hidden input k) for each k, ParseLiterals [hidden outputs]
  // The gold literals never share a child with the program whose output they judge.
  std::vector<sb::Job> jobs;
  std::vector<size_t> first(answers.size());
  std::vector<Grade> out(answers.size());
  std::vector<bool> skip(answers.size(), false);
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& t = tasks.at(answers[i].task);
    first[i] = jobs.size();
    const std::string& a = answers[i].text;
    switch (t.type) {
      case buffer::TaskType::Deduction: jobs.push_back(parse_job({a, t.output}, s.limits)); break;
      case buffer::TaskType::Abduction:
        jobs.push_back(run_job(t.program, a, s.limits, s.abduction_input_mode));
        jobs.push_back(parse_job({t.output}, s.limits));
        break;
      case buffer::TaskType::Induction: {
        size_t n = std::min(t.inputs.size(), t.outputs.size());
        size_t h0 = t.inputs.size() / 2;
        if (t.inputs.size() != t.outputs.size() || h0 >= n) {
          out[i] = Grade{false, 0, "bad_task", "induction task has no hidden pairs"};
          skip[i] = true;
          break;
        }
        for (size_t k = h0; k < n; ++k) jobs.push_back(run_job(a, t.inputs[k], s.limits));
        jobs.push_back(parse_job(std::vector<std::string>(t.outputs.begin() + static_cast<std::ptrdiff_t>(h0),
                                                          t.outputs.end()),
                                 s.limits));
        break;
      }
    }
  }
  auto res = pool.run(std::move(jobs));

  for (size_t i = 0; i < answers.size(); ++i) {
    if (skip[i]) continue;
    const auto& t = tasks[answers[i].task];
    size_t j = first[i];
    Grade& g = out[i];
    switch (t.type) {
      case buffer::TaskType::Deduction: {
        const sb::CallResult* ans = only_call(res[j], 2, 0);
        const sb::CallResult* gold = only_call(res[j], 2, 1);
        if (!ans || !gold) {
          // A limit that killed the child leaves no per-literal results; blame the answer unless
          // the sandbox itself failed.
          const sb::CallResult* any = res[j].calls.empty() ? nullptr : &res[j].calls[0];
          if (!any) g = internal("parse job gave no result");
          else g = Grade{false, 0, literal_failure(*any), detail_of(*any)};
          break;
        }
        if (gold->status != sb::Status::Ok) {
          g = gold->status == sb::Status::Error ? Grade{false, 0, "bad_task", "task output: " + detail_of(*gold)}
                                                : Grade{false, 0, literal_failure(*gold), detail_of(*gold)};
          break;
        }
        if (ans->status != sb::Status::Ok) {
          g = Grade{false, 0, literal_failure(*ans), detail_of(*ans)};
          break;
        }
        bool eq = sb::python_equal(*ans->value, *gold->value);
        g = eq ? Grade{true, 1, "ok", ""} : Grade{false, 0, "wrong", ans->repr.substr(0, 200)};
        break;
      }
      case buffer::TaskType::Abduction: {
        const sb::CallResult* run = only_call(res[j]);
        const sb::CallResult* gold = only_call(res[j + 1]);
        if (!run || !gold) {
          g = internal("no call result");
          break;
        }
        if (gold->status != sb::Status::Ok) {
          g = gold->status == sb::Status::Error ? Grade{false, 0, "bad_task", "task output: " + detail_of(*gold)}
                                                : internal(detail_of(*gold));
          break;
        }
        if (run->status != sb::Status::Ok) {
          g = Grade{false, 0, failure_reason(*run), detail_of(*run)};
          break;
        }
        bool eq = sb::python_equal(*run->value, *gold->value);
        g = eq ? Grade{true, 1, "ok", ""} : Grade{false, 0, "wrong", "f(answer) = " + run->repr.substr(0, 200)};
        break;
      }
      case buffer::TaskType::Induction: {
        size_t h0 = t.inputs.size() / 2, h = t.inputs.size() - h0;
        const sb::JobResult& golds = res[j + h];
        if (golds.calls.size() != h) {
          g = internal("parse job gave no result");
          break;
        }
        size_t right = 0;
        g = Grade{true, 0, "ok", ""};
        for (size_t k = 0; k < h; ++k) {
          const sb::CallResult* run = only_call(res[j + k]);
          const sb::CallResult& gold = golds.calls[k];
          Grade pair;
          if (gold.status != sb::Status::Ok) pair = Grade{false, 0, "bad_task", "task output: " + detail_of(gold)};
          else if (!run) pair = internal("no call result");
          else if (run->status != sb::Status::Ok) pair = Grade{false, 0, failure_reason(*run), detail_of(*run)};
          else if (!sb::python_equal(*run->value, *gold.value))
            pair = Grade{false, 0, "wrong", "f(" + t.inputs[h0 + k].substr(0, 100) + ") = " + run->repr.substr(0, 100)};
          else pair = Grade{true, 1, "ok", ""};
          if (pair.correct) {
            ++right;
          } else if (g.correct) {  // the first failing pair decides the reason
            g.correct = false;
            g.reason = pair.reason;
            g.detail = "hidden " + std::to_string(k) + ": " + pair.detail;
          }
        }
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
