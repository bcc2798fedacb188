// The CUDA backend's token-statistics kernels (kernels/cuda/token_stats.cuh) run on the CPU through
// tests/kernels/cuda_emulation.h, a stand-in for the device, so that their logic runs in CI, where
// there is no GPU: each thread's one-pass online sums, the block's join of them at the block's
// maximum, the running state carried in double from column block to column block, the target found
// in whichever block holds it, and the backward's column offset. Against the statistics from their
// definitions in long double and the CPU backend's gradients (tests/kernels/token_stats_cases.h).
// The GPU test (CudaTokenStats) checks the same on the hardware at the full vocabulary.
//
// Small shapes: every CUDA thread is a std::thread here.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/token_stats.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/token_stats_cases.h"

namespace azr::kernels::cuda_detail::token_stats_kernels {
namespace {

using namespace azr::kernels::testing;

const StatsCase kCases[] = {
    {7, 263, 1.f, 1.f / 0.7f, {263, 100}},  // blocks shorter than the 512 threads: idle threads
    {4, 3001, 4.f, 1.f, {3001, 700}},       // peaked rows; several values per thread
};

TEST(TokenStatsEmulated, KernelsMatchTheDefinitionsOnEveryBlockSplit) {
  for (const StatsCase& c : kCases) {
    const std::vector<float> logits = randn(size_t(c.n * c.V), 80 + uint64_t(c.V), c.scale);
    const std::vector<int32_t> targets = spread_targets(c.n, c.V);
    const std::vector<float> dlogp = randn(size_t(c.n), 81), dent = randn(size_t(c.n), 82);
    const ReferenceStats want = reference_stats(logits, targets, c.n, c.V, c.inv_temp);
    // The CPU's gradients of the whole rows, from the reference's lse and entropy.
    std::vector<float> ref_lse(size_t(c.n)), ref_ent(size_t(c.n)), want_dz(logits.size());
    for (int64_t r = 0; r < c.n; r++) ref_lse[r] = float(want.lse[r]), ref_ent[r] = float(want.entropy[r]);
    cpu_ops().token_stats_backward(want_dz.data(), logits.data(), targets.data(), ref_lse.data(), ref_ent.data(),
                                   dlogp.data(), dent.data(), c.n, 0, c.V, c.inv_temp);
    for (const int64_t block : c.blocks) {
      SCOPED_TRACE("V " + std::to_string(c.V) + ", blocks of " + std::to_string(block));
      std::vector<float> lse(size_t(c.n), NAN), logp(size_t(c.n), NAN), ent(size_t(c.n), NAN);
      std::vector<double> state(size_t(4 * c.n), NAN);
      std::vector<float> dz(logits.size(), NAN);
      for (int64_t col0 = 0; col0 < c.V; col0 += block) {
        const int64_t cols = std::min(block, c.V - col0);
        const std::vector<float> b = column_block(logits, c.n, c.V, col0, cols);
        emu::launch({unsigned(c.n), 1, 1}, kThreads, 0, stats_kernel,
                    StatsArgs{lse.data(), logp.data(), ent.data(), block < c.V ? state.data() : nullptr, b.data(),
                              targets.data(), col0, cols, c.V, c.inv_temp});
      }
      for (int64_t r = 0; r < c.n; r++) {
        // Float sums per thread: looser than the CPU's double sums, still float rounding.
        const double tol = 2e-6 * (1.0 + std::fabs(double(want.lse[r])));
        EXPECT_NEAR(lse[r], double(want.lse[r]), tol) << "row " << r;
        EXPECT_NEAR(logp[r], double(want.logp[r]), tol) << "row " << r;
        EXPECT_NEAR(ent[r], double(want.entropy[r]), tol) << "row " << r;
      }
      for (int64_t col0 = 0; col0 < c.V; col0 += block) {
        const int64_t cols = std::min(block, c.V - col0);
        std::vector<float> b = column_block(logits, c.n, c.V, col0, cols);
        emu::launch({unsigned(c.n), 1, 1}, kThreads, 0, backward_kernel,
                    BackwardArgs{b.data(), b.data(), ref_lse.data(), ref_ent.data(), dlogp.data(), dent.data(),
                                 targets.data(), col0, cols, c.inv_temp});
        for (int64_t r = 0; r < c.n; r++) std::copy_n(b.data() + r * cols, cols, dz.data() + r * c.V + col0);
      }
      float biggest = 0;
      for (float v : want_dz) biggest = std::max(biggest, std::fabs(v));
      for (size_t i = 0; i < dz.size(); i++) ASSERT_NEAR(dz[i], want_dz[i], 1e-6 * biggest) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::token_stats_kernels
