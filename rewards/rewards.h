#pragma once
// Rewards and TRR++ advantages (../shared/METHOD.md "Reward" and "Advantages"; the exact
// reference semantics are in ../shared/research/azr-reference.md §6-§7). Pure functions over
// numbers: no I/O, so every case can be tested against hand computation.
#include <cstdint>
#include <span>
#include <vector>

namespace azr::rewards {

// The parity switches METHOD.md names. Defaults follow the reference CODE (what its results came
// from); the paper's equations differ where noted.
struct RewardSettings {
  double wrong_answer = -0.5;  // well formatted but wrong (solver) / proposal valid but unlearnable
  double format_error = -1.0;  // broken format, or an invalid proposal
  // Proposer reward when the solve rate is 0 or 1. The reference code gives -0.5; the paper's
  // Eq. 4/6 give 0 (reference issue #37).
  double zero_learnability = -0.5;
};

// Solver: `accuracy` in [0, 1] is the graded score (binary for every task type in the paper's
// setting). Well formatted and accuracy > 0 -> accuracy; well formatted and 0 -> wrong_answer;
// broken format -> format_error (the answer is not even graded).
double solver_reward(bool well_formatted, double accuracy, const RewardSettings& s = {});

// Solve rate of a proposal: the mean of its n learnability rollouts' scores (1 correct, 0 not).
// Throws std::invalid_argument for n = 0.
double solve_rate(std::span<const double> scores);

// Proposer: an invalid or badly formatted proposal -> format_error; a valid one with solve rate
// a -> 1 - a when 0 < a < 1, else zero_learnability.
double proposer_reward(bool valid, bool well_formatted, double solve_rate, const RewardSettings& s = {});

// One response sequence of a training step: which of the six task x role groups it belongs to,
// its scalar reward and how many response tokens carry it.
struct Sequence {
  int group = 0;
  double reward = 0;
  int64_t tokens = 0;
};

// TRR++ (Task-Relative REINFORCE++): within each group separately, whiten the rewards over the
// group's response tokens, as veRL's masked_whiten does on the per-token returns:
//   mu = sum L_s R_s / sum L_s,  var = sum L_s (R_s - mu)^2 / (sum L_s - 1)  (unbiased),
//   A_s = (R_s - mu) / sqrt(var + eps).
// Returns one advantage per sequence (the same value on each of its tokens). A group whose
// rewards are all equal gets 0; a group of one token has var undefined (n - 1 = 0): its
// advantage is 0, as the numerator is.
std::vector<double> trr_plus_plus(std::span<const Sequence> seqs, double eps = 1e-8);

// The group index of a (task type, role) pair: type 0..2 (deduction, abduction, induction) x
// role 0..1 (proposer, solver) -> 0..5.
inline int group_of(int task_type, bool solver) { return task_type * 2 + (solver ? 1 : 0); }

}  // namespace azr::rewards
