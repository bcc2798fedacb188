// The whole transformer on the CUDA backend against the same model on the CPU backend (which
// tests/model/transformer_test.cpp checks against PyTorch): logits, log-probs and entropies,
// every parameter's gradient, AdamW steps, KV-cache generation, and save -> load across
// backends. Both models are built from one seed, so their weights are identical. Needs a CUDA
// device; without one every test skips with the reason (scripts/gpu_check.sh runs them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

#include "kernels/buffer.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/internal.h"
#include "kernels/cuda_launch_choice.h"
#include "model/adamw.h"
#include "model/generate.h"
#include "model/memory_plan.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "tests/kernels/bf16_model_checks.h"
#include "tests/kernels/scoped_cuda_setting.h"

namespace azr::model {
namespace {

using kernels::cpu_ops;
using kernels::cuda_ops;
using kernels::testing::AttentionBackwardChoice;
using kernels::testing::AttentionChoice;
using kernels::testing::DecodeLayersTuningScope;
using kernels::testing::PersistentDecodeLayers;
using kernels::testing::ProgrammaticLaunch;
using testing::config_named;
using testing::expect_bf16_model_matches_cpu;
using testing::expect_bf16_sampler_matches_learner;
using testing::test_batch;

std::vector<float> host(std::span<const float> s, const kernels::Ops& ops) {
  std::vector<float> h(s.size());
  ops.download(h.data(), s.data(), h.size() * sizeof(float));
  return h;
}

// max |got - want| <= tol * max |want|, per tensor (as tests/model/transformer_test.cpp).
void expect_rel_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); i++) {
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  EXPECT_LE(diff, tol * std::max(scale, 1e-30)) << what << ": max |cuda - cpu| = " << diff << ", max |cpu| = " << scale;
}

class CudaModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::cuda_device_count(&why) == 0)
      GTEST_SKIP() << "no CUDA device here (" << why << "); the GPU model is checked on a GPU machine "
                   << "(scripts/gpu_check.sh)";
  }
};

