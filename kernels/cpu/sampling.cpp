#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace azr::kernels {

int32_t sample_row(const float* logits, int64_t V, float temperature, int32_t top_k, float top_p, double u,
                   float* logprob) {
  const float* end = logits + V;
  if (temperature == 0.f) {  // greedy: the first maximum, log-prob at temperature 1
    const int32_t best = int32_t(std::max_element(logits, end) - logits);
    double sum = 0;
    for (const float* z = logits; z < end; z++) sum += std::exp(double(*z) - logits[best]);
    *logprob = float(-std::log(sum));
    return best;
  }
  // Grow-only per-thread scratch: the CPU op calls this once per row from an OpenMP loop.
  static thread_local std::vector<double> p_buf;
  static thread_local std::vector<int32_t> ids_buf;
  p_buf.resize(static_cast<size_t>(V));
  double* p = p_buf.data();
  const double inv_t = 1.0 / temperature;
  double mx = -INFINITY;
  for (const float* z = logits; z < end; z++) mx = std::max(mx, *z * inv_t);
  double total = 0;
  for (int64_t j = 0; j < V; j++) total += (p[j] = std::exp(logits[j] * inv_t - mx));

  const bool filter = (top_k > 0 && top_k < V) || top_p < 1.f;
  if (!filter) {
    double target = u * total, acc = 0;
    int64_t pick = V - 1;
    for (int64_t j = 0; j < V; j++) {
      acc += p[j];
      if (acc > target) {
        pick = j;
        break;
      }
    }
    while (p[pick] == 0.0 && pick > 0) pick--;  // never return a zero-probability token
    *logprob = float(std::log(p[pick] / total));
    return int32_t(pick);
  }
  // Candidates by descending probability (ties by id, so the order is deterministic).
  ids_buf.resize(static_cast<size_t>(V));
  std::vector<int32_t>& ids = ids_buf;
  std::iota(ids.begin(), ids.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
  int64_t keep = V;
  if (top_k > 0 && top_k < V) {
    keep = top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_prob);
  } else {
    std::sort(ids.begin(), ids.end(), by_prob);
  }
  double kept_total = 0;
  for (int64_t i = 0; i < keep; i++) kept_total += p[ids[i]];
  if (top_p < 1.f) {
    // Keep a token while the probability mass before it (in the top-k renormalised
    // distribution) is below top_p: the smallest prefix reaching top_p, at least one token.
    double before = 0;
    int64_t n = 0;
    while (n < keep && (n == 0 || before < top_p * kept_total)) before += p[ids[n++]];
    keep = n;
    kept_total = before;
  }
  double target = u * kept_total, acc = 0;
  int64_t pick = keep - 1;
  for (int64_t i = 0; i < keep; i++) {
    acc += p[ids[i]];
    if (acc > target) {
      pick = i;
      break;
    }
  }
  *logprob = float(std::log(p[ids[pick]] / kept_total));
  return ids[pick];
}

}  // namespace azr::kernels
