// In-process model evaluation (what the trainer calls every N steps): generation with a real
// (random, tiny) transformer, grading in the real sandbox. A random model scores about 0; the
// test checks the plumbing and the invariants, not a score.
#include <gtest/gtest.h>

#include "eval/model_eval.h"
#include "eval/prompts.h"
#include "model/byte_tokenizer.h"
#include "model/presets.h"
#include "tests/eval/bigram_model.h"

namespace azr::eval {
namespace {

std::filesystem::path benchmarks_dir() {
  const char* shared = std::getenv("AZR_SHARED_DIR");
  if (!shared) throw std::runtime_error("AZR_SHARED_DIR is not set (ctest sets it)");
  return std::filesystem::path(shared) / "benchmarks";
}

TEST(ModelEval, GeneratesAndGradesEveryRequestedSample) {
  model::Transformer m = model::Transformer::random(model::preset_config("azr-tiny"), 3, 0.2f);
  const model::ByteTokenizer tok;
  const std::filesystem::path data = benchmarks_dir();
  std::vector<Benchmark> benches = {load_benchmark("cruxeval_o", data), load_benchmark("gsm8k", data)};
  sandbox::Pool pool(sandbox::PoolOptions{});
  ModelEvalSettings s;
  s.limit = 2, s.n = 2, s.k = 2, s.temperature = 1.f, s.max_tokens = 8, s.batch_size = 3;

  const std::vector<Sample> samples = generate_samples(m, tok, benches[0], s);
  ASSERT_EQ(samples.size(), 4u);  // 2 items x 2 samples, items in order
  EXPECT_EQ(samples[0].item, 0u);
  EXPECT_EQ(samples[1].item, 0u);
  EXPECT_EQ(samples[2].item, 1u);  // the batch of 3 spans both items
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

// The verdicts known by hand: a model that answers \boxed{18} to every prompt (bigram_model.h)
// passes GSM8K's first item (Janet's ducks, gold 18) and fails its second (gold 3), so pass@1 is
// 1/2; a grader that failed everything, or graded an answer against another item's gold, fails here.
TEST(ModelEval, AModelThatAlwaysAnswers18PassesOnlyTheItemWhoseGoldIs18) {
  const model::ByteTokenizer tok;
  const int32_t eos = 256;  // <|endoftext|>
  ASSERT_EQ(tok.decode(std::vector<int32_t>{eos}), "<|endoftext|>");
  const Benchmark gsm8k = load_benchmark("gsm8k", benchmarks_dir());
  const std::string prompt = item_prompt(gsm8k, gsm8k.items.at(0), Template::R1);
  model::Transformer m = testing::bigram_model(testing::answer_chain(tok, prompt, "\\boxed{18}", eos),
                                               int64_t(tok.vocab_size()), eos);
  ASSERT_EQ(gsm8k.items.at(0).gold, "18");
  ASSERT_EQ(gsm8k.items.at(1).gold, "3");
  ModelEvalSettings s;
  s.limit = 2, s.max_tokens = 32;
  const std::vector<Sample> samples = generate_samples(m, tok, gsm8k, s);
  ASSERT_EQ(samples.size(), 2u);
  for (const Sample& x : samples) EXPECT_EQ(x.response, "\\boxed{18}") << x.item;
  sandbox::Pool pool(sandbox::PoolOptions{.workers = 1});
  const Summary sum = evaluate_model(m, tok, {gsm8k}, pool, sandbox::Limits{}, s);
  ASSERT_EQ(sum.benches.size(), 1u);
  EXPECT_EQ(sum.benches[0].items, 2u);
  EXPECT_DOUBLE_EQ(sum.benches[0].pass1, 0.5);
}

}  // namespace
}  // namespace azr::eval
