#include "bootstrap/transcripts.h"

#include <stdexcept>

#include "proposer/prompts.h"
#include "solver/prompts.h"

namespace azr::bootstrap {
namespace {

std::string block(const char* tag, const std::string& body) {
  std::string s = "```";
  s += tag;
  s += '\n';
  s += body;
  s += "\n```\n";
  return s;
}

// " thought\n</think>\n<answer>\n" ... "</answer>": the layout of the well-formed fixtures in
// tests/task/fixtures/parse/.
std::string wrap(const std::string& thought, const std::string& answer_body) {
  return " " + thought + "\n</think>\n<answer>\n" + answer_body + "</answer>";
}

}  // namespace

std::string proposer_thought(buffer::TaskType type) {
  switch (type) {
    case buffer::TaskType::Deduction:
    case buffer::TaskType::Abduction:
      return "Let me write a small function and an input for it.";
    case buffer::TaskType::Induction:
      return "Let me pick inputs that show what the function does.";
  }
  return "";
}

std::string solver_thought(buffer::TaskType type) {
  switch (type) {
    case buffer::TaskType::Deduction:
      return "Let me run the code on the input.";
    case buffer::TaskType::Abduction:
      return "Let me find an input that gives this output.";
    case buffer::TaskType::Induction:
      return "Let me write a function that maps the inputs to the outputs.";
  }
  return "";
}

Transcript proposer_transcript(const buffer::Task& task, const std::vector<buffer::Task>& references,
                               model::PromptStyle style) {
  Transcript t;
  if (task.type == buffer::TaskType::Induction) {
    if (task.inputs.empty()) throw std::invalid_argument("proposer_transcript: induction task without inputs");
    t.prompt = proposer::induction_proposer_prompt(task.program, static_cast<int>(task.inputs.size()), style);
    std::string body;
    for (const std::string& in : task.inputs) body += block("input", in);
    body += block("message", task.message);
    t.response = wrap(proposer_thought(task.type), body);
    return t;
  }
  t.prompt = proposer::code_proposer_prompt(task.type, references, proposer::default_banned_words(), style);
  t.response = wrap(proposer_thought(task.type), block("python", task.program) + block("input", task.input));
  return t;
}

Transcript solver_transcript(const buffer::Task& task, model::PromptStyle style) {
  Transcript t;
  t.prompt = solver::solver_prompt(task, style);
  switch (task.type) {
    case buffer::TaskType::Deduction:
      t.response = wrap(solver_thought(task.type), block("output", task.output));
      break;
    case buffer::TaskType::Abduction:
      t.response = wrap(solver_thought(task.type), block("input", task.input));
      break;
    case buffer::TaskType::Induction:
      t.response = wrap(solver_thought(task.type), block("python", task.program));
      break;
  }
  return t;
}

}  // namespace azr::bootstrap
