// The few-row decode kernels of the CUDA backend (kernels/cuda/gemv.cuh) run on the CPU through
// tests/kernels/cuda_emulation.h, a stand-in for the device, so that their logic runs in CI,
// where there is no GPU: the item mapping (outputs, RoPE pairs, gate/up pairs), the split of a row
// over 1 to 8 warps and the meeting of their sums in shared memory, the 16-byte and the scalar
// loads, rows below the compiled row count, and the epilogues (bias, RoPE, the bf16 cache store,
// SwiGLU). Checked against independent truths: the GEMV against a double-precision product of its
// bf16 operands, the fused ops against the CPU table's unfused ops (kernels/cpu/bf16_matmul.cpp).
// And what each launch prefetches before its wait for the kernels before it (programmatic
// dependent launch): each weight row once, nothing else. What the emulation cannot show (alignment
// faults, speed, the launch overlap itself) is for the GPU tests (CudaGemv, CudaModel) and the
// benchmarks.
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/gemv.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail::gemv {
namespace {

using namespace azr::kernels::testing;

constexpr int kSplits[] = {1, 2, 8};  // none, a pair, a whole block per item

struct LinearCase {
  int R;
  int64_t IC, OC;
  bool bias, vec8;
};

// A weight matrix a kernel reads: `rows` rows of `row_bytes` from `base`.
struct WeightRows {
  const void* base;
  int64_t rows;
};

// What the launch prefetched before its wait (programmatic dependent launch): with 16-byte loads,
// every row of every weight matrix exactly once, from its start, and whole (these rows are all
// under 1 KiB, the smallest share of a block's prefetch budget), 16-byte aligned and a whole number
// of 16 bytes (cp.async.bulk.prefetch's contract), and nothing outside the weights: the step's
// activations are written by the kernels before, and may not be touched before the wait. With
// scalar loads (rows not 16-byte aligned) nothing.
void expect_weights_prefetched(const std::vector<emu::Prefetch>& got, std::vector<WeightRows> weights,
                               int64_t row_bytes, bool vec8) {
  if (!vec8) {
    EXPECT_TRUE(got.empty()) << got.size() << " prefetches with scalar loads";
    return;
  }
  ASSERT_LT(row_bytes, 1024);
  std::vector<std::vector<int>> seen;
  int64_t rows = 0;
  for (const WeightRows& w : weights) seen.emplace_back(size_t(w.rows), 0), rows += w.rows;
  EXPECT_EQ(int64_t(got.size()), rows) << "prefetches against weight rows";
  for (const emu::Prefetch& p : got) {
    EXPECT_EQ(p.begin % 16, 0u);
    EXPECT_EQ(p.bytes % 16, 0u);
    EXPECT_EQ(int64_t(p.bytes), row_bytes) << "a whole row";
    bool inside = false;
    for (size_t m = 0; m < weights.size(); m++) {
      const auto base = reinterpret_cast<uintptr_t>(weights[m].base);
      if (p.begin < base || p.begin >= base + uintptr_t(weights[m].rows * row_bytes)) continue;
      inside = true;
      EXPECT_EQ((p.begin - base) % uintptr_t(row_bytes), 0u) << "a row's start";
      seen[m][size_t((p.begin - base) / uintptr_t(row_bytes))]++;
    }
    EXPECT_TRUE(inside) << "a prefetch outside the weights";
  }
  for (size_t m = 0; m < weights.size(); m++)
    for (size_t r = 0; r < seen[m].size(); r++) EXPECT_EQ(seen[m][r], 1) << "matrix " << m << " row " << r;
}

// out = x w^T + bias on every split, against sum_k x[k] w[k] in double over the bf16 values: the
// fp32 sums may differ from it by at most IC + 32 roundings of the sum of magnitudes.
TEST(GemvEmulated, LinearIsTheProductOfItsBf16OperandsOnEverySplit) {
  const LinearCase cases[] = {{1, 64, 19, true, true},  {2, 48, 24, false, true}, {3, 40, 17, true, true},
                              {5, 37, 9, true, false},  {8, 16, 8, true, true},   {4, 64, 12, false, false},
                              {7, 200, 5, true, true}};
  for (const LinearCase& c : cases)
    for (int split : kSplits) {
      SCOPED_TRACE("R " + std::to_string(c.R) + " IC " + std::to_string(c.IC) + " OC " + std::to_string(c.OC) +
                   " split " + std::to_string(split) + (c.vec8 ? " 16-byte loads" : " scalar loads"));
      const std::vector<uint16_t> x16 = bf16_bits(randn(size_t(c.R * c.IC), 1 + c.IC));
      const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(c.OC * c.IC), 2 + c.OC, 0.2f));
      const std::vector<float> bias = randn(size_t(c.OC), 3);
      // One row more than R, NaN: a row at or past R must not be written.
      std::vector<float> out(size_t((c.R + 1) * c.OC), NAN);
      dispatch(c.R, c.vec8, [&](auto rows_c, auto vec_c) {
        constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
        emu::launch({blocks_for(c.OC, split), 1, 1}, kThreads, kSmemBytes<1, kRows>, gemv_linear_kernel<kRows, kVec>,
                    out.data(), DecodeInput{.x16 = x16.data()}, w16.data(), c.bias ? bias.data() : nullptr, nullptr,
                    c.R, c.IC, c.OC, split, DecodeAhead{}, 1);
      });
      expect_weights_prefetched(emu::take_prefetches(), {{w16.data(), c.OC}}, c.IC * 2, c.vec8);
      for (int r = 0; r < c.R; r++)
        for (int64_t o = 0; o < c.OC; o++) {
          double ref = c.bias ? bias[size_t(o)] : 0.0, mag = std::fabs(ref);
          for (int64_t k = 0; k < c.IC; k++) {
            const double p = double(bf16_value(x16[size_t(r * c.IC + k)])) * bf16_value(w16[size_t(o * c.IC + k)]);
            ref += p;
            mag += std::fabs(p);
          }
          const float got = out[size_t(r * c.OC + o)];
          ASSERT_LE(std::fabs(got - ref), double(c.IC + 32) * std::ldexp(mag, -24)) << "row " << r << " out " << o;
        }
      for (int64_t o = 0; o < c.OC; o++) ASSERT_TRUE(std::isnan(out[size_t(c.R * c.OC + o)])) << "row R written";
    }
}

