// SwiGLU's CUDA training kernels (kernels/cuda/swiglu.cuh), run on the CPU through
// tests/kernels/cuda_emulation.h: the four-values-a-thread kernels write the one-value kernels'
// bits, fp32 and bf16, forward and backward, at lengths that leave every tail of n % 4 and grids
// smaller than the work (the loops wrap), and nothing past n; both are the CPU table's ops to fp32
// rounding (their exp differs from the CPU's in the last bit at most). The emulation builds with
// the alignment sanitizer, so a 16-byte access through a pointer that is not 16-byte aligned stops
// the test. What it cannot show (the speed, a launch on a device) is for CudaOps' SwiGLU tests and
// cuda_ops_bench.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/swiglu.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "kernels/ops.h"
#include "tests/kernels/quads_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

// |got - want| <= 1e-6 |want| (a few ulps) for every value but the sentinel.
void expect_near_cpu(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size() + 1) << what;
  for (size_t i = 0; i < want.size(); i++)
    ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6f * std::fabs(want[i]) + 1e-30f) << what << " at " << i;
}

TEST(SwigluEmulated, ForwardQuadsAreTheOneValueKernelsBits) {
  for (const int64_t n : kQuadLengths)
    for (const unsigned blocks : kQuadBlocks) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(blocks) + " blocks");
      const std::vector<float> gate = randn(size_t(n), 3, 3.f), up = randn(size_t(n), 4);
      std::vector<float> out1 = floats(n), outq = floats(n), out_only = floats(n);
      std::vector<uint16_t> h1 = halves(n), hq = halves(n), h_only = halves(n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_forward_kernel<1>, out1.data(), bf(h1), gate.data(), up.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_forward_kernel<4>, outq.data(), bf(hq), gate.data(), up.data(), n);
      EXPECT_TRUE(same_bits(outq, out1)) << "fp32";
      EXPECT_EQ(hq, h1) << "bf16";
      EXPECT_TRUE(std::isnan(outq.back()) && hq.back() == kUnwritten16) << "written past n";
      // Either output alone (the training forward writes bf16 only).
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, swiglu_forward_kernel<4>, out_only.data(), nullptr, gate.data(),
                  up.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_forward_kernel<4>, nullptr, bf(h_only), gate.data(), up.data(), n);
      EXPECT_TRUE(same_bits(out_only, out1));
      EXPECT_EQ(h_only, h1);

      std::vector<float> want(static_cast<size_t>(n));
      cpu_ops().swiglu_forward(want.data(), gate.data(), up.data(), n);
      expect_near_cpu(outq, want, "against the CPU's swiglu_forward");
    }
}

TEST(SwigluEmulated, BackwardQuadsAreTheOneValueKernelsBits) {
  for (const int64_t n : kQuadLengths)
    for (const unsigned blocks : kQuadBlocks) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(blocks) + " blocks");
      const std::vector<float> dout = randn(size_t(n), 5), gate = randn(size_t(n), 6, 3.f), up = randn(size_t(n), 7);
      std::vector<float> dg1 = floats(n), du1 = floats(n), dgq = floats(n), duq = floats(n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_backward_kernel<1, float>, dg1.data(), du1.data(), dout.data(), gate.data(), up.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_backward_kernel<4, float>, dgq.data(), duq.data(), dout.data(), gate.data(), up.data(), n);
      EXPECT_TRUE(same_bits(dgq, dg1)) << "dgate";
      EXPECT_TRUE(same_bits(duq, du1)) << "dup";
      EXPECT_TRUE(std::isnan(dgq.back()) && std::isnan(duq.back())) << "written past n";

      std::vector<uint16_t> g1 = halves(n), u1 = halves(n), gq = halves(n), uq = halves(n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0,
                  swiglu_backward_kernel<1, __nv_bfloat16>, bf(g1), bf(u1), dout.data(), gate.data(), up.data(), n);
      emu::launch({blocks, 1, 1}, kQuadThreads, 0, swiglu_backward_kernel<4, __nv_bfloat16>, bf(gq), bf(uq),
                  dout.data(), gate.data(), up.data(), n);
      EXPECT_EQ(gq, g1) << "dgate, bf16";
      EXPECT_EQ(uq, u1) << "dup, bf16";
      EXPECT_TRUE(gq.back() == kUnwritten16 && uq.back() == kUnwritten16) << "written past n";

      std::vector<float> want_dg(static_cast<size_t>(n)), want_du(static_cast<size_t>(n));
      cpu_ops().swiglu_backward(want_dg.data(), want_du.data(), dout.data(), gate.data(), up.data(), n);
      expect_near_cpu(dgq, want_dg, "dgate against the CPU's swiglu_backward");
      expect_near_cpu(duq, want_du, "dup against the CPU's swiglu_backward");
    }
}

