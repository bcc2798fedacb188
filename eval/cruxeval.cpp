#include "eval/cruxeval.h"

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

std::vector<CruxVerdict> grade_cruxeval(sandbox::Pool& pool, const Benchmark& bench,
                                        const std::vector<CruxAnswer>& answers, const sandbox::Limits& limits) {
  if (bench.info.category != Category::Cruxeval) throw std::invalid_argument("grade_cruxeval: not a CRUXEval benchmark");
  const bool output_prediction = bench.info.name == "cruxeval_o";
  // One task per item answered.
  std::vector<buffer::Task> tasks;
  std::unordered_map<size_t, size_t> task_of_item;
  std::vector<solver::Answer> sa;
  sa.reserve(answers.size());
  std::vector<size_t> graded;  // answers[graded[k]] got grade k; the others call f on the input
  std::vector<CruxVerdict> out(answers.size());
  for (size_t k = 0; k < answers.size(); ++k) {
    const CruxAnswer& a = answers[k];
    const BenchItem& it = bench.items.at(a.item);
    // CRUXEval's rule: an output answer that is the call itself is wrong, however it evaluates.
    if (output_prediction && a.answer.find("f(" + it.input + ")") != std::string::npos) {
      out[k] = {false, "calls_f", "the answer calls f on the input"};
      continue;
    }
    graded.push_back(k);
    auto [pos, fresh] = task_of_item.emplace(a.item, tasks.size());
    if (fresh) {
      buffer::Task t;
      t.type = output_prediction ? buffer::TaskType::Deduction : buffer::TaskType::Abduction;
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
  gs.deduction_answer_mode = sandbox::InputMode::Expression;
  std::vector<solver::Grade> grades = solver::grade(pool, tasks, sa, gs);
  for (size_t k = 0; k < grades.size(); ++k)
    out[graded[k]] = {grades[k].correct, std::move(grades[k].reason), std::move(grades[k].detail)};
  return out;
}

}  // namespace azr::eval
