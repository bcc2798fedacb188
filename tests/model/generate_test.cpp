// Sampling and batched generation. The sampler is checked against distributions derived by hand
// (transformers' temperature -> top-k -> top-p rules); generation against the model's own
// full-sequence forward, which transformer_test checks against PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "model/byte_tokenizer.h"
#include "model/generate.h"
#include "model/transformer.h"

namespace azr::model {
namespace {

// p = [0.5, 0.3, 0.15, 0.05] as logits (shifted by a constant, which softmax ignores).
const std::vector<float> kLogits = {std::log(0.5f) + 3, std::log(0.3f) + 3, std::log(0.15f) + 3, std::log(0.05f) + 3};

int32_t draw(const SamplingParams& p, double u, float* lp) { return sample_token(kLogits.data(), 4, p, u, lp); }

TEST(SampleTokenTest, GreedyIsArgmaxWithTemperatureOneLogProb) {
  SamplingParams p;
  p.temperature = 0;
  float lp = 0;
  for (double u : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(draw(p, u, &lp), 0);
    EXPECT_NEAR(lp, std::log(0.5), 1e-6);
  }
}

TEST(SampleTokenTest, InverseCdfOnAUniformGridGivesExactFrequencies) {
  SamplingParams p;
  const int n = 20000;
  std::map<int32_t, int> counts;
  float lp = 0;
  for (int i = 0; i < n; i++) counts[draw(p, (i + 0.5) / n, &lp)]++;
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (int t = 0; t < 4; t++) EXPECT_NEAR(counts[t], want[t] * n, 1.0) << "token " << t;
}

TEST(SampleTokenTest, TemperatureScalesLogits) {
  SamplingParams p;
  p.temperature = 2;  // p_i ∝ sqrt(p_i)
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
  float lp = 0;
  // u just below the first token's share picks token 0; just above picks token 1.
  const double share0 = std::sqrt(0.5) / z;
  EXPECT_EQ(draw(p, share0 - 1e-6, &lp), 0);
  EXPECT_NEAR(lp, std::log(share0), 1e-6);
  EXPECT_EQ(draw(p, share0 + 1e-6, &lp), 1);
  EXPECT_NEAR(lp, std::log(std::sqrt(0.3) / z), 1e-6);
}

TEST(SampleTokenTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  float lp = 0;
  p.top_p = 0.7f;  // {0.5, 0.3}: 0.5 < 0.7, 0.8 >= 0.7
  EXPECT_EQ(draw(p, 0.1, &lp), 0);
  EXPECT_NEAR(lp, std::log(0.5 / 0.8), 1e-6);
  EXPECT_EQ(draw(p, 0.7, &lp), 1);  // 0.7 * 0.8 = 0.56 > 0.5
  EXPECT_NEAR(lp, std::log(0.3 / 0.8), 1e-6);
  EXPECT_EQ(draw(p, 0.9999, &lp), 1);  // never token 2 or 3
  p.top_p = 0.5f;  // the top token alone reaches 0.5 (transformers removes cum <= 1 - top_p)
  EXPECT_EQ(draw(p, 0.9999, &lp), 0);
  EXPECT_NEAR(lp, 0.0, 1e-6);
}

TEST(SampleTokenTest, TopKThenTopP) {
  SamplingParams p;
  float lp = 0;
  p.top_k = 3;  // {0.5, 0.3, 0.15} renormalised by 0.95
  EXPECT_EQ(draw(p, 0.9999, &lp), 2);
  EXPECT_NEAR(lp, std::log(0.15 / 0.95), 1e-6);
  p.top_k = 1;
  EXPECT_EQ(draw(p, 0.9999, &lp), 0);
  EXPECT_NEAR(lp, 0.0, 1e-6);
  p.top_k = 3, p.top_p = 0.8f;  // within top-3 (mass 0.95): 0.5/0.95 = 0.526 < 0.8, then 0.842 >= 0.8
  EXPECT_EQ(draw(p, 0.9999, &lp), 1);
  EXPECT_NEAR(lp, std::log(0.3 / 0.8), 1e-6);
}

TEST(SampleTokenTest, VocabLimitMasksPaddingRows) {
  std::vector<float> logits = {0.f, 1.f, 9.f};  // row 2 is "padding" with the highest logit
  SamplingParams p;
  p.vocab_limit = 2;
  float lp = 0;
  for (double u : {0.0, 0.5, 0.999}) EXPECT_LT(sample_token(logits.data(), 3, p, u, &lp), 2);
  p.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), 3, p, 0.5, &lp), 1);
}

// ---------------------------------------------------------------------------------------------

