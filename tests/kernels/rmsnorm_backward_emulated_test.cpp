// RMSNorm's CUDA backward (kernels/cuda/rmsnorm_backward.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h: dx, dw and dx's bf16 rounding in one pass, a block taking several
// rows, four values a thread and one. Against the CPU table's rmsnorm_backward (dx accumulated onto
// what dx held, dw onto what dw held), at row counts that leave a block part-filled or empty, at
// widths that leave threads idle or give them several groups, and with C % 4 != 0 (one value a
// thread only). dx16 is the CPU's to_bf16 of the kernel's own dx, bit for bit, and nothing is
// written past the rows. The register-held form (rmsnorm_backward_held_kernel) gives the loop
// form's bits at every width it takes, up to eight groups a thread. The emulation builds with the
// alignment sanitizer, so a 16-byte access through a pointer that is not 16-byte aligned stops the
// test. The ordered dw (each block's partial added in block order, ordered_sums.cuh) is the same
// bits in every order of the blocks. What it cannot show (the speed, the atomics of blocks
// running at once) is for CudaOps' RMSNorm tests and cuda_ops_bench.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/rmsnorm_backward.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "kernels/ops.h"
#include "tests/kernels/column_parts_emulated.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

constexpr uint16_t kUnwritten16 = 0xFFFF;  // a NaN's bits, which no rounding of these values gives

struct Inputs {
  std::vector<float> dout, x, w, rstd, dx0, dw0;
};

Inputs inputs(int64_t N, int64_t C, uint64_t seed) {
  Inputs in{randn(size_t(N * C), seed), randn(size_t(N * C), seed + 1, 2.f), randn(size_t(C), seed + 2),
            {}, randn(size_t(N * C), seed + 3, 0.5f), randn(size_t(C), seed + 4)};
  for (int64_t n = 0; n < N; n++) {  // each row's true rstd, as the forward saves it
    double ss = 0;
    for (int64_t c = 0; c < C; c++) ss += double(in.x[n * C + c]) * in.x[n * C + c];
    in.rstd.push_back(float(1.0 / std::sqrt(ss / double(C) + 1e-6)));
  }
  return in;
}

struct Result {
  std::vector<float> dx, dw;
  std::vector<uint16_t> dx16;  // N x C and a sentinel
};

// held: the register-held form at the K the launch (rmsnorm.cu) takes for this width; else the
// loop form.
// ordered: each block's dw partial to its row of a scratch, added in block order by
// add_column_parts_kernel (ordered_sums.cuh), as the launch does; else with atomics.
template <int V>
Result run(const Inputs& in, int64_t N, int64_t C, int64_t rows_per_block, unsigned blocks, bool with_dx16,
           bool held = false, bool ordered = false) {
  Result r{in.dx0, in.dw0, std::vector<uint16_t>(size_t(N * C) + 1, kUnwritten16)};
  const int64_t parts_rows = (N + rows_per_block - 1) / rows_per_block;  // the blocks that have rows
  std::vector<float> parts(size_t(parts_rows * C), NAN);  // NaN: a part never written shows
  r.dx.push_back(NAN);  // a sentinel past the rows
  const RmsnormBackwardArgs a{r.dx.data(),
                              with_dx16 ? reinterpret_cast<__nv_bfloat16*>(r.dx16.data()) : nullptr,
                              r.dw.data(),
                              in.dout.data(),
                              in.x.data(),
                              in.w.data(),
                              in.rstd.data(),
                              N,
                              C,
                              rows_per_block,
                              ordered ? parts.data() : nullptr};
  if (V == 4) {
    EXPECT_TRUE(rmsnorm_backward_quads_fit(a));
  }
  auto go = [&](auto with_parts) {
    constexpr bool kParts = decltype(with_parts)::value;
    if (!held)
      emu::launch({blocks, 1, 1}, kNormBackwardThreads, sizeof(float) * size_t(C), rmsnorm_backward_kernel<V, kParts>,
                  a);
    else
      EXPECT_TRUE((launch_held_form<V, kParts>(C / V, [&](auto kernel) {
        emu::launch({blocks, 1, 1}, kNormBackwardThreads, 0, kernel, a);
      }))) << "no held form for " << C / V << " groups";
  };
  if (ordered) {
    go(std::true_type{});
    testing::emulated_add_column_parts(r.dw.data(), parts.data(), parts_rows, C);
  } else {
    go(std::false_type{});
  }
  return r;
}

// |got - want| within fp32 rounding of sums of C terms in another order.
void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  float biggest = 0;
  for (float v : want) biggest = std::max(biggest, std::fabs(v));
  for (size_t i = 0; i < want.size(); i++)
    ASSERT_NEAR(got[i], want[i], 1e-5f * biggest) << what << " at " << i;
}

struct Case {
  int64_t N, C, rows_per_block;
};