TEST_P(CudaModel, ScoresGradientsAndAdamWMatchTheCpuModel) {
  const ModelConfig c = config_named(GetParam());
  Transformer cpu = Transformer::random(c, 11, 0.05f);
  Transformer gpu = Transformer::random(c, 11, 0.05f, cuda_ops());
  const SequenceBatch b = test_batch(c);

  expect_rel_close(gpu.logits(b), cpu.logits(b), 1e-4, "logits");
  const TokenScores sc = cpu.score(b, 0.8f, true), sg = gpu.score(b, 0.8f, true);
  expect_rel_close(sg.logp, sc.logp, 1e-4, "logp");
  expect_rel_close(sg.entropy, sc.entropy, 1e-4, "entropy");

  std::mt19937 rng(5);
  std::normal_distribution<float> n01;
  std::vector<float> dlogp(sc.logp.size()), dent(sc.logp.size());
  for (size_t i = 0; i < dlogp.size(); i++) dlogp[i] = n01(rng), dent[i] = 0.1f * n01(rng);
  cpu.zero_grad();
  gpu.zero_grad();
  cpu.backward(dlogp, dent);
  gpu.backward(dlogp, dent);
  for (const ParamTensor& t : cpu.tensors())
    expect_rel_close(host(gpu.grad(t.name), cuda_ops()), std::vector<float>(cpu.grad(t.name).begin(), cpu.grad(t.name).end()),
                     1e-4, "grad " + t.name);

  // AdamW on the same gradients (the CPU's, uploaded): Adam's division by sqrt(v) would turn
  // rounding differences of near-zero gradient entries into full-size steps (README).
  AdamW opt_c(cpu_ops(), cpu.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
  AdamW opt_g(cuda_ops(), gpu.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
  for (int step = 0; step < 3; step++) {
    std::span<float> gg = gpu.gradients();
    cuda_ops().upload(gg.data(), cpu.gradients().data(), gg.size() * sizeof(float));
    const double nc = clip_grad_norm(cpu_ops(), cpu.gradients(), 0.5);
    const double ng = clip_grad_norm(cuda_ops(), gpu.gradients(), 0.5);
    EXPECT_NEAR(ng, nc, 1e-6 * nc);
    opt_c.step(cpu.parameters(), cpu.gradients());
    opt_g.step(gpu.parameters(), gpu.gradients());
  }
  expect_rel_close(host(gpu.parameters(), cuda_ops()),
                   std::vector<float>(cpu.parameters().begin(), cpu.parameters().end()), 1e-6, "parameters after AdamW");
}

TEST_P(CudaModel, Bf16GemmsMatchTheCpuBf16Model) {
  const AttentionChoice simt(kernels::CudaAttentionKernel::Simt);
  expect_bf16_model_matches_cpu(config_named(GetParam()), kernels::cuda_bf16_matmul_ops(), cuda_ops(), 1e-2);
}

// The same with the tensor-core training attention (kernels/cuda/attention_tensor_core.cuh): its
// forward is the Simt arithmetic to fp32-level noise (P in two bf16 terms), its backward rounds P
// and dS to bf16. The same kernels on the CPU emulation of the device (tests/kernels/
// cuda_emulation.h), 2026-11-23, on the untied config: log-probs 1.7e-3 from the CPU bf16 model
// on average, 7.8e-3 at worst, against 4.9e-3 and 1.6e-2 from fp32; gradients 4.7e-3 relative L2.
// The GPU adds its GEMMs' other summation order, so the worst token is bounded by the model's
// own distance from fp32, not by the Simt test's measured 1e-2.
TEST_P(CudaModel, TensorCoreAttentionBf16ModelMatchesTheCpuBf16Model) {
  const ModelConfig c = config_named(GetParam());
  if (c.head_dim != 64 && c.head_dim != 128)
    GTEST_SKIP() << "head dim " << c.head_dim << ": the tensor-core attention takes 64 and 128";
  const AttentionChoice tensor(kernels::CudaAttentionKernel::TensorCore);
  expect_bf16_model_matches_cpu(c, kernels::cuda_bf16_matmul_ops(), cuda_ops(), std::nullopt);
}

// The same with the kernels on mma.sync (CudaAttentionKernel::Mma, attention_mma.cuh), whose
// forward's one pass rounds p against the running max. On the CPU emulation of the device
// (2026-11-26, untied config): log-probs 1.8e-3 from the CPU bf16 model on average, 8.0e-3 at
// worst, against 5.0e-3 and 1.9e-2 from fp32 (the WMMA kernels': 1.7e-3, 7.8e-3).
TEST_P(CudaModel, MmaAttentionBf16ModelMatchesTheCpuBf16Model) {
  const ModelConfig c = config_named(GetParam());
  if (c.head_dim != 64 && c.head_dim != 128)
    GTEST_SKIP() << "head dim " << c.head_dim << ": the tensor-core attention takes 64 and 128";
  const AttentionChoice mma(kernels::CudaAttentionKernel::Mma);
  expect_bf16_model_matches_cpu(c, kernels::cuda_bf16_matmul_ops(), cuda_ops(), std::nullopt);
}

// And with the merged backward (CudaAttentionBackward::Merged, attention_mma_backward.cuh: one
// kernel adds dQ, dK and dV with atomics): every parameter's gradient within the same bounds (the
// emulated TensorCoreEmulatedModel.ComputesTheBf16ModelWithTheMergedBackward).
TEST_P(CudaModel, MergedAttentionBackwardBf16ModelMatchesTheCpuBf16Model) {
  const ModelConfig c = config_named(GetParam());
  if (c.head_dim != 64 && c.head_dim != 128)
    GTEST_SKIP() << "head dim " << c.head_dim << ": the tensor-core attention takes 64 and 128";
  const AttentionChoice mma(kernels::CudaAttentionKernel::Mma);
  const AttentionBackwardChoice merged(kernels::CudaAttentionBackward::Merged);
  expect_bf16_model_matches_cpu(c, kernels::cuda_bf16_matmul_ops(), cuda_ops(), std::nullopt);
}

// The fused training steps (the attention's operands made once in bf16, Transformer::attention16;
// gate and up as one GEMM, Transformer::mlp_rows16; both the Bf16 table's default) against the
// same table without their ops, with each training attention: the mma.sync kernels read the bf16
// operands as they are and write out16 themselves; the WMMA and Simt ones read widened copies
// (attention_tensor_core.cu). The tiny config's head dim (32) takes the Simt kernels whatever the
// choice. Bounds: bf16_model_checks.h.
TEST_P(CudaModel, FusedTrainingStepsAreTheUnfusedStepsToRounding) {
  ModelConfig c = config_named(GetParam());
  c.o_bias = true;
  c.qkv_bias = true;
  static const kernels::Ops no_attention16 = [] {
    kernels::Ops t = testing::without_attention16(kernels::cuda_bf16_matmul_ops());
    t.name = "cuda+bf16 without attention16";
    return t;
  }();
  static const kernels::Ops no_mlp_rows16 = [] {
    kernels::Ops t = testing::without_mlp_rows16(kernels::cuda_bf16_matmul_ops());
    t.name = "cuda+bf16 without mlp_rows16";
    return t;
  }();
  static const kernels::Ops no_mlp_rows16_rounded =
      testing::without_mlp_rows16_gate_up_rounded<kernels::cuda_bf16_matmul_ops>(
          "cuda+bf16 without mlp_rows16, gate and up rounded");
  for (const auto kernel : {kernels::CudaAttentionKernel::Mma, kernels::CudaAttentionKernel::TensorCore,
                            kernels::CudaAttentionKernel::Simt}) {
    SCOPED_TRACE(kernel == kernels::CudaAttentionKernel::Mma ? "mma.sync" :
                 kernel == kernels::CudaAttentionKernel::TensorCore ? "WMMA" : "Simt");
    const AttentionChoice choice(kernel);
    testing::expect_fused_step_matches_unfused(kernels::cuda_bf16_matmul_ops(), no_attention16, c, 1e-2, 1e-2);
  }
  {
    SCOPED_TRACE("gate and up");
    testing::expect_fused_step_matches_unfused(kernels::cuda_bf16_matmul_ops(), no_mlp_rows16_rounded, c, 1e-2, 1e-2);
  }
  // Against fp32 gate and up the rounding's own effect adds to the sums' order: the CPU test's
  // wider bounds. Held to 1e-2, this failed on an H200 (2026-11-28): log-probs 0.0111 apart at
  // recompute 1, the k_proj bias gradients 0.0104 and 0.0117 relative L2.
  SCOPED_TRACE("gate and up against fp32 gate and up");
  testing::expect_fused_step_matches_unfused(kernels::cuda_bf16_matmul_ops(), no_mlp_rows16, c, 0.02, 0.02);
}

// zero_grad() leaves the weight gradients to the next backward's products, which write them with
// beta = 0 (kernels::kWriteDw): the same gradients as a zero fill and beta = 1; the projection
// matrices and an untied head bit for bit, the rest to the rounding of the device's atomics. All
// bit for bit, this failed on an H200 (CUDA 13, 2026-11-27): two runs of one step differed in the
// RMSNorm weight, embedding and bias gradients only (relative L2 1e-7 at most, 7e-9 for the tied
// embedding), whatever zero_grad() did. Those sums are now ordered (kernels/cuda/ordered_sums.cuh),
// so the line it prints should say "none"; the bound stays for AZR_CUDA_GRADIENT_SUMS=atomic.
TEST_P(CudaModel, DeferredZeroGradGivesTheZeroFilledGradients) {
  // The projections' gradients bit for bit need the split attention backward, whatever
  // AZR_CUDA_ATTENTION_BACKWARD says: the merged one's adds land in any order.
  const AttentionBackwardChoice split(kernels::CudaAttentionBackward::Split);
  testing::expect_deferred_zero_grad_matches_zero_fill(kernels::cuda_bf16_matmul_ops(), config_named(GetParam()),
                                                       1e-5);
}

// The training step is the same bits every run (AZR_CUDA_GRADIENT_SUMS's default: the sums over
// rows in a fixed order, kernels/cuda/ordered_sums.cuh; the split attention backward, whose dQ is
// written once): two models from one seed, through the same two micro-batches, the gradient norm's
// clip and an AdamW step, on both training tables, with biases on q, k, v and o. What differs is
// named. GEMMs are cuBLASLt's, whose bits its documentation fixes for one GPU model and toolkit.
TEST_P(CudaModel, TrainingStepsAreTheSameBitsEveryRun) {
  const AttentionBackwardChoice split(kernels::CudaAttentionBackward::Split);
  const kernels::testing::GradientSumsOrdered ordered(true);
  ModelConfig c = config_named(GetParam());
  c.qkv_bias = true;
  c.o_bias = true;
  const SequenceBatch b = test_batch(c);
  std::mt19937 draw(91);
  std::normal_distribution<float> n01;
  std::vector<float> dlogp1(size_t(b.B * b.T)), dlogp2(dlogp1.size()), dent(dlogp1.size());
  for (size_t i = 0; i < dlogp1.size(); i++) dlogp1[i] = n01(draw), dlogp2[i] = n01(draw), dent[i] = 0.1f * n01(draw);
  for (const kernels::Ops* ops : {&cuda_ops(), &kernels::cuda_bf16_matmul_ops()}) {
    SCOPED_TRACE(ops->name);
    std::vector<float> grads[2], params[2];
    double norms[2] = {};
    std::vector<ParamTensor> tensors;
    for (int run = 0; run < 2; run++) {
      Transformer m = Transformer::random(c, 23, 0.05f, *ops);
      m.zero_grad();
      m.score(b, 0.9f, true);
      m.backward(dlogp1, dent);
      m.score(b, 0.9f, true);  // a second micro-batch adds to the first's gradients
      m.backward(dlogp2, {});
      grads[run] = host(m.gradients(), *ops);
      norms[run] = clip_grad_norm(*ops, m.gradients(), 0.5);
      AdamW opt(*ops, m.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
      opt.step(m.parameters(), m.gradients());
      params[run] = host(m.parameters(), *ops);
      tensors = m.tensors();
    }
    std::string differ;
    for (const ParamTensor& t : tensors)
      if (!testing::tensor_distance(grads[0], grads[1], t).same_bits) differ += " " + t.name;
    EXPECT_TRUE(differ.empty()) << "gradients not the same bits in two runs:" << differ;
    EXPECT_EQ(std::memcmp(&norms[0], &norms[1], sizeof(double)), 0) << norms[0] << " against " << norms[1];
    EXPECT_TRUE(params[0] == params[1]) << "parameters after the step";
  }
}

// The sampler's log-probs (prefill + decode on the KV cache) are the training forward's
// log-probs of the same tokens (score() at the same temperature): no sampler/learner mismatch.
// The last prompt repeats the first, so its cache and first logits are device copies of the first's.
TEST_P(CudaModel, GenerationLogProbsEqualTheTrainingForward) {
  const ModelConfig c = config_named(GetParam());
  Transformer gpu = Transformer::random(c, 12, 0.05f, cuda_ops());
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3, 4, 5}, {7}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11}, {1, 2, 3, 4, 5}};
  SamplingParams sp;
  sp.temperature = 0.9f, sp.max_new_tokens = 40, sp.seed = 3;
  const std::vector<Completion> out = generate(gpu, prompts, sp);
  EXPECT_EQ(gpu.prefill_stats().computed_tokens, 5 + 1 + 11);
  for (size_t i = 0; i < prompts.size(); i++) {
    std::vector<int32_t> full = prompts[i];
    full.insert(full.end(), out[i].tokens.begin(), out[i].tokens.end());
    const TokenScores s = gpu.score(SequenceBatch::from({full}), sp.temperature);
    for (size_t j = 0; j < out[i].tokens.size(); j++)
      EXPECT_NEAR(out[i].logprobs[j], s.logp[prompts[i].size() + j], 1e-4) << "sequence " << i << " token " << j;
  }
}

