// The CPU backend's token statistics (kernels/ops.h: token_stats, token_stats_backward) over
// column blocks of the vocabulary, as the LM head calls them, against independent truths: the
// statistics from their definitions in long double (tests/kernels/token_stats_cases.h) and, for
// the backward, central differences of those definitions. Splitting a row into blocks must give the
// whole row's statistics up to rounding, and the very same gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/token_stats_cases.h"

namespace azr::kernels {
namespace {

using namespace azr::kernels::testing;

const StatsCase kCases[] = {
    {7, 263, 1.f, 1.f / 0.7f, {263, 100, 64, 1}},  // azr-tiny's vocabulary; blocks down to one column
    {5, 5003, 4.f, 1.f, {5003, 1024, 777}},        // peaked rows (entropy near 0 in some)
};

struct Stats {
  std::vector<float> lse, logp, entropy;
};

// The statistics of logits [n, V] through `ops`, one call per block of `block` columns; state
// starts as NaN garbage, which the first block must ignore.
Stats blocked_stats(const Ops& ops, const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t n,
                    int64_t V, int64_t block, float inv_temp) {
  Stats s{std::vector<float>(size_t(n), NAN), std::vector<float>(size_t(n), NAN), std::vector<float>(size_t(n), NAN)};
  std::vector<double> state(size_t(4 * n), NAN);
  for (int64_t col0 = 0; col0 < V; col0 += block) {
    const int64_t cols = std::min(block, V - col0);
    const std::vector<float> b = column_block(logits, n, V, col0, cols);
    ops.token_stats(s.lse.data(), s.logp.data(), s.entropy.data(), block < V ? state.data() : nullptr, b.data(),
                    targets.data(), n, col0, cols, V, inv_temp);
  }
  return s;
}

TEST(TokenStats, EveryBlockSplitGivesTheDefinitionsStatistics) {
  for (const StatsCase& c : kCases) {
    const std::vector<float> logits = randn(size_t(c.n * c.V), 60 + uint64_t(c.V), c.scale);
    const std::vector<int32_t> targets = spread_targets(c.n, c.V);
    const ReferenceStats want = reference_stats(logits, targets, c.n, c.V, c.inv_temp);
    for (const int64_t block : c.blocks) {
      SCOPED_TRACE("V " + std::to_string(c.V) + ", blocks of " + std::to_string(block));
      const Stats got = blocked_stats(cpu_ops(), logits, targets, c.n, c.V, block, c.inv_temp);
      for (int64_t r = 0; r < c.n; r++) {
        // fp32 results of values of size |lse|: a few units of their last place.
        const double tol = 4e-7 * (1.0 + std::fabs(double(want.lse[r])));
        EXPECT_NEAR(got.lse[r], double(want.lse[r]), tol) << "row " << r;
        EXPECT_NEAR(got.logp[r], double(want.logp[r]), tol) << "row " << r;
        EXPECT_NEAR(got.entropy[r], double(want.entropy[r]), tol) << "row " << r;
      }
      EXPECT_EQ(got.logp[3], 0.f) << "a masked row's log-prob";
    }
    // The whole row in one block is one pass: the same bits with or without a state.
    const Stats whole = blocked_stats(cpu_ops(), logits, targets, c.n, c.V, c.V, c.inv_temp);
    std::vector<double> state(size_t(4 * c.n), NAN);
    Stats again{std::vector<float>(size_t(c.n)), std::vector<float>(size_t(c.n)), std::vector<float>(size_t(c.n))};
    cpu_ops().token_stats(again.lse.data(), again.logp.data(), again.entropy.data(), state.data(), logits.data(),
                          targets.data(), c.n, 0, c.V, c.V, c.inv_temp);
    EXPECT_EQ(std::memcmp(whole.lse.data(), again.lse.data(), sizeof(float) * size_t(c.n)), 0);
    EXPECT_EQ(std::memcmp(whole.entropy.data(), again.entropy.data(), sizeof(float) * size_t(c.n)), 0);
  }
}

// gl * logp + ge * H of one row in long double, for the central differences.
long double objective(std::vector<long double> z, int64_t target, long double gl, long double ge) {
  long double mx = -INFINITY, sum = 0, h = 0;
  for (long double v : z) mx = std::max(mx, v);
  for (long double v : z) sum += std::exp(v - mx);
  const long double lse = mx + std::log(sum);
  for (long double v : z) h -= std::exp(v - lse) * (v - lse);
  return (target >= 0 ? gl * (z[size_t(target)] - lse) : 0) + ge * h;
}

TEST(TokenStats, BackwardIsTheDerivativeAndTheSameOnEveryBlockSplit) {
  for (const StatsCase& c : kCases) {
    const std::vector<float> logits = randn(size_t(c.n * c.V), 60 + uint64_t(c.V), c.scale);
    const std::vector<int32_t> targets = spread_targets(c.n, c.V);
    const std::vector<float> dlogp = randn(size_t(c.n), 61), dent = randn(size_t(c.n), 62);
    const Stats st = blocked_stats(cpu_ops(), logits, targets, c.n, c.V, c.V, c.inv_temp);
    std::vector<float> whole(logits.size());
    cpu_ops().token_stats_backward(whole.data(), logits.data(), targets.data(), st.lse.data(), st.entropy.data(),
                                   dlogp.data(), dent.data(), c.n, 0, c.V, c.inv_temp);
    // d/dlogits_j by central differences, on a few columns of every row (the target's among them).
    for (int64_t r = 0; r < c.n; r++) {
      std::vector<long double> z(size_t(c.V));
      for (int64_t j = 0; j < c.V; j++) z[size_t(j)] = (long double)logits[size_t(r * c.V + j)] * c.inv_temp;
      float biggest = 0;
      for (int64_t j = 0; j < c.V; j++) biggest = std::max(biggest, std::fabs(whole[size_t(r * c.V + j)]));
      for (int64_t j : {int64_t(0), c.V / 2, c.V - 1, int64_t(targets[size_t(r)])}) {
        if (j < 0) continue;
        const long double h = 1e-4L;
        std::vector<long double> up = z, down = z;
        up[size_t(j)] += h, down[size_t(j)] -= h;
        const long double fd = (objective(up, targets[size_t(r)], dlogp[r], dent[r]) -
                                objective(down, targets[size_t(r)], dlogp[r], dent[r])) /
                               (2 * h) * c.inv_temp;
        EXPECT_NEAR(whole[size_t(r * c.V + j)], double(fd), 1e-5 * std::max(biggest, 1e-3f))
            << "V " << c.V << " row " << r << " column " << j;
      }
    }
    // Each block's gradients are the whole row's, bit for bit (the same arithmetic per element).
    for (const int64_t block : c.blocks) {
      std::vector<float> split(logits.size(), NAN);
      for (int64_t col0 = 0; col0 < c.V; col0 += block) {
        const int64_t cols = std::min(block, c.V - col0);
        std::vector<float> b = column_block(logits, c.n, c.V, col0, cols);
        cpu_ops().token_stats_backward(b.data(), b.data(), targets.data(), st.lse.data(), st.entropy.data(),
                                       dlogp.data(), dent.data(), c.n, col0, cols, c.inv_temp);
        for (int64_t r = 0; r < c.n; r++)
          std::copy_n(b.data() + r * cols, cols, split.data() + r * c.V + col0);
      }
      EXPECT_EQ(std::memcmp(split.data(), whole.data(), sizeof(float) * whole.size()), 0)
          << "V " << c.V << ", blocks of " << block;
    }
  }
}

}  // namespace
}  // namespace azr::kernels
