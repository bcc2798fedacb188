// RoPE's CUDA training kernel (kernels/cuda/rope.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h, against the CPU table's rope_forward and rope_backward on the same
// values: the same bits, with the 32-bit index the launch takes for every real shape and with the
// 64-bit one it keeps for the rest, on grids smaller than the work (the loop wraps); and the
// training attention's operand kernels (RoPE with the roundings). What the
// emulation cannot show (the speed, a launch on a device) is for CudaOps.RopeForwardAndBackward.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/rope.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/column_parts_emulated.h"
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

// The training attention's operands (rope_round_qkv_kernel, rope_backward_round_kernel) against
// the CPU table's RoPE and a rounding to bf16, on rows split and joined by hand: the same bits,
// with both index types, on grids smaller than the work (backward: `chunks` grid rows of
// rows_per_chunk rows, fewer or more than cover N). Outputs start as garbage, so every value must
// be written. Backward's bias sums, added to values already there, in both forms (ordered: the
// same bits in every block order) against the CPU's column sums of the rows within fp32 rounding
// (other orders), or left untouched with no dbias.
struct QkvCase {
  int64_t N, heads, kv_heads, d;
  unsigned blocks, chunks;
  int64_t rows_per_chunk;
};

uint16_t bf16_bits_of(float x) { return __float2bfloat16_rn(x).bits; }

template <class Index>
void check_qkv_kernels(const QkvCase& c) {
  constexpr int64_t kPositions = 40;
  std::vector<float> cos, sin;
  rope_tables(kPositions, c.d, cos, sin);
  const int64_t qd = c.heads * c.d, kd = c.kv_heads * c.d, width = qd + 2 * kd;
  std::vector<int32_t> pos(static_cast<size_t>(c.N));
  for (int64_t n = 0; n < c.N; n++) pos[size_t(n)] = int32_t((7 * n + 5) % kPositions);
  const std::vector<float> rows = randn(size_t(c.N * width), 12);
  // The parts of the rows, compact; q and k rotated by the CPU's RoPE.
  std::vector<float> q(size_t(c.N * qd)), k(size_t(c.N * kd)), v(k.size());
  for (int64_t n = 0; n < c.N; n++) {
    std::copy_n(rows.begin() + n * width, qd, q.begin() + n * qd);
    std::copy_n(rows.begin() + n * width + qd, kd, k.begin() + n * kd);
    std::copy_n(rows.begin() + n * width + qd + kd, kd, v.begin() + n * kd);
  }
  std::vector<float> qr = q, kr = k;
  cpu_ops().rope_forward(qr.data(), pos.data(), cos.data(), sin.data(), c.N, c.heads, c.d);
  cpu_ops().rope_forward(kr.data(), pos.data(), cos.data(), sin.data(), c.N, c.kv_heads, c.d);
  std::vector<__nv_bfloat16> q16(q.size(), {0xFFFF}), k16(k.size(), {0xFFFF}), v16(v.size(), {0xFFFF});
  emu::launch({c.blocks, 1, 1}, 64, 0, rope_round_qkv_kernel<Index>, q16.data(), k16.data(), v16.data(), rows.data(),
              pos.data(), cos.data(), sin.data(), Index(c.N), Index(c.heads), Index(c.kv_heads), Index(c.d));
  for (size_t i = 0; i < q.size(); i++) ASSERT_EQ(q16[i].bits, bf16_bits_of(qr[i])) << "q " << i;
  for (size_t i = 0; i < k.size(); i++) ASSERT_EQ(k16[i].bits, bf16_bits_of(kr[i])) << "k " << i;
  for (size_t i = 0; i < v.size(); i++) ASSERT_EQ(v16[i].bits, bf16_bits_of(v[i])) << "v " << i;

  // Backward: q, k and v standing in for dq, dk and dv.
  std::vector<float> dq = q, dk = k, dq_r = q, dk_r = k;
  cpu_ops().rope_backward(dq_r.data(), pos.data(), cos.data(), sin.data(), c.N, c.heads, c.d);
  cpu_ops().rope_backward(dk_r.data(), pos.data(), cos.data(), sin.data(), c.N, c.kv_heads, c.d);
  std::vector<__nv_bfloat16> dqkv16(rows.size(), {0xFFFF});
  const std::vector<float> dbias0 = randn(size_t(width), 13);
  std::vector<float> dbias = dbias0, want_bias = dbias0;
  cpu_ops().matmul_backward(nullptr, nullptr, want_bias.data(), dq_r.data(), nullptr, nullptr, c.N, 0, qd);
  cpu_ops().matmul_backward(nullptr, nullptr, want_bias.data() + qd, dk_r.data(), nullptr, nullptr, c.N, 0, kd);
  cpu_ops().matmul_backward(nullptr, nullptr, want_bias.data() + qd + kd, v.data(), nullptr, nullptr, c.N, 0, kd);
  // The bias sums' two forms: each chunk's sums to its row of parts, added in chunk order by
  // add_column_parts_kernel (ordered), or to dbias with atomics; and no dbias at all.
  auto backward = [&](float* bias, bool ordered) {
    std::vector<float> parts(size_t(c.chunks) * size_t(width), NAN);  // NaN: a part never written shows
    dq = q, dk = k;
    emu::launch({c.blocks, c.chunks, 1}, 64, 0, rope_backward_round_kernel<Index>, dqkv16.data(), dq.data(),
                dk.data(), v.data(), bias, ordered ? parts.data() : nullptr, pos.data(), cos.data(), sin.data(),
                Index(c.N), Index(c.heads), Index(c.kv_heads), Index(c.d), Index(c.rows_per_chunk));
    if (ordered) testing::emulated_add_column_parts(bias, parts.data(), int64_t(c.chunks), width);
  };
  std::vector<float> atomic_bias = dbias0;
  backward(atomic_bias.data(), false);
  backward(nullptr, false);
  backward(dbias.data(), true);
  for (int64_t j = 0; j < width; j++) {
    double sum_abs = std::fabs(dbias0[size_t(j)]);
    for (int64_t n = 0; n < c.N; n++)
      sum_abs += std::fabs(j < qd ? dq_r[size_t(n * qd + j)]
                                  : j < qd + kd ? dk_r[size_t(n * kd + j - qd)] : v[size_t(n * kd + j - qd - kd)]);
    EXPECT_NEAR(dbias[size_t(j)], want_bias[size_t(j)], 2 * fp32_sum_error(c.N + 2, sum_abs) + 1e-30)
        << "bias column " << j;
    EXPECT_NEAR(atomic_bias[size_t(j)], want_bias[size_t(j)], 2 * fp32_sum_error(c.N + 1, sum_abs) + 1e-30)
        << "atomic bias column " << j;
  }
  for (const uint64_t seed : {1, 2}) {  // the ordered sums' bits whatever order the blocks run in
    const emu::ShuffledBlocks shuffled(seed);
    std::vector<float> again = dbias0;
    backward(again.data(), true);
    EXPECT_TRUE(same_bits(again, dbias)) << "block order " << seed;
  }
  EXPECT_TRUE(same_bits(dq, dq_r)) << "dq rotated back in place";
  EXPECT_TRUE(same_bits(dk, dk_r)) << "dk rotated back in place";
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t j = 0; j < width; j++) {
      const float want = j < qd ? dq_r[size_t(n * qd + j)]
                         : j < qd + kd ? dk_r[size_t(n * kd + j - qd)]
                                       : v[size_t(n * kd + j - qd - kd)];
      ASSERT_EQ(dqkv16[size_t(n * width + j)].bits, bf16_bits_of(want)) << "row " << n << " column " << j;
    }
}