// C 4: one group, most threads idle; 132: 33 quads; 1032: 258 quads, two or three a thread; 2560:
// 640 quads, five a thread, held as six; 4096: 1,024 quads, eight a thread, the most held (one value
// a thread: 4,096, the loop form). Rows: one block, blocks of 4 with the last part-filled (9 rows),
// and one row a block.
constexpr Case kCases[] = {{1, 4, 4}, {9, 132, 4}, {9, 132, 1}, {5, 1032, 2}, {3, 132, 8}, {3, 2560, 2},
                           {2, 4096, 1}};

TEST(RmsnormBackwardEmulated, OnePassIsTheCpuOpsGradientsAndRoundsItsOwnDx) {
  for (const Case& c : kCases)
    for (const int v : {4, 1}) {
      SCOPED_TRACE("N " + std::to_string(c.N) + ", C " + std::to_string(c.C) + ", " +
                   std::to_string(c.rows_per_block) + " rows a block, " + std::to_string(v) + " values a thread");
      const Inputs in = inputs(c.N, c.C, 10 + uint64_t(c.C));
      std::vector<float> want_dx = in.dx0, want_dw = in.dw0;
      cpu_ops().rmsnorm_backward(want_dx.data(), want_dw.data(), in.dout.data(), in.x.data(), in.w.data(),
                                 in.rstd.data(), c.N, c.C);
      // One block more than the rows need: it must write nothing.
      const unsigned blocks = unsigned((c.N + c.rows_per_block - 1) / c.rows_per_block) + 1;
      const Result got = v == 4 ? run<4>(in, c.N, c.C, c.rows_per_block, blocks, true)
                                : run<1>(in, c.N, c.C, c.rows_per_block, blocks, true);
      expect_near(got.dx, want_dx, "dx");
      expect_near(got.dw, want_dw, "dw");
      EXPECT_TRUE(std::isnan(got.dx.back())) << "dx written past the rows";
      std::vector<uint16_t> want16(size_t(c.N * c.C));
      cpu_bf16_matmul_ops().to_bf16(want16.data(), got.dx.data(), c.N * c.C);
      EXPECT_TRUE(std::equal(want16.begin(), want16.end(), got.dx16.begin())) << "dx16 is not dx rounded";
      EXPECT_EQ(got.dx16.back(), kUnwritten16) << "dx16 written past the rows";
      // Without dx16 the same dx and dw, bit for bit (the rounding is a store, not a change).
      const Result plain = v == 4 ? run<4>(in, c.N, c.C, c.rows_per_block, blocks, false)
                                  : run<1>(in, c.N, c.C, c.rows_per_block, blocks, false);
      EXPECT_EQ(plain.dx16, std::vector<uint16_t>(size_t(c.N * c.C) + 1, kUnwritten16));
      EXPECT_TRUE(std::equal(plain.dw.begin(), plain.dw.end(), got.dw.begin()));
      EXPECT_EQ(std::memcmp(plain.dx.data(), got.dx.data(), sizeof(float) * size_t(c.N * c.C)), 0);
      // The register-held form, where a width fits it: the loop form's bits, and nothing written
      // past the rows (its extra block returns before any load).
      if (rmsnorm_backward_held_groups(c.C / v) == 0) continue;
      for (const bool with_dx16 : {true, false}) {
        const Result held = v == 4 ? run<4>(in, c.N, c.C, c.rows_per_block, blocks, with_dx16, true)
                                   : run<1>(in, c.N, c.C, c.rows_per_block, blocks, with_dx16, true);
        const Result& loop = with_dx16 ? got : plain;
        EXPECT_EQ(std::memcmp(held.dx.data(), loop.dx.data(), sizeof(float) * size_t(c.N * c.C)), 0)
            << "held dx, dx16 " << with_dx16;
        EXPECT_TRUE(std::isnan(held.dx.back())) << "held dx written past the rows";
        EXPECT_EQ(std::memcmp(held.dw.data(), loop.dw.data(), sizeof(float) * size_t(c.C)), 0) << "held dw";
        EXPECT_EQ(held.dx16, loop.dx16) << "held dx16, dx16 " << with_dx16;
      }
    }
}