// The worst token below the learner's own worst distance from the fp32 model, as with the
// tensor-core attention below. A fixed 1e-2 failed on an H200 (2026-11-26, untied config: mean
// |dlogp| 1.7e-3, worst 1.19e-2, the learner 6.2e-3 from fp32 on average): the sampler now runs
// the fused decode ops, whose sums differ from the learner's GEMMs more than cuBLASLt's did.
TEST_P(CudaModel, Bf16GenerationLogProbsEqualTheTrainingForward) {
  const AttentionChoice simt(kernels::CudaAttentionKernel::Simt);
  expect_bf16_sampler_matches_learner(config_named(GetParam()), kernels::cuda_bf16_matmul_ops(), cuda_ops(),
                                      std::nullopt);
}

// The learner on tensor-core attention, the sampler on the decode kernel. On the CPU emulation of
// the device (2026-11-23, untied config): mean |dlogp| 2.1e-3, worst 6.6e-3, against 5.7e-3 from
// the fp32 model on average. With P in one bf16 term instead of two it was 4.3e-3 and 1.5e-2,
// which is why the forward splits it.
TEST_P(CudaModel, TensorCoreAttentionBf16GenerationLogProbsEqualTheTrainingForward) {
  const ModelConfig c = config_named(GetParam());
  if (c.head_dim != 64 && c.head_dim != 128)
    GTEST_SKIP() << "head dim " << c.head_dim << ": the tensor-core attention takes 64 and 128";
  const AttentionChoice tensor(kernels::CudaAttentionKernel::TensorCore);
  expect_bf16_sampler_matches_learner(c, kernels::cuda_bf16_matmul_ops(), cuda_ops(), std::nullopt);
}

