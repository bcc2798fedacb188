// In-process model evaluation (what the trainer calls every N steps): generation with a real
// (random, tiny) transformer, grading in the real sandbox. A random model scores about 0; the
// test checks the plumbing and the invariants, not a score.
#include <gtest/gtest.h>

#include "eval/model_eval.h"
#include "model/byte_tokenizer.h"
#include "model/presets.h"

namespace azr::eval {
namespace {

TEST(ModelEval, GeneratesAndGradesEveryRequestedSample) {
  model::Transformer m = model::Transformer::random(model::preset_config("azr-tiny"), 3, 0.2f);
  const model::ByteTokenizer tok;
  const std::filesystem::path data = std::filesystem::path(std::getenv("AZR_SHARED_DIR")) / "benchmarks";
  std::vector<Benchmark> benches = {load_benchmark("cruxeval_o", data), load_benchmark("gsm8k", data)};
  sandbox::Pool pool(sandbox::PoolOptions{});
  ModelEvalSettings s;
  s.limit = 2, s.n = 2, s.k = 2, s.temperature = 1.f, s.max_tokens = 8, s.batch_size = 3;

  const std::vector<Sample> samples = generate_samples(m, tok, benches[0], s);
  ASSERT_EQ(samples.size(), 4u);  // 2 items x 2 samples, items in order
  EXPECT_EQ(samples[0].item, 0u);
  EXPECT_EQ(samples[3].item, 1u);

  const Summary sum = evaluate_model(m, tok, benches, pool, sandbox::Limits{}, s);
  ASSERT_EQ(sum.benches.size(), 2u);
  for (const BenchScore& b : sum.benches) {
    EXPECT_EQ(b.items, 2u) << b.name;
    EXPECT_EQ(b.samples, 4u) << b.name;
    EXPECT_GE(b.pass1, 0.0);
    EXPECT_LE(b.pass1, 1.0);
    ASSERT_TRUE(b.passk.has_value());
    EXPECT_GE(*b.passk, b.pass1);  // pass@2 >= pass@1 always
  }
  s.temperature = 0.f;  // n = 2 greedy samples would be identical
  EXPECT_THROW(generate_samples(m, tok, benches[0], s), std::invalid_argument);
}

}  // namespace
}  // namespace azr::eval
