// The streaming element-wise kernels of the CUDA backend (kernels/cuda/streaming.cuh: add, the bf16
// rounding of to_bf16, AdamW), run on the CPU through tests/kernels/cuda_emulation.h: four values a
// thread write the one-value kernels' bits at every length that leaves a tail of n % 4 and on grids
// smaller than the work (the loops wrap), nothing past n; add and the rounding are the CPU table's
// ops bit for bit, AdamW is the CPU's to fp32 rounding. The emulation builds with the alignment
// sanitizer, so a 16-byte access through a pointer that is not 16-byte aligned stops the test.
// What it cannot show (the speed, a launch on a device) is for CudaOps' tests and cuda_ops_bench.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/streaming.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "kernels/ops.h"
#include "tests/kernels/quads_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

// n values and one sentinel past them.
std::vector<float> with_sentinel(std::vector<float> v) {
  v.push_back(NAN);
  return v;
}

TEST(StreamingEmulated, AddIsTheCpusAddAtEitherWidthAndInPlace) {
  for (const int64_t n : kQuadLengths)
    for (const unsigned blocks : kQuadBlocks) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(blocks) + " blocks");
      const std::vector<float> a = randn(size_t(n), 1), b = randn(size_t(n), 2);
      std::vector<float> want(static_cast<size_t>(n));
      cpu_ops().add(want.data(), a.data(), b.data(), n);
      want = with_sentinel(want);
      std::vector<float> out1 = floats(n), outq = floats(n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, add_kernel<1>, out1.data(), a.data(), b.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, add_kernel<4>, outq.data(), a.data(), b.data(), n);
      EXPECT_TRUE(same_bits(out1, want)) << "one value a thread";
      EXPECT_TRUE(same_bits(outq, want)) << "four values a thread";
      std::vector<float> in_place = with_sentinel(a);  // out aliasing a, as the residual adds run
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, add_kernel<4>, in_place.data(), in_place.data(), b.data(), n);
      EXPECT_TRUE(same_bits(in_place, want)) << "in place";
    }
}

TEST(StreamingEmulated, RoundingIsTheCpusToBf16AtEitherWidth) {
  for (const int64_t n : kQuadLengths)
    for (const unsigned blocks : kQuadBlocks) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(blocks) + " blocks");
      std::vector<float> x = randn(size_t(n), 3, 5.f);
      if (n > 4) x[2] = 1.f + 0x1p-8f, x[3] = -0.f;  // a tie (to even: 1) and a signed zero
      std::vector<uint16_t> want = halves(n), got1 = halves(n), gotq = halves(n);
      cpu_bf16_matmul_ops().to_bf16(want.data(), x.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, round_to_bf16_kernel<1>, bf(got1), x.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, round_to_bf16_kernel<4>, bf(gotq), x.data(), n);
      EXPECT_EQ(got1, want) << "one value a thread";
      EXPECT_EQ(gotq, want) << "four values a thread";
    }
}

TEST(StreamingEmulated, AdamwFourValuesAThreadAreOneValueAThreadAndTheCpus) {
  const AdamwStep s{0.9f, 0.999f, 1e-8f, 1e-3f / 0.1f, std::sqrt(0.001f), 1.f - 1e-3f * 0.01f, 0.3712f};
  for (const int64_t n : kQuadLengths)
    for (const unsigned blocks : kQuadBlocks) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(blocks) + " blocks");
      const std::vector<float> p0 = randn(size_t(n), 4), g = randn(size_t(n), 5), m0 = randn(size_t(n), 6, 0.1f);
      std::vector<float> v0 = randn(size_t(n), 7, 0.1f);
      for (float& x : v0) x *= x;  // a second moment is >= 0
      struct State {
        std::vector<float> p, m, v;
        std::vector<uint16_t> p16;
      };
      auto fresh = [&] {
        return State{with_sentinel(p0), with_sentinel(m0), with_sentinel(v0), halves(n)};
      };
      State one = fresh(), quad = fresh(), quad_no16 = fresh();
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, adamw_kernel<1>, one.p.data(), bf(one.p16), g.data(), one.m.data(),
                  one.v.data(), n, s);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, adamw_kernel<4>, quad.p.data(), bf(quad.p16), g.data(), quad.m.data(),
                  quad.v.data(), n, s);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, adamw_kernel<4>, quad_no16.p.data(), nullptr, g.data(),
                  quad_no16.m.data(), quad_no16.v.data(), n, s);
      EXPECT_TRUE(same_bits(quad.p, one.p) && same_bits(quad.m, one.m) && same_bits(quad.v, one.v));
      EXPECT_EQ(quad.p16, one.p16);
      EXPECT_TRUE(same_bits(quad_no16.p, one.p)) << "without the bf16 copy";
      EXPECT_EQ(quad_no16.p16, halves(n));
      std::vector<uint16_t> want16 = halves(n);
      cpu_bf16_matmul_ops().to_bf16(want16.data(), quad.p.data(), n);
      EXPECT_EQ(quad.p16, want16) << "p16 is the updated p rounded";

      // The CPU's adamw with the same settings (lr 1e-3, bc1 0.1, bc2 0.001, weight decay 0.01).
      std::vector<float> p = p0, m = m0, v = v0;
      cpu_ops().adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f,
                      0.3712f);
      for (int64_t i = 0; i < n; i++) {
        ASSERT_NEAR(quad.p[size_t(i)], p[size_t(i)], 1e-6f * std::fabs(p[size_t(i)])) << "p at " << i;
        ASSERT_NEAR(quad.m[size_t(i)], m[size_t(i)], 1e-6f * std::fabs(m[size_t(i)])) << "m at " << i;
        ASSERT_NEAR(quad.v[size_t(i)], v[size_t(i)], 1e-6f * std::fabs(v[size_t(i)])) << "v at " << i;
      }
    }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
