#pragma once
// The benchmark registry of `azr eval` and the loaders of the files in ../shared/benchmarks
// (README.md there: one folder per benchmark, copied unchanged from the public sources).
//
// Categories (what the summary averages, as in the paper, METHOD.md "Evaluation"):
//   code      humaneval, humanevalplus, mbpp, mbppplus          -> code avg
//   math      aime24, aime25, amc23, math500, minerva_math,
//             olympiadbench                                     -> math avg
//   gsm8k     DECISION: graded like math but NOT in the math avg (the paper's math average is
//             the six sets above); reported on its own line.
//   cruxeval  cruxeval_o, cruxeval_i: in-distribution (the self-play task types), reported
//             separately, never in overall.
//   overall = (code avg + math avg) / 2.
//
// Items: id, the problem text (prompt, unformatted; eval/prompts.h formats it) and gold:
//   math: the gold final answer (gold_math_answer), code: the canonical program,
//   cruxeval_o: the output, cruxeval_i: the input (the argument list).
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "eval/code_bench.h"

namespace azr::eval {

enum class Category { Code, Math, Gsm8k, Cruxeval };
const char* category_name(Category c);  // "code", "math", "gsm8k", "cruxeval"

struct BenchmarkInfo {
  std::string name;    // registry name (`--bench`, the "bench" field of answers)
  Category category;
  std::string folder;  // folder under the data dir
  // In its category's average. The paper's code average is HumanEval+ and MBPP+ (and
  // LiveCodeBench); the base HumanEval and MBPP are reported beside it, not in it.
  bool in_average = true;
};

// All benchmarks, in the report's order.
const std::vector<BenchmarkInfo>& benchmark_registry();
const BenchmarkInfo* find_benchmark(std::string_view name);  // nullptr if unknown
// The registry's names, ", "-separated, for messages about an unknown one.
std::string benchmark_names();

// A data file is missing or malformed: the message names the file (and line).
struct BenchmarkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct BenchItem {
  std::string id;
  std::string prompt;  // the problem text: math problem, code prompt, cruxeval program
  std::string gold;
  // cruxeval: the task's program, input and output
  std::string program, input, output;
  size_t code_index = 0;  // code: index into Benchmark::code
};

struct Benchmark {
  BenchmarkInfo info;
  std::vector<BenchItem> items;
  std::vector<CodeProblem> code;  // code benchmarks: what grade_code needs, one per item
  // Code benchmarks: the canonical solutions' plus-input results, filled by grading and reused by
  // every later grading of this benchmark (a training run's periodic evaluation). Shared by the
  // copies of a Benchmark, which hold the same problems.
  std::shared_ptr<CanonicalResults> canonical;
  std::optional<size_t> index_of(const std::string& id) const;
};

// Loads one benchmark from data_dir/<folder>. Throws BenchmarkError (unknown name, missing or
// bad file).
Benchmark load_benchmark(std::string_view name, const std::filesystem::path& data_dir);

// A response that states an item's gold answer the way a model would (CRUXEval: the bare value
// or input; code: the canonical program in a python block; math: "\\boxed{gold}"). Grading it
// must score 100: the tests and the grading benchmark use it.
std::string gold_response(const Benchmark& b, const BenchItem& item);

// The data dir: `flag` if non-empty, else $AZR_BENCHMARKS, else "../shared/benchmarks" if it
// exists (relative to the current directory, which works from the repository root), else
// BenchmarkError saying to give --data.
std::filesystem::path resolve_data_dir(const std::string& flag);

}  // namespace azr::eval
