// The CUDA tensor-core attention kernels (kernels/cuda/attention_tensor_core.cuh) run on the CPU
// through tests/kernels/cuda_emulation.h, a stand-in for the device, and are checked against the
// host emulation of their arithmetic (tests/kernels/tensor_core_reference.h), as the GPU test
// checks them on a GPU. Here that covers the kernels' own logic on every CI run: the tiling over
// queries and keys, the causal and padding masks, GQA's head mapping, the two forward passes,
// the backward's recomputed probabilities, and the shared-memory staging and warp
// synchronisation. It cannot cover the hardware (WMMA's fragment layouts, alignment, the
// shared-memory opt-in): that is the GPU test's (CudaTensorCoreAttention).
//
// Also the whole bf16 model with its training attention on these kernels (an op table that runs
// them through the emulation), held to the GPU test's model checks (bf16_model_checks.h).
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/attention_mma_backward.cuh"
#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/mma_sync.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/bf16_model_checks.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/same_bits.h"
#include "tests/kernels/tensor_core_reference.h"

namespace azr::kernels::cuda_detail::tensor_core {
namespace {

using testing::AttnCase;
using testing::attn_case_name;

// The kernels launched as attention_tensor_core.cu launches them, through the emulation, with the
// op table's signatures; backward's row dots D as attention.cu's attention_row_dots computes them.
// Kernels: the WMMA ones, or with Mma those on mma.sync (attention_mma.cuh); MmaMaskEveryTile the
// same with the causal mask on every tile (their MaskEveryTile flag), as they ran before they
// skipped the tiles it cannot touch; Mma32Rows the mma.sync forward with 32 query rows a warp
// (M = 2: 128-query blocks over 32-key tiles; cuda_set_attention_warp_rows), the same backward;
// MmaMerged the Mma forward and the merged backward (attention_mma_backward.cuh: one kernel adds
// dQ, dK and dV with atomics; cuda_set_attention_backward).
enum class Kernels { Wmma, Mma, MmaMaskEveryTile, Mma32Rows, MmaMerged };

// attention_tensor_core.cu's round_rows: compact bf16 copies of the rows, the mma.sync kernels'
// inputs; and their dims (k and v compact).
std::vector<bf16> round_rows(const float* src, const AttentionShape& sh, int64_t row, int64_t seq_stride) {
  std::vector<bf16> dst(size_t(sh.B * sh.T * row));
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t i = 0; i < sh.T * row; i++) dst[size_t(b * sh.T * row + i)] = __float2bfloat16_rn(src[b * seq_stride + i]);
  return dst;
}

TcDims compact_kv(TcDims s, const AttentionShape& sh, int64_t D) {
  s.kv_seq_stride = sh.T * sh.kv_heads * D;
  return s;
}

// out16 (the mma.sync kernels only; may be null): the forward's bf16 rounding of its output.
template <int D, Kernels F = Kernels::Wmma>
void emulated_forward_out16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& sh, bf16* out16) {
  const TcDims s{sh.T, sh.heads, sh.heads / sh.kv_heads, sh.kv_seq_stride, sh.kv_heads * D, sh.lengths,
                 1.f / std::sqrt(float(D))};
  if constexpr (F != Kernels::Wmma) {
    const auto q16 = round_rows(q, sh, sh.heads * D, sh.T * sh.heads * D);
    const auto k16 = round_rows(k, sh, sh.kv_heads * D, sh.kv_seq_stride);
    const auto v16 = round_rows(v, sh, sh.kv_heads * D, sh.kv_seq_stride);
    constexpr bool every = F == Kernels::MmaMaskEveryTile;
    constexpr int M = F == Kernels::Mma32Rows ? 2 : 1;
    constexpr int64_t rows = kForwardBlockRows<M>;
    const EmuDim3 grid{unsigned((sh.T + rows - 1) / rows), unsigned(sh.heads), unsigned(sh.B)};
    emu::launch(grid, kWarps * kWarp, kMmaForwardSmem<D, M>, mma_forward_kernel<D, every, M>, out, out16, lse,
                q16.data(), k16.data(), v16.data(), compact_kv(s, sh, D));
  } else {
    const EmuDim3 grid{unsigned((sh.T + kBlockRows - 1) / kBlockRows), unsigned(sh.heads), unsigned(sh.B)};
    emu::launch(grid, kWarps * kWarp, kForwardSmem<D>, tc_forward_kernel<D>, out, lse, q, k, v, s);
  }
}

