#include "eval/cruxeval.h"

#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "buffer/task_buffer.h"
#include "solver/extract.h"
#include "solver/grade.h"

namespace azr::eval {
namespace {

std::string strip(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

std::string extract_cruxeval_answer(std::string_view response, bool output_prediction) {
  auto type = output_prediction ? buffer::TaskType::Deduction : buffer::TaskType::Abduction;
  if (response.find("<answer>") != std::string_view::npos) return solver::extract_answer(type, response).answer;
  std::string s = strip(response);
  // Exactly one fenced block: ```[info]\n...\n```
  if (s.size() >= 6 && s.starts_with("```") && s.ends_with("```")) {
    size_t nl = s.find('\n');
    if (nl != std::string::npos && nl < s.size() - 3) {
      std::string inner = s.substr(nl + 1, s.size() - 3 - (nl + 1));
      if (inner.find("```") == std::string::npos) return strip(inner);
    }
  }
  return s;
}

namespace {

constexpr const char* kCheckEntry = "__azr_cruxeval_check__";

// CRUXEval-O's check of one answer, its own text: the program, then `assert <output> == <answer>`
// at module level, then a function for the sandbox to call, which exists only if the assert
// passed. The answer is any expression, as there: `17 / 2` is right for 8.5; `'a', 'b'` is a
// SyntaxError, and `x, 'msg'` compares x alone.
std::string output_check_program(const BenchItem& it, const std::string& answer) {
  return it.program + "\nassert " + it.output + " == " + answer + "\n\n\ndef " + kCheckEntry +
         "():\n    return True\n";
}

CruxVerdict output_verdict(const sandbox::JobResult& r) {
  if (r.calls.size() != 1) return {false, "internal_error", "no call result"};
  const sandbox::CallResult& c = r.calls[0];
  if (c.status == sandbox::Status::Ok) return {true, "ok", ""};
  const std::string detail = c.error_type + (c.message.empty() ? "" : ": " + c.message);
  if (c.status != sandbox::Status::Error) return {false, std::string(sandbox::status_name(c.status)), detail};
  if (c.error_type == "AssertionError") return {false, "wrong", ""};
  if (c.error_type == "SyntaxError" || c.error_type == "IndentationError") return {false, "syntax_error", detail};
  return {false, "exception", detail};
}

// CRUXEval-O: each distinct (item, answer) is one job. An answer that contains the call
// `f(<input>)` is wrong without a run, CRUXEval's rule.
std::vector<CruxVerdict> grade_outputs(sandbox::Pool& pool, const Benchmark& bench,
                                       const std::vector<CruxAnswer>& answers, const sandbox::Limits& limits) {
  std::vector<CruxVerdict> out(answers.size());
  std::vector<sandbox::Job> jobs;
  std::map<std::pair<size_t, std::string>, size_t> job_of;  // (item, answer) -> job
  std::vector<std::optional<size_t>> job_of_answer(answers.size());
  for (size_t k = 0; k < answers.size(); ++k) {
    const BenchItem& it = bench.items.at(answers[k].item);
    if (answers[k].answer.find("f(" + it.input + ")") != std::string::npos) {
      out[k] = {false, "calls_f", "the answer calls f on the input"};
      continue;
    }
    auto [pos, fresh] = job_of.try_emplace({answers[k].item, answers[k].answer}, jobs.size());
    if (fresh) {
      sandbox::Job j;
      j.program = output_check_program(it, answers[k].answer);
      j.entry = kCheckEntry;
      j.inputs = {""};
      j.limits = limits;
      jobs.push_back(std::move(j));
    }
    job_of_answer[k] = pos->second;
  }
  std::vector<sandbox::JobResult> res = pool.run(std::move(jobs));
  for (size_t k = 0; k < answers.size(); ++k)
    if (job_of_answer[k]) out[k] = output_verdict(res[*job_of_answer[k]]);
  return out;
}

}  // namespace

std::vector<CruxVerdict> grade_cruxeval(sandbox::Pool& pool, const Benchmark& bench,
                                        const std::vector<CruxAnswer>& answers, const sandbox::Limits& limits) {
  if (bench.info.category != Category::Cruxeval) throw std::invalid_argument("grade_cruxeval: not a CRUXEval benchmark");
  if (bench.info.name == "cruxeval_o") return grade_outputs(pool, bench, answers, limits);
  // CRUXEval-I: one abduction task per item answered.
  std::vector<buffer::Task> tasks;
  std::unordered_map<size_t, size_t> task_of_item;
  std::vector<solver::Answer> sa;
  sa.reserve(answers.size());
  for (const CruxAnswer& a : answers) {
    const BenchItem& it = bench.items.at(a.item);
    auto [pos, fresh] = task_of_item.emplace(a.item, tasks.size());
    if (fresh) {
      buffer::Task t;
      t.type = buffer::TaskType::Abduction;
      t.origin = buffer::Origin::Imported;
      t.program = it.program;
      t.input = it.input;
      t.output = it.output;
      tasks.push_back(std::move(t));
    }
    sa.push_back({pos->second, a.answer});
  }
  solver::GradeSettings gs;
  gs.limits = limits;
  gs.abduction_input_mode = sandbox::InputMode::Expression;
  std::vector<solver::Grade> grades = solver::grade(pool, tasks, sa, gs);
  std::vector<CruxVerdict> out;
  out.reserve(grades.size());
  for (auto& g : grades) out.push_back({g.correct, std::move(g.reason), std::move(g.detail)});
  return out;
}

}  // namespace azr::eval