// q, k and v in one launch (bias, RoPE on q and k, k and v into the bf16 cache) against the CPU
// table's unfused ops on the same inputs (gemv_cases.h says how close).
TEST(GemvEmulated, QkvWithRopeAndCacheStoreIsTheUnfusedOps) {
  const std::pair<QkvCase, bool> cases[] = {{{1, 40, 4, 2, 8, true}, true},
                                            {{3, 36, 4, 2, 8, true}, false},
                                            {{8, 32, 2, 1, 16, false}, true},
                                            {{5, 24, 6, 3, 4, true}, true}};
  for (const auto& [c, vec8] : cases)
    for (int split : kSplits) {
      SCOPED_TRACE("R " + std::to_string(c.R) + " H " + std::to_string(c.H) + " d " + std::to_string(c.d) +
                   " split " + std::to_string(split));
      const QkvInputs in(c);
      std::vector<float> q(size_t(c.R * in.qd), NAN);
      std::vector<uint16_t> kc = in.cache0, vc = in.cache0;
      const DecodeQkv a = in.args(q.data(), kc.data(), vc.data());
      const QkvArgs args = qkv_args(a);
      const int64_t items = (c.heads + 2 * c.kv_heads) * (c.d / 2);
      dispatch(c.R, vec8, [&](auto rows_c, auto vec_c) {
        constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
        emu::launch({blocks_for(items, split), 1, 1}, kThreads, kSmemBytes<2, kRows>, gemv_qkv_kernel<kRows, kVec>,
                    args, c.R, split, 1);
      });
      expect_weights_prefetched(emu::take_prefetches(),
                                {{a.wq, c.heads * c.d}, {a.wk, c.kv_heads * c.d}, {a.wv, c.kv_heads * c.d}}, c.H * 2,
                                vec8);
      in.expect_matches(q, kc, vc);
    }
}

// bf16(silu(gate) * up) from the two products in one launch, against the CPU table's GEMMs and
// swiglu_forward_w16: each output within a bf16 step and the sums' error of the CPU's
// (expect_bf16_within), nearly all identical; the last two cases with gate and up rounded to bf16
// first (round_gate_up), as the CPU table then rounds them.
TEST(GemvEmulated, GateUpSwigluIsTheUnfusedOps) {
  const std::pair<GateUpCase, bool> cases[] = {{{1, 24, 37, true}, true},        {{2, 20, 11, true}, false},
                                               {{5, 64, 9, false}, true},        {{8, 16, 16, true}, true},
                                               {{1, 24, 37, true, true}, true},  {{3, 20, 11, false, true}, false}};
  for (const auto& [c, vec8] : cases)
    for (int split : kSplits) {
      SCOPED_TRACE("R " + std::to_string(c.R) + " IC " + std::to_string(c.IC) + " I " + std::to_string(c.I) +
                   " split " + std::to_string(split));
      const GateUpInputs in(c);
      std::vector<uint16_t> out(size_t((c.R + 1) * c.I), 0xFFFF);  // a row past R, NaN, stays NaN
      dispatch(c.R, vec8, [&](auto rows_c, auto vec_c) {
        constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
        emu::launch({blocks_for(c.I, split), 1, 1}, kThreads, kSmemBytes<2, kRows>,
                    gemv_gate_up_kernel<kRows, kVec>, reinterpret_cast<__nv_bfloat16*>(out.data()),
                    DecodeInput{.x16 = in.x16.data()}, in.wg.data(), in.gate_bias(), in.wu.data(), in.up_bias(), c.R,
                    c.IC, c.I, split, c.round, 1);
      });
      expect_weights_prefetched(emu::take_prefetches(), {{in.wg.data(), c.I}, {in.wu.data(), c.I}}, c.IC * 2, vec8);
      expect_bf16_within(std::vector<uint16_t>(out.begin(), out.begin() + c.R * c.I), in.ref, nullptr, in.slack, 0.95,
                         "output");
      for (size_t i = in.ref.size(); i < out.size(); i++) ASSERT_EQ(out[i], 0xFFFF) << "row R written";
    }
}