// The learner's attention on mma.sync, the sampler on the decode kernel. On the CPU emulation of the
// device (2026-11-26, untied config): mean |dlogp| 2.0e-3, worst 9.4e-3, against 5.9e-3 from the
// fp32 model on average.
TEST_P(CudaModel, MmaAttentionBf16GenerationLogProbsEqualTheTrainingForward) {
  const ModelConfig c = config_named(GetParam());
  if (c.head_dim != 64 && c.head_dim != 128)
    GTEST_SKIP() << "head dim " << c.head_dim << ": the tensor-core attention takes 64 and 128";
  const AttentionChoice mma(kernels::CudaAttentionKernel::Mma);
  expect_bf16_sampler_matches_learner(c, kernels::cuda_bf16_matmul_ops(), cuda_ops(), std::nullopt);
}

// CUDA graphs of the decode step (Transformer::set_decode_graphs; model/decode_graphs.h): a replay
// launches the kernels the eager steps launched, with the same arguments, on the same buffers, so a
// generation with them is the one without, bit for bit. At batch 1 (one row count throughout) and
// at a batch whose row count falls as sequences stop; both tables (the fp32 one runs cuBLASLt at
// every row count, the bf16 one the GEMV and the fused decode ops too).
TEST_P(CudaModel, RecordedDecodeStepsAreTheEagerStepsBitForBit) {
  const ModelConfig c = config_named(GetParam());
  for (const kernels::Ops* ops : {&cuda_ops(), &kernels::cuda_bf16_matmul_ops()}) {
    Transformer eager = Transformer::random(c, 14, 0.05f, *ops);
    eager.set_decode_graphs(false);  // on by default
    Transformer recorded = eager.copy_to(*ops);
    recorded.set_decode_graphs(true);
    SamplingParams sp;
    sp.temperature = 1.f, sp.max_new_tokens = 24, sp.seed = 8;
    const std::vector<std::vector<int32_t>> one = {{3, 1, 4, 1, 5}};
    const std::vector<std::vector<int32_t>> four = {{1, 2, 3}, {9}, {7, 7, 7, 7, 7, 7}, {30, 31}};
    for (const auto* prompts : {&one, &four}) {
      SamplingParams p = sp;
      if (prompts->size() > 1) {  // stop tokens from a free run, so that sequences stop at different steps
        const auto free_run = generate(eager, *prompts, p);
        p.stop_token_ids = {free_run[1].tokens[4], free_run[3].tokens[9]};
      }
      const int64_t replays_before = recorded.decode_graph_cache().replays();
      const auto want = generate(eager, *prompts, p);
      const auto got = generate(recorded, *prompts, p);
      for (size_t b = 0; b < prompts->size(); b++) {
        EXPECT_EQ(got[b].tokens, want[b].tokens) << ops->name << " sequence " << b;
        ASSERT_EQ(got[b].logprobs.size(), want[b].logprobs.size());
        EXPECT_EQ(std::memcmp(got[b].logprobs.data(), want[b].logprobs.data(), sizeof(float) * want[b].logprobs.size()),
                  0)
            << ops->name << " sequence " << b;
      }
      EXPECT_GT(recorded.decode_graph_cache().replays(), replays_before) << ops->name;
    }
  }
}

