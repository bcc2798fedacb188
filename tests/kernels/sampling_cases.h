#pragma once
// Sampling cases shared by the CUDA sampler's tests, on a GPU (cuda_ops_test.cpp, CudaSampling) and
// on the CPU emulation of the device (sampling_emulated_test.cpp): the modes, awkward rows, and
// uniforms kept clear of the boundaries of the CPU's cumulative distribution, so that the device
// must pick the CPU's token exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels::testing {

struct SampleCase {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float scale;          // of the N(0, 1) logits: 3 = peaked (small top-p sets), 0.05 = nearly flat
  int64_t limit_short;  // V_limit = V - limit_short
};

// Every mode, the CUDA op's filtered paths included: kept sets that fit one chunk (2048
// candidates sorted at a time: every filter at V = 263, top_k 50) and that take several (at V =
// 151,936: top_k 3000 and 5000, top_p 0.9 of these rows, top_p 0.95 of a flat row, 140k tokens);
// at V = 263 the large top_k are no filter at all, which is checked too.
inline const SampleCase kSampleCases[] = {
    {"greedy", 0.f, 0, 1.f, 3.f, 0},                       {"greedy_limit", 0.f, 0, 1.f, 3.f, 37},
    {"unfiltered", 1.f, 0, 1.f, 3.f, 0},                   {"unfiltered_cold_limit", 0.7f, 0, 1.f, 3.f, 37},
    {"unfiltered_flat", 1.f, 0, 1.f, 0.05f, 0},            {"top_k_1", 1.f, 1, 1.f, 3.f, 0},
    {"top_k_50", 0.8f, 50, 1.f, 3.f, 0},                   {"top_k_3000_flat", 1.f, 3000, 1.f, 0.05f, 0},
    {"top_p_0.9", 1.f, 0, 0.9f, 3.f, 0},                   {"top_p_0.95_flat_limit", 1.f, 0, 0.95f, 0.05f, 37},
    {"top_k_40_top_p_0.8", 1.2f, 40, 0.8f, 3.f, 0},        {"top_k_5000_top_p_0.5", 1.f, 5000, 0.5f, 0.5f, 37},
    {"top_p_tiny", 1.f, 0, 1e-4f, 3.f, 0},
};

// Whether sample_rows filters case c at `limit` candidates (kernels/cuda/sampling.cu): a top_k of
// `limit` or more is no filter, and takes the unfiltered sampler, whose order is another.
inline bool filtered_at(const SampleCase& c, int64_t limit) {
  return c.temperature > 0.f && ((c.top_k > 0 && c.top_k < limit) || c.top_p < 1.f);
}

// Rows with the awkward cases mixed in: every third id -inf, a tied maximum and a run of tied
// values, -0 beside +0.
inline void make_awkward(std::vector<float>& z, int64_t R, int64_t V) {
  for (int64_t r = 0; r < R; r++) {
    float* row = &z[size_t(r * V)];
    if (r % 4 == 1)
      for (int64_t j = 0; j < V; j += 3) row[j] = -INFINITY;
    if (r % 4 == 2) {
      const float mx = *std::max_element(row, row + V);
      row[V / 3] = row[V / 2] = mx + 0.5f;
      for (int64_t j = 5; j < 25; j++) row[j] = 0.25f;
    }
    if (r % 4 == 3) row[1] = -0.f, row[2] = 0.f, row[3] = -0.f;
  }
}

// Uniforms kept clear of the boundaries of each row's cumulative distribution: u is redrawn
// until the CPU picks the same token at u - margin and at u + margin; the token's rank being
// monotonic in u, no boundary then lies within the margin. The CUDA op's sums run in another
// order, which moves its boundaries by at most about V * 2^-53 of the mass (2e-11 at V =
// 151,936), far inside the margin, so it must pick the CPU's token exactly. (top_p's cut is not
// nudged: a prefix sum within that rounding of top_p * mass has a chance of ~1e-11 per row.)
inline std::vector<double> uniforms_off_boundaries(const std::vector<float>& logits, int64_t R, int64_t V, int64_t limit,
                                            const SampleCase& c, uint64_t seed) {
  constexpr double kMargin = 1e-9;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(kMargin, 1.0 - kMargin);
  const size_t rows = static_cast<size_t>(R);
  std::vector<double> u(rows), lo(rows), hi(rows);
  std::vector<bool> redraw(rows, true);
  std::vector<int32_t> t_lo(rows), t_hi(rows);
  std::vector<float> lp(rows);
  for (int round = 0; round < 20; round++) {
    for (size_t r = 0; r < rows; r++)
      if (redraw[r]) u[r] = uniform(rng), lo[r] = u[r] - kMargin, hi[r] = u[r] + kMargin;
    cpu_ops().sample_rows(t_lo.data(), lp.data(), logits.data(), lo.data(), R, V, limit, c.temperature, c.top_k,
                          c.top_p);
    cpu_ops().sample_rows(t_hi.data(), lp.data(), logits.data(), hi.data(), R, V, limit, c.temperature, c.top_k,
                          c.top_p);
    size_t left = 0;
    for (size_t r = 0; r < rows; r++) left += (redraw[r] = t_lo[r] != t_hi[r]);
    if (left == 0) return u;
  }
  ADD_FAILURE() << c.name << ": could not draw uniforms away from the CDF's boundaries";
  return u;
}

}  // namespace azr::kernels::testing
