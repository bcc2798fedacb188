#pragma once
// Per-token losses over TokenScores (model/transformer.h): each returns the loss and its
// gradient with respect to every token's log-prob and entropy, which Transformer::backward()
// turns into parameter gradients. Pure functions; the normaliser is explicit so that gradient
// accumulation over micro-batches equals one big batch (pass the token count of the whole batch).
#include <cstdint>
#include <span>
#include <vector>

#include "model/transformer.h"

namespace azr::model {

struct LossResult {
  double loss = 0;               // what is minimised
  std::vector<float> dlogp;      // d loss / d logp[b,t], [B * T]
  std::vector<float> dentropy;   // d loss / d entropy[b,t] (empty when the loss ignores entropy)
  // Diagnostics (token means over the mask, with the same normaliser).
  double pg_loss = 0, entropy = 0, clip_fraction = 0, approx_kl = 0;
  double tokens = 0;             // sum of the mask
};

// Token-mean cross entropy: sum over masked tokens of -logp, divided by `normalizer`
// (<= 0: the mask's own token count).
LossResult cross_entropy_loss(const TokenScores& s, std::span<const float> mask, double normalizer = 0);

// PPO-clip surrogate with token-mean aggregation and an entropy bonus (METHOD.md, as veRL):
//   ratio = exp(clamp(logp - old_logp, -20, 20))
//   pg    = max(-A ratio, -A clamp(ratio, 1 - clip_eps, 1 + clip_eps))
//   loss  = sum(mask pg) / normalizer - entropy_coeff * sum(mask entropy) / normalizer
// The clamp on the log-ratio only guards exp() against overflow (veRL does the same).
struct PpoSettings {
  double clip_eps = 0.2;
  double entropy_coeff = 0.001;
};
LossResult ppo_clip_loss(const TokenScores& s, std::span<const float> old_logp, std::span<const float> advantages,
                         std::span<const float> mask, const PpoSettings& settings, double normalizer = 0);

}  // namespace azr::model