// The launch takes the four-value kernels only where every pointer is aligned for them.
// SwiGLU on bf16 rows [gate | up] of one GEMM over [Wg; Wu] (swiglu_rows_forward_kernel,
// swiglu_rows_backward_kernel), four values a thread and one, against the one-value kernels above
// on the halves' values gathered apart, bit for bit (those are held to the CPU's ops above); row counts
// past the grid's rows and row lengths past its threads (both loops wrap), I not a multiple of 4
// for the one-value kernels, nothing written past the output.
TEST(SwigluEmulated, RowsKernelsAreSwigluOnEachRowsHalves) {
  struct Case {
    int64_t R, I;
    unsigned bx, by;
  };
  for (const Case c : {Case{1, 40, 1, 1}, Case{9, 36, 1, 4}, Case{16, 64, 2, 16}, Case{5, 37, 1, 2}}) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " I " + std::to_string(c.I));
    std::vector<uint16_t> gate_up16(size_t(c.R * 2 * c.I));
    cpu_bf16_matmul_ops().to_bf16(gate_up16.data(), randn(gate_up16.size(), 9, 3.f).data(), int64_t(gate_up16.size()));
    std::vector<uint16_t> dout16(size_t(c.R * c.I));
    cpu_bf16_matmul_ops().to_bf16(dout16.data(), randn(dout16.size(), 10).data(), int64_t(dout16.size()));
    auto values = [](const std::vector<uint16_t>& x16) {  // the bf16 values, exactly
      std::vector<float> x(x16.size());
      for (size_t i = 0; i < x.size(); i++) {
        const uint32_t bits = uint32_t(x16[i]) << 16;
        std::memcpy(&x[i], &bits, sizeof bits);
      }
      return x;
    };
    const std::vector<float> gate_up = values(gate_up16), dout = values(dout16);
    std::vector<float> gate(size_t(c.R * c.I)), up(gate.size());
    for (int64_t r = 0; r < c.R; r++)
      for (int64_t j = 0; j < c.I; j++) {
        gate[size_t(r * c.I + j)] = gate_up[size_t(r * 2 * c.I + j)];
        up[size_t(r * c.I + j)] = gate_up[size_t(r * 2 * c.I + c.I + j)];
      }
    const int64_t n = c.R * c.I;
    std::vector<uint16_t> want(static_cast<size_t>(n)), dg(want.size()), du(want.size());
    emu::launch({1, 1, 1}, kQuadThreads, 0, swiglu_forward_kernel<1>, nullptr, bf(want), gate.data(), up.data(), n);
    emu::launch({1, 1, 1}, kQuadThreads, 0, swiglu_backward_kernel<1, __nv_bfloat16>, bf(dg), bf(du), dout.data(),
                gate.data(), up.data(), n);
    std::vector<uint16_t> want_rows(size_t(2 * c.R * c.I));
    for (int64_t r = 0; r < c.R; r++)
      for (int64_t j = 0; j < c.I; j++) {
        want_rows[size_t(r * 2 * c.I + j)] = dg[size_t(r * c.I + j)];
        want_rows[size_t(r * 2 * c.I + c.I + j)] = du[size_t(r * c.I + j)];
      }
    auto run = [&](auto v) {
      constexpr int V = decltype(v)::value;
      std::vector<uint16_t> out = halves(c.R * c.I), rows = halves(2 * c.R * c.I);
      const auto* in = reinterpret_cast<const __nv_bfloat16*>(gate_up16.data());
      emu::launch({c.bx, c.by, 1}, kQuadThreads, 0, swiglu_rows_forward_kernel<V>, bf(out), in, c.R, c.I);
      emu::launch({c.bx, c.by, 1}, kQuadThreads, 0, swiglu_rows_backward_kernel<V>, bf(rows),
                  reinterpret_cast<const __nv_bfloat16*>(dout16.data()), in, c.R, c.I);
      EXPECT_EQ(out.back(), kUnwritten16) << "forward written past R x I, V " << V;
      EXPECT_EQ(rows.back(), kUnwritten16) << "backward written past R x 2I, V " << V;
      out.pop_back(), rows.pop_back();
      EXPECT_EQ(out, want) << "forward, V " << V;
      EXPECT_EQ(rows, want_rows) << "backward, V " << V;
    };
    run(std::integral_constant<int, 1>{});
    if (c.I % 4 == 0) run(std::integral_constant<int, 4>{});
  }
}

TEST(SwigluEmulated, QuadsFitOnlyAlignedPointers) {
  alignas(16) float f[8] = {};
  alignas(16) uint16_t h[8] = {};
  EXPECT_TRUE(quads_fit({f, f + 4}, {h, h + 4}));
  EXPECT_TRUE(quads_fit({f, nullptr}, {nullptr}));  // an output not written
  EXPECT_FALSE(quads_fit({f, f + 1}, {h}));
  EXPECT_FALSE(quads_fit({f + 2}, {}));
  EXPECT_FALSE(quads_fit({f}, {h + 2}));
  EXPECT_TRUE(quads_fit({}, {h + 4}));
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
