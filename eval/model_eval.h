#pragma once
// Evaluating a model in-process: generate n samples per benchmark item, then grade and score
// them. `azr eval --model` is a thin CLI over this, and the trainer's periodic evaluation calls
// evaluate_model() between steps (default subset: CRUXEval-O/I), with the model it is training.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "eval/benchmarks.h"
#include "eval/prompts.h"
#include "eval/report.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "sandbox/pool.h"

namespace azr::eval {

struct ModelEvalSettings {
  Template tmpl = Template::R1;
  int n = 1;                         // samples per item
  std::optional<float> temperature;  // default: 0 (greedy) when n == 1, else 1.0
  float top_p = 1.f;
  int32_t max_tokens = 1024;
  uint64_t seed = 0;
  int batch_size = 16;  // sequences per generate() call
  size_t limit = 0;     // only the first `limit` items; 0 = all
  int k = 0;            // pass@k besides pass@1; 0 = off
  // Called after each generate() batch with the responses done so far, of all, and the new tokens
  // generated so far: `azr eval`'s progress line. Unset: nothing is said.
  std::function<void(size_t done, size_t total, int64_t tokens)> progress;
};

// n samples for each of the first `limit` items. Throws std::invalid_argument for n > 1 at
// temperature 0 (n identical samples) and for bad sampling settings.
std::vector<Sample> generate_samples(model::Transformer& model, const model::Tokenizer& tokenizer,
                                     const Benchmark& bench, const ModelEvalSettings& s);

// Generates, grades in `pool` and scores every benchmark; the summary has the paper's averages.
Summary evaluate_model(model::Transformer& model, const model::Tokenizer& tokenizer,
                       const std::vector<Benchmark>& benches, sandbox::Pool& pool, const sandbox::Limits& limits,
                       const ModelEvalSettings& s);

}  // namespace azr::eval
