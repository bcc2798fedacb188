#pragma once
// Parsing a raw proposer generation into a Proposal (azr-reference §3.4, §4.1–§4.3), before the
// sandbox sees it (proposer/validate.h does that).
//
// Reason codes (Check::reason), in the order they are tested:
//   "no_answer"       no <answer> (§3.4.2; one never closed is read to the end)
//   deduction/abduction:
//   "no_code_block"   no ```python (or bare ```) block in the answer (§3.4.5)
//   "no_input_block"  no ```input block in the answer, nor a `# Input:` line (§3.4.5)
//   "no_def"          the program has no `def` (§4.1)
//   "multiple_defs"   more than one `def`, nested ones and methods included (§4.1)
//   "input_call"      the substring `input(` anywhere in the program (§4.3)
//   "banned_import"   an import of a banned module; detail = the module (§4.2)
//   induction:
//   "too_few_inputs"  fewer than n ```input blocks (§2.3)
//   "no_message"      no ```message block, <message> tags or `# Message:` line (§2.3)
//   both:
//   "format"          everything parsed, but the <think>…</think><answer>…</answer> regex failed
//                     (§3.4.3). The proposal is filled in: the reference still adds such a
//                     program to the buffer while giving it reward −1 (§6.2), so the caller can
//                     choose parity; azr's default treats it as invalid.
//   "ok"
#include <string>
#include <string_view>
#include <vector>

#include "buffer/task_buffer.h"
#include "proposer/banned_words.h"
#include "proposer/proposal.h"

namespace azr::proposer {

struct ParseOptions {
  std::vector<std::string> banned_words = default_banned_words();
  // Induction: how many ```input blocks are kept (the last ones) and required (§2.3).
  int num_inputs = 10;
  // azr decision: the code is the first fenced block tagged python (or untagged), so an
  // ```input block written before the code is not mistaken for it. true reproduces the
  // reference's regex, which takes the first fenced block of any kind (§3.4.5 pitfall).
  bool reference_code_block_pitfall = false;
};

struct ParseResult {
  Proposal proposal;
  Check check;
};

// Deduction or abduction: `generation` is what the model wrote after the prompt's "<think>".
ParseResult parse_code_proposal(buffer::TaskType type, std::string_view generation,
                                const ParseOptions& options = {});

// Induction: `program` is the program the prompt showed (the proposal's program comes from the
// prompt, not from the response).
ParseResult parse_induction_proposal(std::string_view generation, std::string_view program,
                                     const ParseOptions& options = {});

// Either of the two by type; `shown_program` is only read for induction.
ParseResult parse_proposal(buffer::TaskType type, std::string_view generation, std::string_view shown_program,
                           const ParseOptions& options = {});

}  // namespace azr::proposer