Transformer make_model() {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 90, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.max_position_embeddings = 512;
  c.tie_word_embeddings = false, c.qkv_bias = true;
  return Transformer::random(c, 21, 0.5f);
}

const std::vector<std::vector<int32_t>> kPrompts = {{40, 41, 42, 43, 44}, {50}, {60, 61, 62}};

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(GenerateTest, GreedyFollowsTheFullForwardArgmax) {
  Transformer m = make_model();
  SamplingParams p;
  p.temperature = 0, p.max_new_tokens = 10;
  const std::vector<Completion> out = generate(m, kPrompts, p);
  for (size_t b = 0; b < kPrompts.size(); b++) {
    ASSERT_EQ(out[b].tokens.size(), 10u);
    EXPECT_EQ(out[b].finish, FinishReason::Length);
    const std::vector<int32_t> seq = concat(kPrompts[b], out[b].tokens);
    const std::vector<float> logits = m.logits(SequenceBatch::from({seq}));
    const TokenScores s = m.score(SequenceBatch::from({seq}));
    for (size_t i = 0; i < 10; i++) {
      const size_t pos = kPrompts[b].size() + i;  // the position whose token was generated
      const float* row = &logits[(pos - 1) * 90];
      EXPECT_EQ(out[b].tokens[i], int32_t(std::max_element(row, row + 90) - row)) << "b=" << b << " i=" << i;
      EXPECT_NEAR(out[b].logprobs[i], s.logp[pos], 1e-5) << "b=" << b << " i=" << i;
    }
  }
}

// To float rounding: decode multiplies one row at a time and the training forward whole blocks,
// in other summation orders (which OpenBLAS also chooses by CPU and shape), and this model's
// logits (weights of std 0.5) reach tens, whose rounding is ~1e-5 absolute: the worst token
// differed by 9.6e-6 with libm's exp and 1.3e-5 with the vectorised one (kernels/cpu/fast_exp.h)
// on an Intel Xeon (AVX-512). A real mismatch (another temperature, a missed rounding) is 1e-3 or
// more.
TEST(GenerateTest, SamplerLogProbsEqualTheLearnersAtTheSameTemperature) {
  Transformer m = make_model();
  SamplingParams p;
  p.temperature = 0.7f, p.max_new_tokens = 16, p.seed = 5;
  const std::vector<Completion> out = generate(m, kPrompts, p);
  for (size_t b = 0; b < kPrompts.size(); b++) {
    const TokenScores s = m.score(SequenceBatch::from({concat(kPrompts[b], out[b].tokens)}), 0.7f);
    for (size_t i = 0; i < out[b].tokens.size(); i++)
      EXPECT_NEAR(out[b].logprobs[i], s.logp[kPrompts[b].size() + i], 3e-5) << "b=" << b << " i=" << i;
  }
}

TEST(GenerateTest, SeedsAreReproducibleAndPerSequence) {
  Transformer m = make_model();
  SamplingParams p;
  p.max_new_tokens = 24, p.seed = 9;
  const auto all = generate(m, kPrompts, p);
  const auto again = generate(m, kPrompts, p);
  const auto first_two = generate(m, {kPrompts[0], kPrompts[1]}, p);
  for (size_t b = 0; b < kPrompts.size(); b++) EXPECT_EQ(all[b].tokens, again[b].tokens);
  // A sequence's sample does not depend on which sequences follow it in the batch.
  EXPECT_EQ(first_two[0].tokens, all[0].tokens);
  EXPECT_EQ(first_two[1].tokens, all[1].tokens);
  p.seed = 10;
  EXPECT_NE(generate(m, kPrompts, p)[0].tokens, all[0].tokens);
}

// With the final norm's weight 0 every logit is 0, so each token is the uniform draw alone: seed
// s + 1 must not replay seed s's draws one token later (it did: the streams were seed * gamma
// apart, and a draw advances a stream by gamma), for the batch seed and per-sequence seeds.
TEST(GenerateTest, NextSeedsAreNotTheSameStreamShifted) {
  Transformer m = make_model();
  for (float& w : m.param("model.norm.weight")) w = 0;
  SamplingParams p;
  p.max_new_tokens = 16;
  auto tokens = [&](uint64_t seed, bool per_sequence) {
    p.seed = per_sequence ? 0 : seed;
    p.sequence_seeds = per_sequence ? std::vector<uint64_t>{seed} : std::vector<uint64_t>{};
    return generate(m, {{40}}, p)[0].tokens;
  };
  for (bool per_sequence : {false, true})
    for (uint64_t s : {0u, 1u, 7u}) {
      const std::vector<int32_t> a = tokens(s, per_sequence), b = tokens(s + 1, per_sequence);
      ASSERT_EQ(a.size(), 16u);
      EXPECT_NE(std::vector<int32_t>(a.begin() + 1, a.end()), std::vector<int32_t>(b.begin(), b.end() - 1))
          << "seed " << s << (per_sequence ? " (per sequence)" : "");
    }
}