template <int D, Kernels F = Kernels::Wmma>
void emulated_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                      const AttentionShape& sh) {
  emulated_forward_out16<D, F>(out, lse, q, k, v, sh, nullptr);
}

template <int D, Kernels F = Kernels::Wmma>
void emulated_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                       const float* q, const float* k, const float* v, const AttentionShape& sh) {
  const TcDims s{sh.T, sh.heads, sh.heads / sh.kv_heads, sh.kv_seq_stride, sh.kv_heads * D, sh.lengths,
                 1.f / std::sqrt(float(D))};
  std::vector<float> Drow(size_t(sh.B * sh.heads * sh.T), 0.f);  // attention_row_dots
  for (int64_t b = 0; b < sh.B; b++)
    for (int64_t t = 0; t < (sh.lengths ? sh.lengths[b] : sh.T); t++)
      for (int64_t h = 0; h < sh.heads; h++) {
        float acc = 0.f;
        for (int64_t i = 0; i < D; i++) {
          const size_t at = size_t(((b * sh.T + t) * sh.heads + h) * D + i);
          acc += dout[at] * out[at];
        }
        Drow[size_t((b * sh.heads + h) * sh.T + t)] = acc;
      }
  const float* D_ = Drow.data();
  const unsigned tiles = unsigned((sh.T + kBlockRows - 1) / kBlockRows), threads = kWarps * kWarp;
  const EmuDim3 grid{tiles, unsigned(sh.heads), unsigned(sh.B)};
  const size_t share = size_t(sh.B * sh.T * sh.heads * D);
  std::vector<float> shares(2 * share, NAN);  // every element the sum reads must be written
  if constexpr (F != Kernels::Wmma) {
    constexpr bool every = F == Kernels::MmaMaskEveryTile;
    const auto q16 = round_rows(q, sh, sh.heads * D, sh.T * sh.heads * D);
    const auto do16 = round_rows(dout, sh, sh.heads * D, sh.T * sh.heads * D);
    const auto k16 = round_rows(k, sh, sh.kv_heads * D, sh.kv_seq_stride);
    const auto v16 = round_rows(v, sh, sh.kv_heads * D, sh.kv_seq_stride);
    const TcDims s16 = compact_kv(s, sh, D);
    if constexpr (F == Kernels::MmaMerged) {
      // dq, dk and dv zeroed first (each sequence's T rows), as attention_tensor_core.cu does; no
      // shares, no group sum.
      std::fill(dq, dq + share, 0.f);
      for (int64_t b = 0; b < sh.B; b++) {
        std::fill_n(dk + b * sh.kv_seq_stride, sh.T * sh.kv_heads * D, 0.f);
        std::fill_n(dv + b * sh.kv_seq_stride, sh.T * sh.kv_heads * D, 0.f);
      }
      emu::launch(grid, threads, kMmaMergedSmem<D>, mma_dkdv_kernel<D, false, true>, dk, dv, dq, do16.data(), lse,
                  D_, q16.data(), k16.data(), v16.data(), s16, sh.kv_seq_stride);
      return;
    }
    emu::launch(grid, threads, kMmaDqSmem<D>, mma_dq_kernel<D, every>, dq, do16.data(), lse, D_, q16.data(),
                k16.data(), v16.data(), s16);
    emu::launch(grid, threads, kMmaDkDvSmem<D>, mma_dkdv_kernel<D, every>, shares.data(), shares.data() + share,
                nullptr, do16.data(), lse, D_, q16.data(), k16.data(), v16.data(), s16, int64_t(0));
  } else {
    emu::launch(grid, threads, kDqSmem<D>, tc_dq_kernel<D>, dq, dout, lse, D_, q, k, v, s);
    emu::launch(grid, threads, kDkDvSmem<D>, tc_dkdv_kernel<D>, shares.data(), shares.data() + share, dout, lse, D_, q,
                k, v, s);
  }
  emu::launch({4, 1, 1}, 64, 0, tc_group_sum_kernel, dk, dv, shares.data(), shares.data() + share, s, sh.B,
              int64_t(D));
}

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

