// Rewards and TRR++ against values computed by hand (azr-reference §6-§7).
#include <gtest/gtest.h>

#include <cmath>

#include "rewards/rewards.h"

namespace azr::rewards {
namespace {

TEST(RewardsTest, SolverRewardFollowsTheReferenceTable) {
  EXPECT_EQ(solver_reward(true, 1.0), 1.0);
  EXPECT_EQ(solver_reward(true, 0.0), -0.5);
  EXPECT_EQ(solver_reward(false, 1.0), -1.0);  // broken format: not even graded
  EXPECT_EQ(solver_reward(true, 0.6), 0.6);    // a fractional accuracy passes through
}

TEST(RewardsTest, ProposerLearnability) {
  const double one_in_eight[] = {1, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(solve_rate(one_in_eight), 0.125);
  EXPECT_EQ(proposer_reward(true, true, 0.125), 0.875);  // the maximum with n = 8
  EXPECT_EQ(proposer_reward(true, true, 0.5), 0.5);
  EXPECT_EQ(proposer_reward(true, true, 0.0), -0.5);  // too hard: the reference code's -0.5
  EXPECT_EQ(proposer_reward(true, true, 1.0), -0.5);  // too easy
  RewardSettings paper;
  paper.zero_learnability = 0.0;  // the paper's equation
  EXPECT_EQ(proposer_reward(true, true, 1.0, paper), 0.0);
  EXPECT_EQ(proposer_reward(false, true, 0.5), -1.0);
  EXPECT_EQ(proposer_reward(true, false, 0.5), -1.0);
  EXPECT_THROW(solve_rate({}), std::invalid_argument);
}

TEST(TrrTest, TokenWeightedMeanAndUnbiasedVariance) {
  // Group 0: (R, L) = (1, 2), (-0.5, 1), (-1, 1). By hand: sum L = 4, mu = (2 - 0.5 - 1) / 4 =
  // 0.125; sum L (R - mu)^2 = 2 * 0.875^2 + 0.625^2 + 1.125^2 = 1.53125 + 0.390625 + 1.265625 =
  // 3.1875; var = 3.1875 / 3 = 1.0625.
  const std::vector<Sequence> seqs = {{0, 1.0, 2}, {0, -0.5, 1}, {0, -1.0, 1}};
  const std::vector<double> a = trr_plus_plus(seqs);
  const double sd = std::sqrt(1.0625 + 1e-8);
  EXPECT_NEAR(a[0], 0.875 / sd, 1e-12);
  EXPECT_NEAR(a[1], -0.625 / sd, 1e-12);
  EXPECT_NEAR(a[2], -1.125 / sd, 1e-12);
}

TEST(TrrTest, LongerResponsesWeighMore) {
  // (1, 3 tokens), (0, 1 token): mu = 0.75, var = (3 * 0.0625 + 0.5625) / 3 = 0.25.
  const std::vector<double> a = trr_plus_plus(std::vector<Sequence>{{2, 1.0, 3}, {2, 0.0, 1}});
  EXPECT_NEAR(a[0], 0.25 / std::sqrt(0.25 + 1e-8), 1e-12);
  EXPECT_NEAR(a[1], -0.75 / std::sqrt(0.25 + 1e-8), 1e-12);
}

TEST(TrrTest, GroupsAreWhitenedSeparately) {
  // Two single-token sequences: mu = 0.5, var = (0.25 + 0.25) / 1 = 0.5.
  std::vector<Sequence> seqs = {{1, 0.0, 1}, {1, 1.0, 1}};
  const std::vector<double> alone = trr_plus_plus(seqs);
  EXPECT_NEAR(alone[1], 0.5 / std::sqrt(0.5 + 1e-8), 1e-12);
  EXPECT_NEAR(alone[0], -alone[1], 1e-15);
  seqs.push_back({4, 100.0, 50});  // another group: changes nothing in group 1
  seqs.push_back({4, -3.0, 7});
  const std::vector<double> mixed = trr_plus_plus(seqs);
  EXPECT_EQ(mixed[0], alone[0]);
  EXPECT_EQ(mixed[1], alone[1]);
}

TEST(TrrTest, DegenerateGroupsGiveZero) {
  // All rewards equal: zero advantage (not NaN: var = 0, eps keeps the division finite).
  for (double a : trr_plus_plus(std::vector<Sequence>{{0, -0.5, 4}, {0, -0.5, 9}, {0, -0.5, 1}})) EXPECT_EQ(a, 0.0);
  // One sequence; one token (var undefined with n - 1 = 0: veRL raises, we return 0).
  EXPECT_EQ(trr_plus_plus(std::vector<Sequence>{{3, 0.875, 20}})[0], 0.0);
  EXPECT_EQ(trr_plus_plus(std::vector<Sequence>{{3, 0.875, 1}})[0], 0.0);
  // A sequence without response tokens carries nothing.
  EXPECT_EQ(trr_plus_plus(std::vector<Sequence>{{0, 1.0, 0}, {0, 0.0, 2}, {0, 1.0, 2}})[0], 0.0);
  EXPECT_TRUE(trr_plus_plus(std::vector<Sequence>{}).empty());
}

TEST(TrrTest, WhitenedTokensHaveZeroMeanAndUnitVariance) {
  // Invariant: over a group's tokens the advantages have mean 0 and unbiased variance
  // var / (var + eps) ~ 1.
  std::vector<Sequence> seqs;
  for (int i = 0; i < 64; i++) seqs.push_back({5, (i % 7) * 0.25 - 0.5, 1 + (i * 37) % 23});
  const std::vector<double> a = trr_plus_plus(seqs);
  double n = 0, mean = 0, sq = 0;
  for (size_t i = 0; i < seqs.size(); i++) n += double(seqs[i].tokens), mean += seqs[i].tokens * a[i];
  mean /= n;
  for (size_t i = 0; i < seqs.size(); i++) sq += seqs[i].tokens * (a[i] - mean) * (a[i] - mean);
  EXPECT_NEAR(mean, 0.0, 1e-12);
  EXPECT_NEAR(sq / (n - 1), 1.0, 1e-6);
}

}  // namespace
}  // namespace azr::rewards
