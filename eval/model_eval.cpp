#include "eval/model_eval.h"

#include <algorithm>
#include <stdexcept>

#include "model/generate.h"

namespace azr::eval {

std::vector<Sample> generate_samples(model::Transformer& m, const model::Tokenizer& tok, const Benchmark& bench,
                                     const ModelEvalSettings& s) {
  model::SamplingParams p = model::sampling_defaults(m, tok);
  p.temperature = s.temperature.value_or(s.n > 1 ? 1.f : 0.f);
  if (s.n > 1 && p.temperature == 0.f)
    throw std::invalid_argument("n > 1 samples at temperature 0 would be n identical samples");
  p.top_p = s.top_p;
  p.max_new_tokens = s.max_tokens;
  if (s.tmpl == Template::R1) p.stop_strings = {"</answer>"};

  const size_t count = s.limit > 0 ? std::min(bench.items.size(), s.limit) : bench.items.size();
  // Each (item, sample) is one row, row r being sample r % n of item r / n; rows run in batches of
  // batch_size. A prompt is encoded and held once per item: a copy per row held n copies of each
  // (`azr eval --n 65536 --bench math500` of a byte-level model held 15.6 GB of prompts after 25 s
  // and was still copying, before its first token; 210 MB now).
  std::vector<std::vector<int32_t>> item_ids(count);
  for (size_t i = 0; i < count; ++i) item_ids[i] = tok.encode(item_prompt(bench, bench.items[i], s.tmpl));
  const size_t n = size_t(std::max(1, s.n));
  const size_t rows = count * n;
  std::vector<Sample> samples;
  int64_t tokens = 0;
  const size_t batch = size_t(std::max(1, s.batch_size));
  for (size_t start = 0; start < rows; start += batch) {
    const size_t end = std::min(rows, start + batch);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t r = start; r < end; ++r) prompts.push_back(item_ids[r / n]);
    model::SamplingParams bp = p;
    bp.seed = s.seed + start;  // distinct streams per batch (sequences within a batch differ by index)
    const std::vector<model::Completion> c = model::generate(m, prompts, bp, &tok);
    for (size_t r = start; r < end; ++r) {
      std::string text = c[r - start].text;
      // The stop string is cut off; put the closing tag back so the answer extracts.
      if (c[r - start].finish == model::FinishReason::StopString && s.tmpl == Template::R1) text += "</answer>";
      samples.push_back({r / n, std::move(text), c[r - start].finish == model::FinishReason::Length});
      tokens += int64_t(c[r - start].tokens.size());
    }
    if (s.progress) s.progress(end, rows, tokens);
  }
  return samples;
}

Summary evaluate_model(model::Transformer& m, const model::Tokenizer& tok, const std::vector<Benchmark>& benches,
                       sandbox::Pool& pool, const sandbox::Limits& limits, const ModelEvalSettings& s) {
  std::vector<BenchScore> scores;
  for (const Benchmark& b : benches) {
    const std::vector<Sample> samples = generate_samples(m, tok, b, s);
    const std::vector<Verdict> verdicts = grade_samples(pool, b, samples, limits);
    scores.push_back(score_bench(b, samples, verdicts, s.k));
  }
  return summarize(std::move(scores), s.k);
}

}  // namespace azr::eval