// An update between generations frees the training buffers before the next generation's KV cache
// (Transformer::release_training_buffers, as trainer/policy.cpp calls it; never run on a GPU before
// 2026-11-29's review): the next generation's buffers then come from new allocations, at the old
// addresses or not, so its recorded steps must be keyed to them (re-recorded, or replayed only over
// the same addresses). Three generations with two bf16 training steps and releases between them,
// with recordings and without: the same tokens and log-probs, bit for bit.
TEST_P(CudaModel, RecordedGenerationsBetweenUpdatesAreTheEagerOnesBitForBit) {
  const ModelConfig c = config_named(GetParam());
  const kernels::Ops& ops = kernels::cuda_bf16_matmul_ops();
  const SequenceBatch b = test_batch(c);
  std::mt19937 draw(92);
  std::normal_distribution<float> n01;
  std::vector<float> dlogp(size_t(b.B * b.T));
  for (float& x : dlogp) x = n01(draw);
  const std::vector<std::vector<int32_t>> prompts = {{3, 1, 4, 1, 5}, {9, 2, 6}};
  SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = 16, sp.seed = 12;
  auto run = [&](bool graphs, int64_t* replays) {
    Transformer m = Transformer::random(c, 33, 0.05f, ops);
    m.set_decode_graphs(graphs);
    AdamW opt(ops, m.parameters().size(), {1e-3, 0.9, 0.999, 1e-8, 0.01});
    std::vector<Completion> out;
    for (int round = 0; round < 3; round++) {
      if (round > 0) {
        m.zero_grad();
        m.score(b, 1.f, true);
        m.backward(dlogp, {});
        opt.step(m.parameters(), m.gradients());
        m.release_training_buffers();
        EXPECT_EQ(m.activation_bytes(), 0u) << "round " << round;
      }
      for (Completion& x : generate(m, prompts, sp)) out.push_back(std::move(x));
    }
    *replays = m.decode_graph_cache().replays();
    return out;
  };
  int64_t eager_replays = 0, recorded_replays = 0;
  const std::vector<Completion> want = run(false, &eager_replays), got = run(true, &recorded_replays);
  EXPECT_EQ(eager_replays, 0);
  EXPECT_GT(recorded_replays, 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "generation " << i / prompts.size() << ", sequence " << i % 2;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    EXPECT_EQ(std::memcmp(got[i].logprobs.data(), want[i].logprobs.data(), sizeof(float) * want[i].logprobs.size()), 0)
        << "generation " << i / prompts.size() << ", sequence " << i % 2;
  }
}

// Generation launches step t+1 before it reads step t's tokens (SamplingParams::launch_ahead,
// model/generate.cpp): the next step's tokens are gathered on the device from the sampler's output,
// and step t's download is started, not waited for, until the next step is queued. It must sample
// what one step at a time samples, with sequences stopping at different steps (a step launched ahead
// then carries rows that have just finished). Log-probs to 1e-4: the GEMMs of the steps after a
// stop run on more rows ahead than one step at a time, and cuBLASLt may sum another way per shape.
TEST_P(CudaModel, LaunchingAheadSamplesWhatOneStepAtATimeSamples) {
  const ModelConfig c = config_named(GetParam());
  for (const kernels::Ops* ops : {&cuda_ops(), &kernels::cuda_bf16_matmul_ops()}) {
    Transformer m = Transformer::random(c, 15, 0.05f, *ops);
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {9}, {7, 7, 7, 7, 7, 7}, {30, 31}, {1, 2, 3}};
    SamplingParams p;
    p.temperature = 1.f, p.max_new_tokens = 20, p.seed = 12, p.launch_ahead = false;
    const auto free_run = generate(m, prompts, p);
    p.stop_token_ids = {free_run[1].tokens[0], free_run[3].tokens[6]};
    const auto one_step = generate(m, prompts, p);
    p.launch_ahead = true;
    const auto ahead = generate(m, prompts, p);
    int stopped_early = 0;
    for (size_t b = 0; b < prompts.size(); b++) {
      EXPECT_EQ(ahead[b].tokens, one_step[b].tokens) << ops->name << " sequence " << b;
      EXPECT_EQ(ahead[b].finish, one_step[b].finish) << ops->name << " sequence " << b;
      ASSERT_EQ(ahead[b].logprobs.size(), one_step[b].logprobs.size());
      for (size_t t = 0; t < ahead[b].logprobs.size(); t++)
        EXPECT_NEAR(ahead[b].logprobs[t], one_step[b].logprobs[t], 1e-4) << ops->name << " sequence " << b;
      stopped_early += one_step[b].finish == FinishReason::StopToken && one_step[b].tokens.size() < 20;
    }
    EXPECT_GE(stopped_early, 2) << ops->name;
  }
}