// A test kernel: the products' norm prologue alone, one block writing the normalized rows to
// `out` where the products keep them in shared memory.
void normalize_rows_kernel(DecodeInput in, int rows, int64_t k, __nv_bfloat16* out) {
  block_input(in, rows, k, out);
}

// The rows a few-row product normalizes for itself (DecodeInput with a norm): the prologue's rows
// against the CPU table's rmsnorm_forward_w16 (each within one bf16 step, nearly all identical:
// the two sum the squares in different orders), and every product on normalized inputs bit for
// bit the same product on the prologue's rows given as x16: the rows land in shared memory where
// the products read them, on every split, row count and load width. Also returns the rows.
struct NormedRows {
  std::vector<float> x, norm;
  std::vector<uint16_t> rows16;
  DecodeInput in;
  NormedRows(int R, int64_t k, uint64_t seed) {
    x = randn(size_t(R * k), seed, 3.f);
    norm = randn(size_t(k), seed + 1);
    in = {.x = x.data(), .norm = norm.data(), .eps = 1e-6f};
    rows16.assign(size_t(R * k), 0xFFFF);
    emu::launch({1, 1, 1}, kThreads, 0, normalize_rows_kernel, in, R, k,
                reinterpret_cast<__nv_bfloat16*>(rows16.data()));
    std::vector<uint16_t> cpu(rows16.size());
    std::vector<float> rstd(static_cast<size_t>(R));
    cpu_bf16_matmul_ops().rmsnorm_forward_w16(nullptr, cpu.data(), rstd.data(), x.data(), norm.data(), R, k, in.eps);
    expect_bf16_within(rows16, cpu, nullptr, std::vector<double>(cpu.size(), 0.0), 0.97, "normalized entry");
  }
};

TEST(GemvEmulated, NormalizedInputsAreTheNormKernelsRowsInEveryProduct) {
  const std::pair<LinearCase, int> cases[] = {{{1, 64, 19, true, true}, 8}, {{3, 40, 17, true, true}, 2},
                                              {{5, 37, 9, false, false}, 1}, {{8, 48, 8, true, true}, 1}};
  for (const auto& [c, split] : cases) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " IC " + std::to_string(c.IC) + " split " + std::to_string(split));
    const NormedRows n(c.R, c.IC, uint64_t(40 + c.IC));
    const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(2 * c.OC * c.IC), 2 + c.OC, 0.2f));
    const std::vector<float> bias = randn(size_t(2 * c.OC), 3);
    const float* b = c.bias ? bias.data() : nullptr;
    const DecodeInput given{.x16 = n.rows16.data()};
    dispatch(c.R, c.vec8, [&](auto rows_c, auto vec_c) {
      constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
      // The linear map.
      std::vector<float> normed(size_t(c.R * c.OC), NAN), plain = normed;
      for (auto [in, out] : {std::pair{n.in, &normed}, std::pair{given, &plain}})
        emu::launch({blocks_for(c.OC, split), 1, 1}, kThreads, kSmemBytes<1, kRows> + input_smem_bytes(in, c.R, c.IC),
                    gemv_linear_kernel<kRows, kVec>, out->data(), in, w16.data(), b, nullptr, c.R, c.IC, c.OC, split,
                    DecodeAhead{}, 1);
      EXPECT_EQ(std::memcmp(normed.data(), plain.data(), normed.size() * sizeof(float)), 0) << "linear";
      // Gate, up and SwiGLU (gate and up rounded to bf16 in the cases with biases, so both forms run).
      std::vector<uint16_t> normed16(size_t(c.R * c.OC), 0xFFFF), plain16 = normed16;
      for (auto [in, out] : {std::pair{n.in, &normed16}, std::pair{given, &plain16}})
        emu::launch({blocks_for(c.OC, split), 1, 1}, kThreads, kSmemBytes<2, kRows> + input_smem_bytes(in, c.R, c.IC),
                    gemv_gate_up_kernel<kRows, kVec>, reinterpret_cast<__nv_bfloat16*>(out->data()), in, w16.data(),
                    b, w16.data() + c.OC * c.IC, c.bias ? b + c.OC : nullptr, c.R, c.IC, c.OC, split, c.bias, 1);
      EXPECT_EQ(normed16, plain16) << "gate, up and SwiGLU";
      emu::take_prefetches();
    });
  }
  // q, k and v: the rows normalized in the op against the same rows given.
  for (const QkvCase& c : {QkvCase{1, 40, 4, 2, 8, true}, QkvCase{6, 32, 2, 1, 16, false}}) {
    SCOPED_TRACE("qkv R " + std::to_string(c.R));
    const QkvInputs in(c);
    const NormedRows n(c.R, c.H, uint64_t(60 + c.H));
    std::vector<float> q[2];
    std::vector<uint16_t> kc[2], vc[2];
    for (int i = 0; i < 2; i++) {
      q[i].assign(size_t(c.R * in.qd), NAN), kc[i] = in.cache0, vc[i] = in.cache0;
      DecodeQkv a = in.args(q[i].data(), kc[i].data(), vc[i].data());
      a.in = i == 0 ? n.in : DecodeInput{.x16 = n.rows16.data()};
      const QkvArgs args = qkv_args(a);
      const int64_t items = (c.heads + 2 * c.kv_heads) * (c.d / 2);
      const int split = split_for(items, c.H);
      dispatch(c.R, true, [&](auto rows_c, auto vec_c) {
        constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
        emu::launch({blocks_for(items, split), 1, 1}, kThreads, kSmemBytes<2, kRows> + input_smem_bytes(a.in, c.R, c.H),
                    gemv_qkv_kernel<kRows, kVec>, args, c.R, split, 1);
      });
    }
    emu::take_prefetches();
    EXPECT_EQ(std::memcmp(q[0].data(), q[1].data(), q[0].size() * sizeof(float)), 0) << "q";
    EXPECT_EQ(kc[0], kc[1]) << "k cache";
    EXPECT_EQ(vc[0], vc[1]) << "v cache";
  }
}

