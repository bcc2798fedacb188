#pragma once
// Grading any benchmark's responses, and the summary `azr eval` prints.
//
// grade_samples: per response, the extracted answer and the verdict:
//   cruxeval_o/_i  eval/cruxeval.h
//   code           extract_code + grade_code (sandbox; base tests, then EvalPlus plus inputs)
//   math, gsm8k    extract_math_answer + math_equivalent against the gold answer
//                  (reason "no_answer" when nothing could be extracted, else "ok" / "wrong")
// Scores: per item, n samples with c correct; pass@1 = mean over items of c/n, pass@k = mean of
// the unbiased estimator (eval/pass_at_k.h). Items without any response are not counted.
// Summary, as the paper's table: code avg = mean pass@1 of the code benchmarks evaluated, math
// avg = of the six math benchmarks evaluated (not gsm8k), overall = (code avg + math avg) / 2
// (only when both are present); CRUXEval-O/I and gsm8k on their own lines.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/benchmarks.h"
#include "sandbox/limits.h"
#include "sandbox/pool.h"

namespace azr::eval {

struct Sample {
  size_t item = 0;  // index into bench.items
  std::string response;
  bool cut_off = false;  // generated: stopped at max_tokens, not at its end
};

struct Verdict {
  bool correct = false;
  std::string extracted;
  std::string reason, detail;
};

// Math / gsm8k: one response against a gold answer (no sandbox).
Verdict grade_math_response(std::string_view response, std::string_view gold);

std::vector<Verdict> grade_samples(sandbox::Pool& pool, const Benchmark& bench, const std::vector<Sample>& samples,
                                   const sandbox::Limits& limits = {});

struct BenchScore {
  std::string name;
  Category category = Category::Math;
  size_t items = 0;    // items with at least one sample
  size_t benchmark_items = 0;  // items the benchmark holds (after --limit); more than `items`
                               // when answers are missing: pass@1 is then over `items` alone
  size_t samples = 0;
  size_t min_n = 0;    // fewest samples of an item
  double pass1 = 0;    // in [0, 1]
  std::optional<double> passk;  // when k was asked for and every item has n >= k
};

BenchScore score_bench(const Benchmark& bench, const std::vector<Sample>& samples, const std::vector<Verdict>& verdicts,
                       int k = 0);

struct Summary {
  std::vector<BenchScore> benches;
  std::optional<double> code_avg, math_avg, overall, code_avg_k, math_avg_k, overall_k;
  // The benchmarks each pass@1 average is over, in the report's order. The paper's averages are
  // over all of them (its code average also over LiveCodeBench, which azr lacks), so the table
  // names these: an average over fewer is not the paper's figure.
  std::vector<std::string> code_avg_of, math_avg_of;
  int k = 0;
};

Summary summarize(std::vector<BenchScore> scores, int k);
std::string format_table(const Summary& s);  // percentages with one decimal
nlohmann::json summary_json(const Summary& s);  // percentages (0-100), rounded to 0.01

}  // namespace azr::eval