// Programmatic dependent launch changes when the decode step's kernels start, never what they
// compute, so generation with it is generation without, bit for bit: eager and recorded, at batch
// 1 and 4 (the GEMV and the fused decode ops, the norms, the decode attention; 150 positions split
// it over blocks, whose last one merges them), repeated so that a kernel which read its input before
// its wait would rarely go unseen; and a training forward, whose norms launch the same way, scores
// the same. Before sm_90 both sides launch the ordinary way, and the test says so.
TEST_P(CudaModel, ProgrammaticLaunchesComputeWhatOrdinaryLaunchesDo) {
  const ModelConfig c = config_named(GetParam());
  const kernels::Ops& ops = kernels::cuda_bf16_matmul_ops();
  const ProgrammaticLaunch restore(kernels::cuda_programmatic_launch());
  {
    const ProgrammaticLaunch on(true);
    if (!kernels::cuda_programmatic_launch_applies())
      std::printf("note: this GPU or build has no programmatic dependent launch (sm_90): both runs are ordinary\n");
  }
  Transformer ordinary = Transformer::random(c, 15, 0.05f, ops);
  Transformer early = ordinary.copy_to(ops);
  SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = 150, sp.seed = 9;
  const std::vector<std::vector<int32_t>> one = {{3, 1, 4, 1, 5}};
  const std::vector<std::vector<int32_t>> four = {{1, 2, 3}, {9}, {7, 7, 7, 7, 7, 7}, {30, 31}};
  for (const bool graphs : {false, true})
    for (const auto* prompts : {&one, &four})
      for (int repeat = 0; repeat < 2; repeat++) {
        ordinary.set_decode_graphs(graphs);
        early.set_decode_graphs(graphs);
        std::vector<Completion> want, got;
        {
          const ProgrammaticLaunch off(false);
          want = generate(ordinary, *prompts, sp);
        }
        {
          const ProgrammaticLaunch on(true);
          got = generate(early, *prompts, sp);
        }
        for (size_t b = 0; b < prompts->size(); b++) {
          const std::string where = std::string(graphs ? "recorded" : "eager") + ", " +
                                    std::to_string(prompts->size()) + " prompts, sequence " + std::to_string(b);
          EXPECT_EQ(got[b].tokens, want[b].tokens) << where;
          ASSERT_EQ(got[b].logprobs.size(), want[b].logprobs.size()) << where;
          EXPECT_EQ(
              std::memcmp(got[b].logprobs.data(), want[b].logprobs.data(), sizeof(float) * want[b].logprobs.size()), 0)
              << where;
        }
      }
  const SequenceBatch batch = test_batch(c);
  std::vector<float> want, got;
  {
    const ProgrammaticLaunch off(false);
    want = ordinary.score(batch, 1.f).logp;
  }
  {
    const ProgrammaticLaunch on(true);
    got = early.score(batch, 1.f).logp;
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0) << "training forward";
}

// The persistent decode kernel (kernels/cuda/decode_layers.cuh) runs the five launches a layer's
// block functions between grid barriers, so generation at batch 1 with it is generation with the
// launches, bit for bit: eager and recorded (a cooperative launch inside a CUDA graph), 150 new
// tokens (positions past two tiles: the attention's splits merged by their last block), repeated
// so that a barrier that let a block run ahead would rarely go unseen, each time under another
// tuning (cuda_set_decode_layers_tuning: the default; no prefetch at one block a multiprocessor,
// where each block takes more turns; the most prefetch and slices of gate, up and down). That the
// kernel ran, and not its stand-in of five launches a layer, is checked by its launch count.
// Both configs apply (head dims 32 and 64, every width a multiple of 8).
TEST_P(CudaModel, PersistentDecodeLayersComputeWhatTheLaunchesDo) {
  const ModelConfig c = config_named(GetParam());
  const kernels::Ops& ops = kernels::cuda_bf16_matmul_ops();
  Transformer launches = Transformer::random(c, 16, 0.05f, ops);
  Transformer persistent = launches.copy_to(ops);
  SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = 150, sp.seed = 10;
  const std::vector<std::vector<int32_t>> one = {{3, 1, 4, 1, 5}};
  constexpr int kMost = kernels::kMaxDecodeLayersSlices;
  const kernels::DecodeLayersTuning tunings[] = {
      {}, {0, 1, 0, 0}, {kernels::kMaxDecodeLayersPrefetchBytes, 0, kMost, kMost}};
  for (const bool graphs : {false, true})
    for (const kernels::DecodeLayersTuning& tuning : tunings) {
      launches.set_decode_graphs(graphs);
      persistent.set_decode_graphs(graphs);
      std::vector<Completion> want, got;
      {
        const PersistentDecodeLayers off(false);
        want = generate(launches, one, sp);
      }
      {
        const PersistentDecodeLayers on(true);
        const DecodeLayersTuningScope tuned(tuning);
        const uint64_t before = kernels::cuda_decode_layers_persistent_launches();
        got = generate(persistent, one, sp);
        EXPECT_GT(kernels::cuda_decode_layers_persistent_launches(), before) << "the persistent kernel never ran";
      }
      const std::string where = std::string(graphs ? "recorded" : "eager") + ", prefetch " +
                                std::to_string(tuning.prefetch_bytes_per_block) + " bytes a block, " +
                                std::to_string(tuning.blocks_per_multiprocessor) + " blocks a multiprocessor, " +
                                std::to_string(tuning.gate_up_slices_at_attention) + " gate/up and " +
                                std::to_string(tuning.down_slices_at_gate_up) + " down slices";
      EXPECT_EQ(got[0].tokens, want[0].tokens) << where;
      ASSERT_EQ(got[0].logprobs.size(), want[0].logprobs.size()) << where;
      EXPECT_EQ(std::memcmp(got[0].logprobs.data(), want[0].logprobs.data(), sizeof(float) * want[0].logprobs.size()),
                0)
          << where;
    }
}

