#pragma once
// Validation of parsed proposals (proposer/proposal.h) in the sandbox, in METHOD.md's order after
// parsing: the program parses; no banned import; (deduction/abduction) f(<input>) runs without
// any exception, within the limits, deterministically across two workers with different hash
// seeds, and returns plain data whose repr fits max_output_chars; (induction) the same for every
// one of the proposer's inputs. Nothing of the proposal is parsed or evaluated in this process:
// the static checks run a fixed checker program in the sandbox, with the untrusted source passed
// to it as a Python str literal.
//
// Reason codes (proposer::Check::reason):
//   ok                 valid; the task is in ValidationResult::task
//   syntax_error       ast.parse failed on the program (detail: the SyntaxError)
//   banned_import      an Import/ImportFrom whose module or name has a dotted component in
//                      banned_words (detail: the offending statement's module/name)
//   input_call         the program text contains `input(` (the reference's substring check)
//   no_inputs          induction proposal without inputs
//   input_not_literal  the input is not an argument list of literals (InputMode::Literal)
//   exception          f raised (any exception; detail "Type: message")
//   timeout, memory, violation, crashed
//   output_too_large   stdout/stderr or result over the sandbox cap, or repr longer than
//                      max_output_chars (azr rejects instead of truncating)
//   unrepresentable    the result is not plain data (generator, function, object, ...)
//   output_not_literal the result's repr is not a literal grading can read back: it holds an
//                      inf or nan, a frozenset, a bytearray or Ellipsis (azr rejects; the
//                      reference kept such tasks, which no answer could solve)
//   non_deterministic  the two runs (different hash seeds) disagree
//   internal_error     the sandbox itself failed (not the proposal's fault; callers may mask it)
// Induction: the first failing input decides; detail starts with "input <k>: ". An input the
// sandbox failed on (internal_error) decides only when no other input failed (nor the other
// hash seed's run of the same input). Whatever stops the static checker but the sandbox's own
// failure (a limit: timeout, memory, output_too_large; a crash) is the proposal's doing.
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "proposer/banned_words.h"
#include "proposer/proposal.h"
#include "sandbox/checks.h"

namespace azr::proposer {

struct ValidateSettings {
  std::vector<std::string> banned_words = default_banned_words();
  // The reference skips the banned-word check for induction (the program came from the buffer).
  bool check_banned_for_induction = false;
  bool reject_input_call = true;  // the reference rejects any code containing "input("
  size_t max_output_chars = 400;  // repr length limit in code points (the reference truncated at 400)
  sandbox::Limits limits;         // per execution (each input of an induction runs in its own child)
  sandbox::InputMode input_mode = sandbox::InputMode::Literal;
  size_t induction_inputs = 10;   // an induction proposal keeps at most this many inputs (the last ones)
  size_t induction_min_inputs = 1;  // fewer -> no_inputs
};

struct ValidationResult {
  Check check;
  buffer::Task task;  // filled when check.ok (origin Proposed; step/proposer_sample left to the caller)
};

// One result per proposal, in order. Runs every job of a stage in one Pool::run so all workers
// stay busy; needs a pool with alternate workers (determinism).
std::vector<ValidationResult> validate(sandbox::Pool& pool, const std::vector<Proposal>& proposals,
                                       const ValidateSettings& settings = {});

// Exposed for tests and other modules.
// A Python str literal ('...') whose value is exactly the UTF-8 text `s` (invalid UTF-8 is
// replaced by U+FFFD so the literal always parses).
std::string python_str_literal(const std::string& s);
// The sandbox outcome of one call as a reason code (see above); "ok" for Status::Ok.
Check reason_for(const sandbox::CallResult& r);
// Number of Unicode code points in UTF-8 text.
size_t utf8_length(const std::string& s);

}  // namespace azr::proposer
