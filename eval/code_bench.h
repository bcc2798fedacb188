#pragma once
// Code-generation benchmarks for `azr eval`: HumanEval, HumanEval+, MBPP, MBPP+.
//
// Loading reads the files in the shared benchmarks folder (see its README.md). Grading runs
// every candidate in the sandbox. HumanEval and MBPP: the benchmark's tests (one job: the
// candidate, the test source exec'd inside a checker function). HumanEval+ and MBPP+, as EvalPlus
// grades them: the candidate's answers on base_input, then, if all pass, on plus_input (a job
// each), compared by the problem's oracle with what the canonical solution returns on them (also
// computed in the sandbox, once per problem). The inputs are EvalPlus's (evalplus_inputs.h).
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sandbox/limits.h"
#include "sandbox/pool.h"
#include "sandbox/result.h"

namespace azr::eval {

// How an answer on an EvalPlus input is judged against the canonical solution's, as EvalPlus
// does (evalplus/eval/__init__.py and _special_oracle.py), chosen by the entry point's name:
//   Equal        out == exp, else, with a tolerance (atol, 1e-6 for float answers), the same type
//                and np.allclose(out, exp, rtol=1e-7, atol)
//   SetEqual     set(out) == set(exp): the task's answer is a collection in any order (Mbpp/2, 7,
//                111, 140, 232, 579, 769)
//   NotNone      the canonical solution's answer is whether it returned something (a re.Match,
//                which no file can hold); a bool answer must equal that, any other must be
//                non-None exactly when it is (Mbpp/737, 787, 794)
//   FindZero     |poly(xs, out)| <= atol: any root will do (HumanEval/32)
//   OrReference  Equal, or equal to a second reference EvalPlus accepts (Mbpp/581's other reading
//                of "height", Mbpp/558 with the shorter number zero-padded)
enum class PlusOracle { Equal, SetEqual, NotNone, FindZero, OrReference };

struct CodeProblem {
  std::string id;                  // "HumanEval/0", "Mbpp/2", ...
  std::string prompt;              // what the model is shown
  std::string entry_point;         // function name
  std::string canonical_solution;  // a full program that passes
  // The base tests as a self-contained Python source (asserts / check(entry)). Empty for the
  // EvalPlus benchmarks, which EvalPlus grades on their inputs alone: their `test`/`assertion`
  // fields are stricter than it is (Mbpp/769's assertion fixes an order its grading ignores).
  std::string test;
  std::vector<std::string> plus_inputs;  // EvalPlus base_input + plus_input as argument lists (`1, [2]`)
  size_t base_inputs = 0;                // how many of plus_inputs are base_input's
  double atol = 0;                 // EvalPlus float tolerance
  PlusOracle oracle = PlusOracle::Equal;
};

// name: "humaneval", "humanevalplus", "mbpp" (test split: task_id 11-510), "mbppplus".
// Throws std::runtime_error naming the file (and line) on a missing or malformed file.
std::vector<CodeProblem> load_code_benchmark(const std::string& name, const std::filesystem::path& data_dir);

struct CodeVerdict {
  bool passed = false;
  std::string reason;  // "ok", "failed_test", "exception", "timeout", "syntax_error", "memory",
                       // "no_entry", "wrong_output" (plus inputs), "internal_error", ...
  std::string detail;
};

// The limits grade_code runs a canonical solution under, on all plus inputs in one job, when
// candidates are graded under `limits`: at least 60 s of CPU, 2 GiB and 128 MiB of result.
sandbox::Limits canonical_run_limits(const sandbox::Limits& limits);

// What the canonical solutions return on the plus inputs, kept from one grade_code to the next.
// Those runs are half the plus-input work when candidates pass (MBPP+: 58 CPU-seconds of Python
// for all 378 problems), and a training run's periodic evaluation grades the same problems every
// time (eval::Benchmark holds one per code benchmark). Keyed by problem id and checked against the
// problem's program and inputs and the output caps it ran under, so a different problem under the
// same id, or other caps, run it again. Kept: the answers that follow from the program, its inputs
// and those caps (a value, an exception, an output over a cap: HumanEval/15's results pass 128
// MiB). Not kept, so run again next time: what may be the machine's (a timeout, a memory limit, a
// crash, a sandbox failure). One grade_code at a time may use it.
class CanonicalResults {
 public:
  // The kept result for p run under `ran_under` (canonical_run_limits), or nullptr.
  const sandbox::JobResult* find(const CodeProblem& p, const sandbox::Limits& ran_under) const;
  // Keeps r as p's result where it is one to keep (above); returns whether it did.
  bool keep(const CodeProblem& p, const sandbox::Limits& ran_under, const sandbox::JobResult& r);
  size_t size() const { return by_id_.size(); }

 private:
  struct Entry {
    uint64_t fingerprint;  // of the canonical program, the plus inputs and the output caps
    sandbox::JobResult result;
  };
  std::unordered_map<std::string, Entry> by_id_;
};

// completions[i] is a full program for problems[i]. `limits` applies to the base-test job. On
// the EvalPlus inputs, as EvalPlus: each input has the limit max(1 s, 4x the canonical solution's
// CPU time on it), and each input set (base, plus) the cap min(60 s, its inputs' limits summed)
// + 1 s. A job runs a set's inputs from some input on, with limits.cpu_seconds for the program's
// start-up and the larger of that input's limit and 4x the canonical's time on the rest; one that
// runs out of time in a later input is continued by a new job from there (the set is charged the
// calls it finished, and the start-up once), so a loop that never returns is stopped in the job
// of its own input, at its limit. Times are the calls' CPU seconds, where EvalPlus counts
// wall-clock seconds.
// The canonical results come from `canonical` where it has them, and what is computed goes into
// it; without one, they are computed for this call alone.
// share_identical: candidates that are the same program for the same problem (the same id and
// the same tests, inputs and canonical solution) are graded once, and the others take that
// verdict: pass@k sampling repeats completions, the more so at a low temperature. Their jobs are
// the same program on the same inputs under the same limits; only a program that draws on
// randomness or the clock, or one near a limit, could have been graded apart. Off, each
// candidate runs its own jobs (eval_bench's baseline).
std::vector<CodeVerdict> grade_code(sandbox::Pool& pool, const std::vector<CodeProblem>& problems,
                                    const std::vector<std::string>& completions, const sandbox::Limits& limits = {},
                                    CanonicalResults* canonical = nullptr, bool share_identical = true);

// The last ```python (or bare ```, the tag in any case) block of a response that defines the
// entry point, else the last such block (the whole response if none); for HumanEval problems the
// prompt is prepended when the block does not define the entry point.
std::string extract_code(std::string_view response, const CodeProblem& p);

// Modules the sandbox workers should pre-import for these benchmarks: the sandbox's default
// allowlist plus `hashlib` (HumanEval/162) and the other pure standard-library modules solutions
// import (statistics, datetime, calendar, json, textwrap, dataclasses, pprint, difflib, base64).
// Pass as PoolOptions::preimports.
std::vector<std::string> code_bench_preimports();

// JSON text of one value -> the same value as Python literal source (true -> True, Infinity ->
// 1e999, big integers kept exact, strings re-escaped). Exposed for tests.
std::string json_to_python(std::string_view json);

}  // namespace azr::eval
