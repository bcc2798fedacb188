// The CUDA backend's token-statistics kernels (kernels/cuda/token_stats.cuh) run on the CPU through
// tests/kernels/cuda_emulation.h, a stand-in for the device, so that their logic runs in CI, where
// there is no GPU: each thread's one-pass online sums, the block's join of them at the block's
// maximum, the running state carried in double from column block to column block, the target found
// in whichever block holds it, and the backward's column offset; the backward's bf16 output is its
// fp32 output rounded, bit for bit. Against the statistics from their
// definitions in long double and the CPU backend's gradients (tests/kernels/token_stats_cases.h).
// The GPU test (CudaTokenStats) checks the same on the hardware at the full vocabulary.
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/token_stats.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/token_stats_cases.h"

namespace azr::kernels::cuda_detail::token_stats_kernels {
namespace {

using namespace azr::kernels::testing;

// Blocks of a multiple of 4 columns go four values a thread (unless `quads` is off), the others
// one: the launches' rule (token_stats.cu). Counts the four-value launches in *quad_launches.
void launch_stats(bool quads, unsigned rows, const StatsArgs& a, int* quad_launches) {
  if (quads && stats_quads_fit(a)) {
    ++*quad_launches;
    emu::launch({rows, 1, 1}, kThreads, 0, stats_kernel<4>, a);
  } else {
    emu::launch({rows, 1, 1}, kThreads, 0, stats_kernel<1>, a);
  }
}
void launch_backward(bool quads, unsigned rows, const BackwardArgs& a, int* quad_launches) {
  if (quads && backward_quads_fit(a)) {
    ++*quad_launches;
    emu::launch({rows, 1, 1}, kThreads, 0, backward_kernel<4>, a);
  } else {
    emu::launch({rows, 1, 1}, kThreads, 0, backward_kernel<1>, a);
  }
}

const StatsCase kCases[] = {
    {7, 263, 1.f, 1.f / 0.7f, {263, 100}},  // blocks shorter than the 512 threads: idle threads
    {4, 3001, 4.f, 1.f, {3001, 700}},       // peaked rows; several values per thread; 700 = 4 x 175
    {3, 4100, 1.f, 1.f, {4100, 2048}},      // every block a multiple of 4: quads throughout
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
    for (const int64_t block : c.blocks)
      for (const bool quads : {true, false}) {
      SCOPED_TRACE("V " + std::to_string(c.V) + ", blocks of " + std::to_string(block) +
                   (quads ? ", four values a thread where they fit" : ", one value a thread"));
      int quad_launches = 0;
      std::vector<float> lse(size_t(c.n), NAN), logp(size_t(c.n), NAN), ent(size_t(c.n), NAN);
      std::vector<double> state(size_t(4 * c.n), NAN);
      std::vector<float> dz(logits.size(), NAN);
      for (int64_t col0 = 0; col0 < c.V; col0 += block) {
        const int64_t cols = std::min(block, c.V - col0);
        const std::vector<float> b = column_block(logits, c.n, c.V, col0, cols);
        launch_stats(quads, unsigned(c.n),
                     StatsArgs{lse.data(), logp.data(), ent.data(), block < c.V ? state.data() : nullptr, b.data(),
                               targets.data(), col0, cols, c.V, c.inv_temp},
                     &quad_launches);
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
        // The bf16 output first, from logits it must leave as they are; then the fp32 one in place.
        const std::vector<float> before = b;
        std::vector<uint16_t> b16(b.size() + 1, 0xFFFF);  // and a sentinel past the block
        launch_backward(quads, unsigned(c.n),
                        BackwardArgs{nullptr, reinterpret_cast<__nv_bfloat16*>(b16.data()), b.data(), ref_lse.data(),
                                     ref_ent.data(), dlogp.data(), dent.data(), targets.data(), col0, cols,
                                     c.inv_temp},
                        &quad_launches);
        ASSERT_EQ(std::memcmp(b.data(), before.data(), sizeof(float) * b.size()), 0) << "the bf16 kernel wrote logits";
        launch_backward(quads, unsigned(c.n),
                        BackwardArgs{b.data(), nullptr, b.data(), ref_lse.data(), ref_ent.data(), dlogp.data(),
                                     dent.data(), targets.data(), col0, cols, c.inv_temp},
                        &quad_launches);
        for (int64_t r = 0; r < c.n; r++) std::copy_n(b.data() + r * cols, cols, dz.data() + r * c.V + col0);
        // The bf16 gradient is the fp32 one rounded to nearest even, bit for bit (CPU's to_bf16).
        std::vector<uint16_t> want16(b.size());
        kernels::cpu_bf16_matmul_ops().to_bf16(want16.data(), b.data(), int64_t(b.size()));
        EXPECT_TRUE(std::equal(want16.begin(), want16.end(), b16.begin())) << "bf16 dlogits, block at " << col0;
        EXPECT_EQ(b16.back(), 0xFFFF) << "written past the block";
      }
      float biggest = 0;
      for (float v : want_dz) biggest = std::max(biggest, std::fabs(v));
      for (size_t i = 0; i < dz.size(); i++) ASSERT_NEAR(dz[i], want_dz[i], 1e-6 * biggest) << "element " << i;
      // Which blocks went four values a thread: every block of a multiple of 4 columns, three
      // launches each (the statistics, the bf16 gradient, the fp32 one).
      int fitting = 0;
      for (int64_t col0 = 0; col0 < c.V; col0 += block) fitting += std::min(block, c.V - col0) % 4 == 0;
      EXPECT_EQ(quad_launches, quads ? 3 * fitting : 0);
    }
  }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::token_stats_kernels
