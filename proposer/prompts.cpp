#include "proposer/prompts.h"

#include <sstream>
#include <stdexcept>

#include "model/chat_format.h"

namespace azr::proposer {
namespace {

std::string join(const std::vector<std::string>& words, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? std::string(sep) : "") + words[i];
  return out;
}

std::string shortest(double x) {  // 2 -> "2", 0.5 -> "0.5"
  std::ostringstream out;
  out << x;
  return out.str();
}

// Validation reads inputs as literals (sandbox::InputMode::Literal), where the reference
// evaluated them: `list(range(3))` is refused as input_not_literal, so the prompt says so.
constexpr const char* kLiteralsOnly =
    "- Use Python literals only (numbers, strings, bytes, None, True, False, and tuples, lists, dicts and sets "
    "of them): no names, calls or expressions such as `list(range(3))`\n";

// §3.2 item 7: each reference as <snippet_k> with its program, input and output.
std::string render_references(const std::vector<buffer::Task>& refs) {
  std::string out;
  for (size_t k = 0; k < refs.size(); ++k) {
    const std::string tag = "snippet_" + std::to_string(k);
    out += "<" + tag + ">\n```python\n" + refs[k].program + "\n```\n\n```input\n" + refs[k].input +
           "\n```\n\n```output\n" + refs[k].output + "\n```\n</" + tag + ">\n\n";
  }
  return out;
}

}  // namespace

std::string code_proposer_prompt(buffer::TaskType type, const std::vector<buffer::Task>& references,
                                 const std::vector<std::string>& banned_words, model::PromptStyle style,
                                 double time_limit_seconds) {
  if (type == buffer::TaskType::Induction)
    throw std::invalid_argument("code_proposer_prompt: induction has its own prompt");
  const bool deduction = type == buffer::TaskType::Deduction;
  if (style == model::PromptStyle::Compact)
    return model::render_task_prompt(
        style, std::string("Write a new Python function `f` and one input for it; the solver will deduce ") +
                   (deduction ? "its output" : "an input from its output") +
                   ".\nAnswer with a ```python block and an ```input block.\n\n" + render_references(references));
  // What the solver of this task will have to predict (the fixed "Difficulty" criterion).
  const std::string predicted = deduction ? "its output from the code and your input"
                                          : "your input from the code and its output";
  // The reference's prompt allows custom classes and nested functions, and its validation
  // refuses any second `def` (azr-reference §4.1): a method or a nested function got -1. This one
  // asks for what validation takes.
  std::string p;
  p += "## Task: Create a Python Code Snippet with one Matching Input\n\n";
  p += std::string("Write a new Python code snippet and one input for it. A solver will be shown ") +
       (deduction ? "the code and your input and must deduce the output"
                  : "the code and the output it returns on your input and must deduce an input") +
       ", so make the snippet challenging to reason about.\n\n";
  p += "### Code Requirements:\n"
       "- Write exactly one function definition, `f`: no helper functions, methods or nested functions\n"
       "- `f` must return a value\n"
       "- `f` must take at least one parameter\n"
       "- The snippet must be deterministic: the same input always gives the same output\n"
       "- It should require state tracking across multiple data transformations\n"
       "- No randomness, date or time, file or network I/O, printing, or external state\n"
       "- It must finish in under " + shortest(time_limit_seconds) + " seconds\n"
       "- Put imports at the top of the snippet\n"
       "- The snippet ends with `f` returning a value\n\n";
  p += "### Input Requirements:\n"
       "- Give exactly one input\n"
       "- Several arguments are separated by commas, as in a call `f(<input>)`\n"
       "- Put quotes around strings\n" +
       std::string(kLiteralsOnly) + "\n";
  p += "### Formatting:\n"
       "- Put the code in a block:\n```python\ndef f(...):\n    # your code here\n    return ...\n```\n"
       "- Put the input in a block:\n```input\n'John', {'age': 20, 'city': 'New York'}\n```\n\n";
  p += "### Evaluation Criteria:\n"
       "- Executability: the code runs without errors on your input\n"
       "- Difficulty in predicting " + predicted + "\n"
       "- Creativity: the snippet is sufficiently different from the reference snippets below\n"
       "- Restrictions: these words are forbidden in any form, even in comments: " +
       join(banned_words, ", ") + "\n\n";
  p += "First, carefully devise a clear plan: think about what makes a snippet hard to reason "
       "about, then write the code and pick an input.\n\n";
  p += "### Reference Code Snippets:\n";
  p += render_references(references);
  return model::render_r1(p);
}

std::string induction_proposer_prompt(std::string_view program, int num_inputs, model::PromptStyle style) {
  const std::string n = std::to_string(num_inputs);
  if (style == model::PromptStyle::Compact)
    return model::render_task_prompt(style, "Give " + n + " different inputs for `f`, each in an ```input block, and "
                                            "a ```message block that hints at what `f` does.\n```python\n" +
                                            std::string(program) + "\n```\n");
  std::string p;
  p += "## Task: Output " + n + " Inputs that can be plugged into the following Code Snippet to "
       "produce diverse Outputs, and give a message related to the given snippet.\n\n";
  p += "A solver will see half of the resulting input/output pairs and your message, and must "
       "write the function; it is then checked on the other half.\n\n";
  p += "### Input Requirements:\n"
       "- Give " + n + " valid inputs, each in its own ```input block\n"
       "- Several arguments are separated by commas, as in a call `f(<input>)`\n"
       "- Put quotes around strings\n" +
       std::string(kLiteralsOnly) + "\n";
  p += "### Message Requirements:\n"
       "- Put the message in a ```message block\n"
       "- The message may hint at what the function does, but it cannot provide the code snippet\n\n";
  p += "### Formatting:\n"
       "```input\n'John', {'age': 20, 'city': 'New York'}\n```\n"
       "```message\nWrite a function that ...\n```\n\n";
  p += "### Evaluation Criteria:\n"
       "- Executability: the code runs without errors on every input\n"
       "- Coverage: the inputs together exercise the function's behaviour\n"
       "- Creativity: the inputs differ from each other\n"
       "- The task should be challenging for the solver, but not impossible\n\n";
  p += "### Code Snippet:\n```python\n" + std::string(program) +
       "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)\n```\n";
  return model::render_r1(p);
}

}  // namespace azr::proposer
