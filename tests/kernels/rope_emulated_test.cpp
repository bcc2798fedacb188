// RoPE's CUDA training kernel (kernels/cuda/rope.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h, against the CPU table's rope_forward and rope_backward on the same
// values: the same bits, with the 32-bit index the launch takes for every real shape and with the
// 64-bit one it keeps for the rest, on grids smaller than the work (the loop wraps). What the
// emulation cannot show (the speed, a launch on a device) is for CudaOps.RopeForwardAndBackward.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/rope.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/same_bits.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

struct Case {
  int64_t N, heads, d;
  unsigned blocks;
};

template <int Sign, class Index>
std::vector<float> rotated(std::vector<float> x, const std::vector<int32_t>& pos, const std::vector<float>& cos,
                           const std::vector<float>& sin, const Case& c) {
  emu::launch({c.blocks, 1, 1}, 64, 0, rope_kernel<Sign, Index>, x.data(), pos.data(), cos.data(), sin.data(),
              Index(c.N), Index(c.heads), Index(c.d));
  return x;
}

using azr::kernels::testing::same_bits;

TEST(RopeEmulated, BothIndexTypesAreTheCpuRotationBitForBit) {
  constexpr int64_t kPositions = 40;
  for (const Case c : {Case{5, 3, 8, 1}, Case{7, 2, 64, 3}, Case{3, 14, 128, 2}, Case{9, 1, 2, 1}}) {
    SCOPED_TRACE("N " + std::to_string(c.N) + " heads " + std::to_string(c.heads) + " d " + std::to_string(c.d));
    std::vector<float> cos, sin;
    rope_tables(kPositions, c.d, cos, sin);
    const std::vector<float> x = randn(size_t(c.N * c.heads * c.d), 8);
    std::vector<int32_t> pos(static_cast<size_t>(c.N));
    for (int64_t n = 0; n < c.N; n++) pos[size_t(n)] = int32_t((11 * n + 3) % kPositions);
    std::vector<float> fwd = x, bwd = x;
    cpu_ops().rope_forward(fwd.data(), pos.data(), cos.data(), sin.data(), c.N, c.heads, c.d);
    cpu_ops().rope_backward(bwd.data(), pos.data(), cos.data(), sin.data(), c.N, c.heads, c.d);
    ASSERT_FALSE(same_bits(fwd, x));  // the rotation moved something
    EXPECT_TRUE(same_bits(rotated<1, uint32_t>(x, pos, cos, sin, c), fwd)) << "forward, 32-bit";
    EXPECT_TRUE(same_bits(rotated<1, int64_t>(x, pos, cos, sin, c), fwd)) << "forward, 64-bit";
    EXPECT_TRUE(same_bits(rotated<-1, uint32_t>(x, pos, cos, sin, c), bwd)) << "backward, 32-bit";
    EXPECT_TRUE(same_bits(rotated<-1, int64_t>(x, pos, cos, sin, c), bwd)) << "backward, 64-bit";
  }
}

// The launch's choice: 32 bits up to N x heads x d = 2^31 values, 64 past it.
TEST(RopeEmulated, TheLaunchTakes32BitIndicesUpTo2To31Values) {
  EXPECT_TRUE(rope_fits_32_bits(4 * 1024, 12, 128));
  EXPECT_TRUE(rope_fits_32_bits(int64_t(1) << 24, 1, 128));   // 2^31 exactly
  EXPECT_FALSE(rope_fits_32_bits((int64_t(1) << 24) + 1, 1, 128));
  EXPECT_FALSE(rope_fits_32_bits(int64_t(1) << 20, 64, 128));
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