// The ordered dw (the launch's default): the CPU's gradient to fp32 rounding, the same dx bits as
// the atomic form, the same bits from the loop and held forms, and the same bits whatever order
// the blocks run in.
TEST(RmsnormBackwardEmulated, OrderedDwIsTheSameBitsInEveryBlockOrder) {
  for (const Case& c : kCases) {
    SCOPED_TRACE("N " + std::to_string(c.N) + ", C " + std::to_string(c.C) + ", " +
                 std::to_string(c.rows_per_block) + " rows a block");
    const Inputs in = inputs(c.N, c.C, 20 + uint64_t(c.C));
    std::vector<float> want_dx = in.dx0, want_dw = in.dw0;
    cpu_ops().rmsnorm_backward(want_dx.data(), want_dw.data(), in.dout.data(), in.x.data(), in.w.data(),
                               in.rstd.data(), c.N, c.C);
    const unsigned blocks = unsigned((c.N + c.rows_per_block - 1) / c.rows_per_block) + 1;  // one without rows
    const bool held = rmsnorm_backward_held_groups(c.C / 4) != 0;
    const Result got = run<4>(in, c.N, c.C, c.rows_per_block, blocks, true, false, true);
    expect_near(got.dw, want_dw, "dw");
    const Result atomic = run<4>(in, c.N, c.C, c.rows_per_block, blocks, true, false, false);
    EXPECT_EQ(std::memcmp(atomic.dx.data(), got.dx.data(), sizeof(float) * size_t(c.N * c.C)), 0) << "dx";
    if (held) {
      const Result h = run<4>(in, c.N, c.C, c.rows_per_block, blocks, true, true, true);
      EXPECT_EQ(std::memcmp(h.dw.data(), got.dw.data(), sizeof(float) * size_t(c.C)), 0) << "held dw";
    }
    for (const uint64_t seed : {1, 2}) {
      const emu::ShuffledBlocks shuffled(seed);
      for (const bool h : {false, true}) {
        if (h && !held) continue;
        const Result again = run<4>(in, c.N, c.C, c.rows_per_block, blocks, true, h, true);
        EXPECT_EQ(std::memcmp(again.dw.data(), got.dw.data(), sizeof(float) * size_t(c.C)), 0)
            << "block order " << seed << ", held " << h;
      }
    }
  }
}

// Which form a width takes: the fewest held groups that cover it, the loop form past 8 a thread.
TEST(RmsnormBackwardEmulated, TheHeldFormTakesTheWidthsItsRegistersHold) {
  EXPECT_EQ(rmsnorm_backward_held_groups(1), 1);
  EXPECT_EQ(rmsnorm_backward_held_groups(kNormBackwardThreads), 1);
  EXPECT_EQ(rmsnorm_backward_held_groups(kNormBackwardThreads + 1), 2);
  EXPECT_EQ(rmsnorm_backward_held_groups(1536 / 4), 3);  // 1.5B
  EXPECT_EQ(rmsnorm_backward_held_groups(896 / 4), 2);   // 0.5B
  EXPECT_EQ(rmsnorm_backward_held_groups(4 * kNormBackwardThreads + 1), 6);
  EXPECT_EQ(rmsnorm_backward_held_groups(3584 / 4), 8);  // 7B
  EXPECT_EQ(rmsnorm_backward_held_groups(8 * kNormBackwardThreads), 8);
  EXPECT_EQ(rmsnorm_backward_held_groups(8 * kNormBackwardThreads + 1), 0);
}

// A width that is not a multiple of 4 goes one value a thread, and so does any pointer that is not
// 16-byte aligned (8-byte for dx16); the one-value kernel is the CPU's gradient there too.
TEST(RmsnormBackwardEmulated, OddWidthsAndUnalignedRowsTakeOneValueAThread) {
  const int64_t N = 6, C = 130;
  const Inputs in = inputs(N, C, 7);
  std::vector<float> want_dx = in.dx0, want_dw = in.dw0;
  cpu_ops().rmsnorm_backward(want_dx.data(), want_dw.data(), in.dout.data(), in.x.data(), in.w.data(),
                             in.rstd.data(), N, C);
  Result got = run<1>(in, N, C, 4, 2, true);
  expect_near(got.dx, want_dx, "dx");
  expect_near(got.dw, want_dw, "dw");

  alignas(16) float f[8] = {};
  alignas(16) uint16_t h[8] = {};
  RmsnormBackwardArgs a{f, reinterpret_cast<__nv_bfloat16*>(h), f, f, f, f, f, 1, 132, 1};
  EXPECT_TRUE(rmsnorm_backward_quads_fit(a));
  a.C = 130;
  EXPECT_FALSE(rmsnorm_backward_quads_fit(a)) << "C % 4 != 0";
  a.C = 132, a.x = f + 1;
  EXPECT_FALSE(rmsnorm_backward_quads_fit(a)) << "x 4-byte aligned";
  a.x = f, a.dx16 = reinterpret_cast<__nv_bfloat16*>(h + 4);
  EXPECT_TRUE(rmsnorm_backward_quads_fit(a)) << "dx16 8-byte aligned";
  a.dx16 = reinterpret_cast<__nv_bfloat16*>(h + 2);
  EXPECT_FALSE(rmsnorm_backward_quads_fit(a)) << "dx16 4-byte aligned";
  a.dx16 = nullptr;
  EXPECT_TRUE(rmsnorm_backward_quads_fit(a)) << "no dx16";
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
