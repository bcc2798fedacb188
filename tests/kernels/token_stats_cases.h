#pragma once
// What the token-statistics tests share (token_stats_test.cpp on the CPU backend,
// token_stats_emulated_test.cpp on the CUDA kernels through the CPU stand-in, cuda_ops_test.cpp on a
// GPU): the cases, a column block cut out of a row-major matrix as the LM head's GEMM writes it, and
// an independent reference: the statistics in long double straight from their definitions.
#include <cmath>
#include <cstdint>
#include <vector>

namespace azr::kernels::testing {

struct StatsCase {
  int64_t n, V;
  float scale;                  // of the random logits (4: peaked rows, entropy near 0 in some)
  float inv_temp;
  std::vector<int64_t> blocks;  // column-block widths tried; the last block of a row may be shorter
};

// Rows of x [n, V], columns col0 .. col0 + cols - 1, as an [n, cols] matrix.
inline std::vector<float> column_block(const std::vector<float>& x, int64_t n, int64_t V, int64_t col0, int64_t cols) {
  std::vector<float> out(size_t(n * cols));
  for (int64_t r = 0; r < n; r++)
    for (int64_t j = 0; j < cols; j++) out[size_t(r * cols + j)] = x[size_t(r * V + col0 + j)];
  return out;
}

// Targets spread over the vocabulary, row 3 masked (-1).
inline std::vector<int32_t> spread_targets(int64_t n, int64_t V) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; r++) t[size_t(r)] = int32_t((r * 7919 + 11) % V);
  if (n > 3) t[3] = -1;
  return t;
}

struct ReferenceStats {
  std::vector<long double> lse, logp, entropy;
};

// lse = log sum e^z, logp = z_t - lse, H = -sum p log p, z = logits * inv_temp, in long double.
inline ReferenceStats reference_stats(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                                      int64_t n, int64_t V, float inv_temp) {
  ReferenceStats s;
  for (int64_t r = 0; r < n; r++) {
    const float* z = logits.data() + r * V;
    long double mx = -INFINITY, sum = 0, h = 0;
    for (int64_t j = 0; j < V; j++) mx = std::max(mx, (long double)z[j] * inv_temp);
    for (int64_t j = 0; j < V; j++) sum += std::exp((long double)z[j] * inv_temp - mx);
    const long double lse = mx + std::log(sum);
    for (int64_t j = 0; j < V; j++) {
      const long double lp = (long double)z[j] * inv_temp - lse;
      h -= std::exp(lp) * lp;
    }
    s.lse.push_back(lse);
    s.logp.push_back(targets[size_t(r)] >= 0 ? (long double)z[targets[size_t(r)]] * inv_temp - lse : 0);
    s.entropy.push_back(h);
  }
  return s;
}

}  // namespace azr::kernels::testing