// Weights held before the wait (HeldPacks; DecodeLayersTuning::hold_first_weights, on by default):
// each product with its threads' first two packs of each row loaded before the wait is the same
// product bit for bit, on every split and row count, on bf16 rows and on the fp32 stream the kernel
// normalizes; with rows that the held packs cover (IC 64 and 136) and rows longer than one warp's
// (IC 1000: 125 packs, of which a warp's lanes hold 64 and two warps' all). Its L2 prefetch skips
// what is held: a row of 2,000 bytes on one warp is asked for from byte 1,024 (2 packs of 16 bytes
// for 32 lanes), its other 976 bytes, both under the share of a block's 16 KiB budget (2,048 a row
// alone, 1,024 for a gate and up pair); on 2 or 8 warps, or shorter rows, nothing.
TEST(GemvEmulated, HeldWeightsAreTheSameProductsAndThePrefetchSkipsThem) {
  const int64_t OC = 11;
  for (const auto& [R, IC] : {std::pair<int, int64_t>{1, 1000}, {3, 1000}, {1, 64}, {8, 136}})
    for (int split : kSplits) {
      SCOPED_TRACE("R " + std::to_string(R) + " IC " + std::to_string(IC) + " split " + std::to_string(split));
      const NormedRows n(R, IC, uint64_t(90 + IC));
      const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(2 * OC * IC), 91, 0.2f));
      const std::vector<float> bias = randn(size_t(2 * OC), 92);
      const int64_t row_bytes = IC * 2;
      const bool skips = IC == 1000 && split == 1;
      // Each weight row asked for once, from byte 1,024, its 976 bytes; else nothing.
      const auto expect_prefetch_skips_held = [&](int64_t rows) {
        const std::vector<emu::Prefetch> got = emu::take_prefetches();
        if (!skips) {
          EXPECT_TRUE(got.empty()) << got.size() << " prefetches of rows the held packs cover";
          return;
        }
        std::vector<int> seen(size_t(rows), 0);
        const auto base = reinterpret_cast<uintptr_t>(w16.data());
        for (const emu::Prefetch& p : got) {
          ASSERT_GE(p.begin, base);
          ASSERT_EQ((p.begin - base) % uintptr_t(row_bytes), 1024u) << "from where the held packs end";
          EXPECT_EQ(p.bytes, 976u);
          const size_t row = size_t((p.begin - base) / uintptr_t(row_bytes));
          ASSERT_LT(row, seen.size());
          seen[row]++;
        }
        for (size_t r = 0; r < seen.size(); r++) EXPECT_EQ(seen[r], 1) << "row " << r;
      };
      for (const DecodeInput& in : {n.in, DecodeInput{.x16 = n.rows16.data()}}) {
        const size_t smem1 = input_smem_bytes(in, R, IC);
        dispatch(R, true, [&](auto rows_c, auto) {
          constexpr int kRows = decltype(rows_c)::value;
          std::vector<float> out[2];
          std::vector<uint16_t> out16[2];
          for (const bool hold : {false, true}) {
            out[hold].assign(size_t(R * OC), NAN);
            emu::launch({blocks_for(OC, split), 1, 1}, kThreads, kSmemBytes<1, kRows> + smem1,
                        hold ? gemv_linear_kernel<kRows, 8, true> : gemv_linear_kernel<kRows, 8, false>,
                        out[hold].data(), in, w16.data(), bias.data(), nullptr, R, IC, OC, split, DecodeAhead{}, 1);
            if (hold)
              expect_prefetch_skips_held(OC);
            else
              emu::take_prefetches();
            out16[hold].assign(size_t(R * OC), 0xFFFF);
            emu::launch({blocks_for(OC, split), 1, 1}, kThreads, kSmemBytes<2, kRows> + smem1,
                        hold ? gemv_gate_up_kernel<kRows, 8, true> : gemv_gate_up_kernel<kRows, 8, false>,
                        reinterpret_cast<__nv_bfloat16*>(out16[hold].data()), in, w16.data(), bias.data(),
                        w16.data() + OC * IC, bias.data() + OC, R, IC, OC, split, true, 1);
            if (hold)
              expect_prefetch_skips_held(2 * OC);
            else
              emu::take_prefetches();
          }
          EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0) << "linear";
          EXPECT_EQ(out16[0], out16[1]) << "gate, up and SwiGLU";
        });
      }
    }
  // q, k and v (RoPE pairs over 3 projections), at a row longer than a warp's held packs.
  for (const QkvCase& c : {QkvCase{1, 1000, 2, 1, 8, true}, QkvCase{4, 40, 4, 2, 8, true}})
    for (int split : kSplits) {
      SCOPED_TRACE("qkv R " + std::to_string(c.R) + " H " + std::to_string(c.H) + " split " + std::to_string(split));
      const QkvInputs in(c);
      std::vector<float> q[2];
      std::vector<uint16_t> kc[2], vc[2];
      const int64_t items = (c.heads + 2 * c.kv_heads) * (c.d / 2);
      for (const bool hold : {false, true}) {
        q[hold].assign(size_t(c.R * in.qd), NAN), kc[hold] = in.cache0, vc[hold] = in.cache0;
        const QkvArgs args = qkv_args(in.args(q[hold].data(), kc[hold].data(), vc[hold].data()));
        dispatch(c.R, true, [&](auto rows_c, auto) {
          constexpr int kRows = decltype(rows_c)::value;
          emu::launch({blocks_for(items, split), 1, 1}, kThreads, kSmemBytes<2, kRows>,
                      hold ? gemv_qkv_kernel<kRows, 8, true> : gemv_qkv_kernel<kRows, 8, false>, args, c.R, split, 1);
        });
      }
      emu::take_prefetches();
      EXPECT_EQ(std::memcmp(q[0].data(), q[1].data(), q[0].size() * sizeof(float)), 0) << "q";
      EXPECT_EQ(kc[0], kc[1]) << "k cache";
      EXPECT_EQ(vc[0], vc[1]) << "v cache";
      in.expect_matches(q[1], kc[1], vc[1]);
    }
}

