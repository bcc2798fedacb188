#include "solver/prompts.h"

#include <algorithm>

#include "model/chat_format.h"

namespace azr::solver {
namespace {

std::string block(const std::string& tag, const std::string& content) {
  return "```" + tag + "\n" + content + "\n```\n";
}

}  // namespace

std::string deduction_solver_prompt(const buffer::Task& t, model::PromptStyle style) {
  if (style == model::PromptStyle::Compact)
    return model::render_task_prompt(style, "Deduce what `f` returns on the input; answer with an ```output block.\n" +
                                                block("python", t.program) + block("input", t.input));
  std::string p;
  p += "# Task: Deduce the Output of a Python Code Snippet Given the Code and Input\n\n";
  p += "Given the code snippet and the input below, work out what `f(<input>)` returns. Trace the "
       "execution step by step.\n\n";
  p += "### Code Snippet:\n" + block("python", t.program) + "\n";
  p += "### Input:\n" + block("input", t.input) + "\n";
  p += "### Output Requirements:\n"
       "- Give the returned value as a Python literal\n"
       "- Put quotes around strings\n"
       "- Several returned values go in a tuple\n\n";
  p += "### Formatting:\nPut the output in a block, for example:\n" +
       block("output", "{'name': 'John', 'age': 20}");
  return model::render_r1(p);
}

std::string abduction_solver_prompt(const buffer::Task& t, model::PromptStyle style) {
  if (style == model::PromptStyle::Compact)
    return model::render_task_prompt(style, "Find an input on which `f` returns the output; answer with an ```input block.\n" +
                                                block("python", t.program) + block("output", t.output));
  std::string p;
  p += "# Task: Provide One Possible Input of a Python Code Snippet Given the Code and Output\n\n";
  p += "Given the code snippet and the output below, find an input such that `f(<input>)` returns "
       "that output. Any input that produces it is accepted.\n\n";
  p += "### Code Snippet:\n" + block("python", t.program) + "\n";
  p += "### Output:\n" + block("output", t.output) + "\n";
  p += "### Input Requirements:\n"
       "- Give the arguments of `f` as they would appear in the call `f(<input>)`, on one line\n"
       "- Several arguments are separated by commas\n"
       "- Put quotes around strings\n"
       // Graded in the literal mode (grade.h): `'a' * 3` is not_a_literal, a -0.5.
       "- Write each argument as a Python literal (numbers, strings, bytes, None, True, False, and "
       "tuples, lists, dicts and sets of them), not a name, call or expression such as `'a' * 3`\n\n";
  p += "### Formatting:\nPut the input in a block, for example:\n" +
       block("input", "'John', {'age': 20, 'city': 'New York'}");
  return model::render_r1(p);
}

size_t induction_given_count(const buffer::Task& t) {
  return std::min(t.inputs.size(), t.outputs.size()) / 2;
}

std::string induction_solver_prompt(const buffer::Task& t, model::PromptStyle style) {
  const size_t given = induction_given_count(t);
  if (style == model::PromptStyle::Compact) {
    std::string p = "Write the function `f` that maps each input to its output; answer with a ```python block.\n";
    for (size_t k = 0; k < given; ++k) {
      const std::string i = std::to_string(k);
      p += block("input_" + i, t.inputs[k]) + block("output_" + i, t.outputs[k]);
    }
    return model::render_task_prompt(style, p + block("message", t.message));
  }
  std::string p;
  p += "# Task: Deduce the Function that Produced the Outputs from the Inputs\n\n";
  p += "Given the input/output pairs and the message below, write a Python function `f` that maps "
       "every input to its output. Check your function against each pair before answering.\n\n";
  p += "### Code Requirements:\n"
       "- Name the entry function `f`\n"
       "- It must be deterministic and return a value\n"
       "- No randomness, date or time, I/O or printing\n"
       "- Put imports and class definitions at the top\n\n";
  p += "### Input/Output Pairs:\n";
  for (size_t k = 0; k < given; ++k) {
    const std::string i = std::to_string(k);
    p += block("input_" + i, t.inputs[k]) + block("output_" + i, t.outputs[k]) + "\n";
  }
  p += "### Message:\n" + block("message", t.message) + "\n";
  p += "### Formatting:\nPut the function in a block:\n" +
       block("python", "def f(...):\n    # your code here\n    return ...");
  p += "\nName your entry function `f()`!!!\n";
  return model::render_r1(p);
}

std::string solver_prompt(const buffer::Task& t, model::PromptStyle style) {
  switch (t.type) {
    case buffer::TaskType::Deduction: return deduction_solver_prompt(t, style);
    case buffer::TaskType::Abduction: return abduction_solver_prompt(t, style);
    case buffer::TaskType::Induction: return induction_solver_prompt(t, style);
  }
  return {};
}

}  // namespace azr::solver