// Forward, then backward on the forward's outputs, with the launch geometry of
// attention_tensor_core.cu. Outputs start as garbage (7), so every element must be written.
template <int D, Kernels F = Kernels::Wmma>
Outputs run_kernels(const AttnCase& c, const float* q, const float* k, const float* v, const float* dout) {
  const int64_t qn = c.B * c.T * c.H * D, kvn = c.B * c.T * c.KV * D;
  Outputs o{std::vector<float>(size_t(qn), 7.f), std::vector<float>(size_t(c.B * c.H * c.T), 7.f),
            std::vector<float>(size_t(qn), 7.f), std::vector<float>(size_t(kvn), 7.f),
            std::vector<float>(size_t(kvn), 7.f)};
  const AttentionShape s{c.B, c.T, c.H, c.KV, D, c.T * c.KV * D, c.lengths.empty() ? nullptr : c.lengths.data()};
  emulated_forward<D, F>(o.out.data(), o.lse.data(), q, k, v, s);
  emulated_backward<D, F>(o.dq.data(), o.dk.data(), o.dv.data(), dout, o.out.data(), o.lse.data(), q, k, v, s);
  return o;
}

// run_kernels on the case's random inputs (the seeds of every test here).
template <Kernels F>
Outputs run_case(const AttnCase& c) {
  const int64_t qn = c.B * c.T * c.H * c.d, kvn = c.B * c.T * c.KV * c.d;
  const auto q = testing::randn(size_t(qn), 61, c.qk_scale), k = testing::randn(size_t(kvn), 62, c.qk_scale),
             v = testing::randn(size_t(kvn), 63), dout = testing::randn(size_t(qn), 64);
  return c.d == 64 ? run_kernels<64, F>(c, q.data(), k.data(), v.data(), dout.data())
                   : run_kernels<128, F>(c, q.data(), k.data(), v.data(), dout.data());
}

// Every output of two runs, bit for bit.
void expect_same_bits(const Outputs& a, const Outputs& b) {
  EXPECT_TRUE(testing::same_bits(a.out, b.out)) << "out";
  EXPECT_TRUE(testing::same_bits(a.lse, b.lse)) << "lse";
  EXPECT_TRUE(testing::same_bits(a.dq, b.dq)) << "dq";
  EXPECT_TRUE(testing::same_bits(a.dk, b.dk)) << "dk";
  EXPECT_TRUE(testing::same_bits(a.dv, b.dv)) << "dv";
}

std::vector<float> widened(const uint16_t* x16, int64_t n) {
  std::vector<float> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    const uint32_t bits = uint32_t(x16[i]) << 16;
    std::memcpy(&r[size_t(i)], &bits, sizeof bits);
  }
  return r;
}

// Ops::attention_forward_w16 and attention_backward_w16 on the emulated kernels, as
// attention_tensor_core.cu runs them: the mma.sync forward writes out16 itself; the WMMA kernels
// read fp32 (the widened values) and out16 is their output rounded. The kernels' rounding of a
// widened value is the value.
template <int D, Kernels F>
void emulated_forward_w16(float* out, uint16_t* out16, float* lse, const uint16_t* q16, const uint16_t* k16,
                          const uint16_t* v16, const AttentionShape& sh) {
  const int64_t qn = sh.B * sh.T * sh.heads * D, kvn = sh.B * sh.kv_seq_stride;
  const auto q = widened(q16, qn), k = widened(k16, kvn), v = widened(v16, kvn);
  if constexpr (F == Kernels::Wmma) {
    emulated_forward<D, F>(out, lse, q.data(), k.data(), v.data(), sh);
    for (int64_t i = 0; i < qn; i++) out16[i] = __float2bfloat16_rn(out[i]).bits;
  } else {
    emulated_forward_out16<D, F>(out, lse, q.data(), k.data(), v.data(), sh, reinterpret_cast<bf16*>(out16));
  }
}

template <int D, Kernels F>
void emulated_backward_w16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                           const uint16_t* q16, const uint16_t* k16, const uint16_t* v16, const AttentionShape& sh) {
  const int64_t qn = sh.B * sh.T * sh.heads * D, kvn = sh.B * sh.kv_seq_stride;
  const auto q = widened(q16, qn), k = widened(k16, kvn), v = widened(v16, kvn);
  emulated_backward<D, F>(dq, dk, dv, dout, out, lse, q.data(), k.data(), v.data(), sh);
}

