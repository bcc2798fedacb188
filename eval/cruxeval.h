#pragma once
// CRUXEval-O / CRUXEval-I grading: the answer is extracted as the solver's is and graded as a
// deduction (output prediction) or abduction (input prediction) task in the sandbox.
//   extraction: a response with an <answer> tag goes through solver::extract_answer (the last
//   ```output / ```input block and the reference's fallbacks); otherwise the whole text is the
//   answer (stripped; a response that is exactly one fenced block gives the block's content).
//   grading, as CRUXEval's harness: CRUXEval-O runs its own check, the program then `assert
//   <output> == <answer>` at module level, so an answer may be any expression (`17 / 2`), even of
//   several lines (`x\ny = 1`); one containing the call
//   `f(<input>)` is wrong (reason `calls_f`), CRUXEval's rule. Reasons: ok, wrong (the assert
//   failed), syntax_error, exception, calls_f, timeout, ... CRUXEval-I goes through
//   solver::grade as an abduction task, the answer evaluated in InputMode::Expression (gold
//   inputs such as `dict(...)` or lambdas are expressions). No reward depends on these answers.
#include <string>
#include <string_view>
#include <vector>

#include "eval/benchmarks.h"
#include "sandbox/limits.h"
#include "sandbox/pool.h"

namespace azr::eval {

std::string extract_cruxeval_answer(std::string_view response, bool output_prediction);

struct CruxAnswer {
  size_t item = 0;      // index into bench.items
  std::string answer;   // already extracted
};

struct CruxVerdict {
  bool correct = false;
  std::string reason, detail;  // solver::Grade's reason codes
};

// bench is cruxeval_o or cruxeval_i. One verdict per answer, in order.
std::vector<CruxVerdict> grade_cruxeval(sandbox::Pool& pool, const Benchmark& bench,
                                        const std::vector<CruxAnswer>& answers, const sandbox::Limits& limits = {});

}  // namespace azr::eval