// Programmatic launch's contract (kernels/cuda/device_or_emulation.cuh): a product reads what the
// kernel before it writes (its input rows, bf16 or the fp32 stream it normalizes, and the residual
// it adds) only after its wait, though its threads load their first weights before it (held). Those
// writes are poisoned (NaN) until every thread of the block has reached its wait
// (emu::PriorGridWrites), and the outputs must be the plain run's bit for bit, for each kernel
// holding weights and taking turns or not, on every split.
TEST(GemvEmulated, ProductsReadWhatTheKernelBeforeWritesOnlyAfterTheirWait) {
  const int R = 2;
  const int64_t IC = 1000, OC = 40;
  const NormedRows n(R, IC, 120);
  std::vector<float> x = n.x, residual = randn(size_t(R * OC), 121, 4.f);
  std::vector<uint16_t> x16 = n.rows16;
  const std::vector<float> x_made = x, residual_made = residual;
  const std::vector<uint16_t> x16_made = x16;
  const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(2 * OC * IC), 122, 0.2f));
  const std::vector<float> bias = randn(size_t(2 * OC), 123);
  emu::PriorGridWrites writes{[&] {
                                std::fill(x.begin(), x.end(), NAN);
                                std::fill(residual.begin(), residual.end(), NAN);
                                std::fill(x16.begin(), x16.end(), uint16_t(0x7FC0));
                              },
                              [&] { x = x_made, residual = residual_made, x16 = x16_made; }};
  for (int split : kSplits)
    for (const bool normed : {false, true}) {
      SCOPED_TRACE("split " + std::to_string(split) + (normed ? ", normalized" : ", bf16 rows"));
      const DecodeInput in = normed ? DecodeInput{.x = x.data(), .norm = n.norm.data(), .eps = n.in.eps}
                                    : DecodeInput{.x16 = x16.data()};
      const size_t smem1 = input_smem_bytes(in, R, IC);
      const unsigned blocks = blocks_for(OC, split);
      // kernel 0: held, one turn a block; 1: not held; 2: taking 2 turns.
      const auto run = [&](int kernel, std::vector<float>& out, std::vector<uint16_t>& out16) {
        const unsigned grid = kernel == 2 ? (blocks + 1) / 2 : blocks;
        const int turns = kernel == 2 ? 2 : 1;
        emu::launch({grid, 1, 1}, kThreads, kSmemBytes<1, 2> + smem1,
                    kernel == 0   ? gemv_linear_kernel<2, 8, true>
                    : kernel == 1 ? gemv_linear_kernel<2, 8, false>
                                  : gemv_linear_kernel<2, 8, false, true>,
                    out.data(), in, w16.data(), bias.data(), residual.data(), R, IC, OC, split, DecodeAhead{}, turns);
        emu::launch({grid, 1, 1}, kThreads, kSmemBytes<2, 2> + smem1,
                    kernel == 0   ? gemv_gate_up_kernel<2, 8, true>
                    : kernel == 1 ? gemv_gate_up_kernel<2, 8, false>
                                  : gemv_gate_up_kernel<2, 8, false, true>,
                    reinterpret_cast<__nv_bfloat16*>(out16.data()), in, w16.data(), bias.data(), w16.data() + OC * IC,
                    bias.data() + OC, R, IC, OC, split, false, turns);
      };
      for (int kernel = 0; kernel < 3; kernel++) {
        std::vector<float> want(size_t(R * OC), NAN), got = want;
        std::vector<uint16_t> want16(size_t(R * OC), 0xFFFF), got16 = want16;
        run(kernel, want, want16);
        {
          const emu::PriorGridWritesScope scope(writes);
          run(kernel, got, got16);
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "linear, kernel " << kernel;
        EXPECT_EQ(got16, want16) << "gate, up and SwiGLU, kernel " << kernel;
      }
      emu::take_prefetches();
    }
  // q, k and v on the normalized stream, held.
  const QkvInputs qkv(QkvCase{R, IC, 2, 1, 8, true});
  std::vector<float> q[2];
  std::vector<uint16_t> kc[2], vc[2];
  for (int i = 0; i < 2; i++) {
    q[i].assign(size_t(R * qkv.qd), NAN), kc[i] = qkv.cache0, vc[i] = qkv.cache0;
    DecodeQkv a = qkv.args(q[i].data(), kc[i].data(), vc[i].data());
    a.in = DecodeInput{.x = x.data(), .norm = n.norm.data(), .eps = n.in.eps};
    const int64_t items = (2 + 2 * 1) * 4;
    const std::optional<emu::PriorGridWritesScope> scope =
        i == 1 ? std::optional<emu::PriorGridWritesScope>(std::in_place, writes) : std::nullopt;
    emu::launch({blocks_for(items, 8), 1, 1}, kThreads, kSmemBytes<2, 2> + input_smem_bytes(a.in, R, IC),
                gemv_qkv_kernel<2, 8, true>, qkv_args(a), R, 8, 1);
  }
  emu::take_prefetches();
  EXPECT_EQ(std::memcmp(q[0].data(), q[1].data(), q[0].size() * sizeof(float)), 0) << "q";
  EXPECT_EQ(kc[0], kc[1]) << "k cache";
  EXPECT_EQ(vc[0], vc[1]) << "v cache";
}