// The Bf16 table with its training attention on the emulated kernels, through both pairs of ops:
// attention_forward and attention_backward, and the _w16 ones a training step takes
// (Transformer::attention16); `fused` false leaves those out, so the step takes the first pair.
template <Kernels F, bool fused = true>
const Ops& emulated_tensor_core_ops() {
  static const Ops table = [] {
    Ops t = cpu_bf16_matmul_ops();
    t.name = F == Kernels::Mma         ? "cpu+bf16, mma.sync attention emulated"
             : F == Kernels::Mma32Rows ? "cpu+bf16, mma.sync attention (32 rows a warp) emulated"
             : F == Kernels::MmaMerged ? "cpu+bf16, mma.sync attention (merged backward) emulated"
                                       : "cpu+bf16, tensor-core attention emulated";
    t.attention_forward = emulated_forward<64, F>;
    t.attention_backward = emulated_backward<64, F>;
    t.attention_forward_w16 = emulated_forward_w16<64, F>;
    t.attention_backward_w16 = emulated_backward_w16<64, F>;
    return fused ? t : model::testing::without_attention16(t);
  }();
  return table;
}

// The model checks the GPU runs as CudaModel.TensorCoreAttention*, here on the emulated kernels.
TEST(TensorCoreEmulatedModel, ComputesTheBf16Model) {
  const model::ModelConfig c = model::testing::config_named("untied");
  ASSERT_EQ(c.head_dim, 64);
  model::testing::expect_bf16_model_matches_cpu(c, emulated_tensor_core_ops<Kernels::Wmma>(), cpu_ops(), std::nullopt);
}

TEST(TensorCoreEmulatedModel, SamplerLogProbsMatchTheLearners) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_sampler_matches_learner(c, emulated_tensor_core_ops<Kernels::Wmma>(), cpu_ops(),
                                                      std::nullopt);
}

// The same with the kernels on mma.sync: the forward's one pass rounds p against the running
// max, not the final lse, so its output differs from the WMMA forward's, within the same bounds.
TEST(TensorCoreEmulatedModel, ComputesTheBf16ModelWithTheMmaKernels) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_model_matches_cpu(c, emulated_tensor_core_ops<Kernels::Mma>(), cpu_ops(), std::nullopt);
}

TEST(TensorCoreEmulatedModel, SamplerLogProbsMatchTheLearnersWithTheMmaKernels) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_sampler_matches_learner(c, emulated_tensor_core_ops<Kernels::Mma>(), cpu_ops(),
                                                      std::nullopt);
}

// And with the forward's 32 query rows a warp: the learner's log-probs stay at the sampler's.
TEST(TensorCoreEmulatedModel, SamplerLogProbsMatchTheLearnersWithThe32RowsForward) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_sampler_matches_learner(c, emulated_tensor_core_ops<Kernels::Mma32Rows>(), cpu_ops(),
                                                      std::nullopt);
}

// And with the merged backward: the whole model's gradients (through the _w16 ops; the other pair
// reaches the same kernel by the same emulated launch).
TEST(TensorCoreEmulatedModel, ComputesTheBf16ModelWithTheMergedBackward) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_model_matches_cpu(c, emulated_tensor_core_ops<Kernels::MmaMerged>(), cpu_ops(),
                                                std::nullopt);
}

// And through attention_forward and attention_backward, the ops a training step took before the
// _w16 ones (and still takes on a table without them).
TEST(TensorCoreEmulatedModel, ComputesTheBf16ModelWithTheMmaKernelsUnfused) {
  const model::ModelConfig c = model::testing::config_named("untied");
  model::testing::expect_bf16_model_matches_cpu(c, emulated_tensor_core_ops<Kernels::Mma, false>(), cpu_ops(),
                                                std::nullopt);
}

class TensorCoreEmulated : public ::testing::TestWithParam<AttnCase> {};