TEST(RopeEmulated, AttentionOperandKernelsAreRopeAndRoundingBitForBit) {
  for (const QkvCase c : {QkvCase{5, 4, 2, 8, 1, 1, 2}, QkvCase{7, 3, 1, 64, 3, 2, 3}, QkvCase{3, 2, 2, 128, 2, 4, 1},
                          QkvCase{9, 2, 1, 16, 1, 1, 9}}) {
    SCOPED_TRACE("N " + std::to_string(c.N) + " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                 " d " + std::to_string(c.d));
    check_qkv_kernels<uint32_t>(c);
    check_qkv_kernels<int64_t>(c);
  }
}

// The backward's grid: every item along x, about 1,024 blocks through chunks of at least 8 rows
// that cover N.
TEST(RopeEmulated, TheBackwardGridCoversEveryRowInChunks) {
  const RopeBackwardGrid g = rope_backward_grid(4096, 1024);  // 1.5B at 4 x 1,024 tokens
  EXPECT_EQ(g.x, 4u);
  EXPECT_EQ(g.y, 256u);
  EXPECT_EQ(g.rows_per_chunk, 16);
  for (const auto& [N, per_row] : {std::pair<int64_t, int64_t>{1, 8}, {13, 300}, {1 << 20, 64}, {100000, 4096}}) {
    const RopeBackwardGrid h = rope_backward_grid(N, per_row);
    EXPECT_GE(int64_t(h.x) * 256, per_row);
    EXPECT_GE(int64_t(h.y) * h.rows_per_chunk, N);
    EXPECT_LE(h.y, 65535u);
    EXPECT_GE(h.y, 1u);
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