// One wave of blocks taking turns (DecodeLayersTuning::one_wave): one_wave's geometry by hand at
// 1.5B's shapes on an H200 (132 multiprocessors: gate/up 6 blocks each, the linear map 8), and each
// kernel that takes turns, with its blocks' items taken 2 and 3 to a block (the last block short of
// items), is the same product bit for bit as one block each, on bf16 and normalized rows. Without
// the barrier between turns, a warp's next sums overwrite the ones the turn before still reads.
TEST(GemvEmulated, OneWaveOfBlocksTakingTurnsIsTheSameProducts) {
  const auto expect_wave = [](unsigned blocks, int64_t resident, unsigned want_blocks, int want_turns) {
    const Wave w = one_wave(blocks, resident);
    EXPECT_EQ(w.blocks, want_blocks) << blocks << " blocks, " << resident << " resident";
    EXPECT_EQ(w.turns, want_turns) << blocks << " blocks, " << resident << " resident";
  };
  expect_wave(1120, 792, 560, 2);     // gate/up: 8,960 items, 8 a block
  expect_wave(1536, 1056, 768, 2);    // down: 1,536 items, a block each
  expect_wave(18992, 1056, 1056, 18);  // the LM head: 151,936 items; 18,992 / 18 = 1,055.1
  expect_wave(512, 660, 512, 1);      // q/k/v: fewer than the device holds
  expect_wave(1056, 1056, 1056, 1);
  expect_wave(7, 0, 7, 1);            // nothing known of the device

  const int64_t OC = 40;
  for (const auto& [R, IC] : {std::pair<int, int64_t>{1, 1000}, {3, 64}})
    for (int split : {1, 8}) {
      const unsigned item_blocks = blocks_for(OC, split);
      SCOPED_TRACE("R " + std::to_string(R) + " IC " + std::to_string(IC) + " split " + std::to_string(split) + ", " +
                   std::to_string(item_blocks) + " blocks");
      const NormedRows n(R, IC, uint64_t(95 + IC));
      const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(2 * OC * IC), 96, 0.2f));
      const std::vector<float> bias = randn(size_t(2 * OC), 97);
      for (const DecodeInput& in : {n.in, DecodeInput{.x16 = n.rows16.data()}}) {
        const size_t smem1 = input_smem_bytes(in, R, IC);
        dispatch(R, true, [&](auto rows_c, auto) {
          constexpr int kRows = decltype(rows_c)::value;
          std::vector<float> want(size_t(R * OC), NAN);
          std::vector<uint16_t> want16(size_t(R * OC), 0xFFFF);
          // The kernels of one turn a block, then the ones that take turns.
          const auto run = [&](auto turns_c, unsigned blocks, int turns, std::vector<float>& out,
                               std::vector<uint16_t>& out16) {
            constexpr bool kTurns = decltype(turns_c)::value;
            emu::launch({blocks, 1, 1}, kThreads, kSmemBytes<1, kRows> + smem1,
                        gemv_linear_kernel<kRows, 8, false, kTurns>, out.data(), in, w16.data(), bias.data(), nullptr,
                        R, IC, OC, split, DecodeAhead{}, turns);
            emu::launch({blocks, 1, 1}, kThreads, kSmemBytes<2, kRows> + smem1,
                        gemv_gate_up_kernel<kRows, 8, false, kTurns>, reinterpret_cast<__nv_bfloat16*>(out16.data()),
                        in, w16.data(), bias.data(), w16.data() + OC * IC, bias.data() + OC, R, IC, OC, split, true,
                        turns);
          };
          run(std::false_type{}, item_blocks, 1, want, want16);
          for (const int turns : {2, 3}) {
            const unsigned blocks = (item_blocks + unsigned(turns) - 1) / unsigned(turns);
            std::vector<float> got(want.size(), NAN);
            std::vector<uint16_t> got16(want16.size(), 0xFFFF);
            run(std::true_type{}, blocks, turns, got, got16);
            const std::string where = std::to_string(turns) + " turns";
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "linear, " << where;
            EXPECT_EQ(got16, want16) << "gate, up and SwiGLU, " << where;
          }
          emu::take_prefetches();
        });
      }
    }
  // q, k and v: 2 heads and 1 kv head of 8, 16 pairs, a block each at split 8.
  const QkvCase c{2, 64, 2, 1, 8, true};
  const QkvInputs in(c);
  const int64_t items = (c.heads + 2 * c.kv_heads) * (c.d / 2);
  const int split = 8;
  std::vector<float> q[2];
  std::vector<uint16_t> kc[2], vc[2];
  for (const int turns : {1, 3}) {
    const size_t i = turns == 1 ? 0 : 1;
    q[i].assign(size_t(c.R * in.qd), NAN), kc[i] = in.cache0, vc[i] = in.cache0;
    const QkvArgs args = qkv_args(in.args(q[i].data(), kc[i].data(), vc[i].data()));
    const unsigned blocks = (blocks_for(items, split) + unsigned(turns) - 1) / unsigned(turns);
    emu::launch({blocks, 1, 1}, kThreads, kSmemBytes<2, 2>,
                turns == 1 ? gemv_qkv_kernel<2, 8, true> : gemv_qkv_kernel<2, 8, false, true>, args, c.R, split, turns);
  }
  emu::take_prefetches();
  EXPECT_EQ(std::memcmp(q[0].data(), q[1].data(), q[0].size() * sizeof(float)), 0) << "q";
  EXPECT_EQ(kc[0], kc[1]) << "k cache";
  EXPECT_EQ(vc[0], vc[1]) << "v cache";
}

