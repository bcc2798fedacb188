// Policy::update (trainer/policy.h) on a tiny random model, CPU backend: where the PPO ratio's
// old log-probs come from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "model/byte_tokenizer.h"
#include "model/presets.h"
#include "trainer/dist.h"
#include "trainer/policy.h"

namespace azr::trainer {
namespace {

Policy tiny_policy() {
  return Policy(model::Transformer::random(model::preset_config("azr-tiny"), 3),
                std::make_unique<model::ByteTokenizer>(), model::AdamWSettings{.lr = 1e-3});
}

// Three sequences of random bytes with advantages of both signs, and old log-probs that are not
// the model's (-1 on every token, where the random model gives about -ln 260 = -5.6).
std::vector<TrainSequence> sequences() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> byte(0, 255);
  std::vector<TrainSequence> seqs;
  const int lengths[3][2] = {{5, 9}, {12, 4}, {3, 15}};
  const float advantages[3] = {1.25f, -0.75f, 0.5f};
  for (int i = 0; i < 3; i++) {
    TrainSequence s;
    for (int k = 0; k < lengths[i][0]; k++) s.prompt.push_back(byte(rng));
    for (int k = 0; k < lengths[i][1]; k++) s.response.push_back(byte(rng));
    s.old_logp.assign(s.response.size(), -1.f);
    s.advantage = advantages[i];
    seqs.push_back(std::move(s));
  }
  return seqs;
}

double response_tokens(const std::vector<TrainSequence>& seqs) {
  double n = 0;
  for (const TrainSequence& s : seqs) n += double(s.response.size());
  return n;
}

std::vector<float> weights(Policy& p) {
  const std::span<const float> w = p.model().parameters();
  return {w.begin(), w.end()};
}

// With old_logp_from_learner (training's setting under top-p or top-k sampling) the update is, bit
// for bit, the one whose sequences carry the log-probs the model itself gives them (scored here
// on the same batch before the update): ratio 1, whatever the sampler reported. In micro-batches
// of one sequence too: the weights change once, after every micro-batch's backward.
class PolicyUpdate : public ::testing::TestWithParam<int> {};

TEST_P(PolicyUpdate, OldLogProbsFromTheLearnerAreTheModelsOwn) {
  dist::SingleCommunicator comm;
  UpdateSettings us;
  us.micro_batch_size = GetParam();
  us.old_logp_from_learner = true;
  Policy learner = tiny_policy();
  std::vector<TrainSequence> seqs = sequences();
  const UpdateStats a = learner.update(seqs, response_tokens(seqs), comm, us);
  EXPECT_EQ(a.approx_kl, 0.0);
  EXPECT_EQ(a.clip_fraction, 0.0);

  Policy own = tiny_policy();
  std::vector<std::vector<int32_t>> full;
  for (const TrainSequence& s : seqs) {
    full.push_back(s.prompt);
    full.back().insert(full.back().end(), s.response.begin(), s.response.end());
  }
  // Scored in the micro-batches the update runs, so each sequence's log-probs come out of the
  // same batch shape.
  const size_t mb = size_t(us.micro_batch_size);
  for (size_t begin = 0; begin < full.size(); begin += mb) {
    const size_t end = std::min(full.size(), begin + mb);
    const model::SequenceBatch batch =
        model::SequenceBatch::from({full.begin() + std::ptrdiff_t(begin), full.begin() + std::ptrdiff_t(end)});
    const model::TokenScores scores = own.model().score(batch, us.temperature);
    for (size_t i = begin; i < end; i++)
      for (size_t r = 0; r < seqs[i].response.size(); r++)
        seqs[i].old_logp[r] = scores.logp[(i - begin) * size_t(batch.T) + seqs[i].prompt.size() + r];
  }
  UpdateSettings plain = us;
  plain.old_logp_from_learner = false;
  const UpdateStats b = own.update(seqs, response_tokens(seqs), comm, plain);
  EXPECT_EQ(b.approx_kl, 0.0);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  EXPECT_EQ(weights(learner), weights(own));

  // The sampler's log-probs used as they are: another update.
  Policy sampler = tiny_policy();
  const std::vector<TrainSequence> reported = sequences();
  const UpdateStats c = sampler.update(reported, response_tokens(reported), comm, plain);
  EXPECT_NE(c.approx_kl, 0.0);
  EXPECT_GT(c.clip_fraction, 0.0);
  EXPECT_NE(weights(sampler), weights(learner));
}

// A step whose every sequence was masked (no token to learn from, on any rank) leaves the weights
// as they are. The optimizer used to step anyway, on a zero gradient: the first step's momentum
// moved every weight again.
TEST(PolicyUpdateNothing, AStepWithNoTokensLeavesTheWeights) {
  dist::SingleCommunicator comm;
  Policy p = tiny_policy();
  const std::vector<TrainSequence> seqs = sequences();
  const std::vector<float> before = weights(p);
  p.update(seqs, response_tokens(seqs), comm, UpdateSettings{});
  const std::vector<float> after_one = weights(p);
  ASSERT_NE(after_one, before);
  const UpdateStats st = p.update({}, 0.0, comm, UpdateSettings{});
  EXPECT_EQ(weights(p), after_one);
  EXPECT_EQ(st.tokens, 0.0);
  EXPECT_EQ(st.grad_norm, 0.0);
}

// A gradient that is not finite (here a NaN advantage) skips the optimizer: the weights stay as
// they were, where a step wrote NaN into every weight and both moments, for good.
TEST(PolicyUpdateNothing, AGradientThatIsNotFiniteSkipsTheStep) {
  dist::SingleCommunicator comm;
  Policy p = tiny_policy();
  std::vector<TrainSequence> seqs = sequences();
  p.update(seqs, response_tokens(seqs), comm, UpdateSettings{});  // momentum to move with
  const std::vector<float> before = weights(p);
  seqs[1].advantage = std::nanf("");
  const UpdateStats st = p.update(seqs, response_tokens(seqs), comm, UpdateSettings{});
  EXPECT_TRUE(st.skipped_not_finite);
  EXPECT_TRUE(std::isnan(st.grad_norm));
  EXPECT_EQ(weights(p), before);
  seqs[1].advantage = -0.75f;  // finite again: the next update steps, from finite state
  const UpdateStats next = p.update(seqs, response_tokens(seqs), comm, UpdateSettings{});
  EXPECT_FALSE(next.skipped_not_finite);
  const std::vector<float> after = weights(p);
  EXPECT_NE(after, before);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](float w) { return std::isfinite(w); }));
}

INSTANTIATE_TEST_SUITE_P(MicroBatches, PolicyUpdate, ::testing::Values(8, 1));

}  // namespace
}  // namespace azr::trainer
