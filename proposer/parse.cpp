#include "proposer/parse.h"

#include <optional>

#include "proposer/entry_function.h"
#include "proposer/fenced_blocks.h"
#include "proposer/import_scan.h"
#include "proposer/r1_answer.h"

namespace azr::proposer {
namespace {

ParseResult fail(ParseResult r, std::string reason, std::string detail = {}) {
  r.check = {false, std::move(reason), std::move(detail)};
  return r;
}

// The code block of the answer (see ParseOptions::reference_code_block_pitfall).
std::optional<std::string> code_block(std::string_view answer, const ParseOptions& o) {
  if (o.reference_code_block_pitfall) return reference_first_code_block(answer);
  for (auto& b : fenced_blocks(answer))
    if (is_code_info(b.info)) return std::move(b.content);
  return std::nullopt;
}

// The reference's fallbacks for a field written without its block (code_reward.py): the first
// `# Input:` line; the first <message> tags, else `# Message:` line.
std::optional<std::string> input_without_block(std::string_view answer) {
  std::vector<std::string> v = comment_values(answer, "input");
  return v.empty() ? std::nullopt : std::optional<std::string>(v.front());
}

std::optional<std::string> message_without_block(std::string_view answer) {
  std::vector<std::string> v = tag_values(answer, "message");
  if (v.empty()) v = comment_values(answer, "message");
  return v.empty() ? std::nullopt : std::optional<std::string>(v.front());
}

// The final check shared by both kinds: the R1 format (§3.4.3).
ParseResult finish(ParseResult r, const std::string& text) {
  if (!r1_format_ok(text)) return fail(std::move(r), "format", "not <think>…</think> <answer>…</answer>");
  r.check = {true, "ok", ""};
  return r;
}

}  // namespace

ParseResult parse_code_proposal(buffer::TaskType type, std::string_view generation, const ParseOptions& o) {
  ParseResult r;
  r.proposal.type = type;
  const std::string text = judged_text(generation);
  std::optional<std::string> answer = last_answer(text);
  if (!answer) return fail(std::move(r), "no_answer");

  std::optional<std::string> code = code_block(*answer, o);
  if (!code) return fail(std::move(r), "no_code_block");
  std::vector<std::string> inputs = blocks_tagged(*answer, "input");
  if (!inputs.empty()) {
    r.proposal.input = strip(inputs.front());  // §3.4.5: the FIRST ```input block
  } else if (auto line = input_without_block(*answer)) {
    r.proposal.input = *line;
  } else {
    return fail(std::move(r), "no_input_block");
  }
  std::string program = program_text(*code);

  std::vector<std::string> defs = def_names(program);
  if (defs.empty()) return fail(std::move(r), "no_def");
  if (defs.size() > 1) return fail(std::move(r), "multiple_defs", std::to_string(defs.size()) + " defs");
  program = rename_to_f(program, defs.front());
  r.proposal.program = program;

  if (program.find("input(") != std::string::npos) return fail(std::move(r), "input_call");
  if (auto b = find_banned_import(program, o.banned_words))
    return fail(std::move(r), "banned_import", b->module);
  return finish(std::move(r), text);
}

ParseResult parse_induction_proposal(std::string_view generation, std::string_view program,
                                     const ParseOptions& o) {
  ParseResult r;
  r.proposal.type = buffer::TaskType::Induction;
  r.proposal.program = std::string(program);
  const std::string text = judged_text(generation);
  std::optional<std::string> answer = last_answer(text);
  if (!answer) return fail(std::move(r), "no_answer");

  // §2.3: the LAST n ```input blocks, at least n of them.
  std::vector<std::string> inputs = blocks_tagged(*answer, "input");
  const size_t n = o.num_inputs > 0 ? static_cast<size_t>(o.num_inputs) : 0;
  if (inputs.size() < n)
    return fail(std::move(r), "too_few_inputs", std::to_string(inputs.size()) + " of " + std::to_string(n));
  for (size_t i = inputs.size() - n; i < inputs.size(); ++i) r.proposal.inputs.push_back(strip(inputs[i]));

  std::vector<std::string> messages = blocks_tagged(*answer, "message");
  if (!messages.empty()) {
    r.proposal.message = strip(messages.front());
  } else if (auto other = message_without_block(*answer)) {
    r.proposal.message = *other;
  } else {
    return fail(std::move(r), "no_message");
  }
  return finish(std::move(r), text);
}

ParseResult parse_proposal(buffer::TaskType type, std::string_view generation, std::string_view shown_program,
                           const ParseOptions& options) {
  return type == buffer::TaskType::Induction ? parse_induction_proposal(generation, shown_program, options)
                                             : parse_code_proposal(type, generation, options);
}

}  // namespace azr::proposer
