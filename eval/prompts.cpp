#include "eval/prompts.h"

#include <stdexcept>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"
#include "solver/prompts.h"

namespace azr::eval {

Template parse_template(std::string_view s) {
  if (s == "r1") return Template::R1;
  if (s == "boxed") return Template::Boxed;
  throw std::invalid_argument("unknown template '" + std::string(s) + "' (r1 or boxed)");
}

std::string math_prompt(std::string_view problem, Template t) {
  std::string body = std::string(problem) + "\n" + std::string(kBoxedInstruction);
  return t == Template::R1 ? model::render_r1(body) : body;
}

std::string code_prompt(std::string_view problem_prompt, Template t) {
  std::string body =
      "Complete the following Python function. Give the complete program (imports, helper functions and the "
      "function itself) in one ```python block.\n```python\n" +
      std::string(problem_prompt);
  if (!body.empty() && body.back() != '\n') body += '\n';
  body += "```";
  return t == Template::R1 ? model::render_r1(body) : body + "\n";
}

std::string cruxeval_prompt(const BenchItem& item, bool output_prediction) {
  buffer::Task task;
  task.type = output_prediction ? buffer::TaskType::Deduction : buffer::TaskType::Abduction;
  task.program = item.program;
  task.input = item.input;
  task.output = item.output;
  return output_prediction ? solver::deduction_solver_prompt(task) : solver::abduction_solver_prompt(task);
}

std::string item_prompt(const Benchmark& b, const BenchItem& item, Template t) {
  switch (b.info.category) {
    case Category::Cruxeval: return cruxeval_prompt(item, b.info.name == "cruxeval_o");
    case Category::Code: return code_prompt(item.prompt, t);
    case Category::Math:
    case Category::Gsm8k: return math_prompt(item.prompt, t);
  }
  return {};
}

}  // namespace azr::eval
