#include "eval/prompts.h"

#include <stdexcept>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"
#include "solver/prompts.h"

namespace azr::eval {

Template parse_template(std::string_view s) {
  if (s == "r1") return Template::R1;
  if (s == "boxed") return Template::Boxed;
  if (s == "compact") return Template::Compact;
  throw std::invalid_argument("unknown template '" + std::string(s) + "' (r1, boxed or compact)");
}

namespace {

// The body as the template wraps it; Boxed is the bare body (base models continue the text).
std::string wrap(std::string body, Template t) {
  switch (t) {
    case Template::R1: return model::render_r1(body);
    case Template::Compact: return model::render_task_prompt(model::PromptStyle::Compact, body);
    case Template::Boxed: break;
  }
  return body;
}

}  // namespace

std::string math_prompt(std::string_view problem, Template t) {
  std::string body = std::string(problem) + "\n" + std::string(kBoxedInstruction);
  return wrap(std::move(body), t);
}

std::string code_prompt(std::string_view problem_prompt, Template t) {
  std::string body =
      "Complete the following Python function. Give the complete program (imports, helper functions and the "
      "function itself) in one ```python block.\n```python\n" +
      std::string(problem_prompt);
  if (!body.empty() && body.back() != '\n') body += '\n';
  body += "```";
  return t == Template::Boxed ? body + "\n" : wrap(std::move(body), t);
}

std::string cruxeval_prompt(const BenchItem& item, bool output_prediction, Template t) {
  buffer::Task task;
  task.type = output_prediction ? buffer::TaskType::Deduction : buffer::TaskType::Abduction;
  task.program = item.program;
  task.input = item.input;
  task.output = item.output;
  const model::PromptStyle style = t == Template::Compact ? model::PromptStyle::Compact : model::PromptStyle::Paper;
  return output_prediction ? solver::deduction_solver_prompt(task, style) : solver::abduction_solver_prompt(task, style);
}

std::string item_prompt(const Benchmark& b, const BenchItem& item, Template t) {
  switch (b.info.category) {
    case Category::Cruxeval: return cruxeval_prompt(item, b.info.name == "cruxeval_o", t);
    case Category::Code: return code_prompt(item.prompt, t);
    case Category::Math:
    case Category::Gsm8k: return math_prompt(item.prompt, t);
  }
  return {};
}

}  // namespace azr::eval