// The five launches a layer with the o projection asking L2 for gate's and up's weights ahead
// (DecodeLayersTuning::gate_up_ahead_bytes, kernels/cuda/decode_layers.cu) generate what they
// generate without, bit for bit, eager and recorded: a prefetch changes no value. 1 MiB, and the
// most (64 MiB, past both configs' matrices: clipped to each). Both configs take that path (their
// gate and up 16-byte aligned in every layer, as the persistent kernel's test above needs too).
TEST_P(CudaModel, GateUpAskedAheadChangesNoBitOfGeneration) {
  const ModelConfig c = config_named(GetParam());
  Transformer m = Transformer::random(c, 16, 0.05f, kernels::cuda_bf16_matmul_ops());
  SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = 40, sp.seed = 10;
  const std::vector<std::vector<int32_t>> one = {{3, 1, 4, 1, 5}};
  const PersistentDecodeLayers launches(false);
  for (const bool graphs : {false, true}) {
    m.set_decode_graphs(graphs);
    const std::vector<Completion> want = generate(m, one, sp);
    for (const int64_t ahead : {int64_t(1) << 20, kernels::kMaxDecodeLayersAheadBytes}) {
      kernels::DecodeLayersTuning t;
      t.gate_up_ahead_bytes = ahead;
      const DecodeLayersTuningScope tuned(t);
      const std::vector<Completion> got = generate(m, one, sp);
      const std::string where = std::string(graphs ? "recorded" : "eager") + ", " + std::to_string(ahead) + " bytes";
      EXPECT_EQ(got[0].tokens, want[0].tokens) << where;
      ASSERT_EQ(got[0].logprobs.size(), want[0].logprobs.size()) << where;
      EXPECT_EQ(std::memcmp(got[0].logprobs.data(), want[0].logprobs.data(), sizeof(float) * want[0].logprobs.size()),
                0)
          << where;
    }
  }
}

// Two tunings of the few-row products that change no value (kernels/cuda/cuda_ops.h,
// DecodeLayersTuning): each thread's first packs of weights held in registers before the wait or
// not (hold_first_weights, on by default; kernels/cuda/gemv.cuh, HeldPacks), and a product of more
// blocks than the GPU holds at once run as one wave of blocks taking turns or not (one_wave, off by
// default; gemv.cuh, one_wave). Generation is the same bit for bit, eager and recorded, at batch 1
// and 4 (the few-row kernels at 4 rows too). The vocabulary is widened to 16,384 so that the LM
// head's 2,048 blocks outnumber what an H100 or H200 holds at once (8 a multiprocessor).
TEST_P(CudaModel, HeldWeightsAndOneWaveChangeNoBitOfGeneration) {
  ModelConfig c = config_named(GetParam());
  c.vocab_size = 16384;
  Transformer m = Transformer::random(c, 16, 0.05f, kernels::cuda_bf16_matmul_ops());
  SamplingParams sp;
  sp.temperature = 1.f, sp.max_new_tokens = 40, sp.seed = 11;
  const PersistentDecodeLayers launches(false);
  kernels::DecodeLayersTuning held, not_held, one_wave;
  not_held.hold_first_weights = false;
  one_wave.one_wave = true;
  for (const size_t batch : {1, 4}) {
    std::vector<std::vector<int32_t>> prompts;
    for (size_t b = 0; b < batch; b++) prompts.push_back({3, 1, 4, int32_t(1 + b), 5});
    for (const bool graphs : {false, true}) {
      m.set_decode_graphs(graphs);
      std::vector<Completion> want;
      {
        const DecodeLayersTuningScope tuned(not_held);
        want = generate(m, prompts, sp);
      }
      for (const auto& [tuning, name] : {std::pair{held, "held"}, std::pair{one_wave, "held, one wave"}}) {
        const DecodeLayersTuningScope tuned(tuning);
        const std::vector<Completion> got = generate(m, prompts, sp);
        for (size_t b = 0; b < batch; b++) {
          const std::string where = std::string(name) + ", " + (graphs ? "recorded" : "eager") + ", batch " +
                                    std::to_string(batch) + ", sequence " + std::to_string(b);
          EXPECT_EQ(got[b].tokens, want[b].tokens) << where;
          ASSERT_EQ(got[b].logprobs.size(), want[b].logprobs.size()) << where;
          EXPECT_EQ(
              std::memcmp(got[b].logprobs.data(), want[b].logprobs.data(), sizeof(float) * want[b].logprobs.size()),
              0)
              << where;
        }
      }
    }
  }
}

TEST_P(CudaModel, SavedOnTheGpuLoadsOnTheCpuBitIdentical) {
  const ModelConfig c = config_named(GetParam());
  Transformer gpu = Transformer::random(c, 13, 0.05f, cuda_ops());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                     ("azr_cuda_model_" + GetParam() + "-" + std::to_string(getpid()));
  gpu.save_pretrained(dir);
  Transformer cpu = Transformer::from_pretrained(dir);
  Transformer back = Transformer::from_pretrained(dir, cuda_ops());
  const std::vector<float> want(cpu.parameters().begin(), cpu.parameters().end());
  EXPECT_EQ(host(gpu.parameters(), cuda_ops()), want);
  EXPECT_EQ(host(back.parameters(), cuda_ops()), want);
  std::filesystem::remove_all(dir);
}