// The residual add in the product's epilogue: out = residual + (x . w + bias), the one fp32
// addition of the unfused add after the product, bit for bit; with residual aliasing out too (the
// residual stream updated in place).
TEST(GemvEmulated, LinearAddsTheResidualAfterTheProduct) {
  const LinearCase c{3, 64, 24, true, true};
  const std::vector<uint16_t> x16 = bf16_bits(randn(size_t(c.R * c.IC), 70));
  const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(c.OC * c.IC), 71, 0.2f));
  const std::vector<float> bias = randn(size_t(c.OC), 72), residual = randn(size_t(c.R * c.OC), 73, 4.f);
  const int split = 2;
  std::vector<float> plain(size_t(c.R * c.OC), NAN), added = plain, in_place = residual;
  dispatch(c.R, true, [&](auto rows_c, auto vec_c) {
    constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
    const auto run = [&](float* out, const float* res) {
      emu::launch({blocks_for(c.OC, split), 1, 1}, kThreads, kSmemBytes<1, kRows>, gemv_linear_kernel<kRows, kVec>,
                  out, DecodeInput{.x16 = x16.data()}, w16.data(), bias.data(), res, c.R, c.IC, c.OC, split,
                  DecodeAhead{}, 1);
    };
    run(plain.data(), nullptr);
    run(added.data(), residual.data());
    run(in_place.data(), in_place.data());
  });
  emu::take_prefetches();
  for (size_t i = 0; i < plain.size(); i++) {
    const float want = residual[i] + plain[i];
    ASSERT_EQ(std::memcmp(&added[i], &want, sizeof want), 0) << i << ": " << added[i] << " against " << want;
    ASSERT_EQ(std::memcmp(&in_place[i], &want, sizeof want), 0) << i << " in place";
  }
}