TEST(GenerateTest, DefaultsStopAtBothFilesEosIdsOnce) {
  ModelConfig c = make_model().config();
  c.eos_token_ids = {7, 9};
  c.generation_eos_token_ids = {9, 11};  // as Qwen2.5-Instruct: the generation config adds an id
  const Transformer m = Transformer::random(c, 21, 0.5f);
  const ByteTokenizer tok;
  EXPECT_EQ(sampling_defaults(m, tok, true).stop_token_ids, (std::vector<int32_t>{7, 9, 11}));
  EXPECT_TRUE(sampling_defaults(m, tok, false).stop_token_ids.empty());
}

TEST(GenerateTest, StopTokenEndsOnlyItsSequenceAndIsKept) {
  Transformer m = make_model();
  SamplingParams p;
  p.temperature = 0, p.max_new_tokens = 10;
  const auto free_run = generate(m, kPrompts, p);
  // Stop on sequence 0's 3rd token, unless it appears earlier in that sequence.
  const int32_t stop = free_run[0].tokens[2];
  p.stop_token_ids = {stop};
  const auto out = generate(m, kPrompts, p);
  for (size_t b = 0; b < kPrompts.size(); b++) {
    const auto& t = free_run[b].tokens;
    const auto hit = std::find(t.begin(), t.end(), stop);
    const size_t want = hit == t.end() ? t.size() : size_t(hit - t.begin()) + 1;
    ASSERT_EQ(out[b].tokens.size(), want) << "b=" << b;
    EXPECT_TRUE(std::equal(out[b].tokens.begin(), out[b].tokens.end(), t.begin()));  // others unaffected
    EXPECT_EQ(out[b].finish, hit == t.end() ? FinishReason::Length : FinishReason::StopToken);
  }
  EXPECT_LE(out[0].tokens.size(), 3u);
}

TEST(GenerateTest, StopStringCutsTheText) {
  Transformer m = make_model();
  const ByteTokenizer tok;
  SamplingParams p;
  p.temperature = 0, p.max_new_tokens = 12;
  const auto free_run = generate(m, kPrompts, p, &tok);
  const std::string full = free_run[0].text;
  ASSERT_EQ(full.size(), 12u);  // one byte per token below 256
  const std::string stop = full.substr(4, 2);
  p.stop_strings = {"\xff\xfe-never", stop};
  const auto out = generate(m, kPrompts, p, &tok);
  const size_t at = full.find(stop);
  EXPECT_EQ(out[0].finish, FinishReason::StopString);
  EXPECT_EQ(out[0].text, full.substr(0, at));
  EXPECT_EQ(out[0].tokens.size(), at + stop.size());  // generation ends on the token completing the match
}