// The case's kernels (forward, then backward on its outputs) against the emulated arithmetic.
template <Kernels F>
void expect_kernels_match_the_emulated_arithmetic(const AttnCase& c) {
  const int64_t qn = c.B * c.T * c.H * c.d, kvn = c.B * c.T * c.KV * c.d;
  const auto q = testing::randn(size_t(qn), 61, c.qk_scale), k = testing::randn(size_t(kvn), 62, c.qk_scale),
             v = testing::randn(size_t(kvn), 63), dout = testing::randn(size_t(qn), 64);
  const testing::TensorCoreReference want =
      testing::emulate_tensor_core_attention(q, k, v, dout, c.B, c.T, c.H, c.KV, c.d, c.lengths);
  const Outputs got = c.d == 64 ? run_kernels<64, F>(c, q.data(), k.data(), v.data(), dout.data())
                                : run_kernels<128, F>(c, q.data(), k.data(), v.data(), dout.data());
  testing::expect_matches_tensor_core_reference(want, got.out, got.lse, got.dq, got.dk, got.dv);
}

TEST_P(TensorCoreEmulated, KernelsMatchTheEmulatedArithmetic) {
  expect_kernels_match_the_emulated_arithmetic<Kernels::Wmma>(GetParam());
}

// The kernels on mma.sync against the same emulated arithmetic: their masks, the forward's online
// rescaling and two-term P, the backward's recomputed P and dS, the dK/dV kernel's 32-query
// tiles, and every fragment they build from mma_sync.cuh's layouts.
TEST_P(TensorCoreEmulated, MmaKernelsMatchTheEmulatedArithmetic) {
  expect_kernels_match_the_emulated_arithmetic<Kernels::Mma>(GetParam());
}

// The mma.sync forward with 32 query rows a warp (two m-tiles, 128-query blocks, 32-key tiles)
// against the same arithmetic: its online softmax rescales at other tile boundaries than the
// 16-row forward's, so the two agree only as each agrees with the emulation. The shapes give it
// partial 128-query blocks (T = 65, 70, 200), a sequence of one token, an empty one (a padding
// block), and at T = 200 warps whose queries end before the block's last tiles (skipped).
TEST_P(TensorCoreEmulated, Mma32RowsForwardMatchesTheEmulatedArithmetic) {
  expect_kernels_match_the_emulated_arithmetic<Kernels::Mma32Rows>(GetParam());
}

// The merged backward against the same arithmetic: dS^T through shared memory into dQ's product
// (its .trans reading of queries x keys), each warp's column share, the adds of every key block
// whose keys a query sees, zeros from the warps that skip a tile, each query head's dK and dV added
// into its kv head's rows (GQA), and rows at or past a sequence's end left as the zeroing left
// them.
TEST_P(TensorCoreEmulated, MmaMergedBackwardMatchesTheEmulatedArithmetic) {
  expect_kernels_match_the_emulated_arithmetic<Kernels::MmaMerged>(GetParam());
}

// Merging changes only the order of the sums: dq adds the same bf16 terms by key block (each
// share scaled, where the dQ kernel scales once), dk and dv add the query heads' shares by atomics
// where the group sum adds them in head order. So each agrees with the split backward to fp32
// rounding: here within 1e-6 of its largest magnitude (the first five shapes measured 7e-8 at
// most for dq; the emulation runs blocks in order, so dk and dv came out bit for bit, which a GPU
// need not).
TEST_P(TensorCoreEmulated, MergingTheBackwardChangesOnlyTheSumsOrder) {
  const Outputs split = run_case<Kernels::Mma>(GetParam()), merged = run_case<Kernels::MmaMerged>(GetParam());
  testing::expect_same_to_fp32_sums(merged.dq, split.dq, "dq");
  testing::expect_same_to_fp32_sums(merged.dk, split.dk, "dk");
  testing::expect_same_to_fp32_sums(merged.dv, split.dv, "dv");
}

// The mma.sync kernels skip the mask on tiles it cannot touch (attention_mma.cuh,
// rows_see_whole_tile): every output bit for bit as with the mask on every tile. The shapes have
// such tiles in each kernel (T = 200: in the forward and dQ from the second block, in dK/dV below
// the diagonal), ragged and padded rows beside them, and tails that must stay masked.
TEST_P(TensorCoreEmulated, SkippingTheMasksOfWholeTilesChangesNoBit) {
  expect_same_bits(run_case<Kernels::Mma>(GetParam()), run_case<Kernels::MmaMaskEveryTile>(GetParam()));
}

