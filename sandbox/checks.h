#pragma once
// The job kinds the method needs (shared/METHOD.md), built on Pool. Each comes in a batch form
// so callers keep every worker busy; the single forms are conveniences over them.
//
//   evaluate           f(<input>) -> value and its repr (deduction outputs, validation)
//   determinism        f(<input>) twice, on workers with different hash seeds
//   check_equals       f(<input>) == <expected literal>, compared here on parsed values
//   run_on_inputs      one program on several inputs (induction grading)
//   parse_literals     Python literals -> values, parsed in the sandbox, never in azr
#include <string>
#include <vector>

#include "sandbox/pool.h"

namespace azr::sandbox {

using protocol::InputMode;

struct EvalRequest {
  std::string program;
  std::string input;  // the argument list, as Python source: `1, 'a', [2]`
};

struct DeterminismResult {
  CallResult first;   // primary worker: what training records
  CallResult second;  // alternate worker
  bool deterministic = false;
};

struct EqualsResult {
  CallResult actual;
  CallResult expected;  // the parsed literal (status error if it is not a literal)
  bool equal = false;
};

std::vector<CallResult> evaluate(Pool& pool, const std::vector<EvalRequest>& reqs, const Limits& limits = {},
                                 InputMode mode = InputMode::Literal);
CallResult evaluate(Pool& pool, const std::string& program, const std::string& input, const Limits& limits = {},
                                 InputMode mode = InputMode::Literal);

// Deterministic means: both ran ok and their values are equal (NaN counted equal to NaN, sets
// and dicts unordered), or both failed the same way (same status and exception type).
bool same_outcome(const CallResult& a, const CallResult& b);
std::vector<DeterminismResult> determinism(Pool& pool, const std::vector<EvalRequest>& reqs,
                                           const Limits& limits = {}, InputMode mode = InputMode::Literal);

std::vector<CallResult> parse_literals(Pool& pool, const std::vector<std::string>& literals,
                                       const Limits& limits = {});
std::vector<EqualsResult> check_equals(Pool& pool, const std::vector<EvalRequest>& reqs,
                                       const std::vector<std::string>& expected, const Limits& limits = {},
                                       InputMode mode = InputMode::Literal);

std::vector<CallResult> run_on_inputs(Pool& pool, const std::string& program, const std::vector<std::string>& inputs,
                                      const Limits& limits = {}, InputMode mode = InputMode::Literal);

// The two jobs these checks are made of, for callers that batch them with work of their own
// (solver/grade.cpp, solver/literal_parses.cpp): the program on each input, one call each;
// each literal parsed, one call each, in a child that runs no program.
Job run_program_job(std::string program, std::vector<std::string> inputs, const Limits& limits,
                    InputMode mode = InputMode::Literal, SeedClass seed = SeedClass::Primary);
Job parse_literals_job(std::vector<std::string> literals, const Limits& limits);

}  // namespace azr::sandbox