// Identical prompts (a task's learnability rollouts, pass@k samples) run through the layers once;
// the other copies get the first copy's keys, values and logits. Each sequence must then sample
// exactly what it samples alone, its log-probs must be the learner's on its own sequence (so every
// copy's cache holds its prompt), and the count of computed tokens is the distinct prompts'.
TEST(GenerateTest, IdenticalPromptsArePrefilledOnceAndSampleAsIfAlone) {
  const std::vector<int32_t>& a = kPrompts[0];  // 5 tokens
  const std::vector<int32_t>& b = kPrompts[1];  // 1
  const std::vector<int32_t>& c = kPrompts[2];  // 3
  const std::vector<std::vector<int32_t>> prompts = {a, b, a, c, c, a};
  SamplingParams p;
  p.temperature = 0.8f, p.max_new_tokens = 12;
  p.sequence_seeds = {11, 12, 13, 14, 15, 16};
  Transformer m = make_model();
  const std::vector<Completion> out = generate(m, prompts, p);
  const PrefillStats st = m.prefill_stats();
  EXPECT_EQ(st.prompts, 6);
  EXPECT_EQ(st.distinct_prompts, 3);
  EXPECT_EQ(st.tokens, 3 * 5 + 1 + 2 * 3);
  EXPECT_EQ(st.computed_tokens, 5 + 1 + 3);

  Transformer every_copy = make_model();
  every_copy.set_prefill_duplicates_once(false);
  const std::vector<Completion> computed = generate(every_copy, prompts, p);
  EXPECT_EQ(every_copy.prefill_stats().computed_tokens, st.tokens);

  std::set<std::vector<int32_t>> samples_of_a;
  for (size_t i = 0; i < prompts.size(); i++) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    SamplingParams one = p;
    one.sequence_seeds = {p.sequence_seeds[i]};
    const Completion alone = generate(m, {prompts[i]}, one)[0];
    EXPECT_EQ(out[i].tokens, alone.tokens);
    EXPECT_EQ(out[i].tokens, computed[i].tokens);
    // Log-probs to float rounding only: the decode steps' GEMMs run on as many rows as there are
    // live sequences, and OpenBLAS sums by shape (SamplerLogProbsEqualTheLearners... above).
    for (size_t t = 0; t < out[i].tokens.size(); t++) {
      EXPECT_NEAR(out[i].logprobs[t], alone.logprobs[t], 3e-5) << "token " << t;
      EXPECT_NEAR(out[i].logprobs[t], computed[i].logprobs[t], 3e-5) << "token " << t;
    }
    const TokenScores s = m.score(SequenceBatch::from({concat(prompts[i], out[i].tokens)}), p.temperature);
    for (size_t t = 0; t < out[i].tokens.size(); t++)
      EXPECT_NEAR(out[i].logprobs[t], s.logp[prompts[i].size() + t], 3e-5) << "token " << t;
    if (prompts[i] == a) samples_of_a.insert(out[i].tokens);
  }
  EXPECT_EQ(samples_of_a.size(), 3u);  // the copies share a prompt, not a sample
}

// Sequences that stop at different steps (on a stop token, a stop string, or the length), some
// copies of one prompt: launching step t+1 before step t's tokens are read must sample what one
// step at a time samples. The sampled tokens' log-probs to float rounding only: a step run ahead
// carries the rows that have just finished, and OpenBLAS sums by shape (as above).
TEST(GenerateTest, LaunchingAheadSamplesWhatOneStepAtATimeSamples) {
  Transformer m = make_model();
  const ByteTokenizer tok;
  const std::vector<std::vector<int32_t>> prompts = {kPrompts[0], kPrompts[1], kPrompts[2], kPrompts[0], {70, 71}};
  SamplingParams p;
  p.temperature = 0.9f, p.top_k = 40, p.max_new_tokens = 14, p.seed = 3;
  p.launch_ahead = false;
  const auto free_run = generate(m, prompts, p, &tok);
  // Stops taken from the free run: sequence 1's 1st token, sequence 3's 7th, and sequence 0's
  // text from its 7th byte (one byte a token below 256), unless they come earlier elsewhere; and
  // fewer tokens, so that some sequence runs to the length.
  p.stop_token_ids = {free_run[1].tokens[0], free_run[3].tokens[6]};
  p.stop_strings = {free_run[0].text.substr(6, 2)};
  p.max_new_tokens = 9;
  const auto one_at_a_time = generate(m, prompts, p, &tok);
  p.launch_ahead = true;
  const auto ahead = generate(m, prompts, p, &tok);
  std::set<FinishReason> reasons;
  std::set<size_t> lengths;
  for (size_t b = 0; b < prompts.size(); b++) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    EXPECT_EQ(ahead[b].tokens, one_at_a_time[b].tokens);
    EXPECT_EQ(ahead[b].finish, one_at_a_time[b].finish);
    EXPECT_EQ(ahead[b].text, one_at_a_time[b].text);
    ASSERT_EQ(ahead[b].logprobs.size(), one_at_a_time[b].logprobs.size());
    for (size_t t = 0; t < ahead[b].logprobs.size(); t++)
      EXPECT_NEAR(ahead[b].logprobs[t], one_at_a_time[b].logprobs[t], 3e-5) << "token " << t;
    reasons.insert(ahead[b].finish);
    lengths.insert(ahead[b].tokens.size());
  }
  EXPECT_EQ(one_at_a_time[1].tokens.size(), 1u);  // stopped by its first token
  EXPECT_EQ(reasons.size(), 3u);                  // every way to finish is covered
  EXPECT_GE(lengths.size(), 3u);                  // and sequences finish at different steps
}

// Rows sampled, by a table that counts them (the CPU's ops otherwise).
int64_t g_rows_sampled = 0;
void counting_sample_rows(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                          int64_t V_limit, float temperature, int32_t top_k, float top_p) {
  g_rows_sampled += R;
  kernels::cpu_ops().sample_rows(tokens, logprobs, logits, u, R, V, V_limit, temperature, top_k, top_p);
}
const kernels::Ops& counting_ops() {
  static const kernels::Ops table = [] {
    kernels::Ops t = kernels::cpu_ops();
    t.sample_rows = counting_sample_rows;
    return t;
  }();
  return table;
}