// The mma.sync forward's out16 (attention_forward_w16's o-projection input) is its output rounded
// to bf16, padding rows included (zeros), and writing it changes no bit of out or lse. Outputs
// start as garbage.
TEST_P(TensorCoreEmulated, MmaForwardsRoundedOutputIsItsOutputRounded) {
  const AttnCase c = GetParam();
  const int64_t qn = c.B * c.T * c.H * c.d, kvn = c.B * c.T * c.KV * c.d;
  const auto q = testing::randn(size_t(qn), 61, c.qk_scale), k = testing::randn(size_t(kvn), 62, c.qk_scale),
             v = testing::randn(size_t(kvn), 63);
  const AttentionShape s{c.B, c.T, c.H, c.KV, c.d, c.T * c.KV * c.d, c.lengths.empty() ? nullptr : c.lengths.data()};
  std::vector<float> out(size_t(qn), 7.f), lse(size_t(c.B * c.H * c.T), 7.f), out_b = out, lse_b = lse;
  std::vector<bf16> out16(size_t(qn), bf16{0xFFFF});
  if (c.d == 64) {
    emulated_forward_out16<64, Kernels::Mma>(out.data(), lse.data(), q.data(), k.data(), v.data(), s, out16.data());
    emulated_forward<64, Kernels::Mma>(out_b.data(), lse_b.data(), q.data(), k.data(), v.data(), s);
  } else {
    emulated_forward_out16<128, Kernels::Mma>(out.data(), lse.data(), q.data(), k.data(), v.data(), s, out16.data());
    emulated_forward<128, Kernels::Mma>(out_b.data(), lse_b.data(), q.data(), k.data(), v.data(), s);
  }
  EXPECT_TRUE(testing::same_bits(out, out_b));
  EXPECT_TRUE(testing::same_bits(lse, lse_b));
  for (size_t i = 0; i < out.size(); i++) ASSERT_EQ(out16[i].bits, __float2bfloat16_rn(out[i]).bits) << i;
}

// The tiles load 16-byte aligned rows four floats at a time and other rows one float at a time
// (load_tile); the same values rounded the same way, so both give the same outputs bit for bit.
// Inputs one float past alignment take the scalar path (a float4 load there would stop the test:
// the emulated tests build with -fsanitize=alignment).
TEST(TensorCoreEmulated, UnalignedInputsGiveTheAlignedOutputsBitForBit) {
  const AttnCase c{2, 70, 4, 2, 64, {70, 5}};
  const int64_t qn = c.B * c.T * c.H * c.d, kvn = c.B * c.T * c.KV * c.d;
  const auto q = testing::randn(size_t(qn), 71), k = testing::randn(size_t(kvn), 72), v = testing::randn(size_t(kvn), 73),
             dout = testing::randn(size_t(qn), 74);
  auto shifted = [](const std::vector<float>& x) {
    std::vector<float> y(x.size() + 4);
    std::copy(x.begin(), x.end(), y.begin() + 1);
    return y;
  };
  const auto q1 = shifted(q), k1 = shifted(k), v1 = shifted(v), d1 = shifted(dout);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(q.data()) % 16, 0u);  // the vector path, for the reference
  const Outputs aligned = run_kernels<64>(c, q.data(), k.data(), v.data(), dout.data());
  const Outputs unaligned = run_kernels<64>(c, q1.data() + 1, k1.data() + 1, v1.data() + 1, d1.data() + 1);
  expect_same_bits(aligned, unaligned);
  // The kernels on mma.sync read their tiles through the same load_tile.
  expect_same_bits(run_kernels<64, Kernels::Mma>(c, q.data(), k.data(), v.data(), dout.data()),
                   run_kernels<64, Kernels::Mma>(c, q1.data() + 1, k1.data() + 1, v1.data() + 1, d1.data() + 1));
}

// mma_sync.cuh's stand-ins compose into matrix products: A (16 x 16) times B given as rows of
// k (B^T, read as attention_mma.cuh reads k) and as rows of n (read with .trans, as it reads v),
// each into two 16 x 8 C tiles, against the host's products of the same bf16 values. A wrong
// lane mapping in the stand-in scrambles rows or columns here.
constexpr int kProdLd = 24;  // bf16 stride: 48 bytes, rows 16-byte aligned as ldmatrix requires

