// RMSNorm's CUDA forward (kernels/cuda/rmsnorm_forward.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h: the register-held form gives the loop form's bits (the output,
// its bf16 rounding, rstd, and the residual sum with res aliasing x, as the step calls it) at
// every width it takes, among them widths that leave threads idle or with a short last value, and
// both forms stay within fp32 rounding of the CPU backend's add and norm. Which form a width gets
// is checked by hand. What the emulation cannot show (the speed) is cuda_ops_bench's rmsnorm rows.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/rmsnorm_forward.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

struct Outputs {
  std::vector<float> out, rstd, res;
  std::vector<uint16_t> out16;
};

// One launch of `kernel` over N rows of x (+ delta, the sum written over x, as the model's
// residual add aliases it).
template <class Kernel>
Outputs run(Kernel kernel, const std::vector<float>& x, const std::vector<float>& delta, const std::vector<float>& w,
            int64_t N, int64_t C) {
  Outputs o{std::vector<float>(size_t(N * C), NAN), std::vector<float>(size_t(N), NAN), x,
            std::vector<uint16_t>(size_t(N * C), 0xFFFF)};
  RmsnormForwardArgs a{o.out.data(), reinterpret_cast<__nv_bfloat16*>(o.out16.data()), o.rstd.data(),
                       o.res.data(), w.data(), C, 1e-6f, delta.empty() ? nullptr : delta.data(),
                       delta.empty() ? nullptr : o.res.data()};
  emu::launch({unsigned(N), 1, 1}, kNormThreads, 0, kernel, a);
  return o;
}

TEST(RmsnormForwardEmulated, HeldFormIsTheLoopFormBitForBit) {
  const int64_t N = 3;
  for (const int64_t C : {int64_t(37), int64_t(256), int64_t(300), int64_t(896), int64_t(1536), int64_t(3584)}) {
    const int K = rmsnorm_forward_held_values(C);
    ASSERT_GT(K, 0) << C;
    for (const bool residual : {false, true}) {
      SCOPED_TRACE("C " + std::to_string(C) + " K " + std::to_string(K) + (residual ? ", residual" : ""));
      const std::vector<float> x = randn(size_t(N * C), uint64_t(C), 2.f), w = randn(size_t(C), uint64_t(C) + 1);
      const std::vector<float> delta = residual ? randn(size_t(N * C), uint64_t(C) + 2) : std::vector<float>{};
      const Outputs loop = run(rmsnorm_forward_kernel, x, delta, w, N, C);
      Outputs held;
      launch_rmsnorm_forward_form(C, false, [&](auto kernel) { held = run(kernel, x, delta, w, N, C); });
      EXPECT_EQ(held.out, loop.out);
      EXPECT_EQ(held.out16, loop.out16);
      EXPECT_EQ(held.rstd, loop.rstd);
      EXPECT_EQ(held.res, loop.res);
      // Against the CPU backend: the sum of x and delta exactly (one addition), the norm within
      // fp32 rounding (the sums of squares in another order).
      std::vector<float> sum = x, want(static_cast<size_t>(N * C)), want_rstd(static_cast<size_t>(N));
      if (residual) cpu_ops().add(sum.data(), x.data(), delta.data(), N * C);
      cpu_ops().rmsnorm_forward(want.data(), want_rstd.data(), sum.data(), w.data(), N, C, 1e-6f);
      EXPECT_EQ(held.res, sum);
      for (int64_t i = 0; i < N * C; i++)
        ASSERT_NEAR(held.out[size_t(i)], want[size_t(i)], 1e-5f * (1.f + std::fabs(want[size_t(i)]))) << i;
      for (int64_t n = 0; n < N; n++)
        EXPECT_NEAR(held.rstd[size_t(n)], want_rstd[size_t(n)], 1e-5f * want_rstd[size_t(n)]) << "row " << n;
    }
  }
}

// Programmatic launch's contract (kernels/cuda/device_or_emulation.cuh; the norms are launched after
// the kernel before them): a block reads its row of x and delta, which that kernel writes, only after
// its wait. The row is poisoned (NaN) until every thread of the block has reached its wait
// (emu::PriorGridWrites; blocks run in row order, so the n-th block to start has row n), and both
// forms give the plain run's bits, with the residual add writing over x as the step does.
TEST(RmsnormForwardEmulated, BothFormsReadTheirRowOnlyAfterTheirWait) {
  const int64_t N = 3, C = 1536;
  const std::vector<float> x = randn(size_t(N * C), 61, 2.f), w = randn(size_t(C), 62),
                           delta = randn(size_t(N * C), 63);
  const auto each_form = [&](auto&& f) {
    f(rmsnorm_forward_kernel);
    launch_rmsnorm_forward_form(C, false, [&](auto kernel) { f(kernel); });
  };
  each_form([&](auto kernel) {
    const Outputs want = run(kernel, x, delta, w, N, C);
    Outputs got{std::vector<float>(size_t(N * C), NAN), std::vector<float>(size_t(N), NAN), x,
                std::vector<uint16_t>(size_t(N * C), 0xFFFF)};
    std::vector<float> d = delta;
    const RmsnormForwardArgs a{got.out.data(), reinterpret_cast<__nv_bfloat16*>(got.out16.data()), got.rstd.data(),
                               got.res.data(), w.data(), C, 1e-6f, d.data(), got.res.data()};
    int64_t row = -1;
    const auto at = [&](int64_t n) { return std::ptrdiff_t(n * C); };
    emu::PriorGridWrites writes{[&] {
                                  row++;
                                  std::fill_n(got.res.begin() + at(row), C, NAN);
                                  std::fill_n(d.begin() + at(row), C, NAN);
                                },
                                [&] {
                                  std::copy_n(x.begin() + at(row), C, got.res.begin() + at(row));
                                  std::copy_n(delta.begin() + at(row), C, d.begin() + at(row));
                                }};
    {
      const emu::PriorGridWritesScope scope(writes);
      emu::launch({unsigned(N), 1, 1}, kNormThreads, 0, kernel, a);
    }
    EXPECT_EQ(row, N - 1) << "a block a row";
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.out16, want.out16);
    EXPECT_EQ(got.rstd, want.rstd);
    EXPECT_EQ(got.res, want.res);
  });
}

// The held form's values a thread: the next compiled count at or above ceil(C / 256), none past
// 4,096 columns (the loop form takes those).
TEST(RmsnormForwardEmulated, TheHeldFormTakesWidthsUpTo4096) {
  EXPECT_EQ(rmsnorm_forward_held_values(1), 1);
  EXPECT_EQ(rmsnorm_forward_held_values(256), 1);
  EXPECT_EQ(rmsnorm_forward_held_values(257), 2);
  EXPECT_EQ(rmsnorm_forward_held_values(896), 4);    // Qwen2.5-0.5B
  EXPECT_EQ(rmsnorm_forward_held_values(1536), 6);   // 1.5B
  EXPECT_EQ(rmsnorm_forward_held_values(2048), 8);   // 3B
  EXPECT_EQ(rmsnorm_forward_held_values(3584), 16);  // 7B: 14 rounded up
  EXPECT_EQ(rmsnorm_forward_held_values(4096), 16);
  EXPECT_EQ(rmsnorm_forward_held_values(4097), 0);
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