// What launching ahead costs: a sequence that stops before its last allowed token is sampled one
// step more (the step launched before its stop was read), every other sequence not at all.
TEST(GenerateTest, AStepRunAheadCostsOneRowForEachSequenceThatStopsEarly) {
  Transformer m = make_model().copy_to(counting_ops());
  SamplingParams p;
  p.temperature = 0, p.max_new_tokens = 10;
  const auto free_run = generate(m, kPrompts, p);
  p.stop_token_ids = {free_run[0].tokens[3], free_run[2].tokens[9]};  // one early, one on the last token
  for (const bool ahead : {false, true}) {
    SCOPED_TRACE(ahead ? "ahead" : "one step at a time");
    p.launch_ahead = ahead;
    g_rows_sampled = 0;
    const auto out = generate(m, kPrompts, p);
    int64_t want = 0, stopped_early = 0;
    for (const Completion& c : out) {
      want += int64_t(c.tokens.size());
      stopped_early += c.finish == FinishReason::StopToken && int32_t(c.tokens.size()) < p.max_new_tokens;
    }
    ASSERT_GE(stopped_early, 1);
    EXPECT_EQ(g_rows_sampled, want + (ahead ? stopped_early : 0));
  }
}

// A decode step from tokens on the backend (generation's step launched ahead) is the step from the
// same tokens given by the host, row r taking tokens[rows[r]]; rows outside the tokens given, or
// slots outside the cache, are refused.
TEST(GenerateTest, ADecodeStepFromBackendTokensIsTheStepFromHostTokens) {
  Transformer m = make_model();
  const std::vector<int32_t> slots = {0, 1}, pos = {0, 0};
  KVCache by_host(m.config(), 2, 8, m.ops()), by_backend(m.config(), 2, 8, m.ops());
  const float* host_logits = m.decode_on_backend(by_host, std::vector<int32_t>{5, 7}, slots, pos);
  const std::vector<float> want(host_logits, host_logits + 2 * 90);
  kernels::Buffer<int32_t> sampled(m.ops(), 3);
  const std::vector<int32_t> on_backend = {7, 11, 5};
  sampled.upload(on_backend.data(), 3);
  const float* got = m.decode_on_backend(by_backend, sampled.data(), 3, std::vector<int32_t>{2, 0}, slots, pos);
  EXPECT_EQ(std::vector<float>(got, got + 2 * 90), want);
  EXPECT_THROW(m.decode_on_backend(by_backend, sampled.data(), 3, std::vector<int32_t>{0, 3}, slots, pos),
               std::invalid_argument);
  EXPECT_THROW(m.decode_on_backend(by_backend, sampled.data(), 3, std::vector<int32_t>{0}, slots, pos),
               std::invalid_argument);
  EXPECT_THROW(
      m.decode_on_backend(by_backend, sampled.data(), 3, std::vector<int32_t>{0, 1}, std::vector<int32_t>{0, 2}, pos),
      std::invalid_argument);
  // One slot for two rows of a step (the second row's K/V would land where the first reads).
  try {
    m.decode_on_backend(by_backend, sampled.data(), 3, std::vector<int32_t>{0, 1}, std::vector<int32_t>{1, 1},
                        std::vector<int32_t>{1, 2});
    ADD_FAILURE() << "one slot for two rows was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "decode(): slot 1 given to two rows of one step");
  }
  EXPECT_THROW(m.decode_on_backend(by_host, std::vector<int32_t>{5, 7}, std::vector<int32_t>{0, 0}, pos),
               std::invalid_argument);
}

TEST(GenerateTest, BadParametersAreRefused) {
  Transformer m = make_model();
  SamplingParams p;
  EXPECT_EQ(generate(m, kPrompts, SamplingParams{.max_new_tokens = 0})[0].tokens.size(), 0u);
  p.top_p = 0;
  EXPECT_THROW(generate(m, kPrompts, p), std::invalid_argument);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(generate(m, kPrompts, p), std::invalid_argument);
  p = {};
  p.stop_strings = {"x"};
  EXPECT_THROW(generate(m, kPrompts, p), std::invalid_argument);  // no tokenizer
  p = {};
  EXPECT_THROW(generate(m, {{1, 2}, {}}, p), std::invalid_argument);  // empty prompt
  EXPECT_THROW(generate(m, {{1, 900}}, p), std::invalid_argument);    // id outside the vocabulary
}

}  // namespace
}  // namespace azr::model
