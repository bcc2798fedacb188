#pragma once
// Filtered sampling (top-k, top-p) the plain way, for checking and timing the CPU sampler
// (kernels/cpu/sampling.cpp), which orders only the prefix the filters can keep: here every
// candidate is sorted by descending probability (ties by id), and without top-k the mass top-p
// renormalises against is summed in that order. So its sums differ from the sampler's in the last
// bits only, and it picks the same token but where u lies within that of a boundary.
// tests/kernels/sampling_test.cpp compares the two; bench/sampling_bench.cpp times them;
// tests/kernels/sampling_emulated_test.cpp checks that the CUDA split's lists hold the kept set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace azr::kernels::testing {

// The kept set, the plain way: every candidate's probability (unnormalised, p_j = exp(z_j / t -
// max) as the sampler computes it), all candidates by descending probability (ties by id), the
// length of the prefix the filters keep, and its mass (without top-p, the top-k's in order).
struct FullSortKept {
  std::vector<double> p;
  std::vector<int32_t> ids;
  int64_t keep = 0;
  double kept_total = 0;
};

inline FullSortKept full_sort_kept(const float* logits, int64_t V, float temperature, int32_t top_k, float top_p) {
  FullSortKept k;
  k.p.resize(static_cast<size_t>(V));
  const double inv_t = 1.0 / temperature;
  double mx = -INFINITY;
  for (int64_t j = 0; j < V; j++) mx = std::max(mx, logits[j] * inv_t);
  for (int64_t j = 0; j < V; j++) k.p[size_t(j)] = std::exp(logits[j] * inv_t - mx);
  k.ids.resize(static_cast<size_t>(V));
  std::iota(k.ids.begin(), k.ids.end(), 0);
  const std::vector<double>& p = k.p;
  std::sort(k.ids.begin(), k.ids.end(), [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  k.keep = top_k > 0 && top_k < V ? top_k : V;
  for (int64_t i = 0; i < k.keep; i++) k.kept_total += p[size_t(k.ids[size_t(i)])];
  if (top_p < 1.f) {
    double before = 0;
    int64_t n = 0;
    while (n < k.keep && (n == 0 || before < top_p * k.kept_total)) before += p[size_t(k.ids[size_t(n++)])];
    k.keep = n, k.kept_total = before;
  }
  return k;
}

// temperature > 0, and top_k in (0, V) or top_p < 1: the sampler's filtered path.
inline int32_t full_sort_sample_row(const float* logits, int64_t V, float temperature, int32_t top_k, float top_p,
                                    double u, float* logprob) {
  const FullSortKept k = full_sort_kept(logits, V, temperature, top_k, top_p);
  const double target = u * k.kept_total;
  double acc = 0;
  int64_t pick = k.keep - 1;
  for (int64_t i = 0; i < k.keep; i++)
    if ((acc += k.p[size_t(k.ids[size_t(i)])]) > target) {
      pick = i;
      break;
    }
  *logprob = float(std::log(k.p[size_t(k.ids[size_t(pick)])] / k.kept_total));
  return k.ids[size_t(pick)];
}

}  // namespace azr::kernels::testing
