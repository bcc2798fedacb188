#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace azr::kernels {

namespace {
constexpr int64_t kFirstOrderedPrefix = 256;  // top-p's first ordered prefix; then 4x as many
}  // namespace

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
  // Candidates by descending probability (ties by id, so the order is deterministic). Only the
  // prefix the filters can keep is put in order: the top-k, or for top-p alone a prefix that
  // grows 4x at a time until the kept mass is reached (a peaked row keeps a few of 151,936
  // tokens: sorting them all took 30 ms a row). ids[0, sorted) is in order, the rest after it.
  ids_buf.resize(static_cast<size_t>(V));
  std::vector<int32_t>& ids = ids_buf;
  std::iota(ids.begin(), ids.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
  int64_t sorted = 0;
  auto order_prefix = [&](int64_t m) {
    if (m <= sorted) return;
    if (m < V) std::nth_element(ids.begin() + sorted, ids.begin() + m, ids.end(), by_prob);
    std::sort(ids.begin() + sorted, ids.begin() + m, by_prob);
    sorted = m;
  };
  // The mass top-p renormalises against: the top-k's, summed in order; without top-k, the row's
  // (summed in id order above).
  int64_t keep = V;
  double kept_total = total;
  if (top_k > 0 && top_k < V) {
    keep = top_k;
    order_prefix(keep);
    kept_total = 0;
    for (int64_t i = 0; i < keep; i++) kept_total += p[ids[i]];
  }
  if (top_p < 1.f) {
    // Keep a token while the probability mass before it (in the top-k renormalised
    // distribution) is below top_p: the smallest prefix reaching top_p, at least one token.
    // The prefix grows at least 4x, and at least by the tokens still needed were each as likely
    // as the last one taken (none of them is more likely): a nearly flat row's long prefix is
    // then ordered in two steps, not six.
    const double cut = top_p * kept_total;
    double before = 0;
    int64_t n = 0;
    for (int64_t m = std::min<int64_t>(keep, kFirstOrderedPrefix);;) {
      order_prefix(m);
      while (n < m && (n == 0 || before < cut)) before += p[ids[n++]];
      if (n < m || m == keep) break;  // the mass reached within the prefix, or every token taken
      const double last = p[ids[n - 1]];
      const double still = last > 0 ? std::ceil((cut - before) / last) : double(keep);
      m = int64_t(std::min(double(keep), std::max(4.0 * double(m), double(m) + still)));
    }
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