void mma_product_kernel(float* c_bt, float* c_b, const bf16* a, const bf16* bt, const bf16* b) {
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4, mat = lane / 8, mat_row = lane % 8;
  uint32_t af[4], kf[4], vf[4];
  mma::ldmatrix_x4(af, a + ((mat % 2) * 8 + mat_row) * kProdLd + (mat / 2) * 8);
  mma::ldmatrix_x4(kf, bt + ((mat / 2) * 8 + mat_row) * kProdLd + (mat % 2) * 8);
  mma::ldmatrix_x4_trans(vf, b + ((mat % 2) * 8 + mat_row) * kProdLd + (mat / 2) * 8);
  float c[2][4] = {}, d[2][4] = {};
  mma::mma_bf16(c[0], af, kf[0], kf[1]);
  mma::mma_bf16(c[1], af, kf[2], kf[3]);
  mma::mma_bf16(d[0], af, vf[0], vf[1]);
  mma::mma_bf16(d[1], af, vf[2], vf[3]);
  for (int n = 0; n < 2; n++)
    for (int e = 0; e < 4; e++) {
      const int row = g + (e / 2) * 8, col = 8 * n + 2 * t + e % 2;
      c_bt[row * 16 + col] = c[n][e];
      c_b[row * 16 + col] = d[n][e];
    }
}

TEST(MmaSyncEmulation, LdmatrixAndMmaFormMatrixProducts) {
  struct alignas(16) Tile {
    bf16 x[16 * kProdLd];
  };
  Tile a{}, bt{}, b{};
  const auto av = testing::randn(256, 81), bv = testing::randn(256, 82);
  std::vector<float> a16(256), b16(256);  // b16[k * 16 + n]: B's element (k, n)
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      a16[size_t(i * 16 + j)] = round_to_bf16(av[size_t(i * 16 + j)]);
      b16[size_t(i * 16 + j)] = round_to_bf16(bv[size_t(i * 16 + j)]);
      a.x[i * kProdLd + j] = __float2bfloat16_rn(a16[size_t(i * 16 + j)]);
      b.x[i * kProdLd + j] = __float2bfloat16_rn(b16[size_t(i * 16 + j)]);  // row k holds (k, 0..15)
      bt.x[j * kProdLd + i] = __float2bfloat16_rn(b16[size_t(i * 16 + j)]);  // row n holds (0..15, n)
    }
  std::vector<float> c_bt(256, NAN), c_b(256, NAN);
  emu::launch({1, 1, 1}, 32, 0, mma_product_kernel, c_bt.data(), c_b.data(), a.x, bt.x, b.x);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      double want = 0, mag = 0;
      for (int kk = 0; kk < 16; kk++) {
        want += double(a16[size_t(i * 16 + kk)]) * b16[size_t(kk * 16 + j)];
        mag += std::fabs(double(a16[size_t(i * 16 + kk)]) * b16[size_t(kk * 16 + j)]);
      }
      EXPECT_NEAR(c_bt[size_t(i * 16 + j)], want, 1e-6 * mag) << "B read as rows of k, C(" << i << ", " << j << ")";
      EXPECT_NEAR(c_b[size_t(i * 16 + j)], want, 1e-6 * mag) << "B read with .trans, C(" << i << ", " << j << ")";
    }
}

// pack_bf16x2 puts its first value in the low half (PTX: the lower column's element), rounded
// to nearest even: 1 is 0x3F80; -2 is 0xC000; 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and
// goes to 1's even mantissa.
TEST(MmaSyncEmulation, PackPutsTheFirstValueInTheLowHalf) {
  EXPECT_EQ(mma::pack_bf16x2(1.f, -2.f), 0xC0003F80u);
  EXPECT_EQ(mma::pack_bf16x2(1.f + 0x1p-8f, 0.f), 0x00003F80u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TensorCoreEmulated,
    ::testing::Values(AttnCase{2, 70, 4, 2, 64, {70, 5}},       // GQA 2:1, ragged: two query tiles, a partial one
                      AttnCase{1, 65, 2, 1, 128, {}},           // head dim 128, one row past a tile
                      AttnCase{3, 20, 2, 2, 64, {20, 1, 0}},    // no GQA; a 1-token and an empty sequence
                      AttnCase{1, 70, 2, 1, 64, {}, 4.f},       // peaked softmax: the online max matters
                      AttnCase{1, 200, 2, 1, 64, {}, 4.f},      // 4 key tiles: the running max rescales 3 times
                      AttnCase{1, 90, 6, 1, 128, {83}}),        // 1.5B's 6:1 grouping and head dim, ragged
    attn_case_name);

}  // namespace
}  // namespace azr::kernels::cuda_detail::tensor_core