// The memory plan's `sampler` line bounds what the CUDA sampler's grow-only scratch holds after
// calls of every mode (greedy, temperature, top-k, top-p) at 1, 5 and 300 rows of the 151,936-token
// vocabulary, and top-p's list of 16,384 keys a row for a group of 256 rows is part of it. The
// bound is taken at 4,096 rows, more than any test here samples, so that it holds in a process
// shared with other tests too (ctest gives each test one of its own).
TEST(CudaSamplerScratch, StaysWithinTheMemoryPlansLine) {
  std::string why;
  if (kernels::cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device here (" << why << ")";
  const kernels::Ops& gpu = cuda_ops();
  constexpr int64_t V = 151936;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (const int64_t R : {int64_t(1), int64_t(5), int64_t(300)}) {
    std::vector<float> logits(size_t(R * V));
    for (float& z : logits) z = normal(rng);
    const std::vector<double> u(size_t(R), 0.5);
    kernels::Buffer<float> d_logits(gpu, logits.size()), d_logprobs(gpu, size_t(R));
    kernels::Buffer<double> d_u(gpu, size_t(R));
    kernels::Buffer<int32_t> d_tokens(gpu, size_t(R));
    d_logits.upload(logits.data(), logits.size());
    d_u.upload(u.data(), u.size());
    struct Mode {
      float temperature;
      int32_t top_k;
      float top_p;
    };
    for (const Mode& m : {Mode{0.f, 0, 1.f}, Mode{1.f, 0, 1.f}, Mode{1.f, 50, 1.f}, Mode{0.7f, 0, 0.9f}}) {
      gpu.sample_rows(d_tokens.data(), d_logprobs.data(), d_logits.data(), d_u.data(), R, V, V, m.temperature,
                      m.top_k, m.top_p);
      std::vector<int32_t> tokens(static_cast<size_t>(R));
      gpu.download(tokens.data(), d_tokens.data(), tokens.size() * sizeof(int32_t));
      for (const int32_t t : tokens) ASSERT_TRUE(t >= 0 && t < V) << t;
    }
  }
  MemoryPlanSettings s;
  s.kv_slots = 4096, s.kv_capacity = 64;
  const double bound = plan_memory(preset_config("azr-tiny"), s).sampler;
  const double held = double(kernels::cuda_detail::cuda_sampler_scratch_bytes());
  EXPECT_LE(held, bound);
  EXPECT_GE(held, 256.0 * 16384 * 8) << "top-p's lists for 256 rows";
}

// Hugging Face transformers as the reference on the real Qwen2.5 configs with random weights:
// tests/kernels/hf_reference.py writes each model and transformers' log-probs and entropies of a
// few sequences (fp32, one sequence at a time); here they are scored as one right-padded batch on
// the GPU. AZR_HF_REFERENCE_DIR names its output (scripts/gpu_check.sh sets it where PyTorch is).
TEST(CudaHfReference, QwenConfigsMatchTransformers) {
  std::string why;
  if (kernels::cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device here (" << why << ")";
  const char* dir = std::getenv("AZR_HF_REFERENCE_DIR");
  if (!dir || !*dir)
    GTEST_SKIP() << "AZR_HF_REFERENCE_DIR is not set (scripts/gpu_check.sh runs tests/kernels/hf_reference.py first)";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!std::filesystem::exists(entry.path() / "reference.json")) continue;
    const nlohmann::json ref = nlohmann::json::parse(std::ifstream(entry.path() / "reference.json"));
    Transformer m = Transformer::from_pretrained(entry.path(), cuda_ops());
    std::vector<std::vector<int32_t>> seqs;
    for (const auto& s : ref["sequences"]) seqs.push_back(s["ids"].get<std::vector<int32_t>>());
    const SequenceBatch b = SequenceBatch::from(seqs);
    const TokenScores sc = m.score(b, 1.f);
    std::vector<float> got_lp, want_lp, got_h, want_h;
    for (size_t i = 0; i < seqs.size(); i++) {
      const auto lp = ref["sequences"][i]["logp"].get<std::vector<float>>();
      const auto h = ref["sequences"][i]["entropy"].get<std::vector<float>>();
      for (size_t t = 1; t < seqs[i].size(); t++) {
        got_lp.push_back(sc.logp[i * size_t(b.T) + t]), want_lp.push_back(lp[t - 1]);
        got_h.push_back(sc.entropy[i * size_t(b.T) + t]), want_h.push_back(h[t - 1]);
      }
    }
    const std::string name = entry.path().filename().string();
    expect_rel_close(got_lp, want_lp, 2e-4, name + " logp");
    expect_rel_close(got_h, want_h, 2e-4, name + " entropy");
    checked++;
  }
  EXPECT_GT(checked, 0) << "no model directory with a reference.json under " << dir;
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaModel, ::testing::Values("tiny", "untied"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace azr::model
