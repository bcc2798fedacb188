#include "model/losses.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace azr::model {
namespace {

double mask_normalizer(std::span<const float> mask, double normalizer, double* tokens) {
  double n = 0;
  for (float m : mask) n += m;
  *tokens = n;
  if (normalizer <= 0) normalizer = n;
  return normalizer > 0 ? normalizer : 1.0;  // an empty mask gives a zero loss, not NaN
}

void check_size(std::span<const float> v, const TokenScores& s, const char* what) {
  if (int64_t(v.size()) != s.B * s.T) throw std::invalid_argument(std::string(what) + " must have B * T entries");
}

}  // namespace

LossResult cross_entropy_loss(const TokenScores& s, std::span<const float> mask, double normalizer) {
  check_size(mask, s, "mask");
  LossResult r;
  const double norm = mask_normalizer(mask, normalizer, &r.tokens);
  r.dlogp.assign(mask.size(), 0.f);
  for (size_t i = 0; i < mask.size(); i++) {
    if (mask[i] == 0.f) continue;
    r.loss -= double(mask[i]) * s.logp[i] / norm;
    r.dlogp[i] = float(-mask[i] / norm);
  }
  r.pg_loss = r.loss;
  return r;
}

LossResult ppo_clip_loss(const TokenScores& s, std::span<const float> old_logp, std::span<const float> advantages,
                         std::span<const float> mask, const PpoSettings& settings, double normalizer) {
  check_size(old_logp, s, "old_logp");
  check_size(advantages, s, "advantages");
  check_size(mask, s, "mask");
  LossResult r;
  const double norm = mask_normalizer(mask, normalizer, &r.tokens);
  r.dlogp.assign(mask.size(), 0.f);
  r.dentropy.assign(mask.size(), 0.f);
  const double lo = 1.0 - settings.clip_eps, hi = 1.0 + settings.clip_eps;
  double clipped = 0;
  for (size_t i = 0; i < mask.size(); i++) {
    if (mask[i] == 0.f) continue;
    const double w = mask[i] / norm;
    const double log_ratio = double(s.logp[i]) - old_logp[i];
    const double ratio = std::exp(std::clamp(log_ratio, -20.0, 20.0));
    const double A = advantages[i];
    const double unclipped = -A * ratio, clipped_loss = -A * std::clamp(ratio, lo, hi);
    // max() picks the clipped branch only when it is strictly larger; its gradient is zero
    // (the ratio is held at the bound), as is the gradient through the overflow clamp.
    const bool use_clipped = clipped_loss > unclipped;
    r.pg_loss += w * std::max(unclipped, clipped_loss);
    if (use_clipped) clipped += mask[i];
    if (!use_clipped && std::fabs(log_ratio) < 20.0) r.dlogp[i] = float(w * -A * ratio);
    r.entropy += w * s.entropy[i];
    r.dentropy[i] = float(-settings.entropy_coeff * w);
    r.approx_kl -= w * log_ratio;  // veRL's ppo_kl: mean(old_logp - logp)
  }
  r.loss = r.pg_loss - settings.entropy_coeff * r.entropy;
  // Over the normaliser, as the loss is: given the update's tokens, a micro-batch's share, so that
  // the sum over micro-batches and ranks (trainer/policy.cpp) is the update's fraction. Over this
  // batch's tokens it was the fraction of each, and the sum counted it once per micro-batch and rank.
  r.clip_fraction = clipped / norm;
  return r;
}

}  // namespace azr::model
