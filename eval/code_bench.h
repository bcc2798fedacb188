#pragma once
// Code-generation benchmarks for `azr eval`: HumanEval, HumanEval+, MBPP, MBPP+.
//
// Loading reads the files in the shared benchmarks folder (see its README.md). Grading runs
// every candidate in the sandbox: first the benchmark's base tests (one job: the candidate, the
// test source exec'd inside a checker function), then, for the EvalPlus benchmarks, all
// base_input + plus_input argument lists in one job, compared value by value with what the
// canonical solution returns on them (also computed in the sandbox, once per problem).
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sandbox/limits.h"
#include "sandbox/pool.h"
#include "sandbox/result.h"

namespace azr::eval {

struct CodeProblem {
  std::string id;                  // "HumanEval/0", "Mbpp/2", ...
  std::string prompt;              // what the model is shown
  std::string entry_point;         // function name
  std::string canonical_solution;  // a full program that passes
  std::string test;                // the base tests as a self-contained Python source (asserts / check(entry))
  std::vector<std::string> plus_inputs;  // EvalPlus base_input + plus_input as argument lists (`1, [2]`)
  double atol = 0;                 // EvalPlus float tolerance
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

// completions[i] is a full program for problems[i]. `limits` applies to the base-test job; the
// plus-input job of a candidate gets limits.cpu_seconds + 4x the canonical solution's CPU time.
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
