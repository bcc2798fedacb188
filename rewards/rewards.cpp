#include "rewards/rewards.h"

#include <cmath>
#include <map>
#include <stdexcept>

namespace azr::rewards {

double solver_reward(bool well_formatted, double accuracy, const RewardSettings& s) {
  if (!well_formatted) return s.format_error;
  return accuracy > 0 ? accuracy : s.wrong_answer;
}

double solve_rate(std::span<const double> scores) {
  if (scores.empty()) throw std::invalid_argument("solve_rate: no learnability rollouts");
  double sum = 0;
  for (double x : scores) sum += x;
  return sum / double(scores.size());
}

double proposer_reward(bool valid, bool well_formatted, double rate, const RewardSettings& s) {
  if (!valid || !well_formatted) return s.format_error;
  return rate > 0 && rate < 1 ? 1 - rate : s.zero_learnability;
}

std::vector<double> trr_plus_plus(std::span<const Sequence> seqs, double eps) {
  struct Stats {
    double tokens = 0, weighted = 0, sq = 0, mean = 0, var = 0;
  };
  std::map<int, Stats> groups;
  for (const Sequence& s : seqs) {
    if (s.tokens < 0) throw std::invalid_argument("trr_plus_plus: negative token count");
    Stats& g = groups[s.group];
    g.tokens += double(s.tokens);
    g.weighted += double(s.tokens) * s.reward;
  }
  for (auto& [_, g] : groups)
    if (g.tokens > 0) g.mean = g.weighted / g.tokens;
  // Second pass for the variance: (R - mu)^2 directly, not E[R^2] - mu^2, which cancels badly.
  for (const Sequence& s : seqs) {
    Stats& g = groups[s.group];
    g.sq += double(s.tokens) * (s.reward - g.mean) * (s.reward - g.mean);
  }
  for (auto& [_, g] : groups) g.var = g.tokens > 1 ? g.sq / (g.tokens - 1) : 0;
  std::vector<double> out;
  out.reserve(seqs.size());
  for (const Sequence& s : seqs) {
    const Stats& g = groups[s.group];
    out.push_back(s.tokens > 0 ? (s.reward - g.mean) / std::sqrt(g.var + eps) : 0.0);
  }
  return out;
}

}  // namespace azr::rewards