// The o projection's launch may ask L2 for a later product's weights as well (DecodeAhead: gate's
// and up's, kernels/cuda/decode_layers.cu). Its outputs are the same bits; beside each weight row
// of its own (expect_weights_prefetched), its blocks ask for every 16-byte unit of the first
// `bytes` of `first` and of `second` exactly once, in whole aligned units, and for nothing past
// them; a null `second` is skipped; the scalar kernel asks for none of it.
TEST(GemvEmulated, LinearAsksL2AheadForALaterProductsWeightsAndChangesNoBit) {
  const int64_t IC = 64, OC = 19;
  const std::vector<uint16_t> x16 = bf16_bits(randn(size_t(IC), 80));
  const std::vector<uint16_t> w16 = bf16_bits(randn(size_t(OC * IC), 81, 0.2f));
  const std::vector<float> bias = randn(size_t(OC), 82);
  // Later weights, more than any case asks for (vectors of 16-byte aligned storage, as malloc's).
  const std::vector<uint16_t> gate(70000), up(70000);
  struct Case {
    int64_t bytes;
    bool second, vec8;
  };
  const Case cases[] = {{16, true, true},     {4000, true, true},    {100000, true, true},
                        {131072, false, true}, {4000, true, false}};
  for (const Case& c : cases)
    for (int split : kSplits) {
      SCOPED_TRACE(std::to_string(c.bytes) + " bytes ahead, split " + std::to_string(split) +
                   (c.second ? "" : ", no second matrix") + (c.vec8 ? "" : ", scalar loads"));
      const DecodeAhead ahead{gate.data(), c.second ? up.data() : nullptr, c.bytes};
      std::vector<float> plain(size_t(OC), NAN), with = plain;
      std::vector<emu::Prefetch> asked[2];
      dispatch(1, c.vec8, [&](auto rows_c, auto vec_c) {
        constexpr int kRows = decltype(rows_c)::value, kVec = decltype(vec_c)::value;
        int i = 0;
        for (auto [out, a] : {std::pair{&plain, DecodeAhead{}}, std::pair{&with, ahead}}) {
          emu::launch({blocks_for(OC, split), 1, 1}, kThreads, kSmemBytes<1, kRows>, gemv_linear_kernel<kRows, kVec>,
                      out->data(), DecodeInput{.x16 = x16.data()}, w16.data(), bias.data(), nullptr, 1, IC, OC, split,
                      a, 1);
          asked[i++] = emu::take_prefetches();
        }
      });
      EXPECT_EQ(std::memcmp(plain.data(), with.data(), sizeof(float) * plain.size()), 0);
      // The weights' own prefetches, and the rest, which must be `ahead`'s.
      std::vector<emu::Prefetch> own;
      const std::vector<int> none(size_t(c.bytes / 16), 0);
      std::vector<int> units[2] = {none, none};  // times each 16-byte unit of first and second was asked for
      for (const emu::Prefetch& p : asked[1]) {
        const auto w = reinterpret_cast<uintptr_t>(w16.data());
        if (p.begin >= w && p.begin < w + uintptr_t(w16.size() * 2)) {
          own.push_back(p);
          continue;
        }
        EXPECT_EQ(p.begin % 16, 0u);
        EXPECT_EQ(p.bytes % 16, 0u);
        EXPECT_GT(p.bytes, 0u);
        bool inside = false;
        for (int m = 0; m < 2; m++) {
          const auto base = reinterpret_cast<uintptr_t>(m == 0 ? gate.data() : up.data());
          if (p.begin < base || p.begin + p.bytes > base + uintptr_t(c.bytes)) continue;
          inside = true;
          for (uintptr_t u = (p.begin - base) / 16; u < (p.begin - base + p.bytes) / 16; u++) units[m][size_t(u)]++;
        }
        EXPECT_TRUE(inside) << "a prefetch outside the weights asked for ahead";
      }
      expect_weights_prefetched(own, {{w16.data(), OC}}, IC * 2, c.vec8);
      EXPECT_EQ(asked[0].size(), own.size()) << "the weights' own prefetches, with and without";
      for (int m = 0; m < 2; m++) {
        const int want = c.vec8 && (m == 0 || c.second) ? 1 : 0;
        for (size_t u = 0; u < units[m].size(); u++)
          ASSERT_EQ(units[m][u], want) << (m == 0 ? "first" : "second") << ", 16-byte unit " << u;
      }
    }
}

// The launch geometry: a split doubles while the device has fewer than 8,192 warps and each lane
// keeps at least one 8-element pack; the blocks cover every item exactly.
TEST(GemvEmulated, LaunchGeometryCoversEveryItem) {
  EXPECT_EQ(split_for(896, 896), 2);       // 0.5B's q: 112 packs, 1.75 per lane at split 2; 4 would leave lanes idle
  EXPECT_EQ(split_for(896, 4864), 8);      // 0.5B's down: 608 packs over few items
  EXPECT_EQ(split_for(151936, 896), 1);    // the LM head: items enough
  EXPECT_EQ(split_for(4096, 8960), 2);     // 4,096 x 2 warps reach 8,192
  EXPECT_EQ(split_for(100, 64), 1);        // 8 packs: a warp of lanes would sit idle on a split
  for (int split : kSplits)
    for (int64_t items : {1, 7, 8, 9, 100}) {
      const int64_t per_block = kWarps / split;
      EXPECT_GE(int64_t(blocks_for(items, split)) * per_block, items);
      EXPECT_LT((int64_t(blocks_for(items, split)) - 1) * per_block, items);
    }
  EXPECT_THROW(dispatch(0, true, [](auto, auto) {}), std::invalid_argument);
  EXPECT_THROW(dispatch(kMaxRows + 1, true, [](auto, auto) {}), std::invalid_argument);
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::gemv
