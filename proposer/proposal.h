#pragma once
// What a proposer response becomes once parsed (proposer/parse.h), before the sandbox has seen
// it (proposer/validate.h). Plain data shared by the two halves of the proposer.
#include <string>
#include <vector>

#include "buffer/task_buffer.h"

namespace azr::proposer {

struct Proposal {
  buffer::TaskType type = buffer::TaskType::Deduction;
  // Deduction/abduction: the proposed program (entry function already renamed to `f`) and its
  // one input. Induction: the program is the one the prompt showed; the proposer wrote `inputs`
  // (the reference keeps the last 10 input blocks) and `message`.
  std::string program;
  std::string input;
  std::vector<std::string> inputs;
  std::string message;
};

// The outcome of parsing or validating: `reason` is a stable machine-readable code ("ok",
// "no_answer", "no_code_block", "banned_import", "non_deterministic", ...; each module lists its
// own), `detail` is for humans (which import, the exception message, ...).
struct Check {
  bool ok = false;
  std::string reason;
  std::string detail;
};

}  // namespace azr::proposer
