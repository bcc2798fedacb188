#pragma once
// Filtered sampling (top-k, top-p) the plain way, for checking and timing the CPU sampler
// (kernels/cpu/sampling.cpp), which orders only the prefix the filters can keep: here every
// candidate is sorted by descending probability (ties by id), and without top-k the mass top-p
// renormalises against is summed in that order. So its sums differ from the sampler's in the last
// bits only, and it picks the same token but where u lies within that of a boundary.
// tests/kernels/sampling_test.cpp compares the two; bench/sampling_bench.cpp times them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace azr::kernels::testing {

// temperature > 0, and top_k in (0, V) or top_p < 1: the sampler's filtered path.
inline int32_t full_sort_sample_row(const float* logits, int64_t V, float temperature, int32_t top_k, float top_p,
                                    double u, float* logprob) {
  std::vector<double> p(static_cast<size_t>(V));
  const double inv_t = 1.0 / temperature;
  double mx = -INFINITY;
  for (int64_t j = 0; j < V; j++) mx = std::max(mx, logits[j] * inv_t);
  for (int64_t j = 0; j < V; j++) p[size_t(j)] = std::exp(logits[j] * inv_t - mx);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  const int64_t k = top_k > 0 && top_k < V ? top_k : V;
  double kept_total = 0;
  for (int64_t i = 0; i < k; i++) kept_total += p[size_t(ids[size_t(i)])];
  int64_t keep = k;
  if (top_p < 1.f) {
    double before = 0;
    int64_t n = 0;
    while (n < k && (n == 0 || before < top_p * kept_total)) before += p[size_t(ids[size_t(n++)])];
    keep = n, kept_total = before;
  }
  const double target = u * kept_total;
  double acc = 0;
  int64_t pick = keep - 1;
  for (int64_t i = 0; i < keep; i++)
    if ((acc += p[size_t(ids[size_t(i)])]) > target) {
      pick = i;
      break;
    }
  *logprob = float(std::log(p[size_t(ids[size_t(pick)])] / kept_total));
  return ids[size_t(pick)];
}

}  // namespace azr::kernels::testing
