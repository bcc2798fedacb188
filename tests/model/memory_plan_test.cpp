// The memory plan against independent truths: the published parameter counts of Qwen2.5, the
// CPU transformer's actual allocations (its activation arena and backward scratch, which the
// fp32 plan must predict to the byte), and sizes worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/hf_config.h"
#include "model/memory_plan.h"
#include "model/presets.h"
#include "model/transformer.h"

namespace azr::model {
namespace {

ModelConfig qwen(const std::string& size) {
  return load_config(std::string(AZR_SOURCE_DIR) + "/tests/model/configs/qwen2.5-" + size + ".json");
}

constexpr double kGiB = double(1ull << 30);

TEST(MemoryPlan, ParameterCountsAreThePublishedOnes) {
  // ../shared/research/qwen2.md 1.1: 0.5B = 494,032,768 (its model.safetensors is that many bf16
  // values plus a header), 1.5B = 1,543,714,304, 7B = 7,615,616,512 (untied: its head is
  // counted); 3B = 3,085,938,688 ("3.09B" on its card).
  EXPECT_EQ(plan_memory(qwen("0.5b"), {}).parameters, 494032768);
  EXPECT_EQ(plan_memory(qwen("1.5b"), {}).parameters, 1543714304);
  EXPECT_EQ(plan_memory(qwen("3b"), {}).parameters, 3085938688);
  EXPECT_EQ(plan_memory(qwen("7b"), {}).parameters, 7615616512);
}

TEST(MemoryPlan, PersistentStateIs18BytesPerParameterMixedAnd16Fp32) {
  const ModelConfig c = qwen("1.5b");
  const double P = 1543714304.0;
  MemoryPlanSettings s;
  const MemoryPlan mixed = plan_memory(c, s);
  EXPECT_EQ(mixed.weights, 2 * P);
  EXPECT_EQ(mixed.master_weights, 4 * P);
  EXPECT_EQ(mixed.gradients, 4 * P);
  EXPECT_EQ(mixed.adam, 8 * P);
  EXPECT_EQ(mixed.persistent(), 18 * P);
  s.precision = Precision::Fp32;
  EXPECT_EQ(plan_memory(c, s).persistent(), 16 * P);
}

// A training step's allocations against the plan for its batch shape: a model of config c on
// `ops` scores `batch` for backward (which carves the activation arena for exactly this shape) and
// runs backward (which carves its scratch); the plan of `precision` for the same shape.
struct Carved {
  double activations, backward_scratch, gemm_inputs;
  MemoryPlan plan;
};
Carved carve_and_plan(const ModelConfig& c, const kernels::Ops& ops, Precision precision, bool recompute) {
  const SequenceBatch batch = SequenceBatch::from({std::vector<int32_t>(17, 5), std::vector<int32_t>(9, 7),
                                                   std::vector<int32_t>(13, 3)});
  Transformer m = Transformer::random(c, 1, 0.02f, ops);
  m.set_recompute(recompute);
  m.score(batch, 1.f, /*for_backward=*/true);
  m.backward(std::vector<float>(size_t(batch.B * batch.T), 1.f), {});
  MemoryPlanSettings s;
  s.precision = precision;
  s.micro_batch = batch.B;
  s.seq_len = batch.T;
  s.recompute = recompute;
  return {double(m.activation_bytes()), double(m.backward_scratch_bytes()), double(m.gemm_input_bytes()),
          plan_memory(c, s)};
}

// The fp32 plan is the CPU transformer's allocation, with and without recomputation.
TEST(MemoryPlan, Fp32PlanPredictsTheTransformersAllocationsExactly) {
  for (bool recompute : {false, true}) {
    const Carved m = carve_and_plan(preset_config("azr-tiny"), kernels::cpu_ops(), Precision::Fp32, recompute);
    EXPECT_EQ(m.plan.activations, m.activations) << "recompute " << recompute;
    EXPECT_EQ(m.plan.backward_scratch, m.backward_scratch) << "recompute " << recompute;
  }
}

// By hand, for H 8, I 16, 2 layers, 2 heads of 4 (1 KV head), bf16 activations, 3 x 5 tokens.
// Per token: the residual stream, 3 x 8 bf16 (48 B); per layer slot 3*8 + 2*8 + 2*4 + 2*16 = 80
// bf16 values (160 B) and 2 + 2 fp32 (16 B) = 176 B; once, the final norm's output and tmp [8
// each] and act [16] in bf16 (64 B) and the final rstd (4 B) = 68 B. Kept (2 slots): 15 * (48 +
// 352 + 68) = 7020. Recomputed (1 slot): 15 * (48 + 176 + 68) = 4380.
TEST(MemoryPlan, ActivationsAndRecomputationByHand) {
  ModelConfig c = preset_config("azr-tiny");
  c.hidden_size = 8, c.intermediate_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 2;
  c.num_key_value_heads = 1, c.head_dim = 4;
  MemoryPlanSettings s;
  s.micro_batch = 3, s.seq_len = 5;
  EXPECT_EQ(plan_memory(c, s).activations, 7020.0);
  s.recompute = true;
  EXPECT_EQ(plan_memory(c, s).activations, 4380.0);
  // backward scratch: (2*8 + 2*8 + 2*4 + 3*16) = 88 bf16 values per token
  EXPECT_EQ(plan_memory(c, s).backward_scratch, 15.0 * 88 * 2);
}

// 1.5B's KV cache, 256 sequences of 4096 positions: 2 (k, v) x 28 layers x 256 x 4096 x 256
// (2 KV heads x 128) x 2 bytes = 28 GiB exactly.
TEST(MemoryPlan, KvCacheByHand) {
  MemoryPlanSettings s;
  s.kv_slots = 256, s.kv_capacity = 4096;
  EXPECT_EQ(plan_memory(qwen("1.5b"), s).kv_cache, 28.0 * kGiB);
}

TEST(MemoryPlan, MaxMicroBatchIsTheLargestThatFits) {
  for (const char* size : {"0.5b", "1.5b", "3b"}) {
    for (bool recompute : {false, true}) {
      MemoryPlanSettings s;
      s.seq_len = 8192, s.recompute = recompute;
      const int64_t mb = max_micro_batch(qwen(size), s, 80 * kGiB);
      ASSERT_GE(mb, 1) << size;
      s.micro_batch = mb;
      EXPECT_LE(plan_memory(qwen(size), s).training_peak(), 80 * kGiB) << size;
      s.micro_batch = mb + 1;
      EXPECT_GT(plan_memory(qwen(size), s).training_peak(), 80 * kGiB) << size;
    }
  }
}

// The LM head keeps the forward's logits for backward while the micro-batch's rows fit
// kHeadKeepFloats, and holds one tile past that: the training peak drops where the keeping stops
// (0.5B at 257-token sequences: 27 sequences keep 3.9 GiB of logits, 28 keep none). For budgets
// across that drop, the answer is the largest micro-batch that fits, found by trying each one.
TEST(MemoryPlan, MaxMicroBatchIsTheLargestThatFitsAcrossTheKeptLogitsDrop) {
  const ModelConfig c = qwen("0.5b");
  for (const Precision precision : {Precision::Fp32, Precision::Fp32Bf16Gemm, Precision::Bf16Mixed}) {
    MemoryPlanSettings s;
    s.precision = precision, s.seq_len = 257;
    auto peak = [&](int64_t mb) {
      MemoryPlanSettings t = s;
      t.micro_batch = mb;
      return plan_memory(c, t).training_peak();
    };
    int64_t last_keep = 0;
    while (plan_head_tiles((last_keep + 1) * (s.seq_len - 1), c.vocab_size, true).keep) last_keep++;
    ASSERT_EQ(last_keep, 27);
    ASSERT_GT(peak(last_keep), peak(last_keep + 1)) << precision_name(precision);  // the drop
    std::vector<double> peaks(201);  // peaks[mb]
    for (int64_t mb = 1; mb <= 200; mb++) peaks[size_t(mb)] = peak(mb);
    for (double budget = peaks[1]; budget <= peaks[80]; budget += 0.25 * kGiB) {
      int64_t want = 0;
      for (int64_t mb = 1; mb <= 200; mb++)
        if (peaks[size_t(mb)] <= budget) want = mb;
      EXPECT_EQ(max_micro_batch(c, s, budget), want)
          << precision_name(precision) << ", budget " << budget / kGiB << " GiB";
    }
  }
}

// The targets: Qwen2.5-1.5B RL fits one 80 GB GPU as is; 3B needs recomputation at long
// sequences (16k tokens: its 18 bytes/parameter leave ~25 GiB, less than one sequence's activations).
TEST(MemoryPlan, OneAndAHalfBFitsEightyGigabytesAndThreeBNeedsRecompute) {
  MemoryPlanSettings s;
  s.seq_len = 16384;
  EXPECT_GE(max_micro_batch(qwen("1.5b"), s, 80 * kGiB), 1);
  EXPECT_EQ(max_micro_batch(qwen("3b"), s, 80 * kGiB), 0);
  s.recompute = true;
  EXPECT_GE(max_micro_batch(qwen("3b"), s, 80 * kGiB), 1);
}

// azr-tiny's activations fit millions of tokens in a large budget; the CUDA kernels' grids bound
// the micro-batch: 2,097,120 tokens / 1,024 = 2,047 sequences, and at 16 tokens (131,070 by
// tokens) the 65,535 sequences of a grid's rows.
TEST(MemoryPlan, MaxMicroBatchStaysWithinTheKernelsGrids) {
  MemoryPlanSettings s;
  s.seq_len = 1024;
  EXPECT_EQ(micro_batch_limit(1024), 2047);
  EXPECT_EQ(max_micro_batch(preset_config("azr-tiny"), s, 1000 * kGiB), 2047);
  s.seq_len = 16;
  EXPECT_EQ(micro_batch_limit(16), 65535);
  EXPECT_EQ(max_micro_batch(preset_config("azr-tiny"), s, 1000 * kGiB), 65535);
}

TEST(MemoryPlan, NothingFitsWhenThePersistentStateDoesNot) {
  MemoryPlanSettings s;
  EXPECT_EQ(max_micro_batch(qwen("7b"), s, 80 * kGiB), 0);  // 18 x 7.6B = 137 GB: 7B needs ZeRO-1
  s.reserve_bytes = 0;
  const double persistent = 18.0 * 1543714304.0;
  EXPECT_EQ(max_micro_batch(qwen("1.5b"), s, persistent), 0);  // no room for one token's activations
}

// fp32+bf16-gemm (model.matmul_precision = "bf16" on a GPU): the fp32 plan, plus the bf16 copy
// of the weights, the two bf16 rounding buffers, attention's rounded k and v and the norms'
// rounded outputs, the tensor-core attention's per-query-head shares of dK and dV (2 x N x q_dim
// fp32) with the mma.sync backward's bf16 q, dout, k and v after them (N x (2 q_dim + 2 kv_dim)),
// or the WMMA backward's widened fp32 copies of the kept bf16 q, k and v after the shares (N x
// (3 q_dim + 2 kv_dim) fp32, attention_backward_w16), or the mma.sync forward's bf16 q, k and v
// (rows x (q_dim + 2 kv_dim)), the largest, with the KV cache in bf16, sized by hand. Qwen2.5-1.5B, one sequence of 4096
// tokens: the widest GEMM input is the down projection's 4096 x 8960 = 36,700,160 values, and so
// is the widest output gradient (the LM head's tile, its 4,095 rows x 4,096 columns = 16,773,120,
// is narrower); k and v are 4096 x 256 fp32 each; the producers' bf16 roundings (a norm's,
// SwiGLU's) 4096 x 8960; q_dim 1536.
TEST(MemoryPlan, Bf16GemmProfileAddsTheWeightCopyAndTheRoundingScratch) {
  const ModelConfig c = qwen("1.5b");
  const double P = 1543714304.0;
  MemoryPlanSettings s;
  s.precision = Precision::Fp32;
  s.seq_len = 4096;
  s.kv_slots = 8, s.kv_capacity = 500;  // a prefill of 8 x 500 tokens rounds fewer rows than training's 4096
  const MemoryPlan fp32 = plan_memory(c, s);
  s.precision = Precision::Fp32Bf16Gemm;
  const MemoryPlan g = plan_memory(c, s);
  EXPECT_EQ(g.weights, 2 * P);
  EXPECT_EQ(g.master_weights, 4 * P);
  EXPECT_EQ(g.gemm_scratch, 2.0 * 36700160.0 + 2.0 * 4096 * 256 * 4 + 4096.0 * (3 * 1536 + 2 * 256) * 4);
  // The GEMM inputs' bf16 rounding, freed after each update: the learner's 4,096 rows of the MLP's
  // 8,960; a generation's 4,000 of its prefill.
  EXPECT_EQ(g.gemm_inputs, 36700160.0 * 2);
  EXPECT_EQ(g.generation_gemm_inputs, 4000.0 * 8960 * 2);
  EXPECT_EQ(fp32.gemm_inputs + fp32.generation_gemm_inputs, 0.0);
  // The head's tile of dlogits, written in bf16 by its producer: with the head, not the GEMMs.
  EXPECT_EQ(g.lm_head, fp32.lm_head + 16773120.0 * 2);
  EXPECT_EQ(g.persistent(), 18 * P + g.gemm_scratch);
  // Activations stay fp32, less SwiGLU's fp32 output (4096 x 8960), which a bf16 model never
  // writes, and with each layer's two norm outputs (4096 x 1536 each) kept in bf16 only, and its
  // gate and up (2 x 4096 x 8960) too, in half their fp32 slots; each layer keeps SwiGLU's bf16
  // output (4096 x 8960) for backward.
  EXPECT_EQ(g.activations, fp32.activations - 36700160.0 * 4 - 28 * 2 * 4096.0 * 1536 * 2 - 28 * 36700160.0 * 4 +
                               28 * 36700160.0 * 2);
  // Backward: dres, dln, datt, dq [1536], dk, dv [256] and dact [8960] in fp32; fp32 dgate and dup
  // [2 x 8960], or bf16 dgate, dup and the other products' gradients [2 x 8960 + max(1536, 1536 + 2 x 256)].
  EXPECT_EQ(fp32.backward_scratch, 4096.0 * (2 * 1536 + 2 * 1536 + 2 * 256 + 3 * 8960) * 4);
  EXPECT_EQ(g.backward_scratch, 4096.0 * (2 * 1536 + 2 * 1536 + 2 * 256 + 8960) * 4 + 4096.0 * (2 * 8960 + 2048) * 2);
  // The ordered gradient sums' scratch (kernels/cuda/ordered_sums_limits.h), by hand at 4,096 rows
  // of 1,536 with biases 2,048 wide: RMSNorm's 512 partials of 1,536 floats (more than a column
  // sum's 512 x 1,024 + 2,048 + 512); the sort's 3 x 4,096 int32, CUB's 8 x 4,096 bytes and 1 MiB;
  // heads and tails of 4,096 / 32 + 1 pieces; 1,025 doubles. Any precision.
  EXPECT_EQ(g.gradient_sums, 512.0 * 1536 * 4 + (12.0 * 4096 + 8.0 * 4096 + 1048576) + 2.0 * 129 * 1536 * 4 + 8200);
  EXPECT_EQ(fp32.gradient_sums, g.gradient_sums);
  EXPECT_EQ(g.kv_cache, 2.0 * 28 * 8 * 500 * 256 * 2);  // k and v, 28 layers, 8 x 500 positions, bf16
  EXPECT_EQ(fp32.kv_cache, 2 * g.kv_cache);
  EXPECT_EQ(parse_precision("fp32+bf16-gemm"), Precision::Fp32Bf16Gemm);
  EXPECT_STREQ(precision_name(Precision::Fp32Bf16Gemm), "fp32+bf16-gemm");
  // azr-tiny (hidden size 128, q_dim 128), 2 x 64 tokens: the MLP's 128 x 352 is the widest
  // input; no GEMM rounds an output gradient (the layers' and the head's come in bf16). With MLP
  // biases the layers' fp32 output gradients are rounded by the GEMMs, the widest 128 x 352, and so
  // is the LM head's, its 2 x 63 rows x 263 kept logits, narrower.
  s.seq_len = 64;
  s.micro_batch = 2;
  s.kv_slots = 0;
  ModelConfig tiny = preset_config("azr-tiny");
  EXPECT_EQ(plan_memory(tiny, s).gemm_scratch, 2.0 * 45056.0 + 2.0 * 128 * 64 * 4 + 128.0 * (3 * 128 + 2 * 64) * 4);
  EXPECT_EQ(plan_memory(tiny, s).gemm_inputs, 45056.0 * 2);
  EXPECT_EQ(plan_memory(tiny, s).generation_gemm_inputs, 0.0);  // no generation
  tiny.mlp_bias = true;
  EXPECT_EQ(plan_memory(tiny, s).gemm_scratch,
            2.0 * (45056.0 + 45056.0) + 2.0 * 128 * 64 * 4 + 128.0 * (3 * 128 + 2 * 64) * 4);
  tiny.mlp_bias = false;
  // A prefill group of 8 prompts x 500 tokens rounds 4000 rows of the MLP's input (352 wide), and
  // its k and v: more than the 128 training rows; no output gradient is rounded by a GEMM.
  // The mma.sync forward's bf16 q, k, v for those rows, 4000 x (128 + 2 x 64), outgrow the 128
  // rows' dK/dV shares.
  s.kv_slots = 8;
  EXPECT_EQ(plan_memory(tiny, s).gemm_scratch, 2.0 * 4000.0 * 352 + 2.0 * 4000 * 64 * 4 + 4000.0 * 256 * 2);
  EXPECT_EQ(plan_memory(tiny, s).gemm_inputs, 4000.0 * 352 * 2);
  EXPECT_EQ(plan_memory(tiny, s).generation_gemm_inputs, 4000.0 * 352 * 2);
}

// With bf16 GEMMs the plan is the CPU Bf16 table's transformer to the byte as well (the table the
// GPU's is checked against, with the same arena and scratch): no fp32 SwiGLU output, the norm
// outputs and the backward's output gradients in bf16; with MLP biases, or a hidden size that is
// not a multiple of 8, the fp32 norm outputs, dgate and dup.
TEST(MemoryPlan, Bf16GemmPlanPredictsTheBf16TransformersAllocationsExactly) {
  for (int variant : {0, 1, 2})
    for (bool recompute : {false, true}) {
      ModelConfig c = preset_config("azr-tiny");
      c.mlp_bias = variant == 1;
      if (variant == 2) c.hidden_size = 132, c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 66;
      EXPECT_EQ(bf16_training_buffers(c), variant == 0);
      const Carved m = carve_and_plan(c, kernels::cpu_bf16_matmul_ops(), Precision::Fp32Bf16Gemm, recompute);
      const Carved fp32 = carve_and_plan(c, kernels::cpu_ops(), Precision::Fp32, recompute);
      const std::string what = "variant " + std::to_string(variant) + ", recompute " + (recompute ? "on" : "off");
      EXPECT_EQ(m.plan.activations, m.activations) << what;
      EXPECT_EQ(m.plan.backward_scratch, m.backward_scratch) << what;
      // An upper bound (rows x the widest input): with bf16 training buffers the layers keep their
      // norms' and SwiGLU's roundings in their slots, and only the head's input comes here.
      EXPECT_LE(m.gemm_inputs, m.plan.gemm_inputs) << what;
      EXPECT_GT(m.gemm_inputs, 0.0) << what;
      EXPECT_EQ(fp32.plan.gemm_inputs, 0.0) << what;
      EXPECT_EQ(fp32.gemm_inputs, 0.0) << what;
      EXPECT_EQ(fp32.plan.activations, fp32.activations) << what;
      EXPECT_LT(m.activations, fp32.activations) << what;
      if (variant != 0) EXPECT_EQ(m.backward_scratch, fp32.backward_scratch) << what;
      else EXPECT_LT(m.backward_scratch, fp32.backward_scratch) << what;
    }
}

// Prefill keeps one layer's activations for one group of prompts (Transformer::prefill_on_backend):
// the fp32 plan is the CPU transformer's arena to the byte after a prefill of prompts as long as
// the cache, in groups of two (30 tokens / 12 per prompt), and the logits [slots, V] beside it.
TEST(MemoryPlan, Fp32PlanPredictsThePrefillsAllocationExactly) {
  const ModelConfig c = preset_config("azr-tiny");
  const int64_t slots = 5, capacity = 12;
  Transformer m = Transformer::random(c, 1);
  m.set_prefill_group_tokens(30);
  KVCache cache(c, slots, capacity);
  // Distinct prompts: the plan is for the worst case, and identical ones would be computed once.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t b = 0; b < slots; b++) prompts.push_back(std::vector<int32_t>(12, 3 + b));
  m.prefill(cache, SequenceBatch::from(prompts));
  MemoryPlanSettings s;
  s.precision = Precision::Fp32;
  s.kv_slots = slots, s.kv_capacity = capacity, s.prefill_group_tokens = 30;
  const MemoryPlan p = plan_memory(c, s);
  EXPECT_EQ(p.prefill_activations, double(m.activation_bytes()));
  EXPECT_EQ(p.prefill_logits, double(slots * c.vocab_size * 4));
}

// The GEMM inputs' bf16 rounding on the CPU's Bf16 table, within the plan's bounds for each phase:
// a training step grows it within gemm_inputs; released after the update
// (Transformer::release_training_buffers), a prefill of prompts as long as the cache in groups of
// two and a decode step of every slot grow it within generation_gemm_inputs, the larger prefill's
// rows (2 x 12) of the MLP's 352, not the learner's 73.
TEST(MemoryPlan, Bf16PlanBoundsTheGemmInputsOfEachPhase) {
  const ModelConfig c = preset_config("azr-tiny");
  const int64_t slots = 5, capacity = 12;
  Transformer m = Transformer::random(c, 1, 0.02f, kernels::cpu_bf16_matmul_ops());
  m.set_prefill_group_tokens(30);
  const SequenceBatch batch = SequenceBatch::from({std::vector<int32_t>(40, 5), std::vector<int32_t>(33, 7)});
  m.score(batch, 1.f, /*for_backward=*/true);
  m.backward(std::vector<float>(size_t(batch.B * batch.T), 1.f), {});
  MemoryPlanSettings s;
  s.precision = Precision::Fp32Bf16Gemm;
  s.micro_batch = batch.B, s.seq_len = batch.T;
  s.kv_slots = slots, s.kv_capacity = capacity, s.prefill_group_tokens = 30;
  const MemoryPlan p = plan_memory(c, s);
  EXPECT_LE(double(m.gemm_input_bytes()), p.gemm_inputs);
  EXPECT_GT(m.gemm_input_bytes(), 0u);
  m.release_training_buffers();
  EXPECT_EQ(m.gemm_input_bytes(), 0u);
  KVCache cache(c, slots, capacity, kernels::cpu_bf16_matmul_ops());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t b = 0; b < slots; b++) prompts.push_back(std::vector<int32_t>(capacity, 3 + b));
  m.prefill(cache, SequenceBatch::from(prompts));
  std::vector<int32_t> tokens(static_cast<size_t>(slots), 5), slot(static_cast<size_t>(slots));
  std::vector<int32_t> pos(static_cast<size_t>(slots), int32_t(capacity - 1));
  for (int32_t r = 0; r < slots; r++) slot[size_t(r)] = r;
  std::vector<float> logits;
  m.decode(cache, tokens, slot, pos, logits);
  EXPECT_LE(double(m.gemm_input_bytes()), p.generation_gemm_inputs);
  EXPECT_GT(m.gemm_input_bytes(), 0u);
  EXPECT_EQ(p.generation_gemm_inputs, 2.0 * 12 * 352 * 2);
  EXPECT_LT(p.generation_gemm_inputs, p.gemm_inputs);
}

// One decode step of every slot (Transformer::decode_on_backend's buffers: the residual stream
// and its scratch, q, attention and the q/k/v GEMM's rows, gate and up, rstd and the logits): the
// fp32 plan is the CPU transformer's arena to the byte, on the fp32 table and on the bf16 one
// (whose few-row and many-row paths use the same buffers), at a few rows and at many.
TEST(MemoryPlan, PlanPredictsTheDecodeStepsAllocationExactly) {
  const ModelConfig c = preset_config("azr-tiny");
  for (const kernels::Ops* ops : {&kernels::cpu_ops(), &kernels::cpu_bf16_matmul_ops()})
    for (const int64_t slots : {int64_t(3), kernels::kDecodeFusedMaxRows + 4}) {
      Transformer m = Transformer::random(c, 1, 0.02f, *ops);
      KVCache cache(c, slots, 8, *ops);
      const size_t n = static_cast<size_t>(slots);
      std::vector<int32_t> tokens(n, 5), slot(n), pos(n, 0);
      for (int64_t r = 0; r < slots; r++) slot[size_t(r)] = int32_t(r);
      std::vector<float> logits;
      m.decode(cache, tokens, slot, pos, logits);
      MemoryPlanSettings s;
      s.precision = Precision::Fp32;
      s.kv_slots = slots, s.kv_capacity = 8;
      EXPECT_EQ(plan_memory(c, s).decode_buffers, double(m.activation_bytes())) << ops->name << ", " << slots << " rows";
    }
}

// The head's tiles by hand (memory_plan.h): whole rows in a 16Mi-float tile; else column blocks, a
// multiple of 256 wide; rows split only below 1,024 columns. For backward, kept while R x V <=
// 1Gi floats and the blocks hold every row: 7,067 x 151,936 = 1,073,731,712 is kept, 7,068 rows
// (1,073,883,648) are not.
TEST(MemoryPlan, HeadTilesByHand) {
  EXPECT_EQ(plan_head_tiles(4095, 151936, true), (HeadTiles{4095, 4096, true}));    // 16Mi / 4095 = 4096.9
  EXPECT_EQ(plan_head_tiles(4095, 151936, false), (HeadTiles{4095, 4096, false}));  // scoring keeps nothing
  EXPECT_EQ(plan_head_tiles(441, 151936, true), (HeadTiles{441, 37888, true}));     // 16Mi / 441 = 38,043.6
  EXPECT_EQ(plan_head_tiles(7067, 151936, true), (HeadTiles{7067, 2304, true}));    // 16Mi / 7067 = 2,374.0
  EXPECT_EQ(plan_head_tiles(7068, 151936, true), (HeadTiles{7068, 2304, false}));   // past 1Gi floats
  EXPECT_EQ(plan_head_tiles(110, 151936, false), (HeadTiles{110, 151936, false}));  // 16.7M floats: one tile
  EXPECT_EQ(plan_head_tiles(110, 151936, true), (HeadTiles{110, 151936, true}));
  EXPECT_EQ(plan_head_tiles(32768, 151936, true), (HeadTiles{16384, 1024, false})); // 512 columns: too few
  EXPECT_EQ(plan_head_tiles(100000, 263, true), (HeadTiles{63791, 263, false}));    // 16Mi / 263: row blocks
  EXPECT_EQ(plan_head_tiles(0, 263, true), (HeadTiles{1, 263, true}));
}

// The plan's LM head is the transformer's head buffers to the byte (Transformer::head_bytes) after
// score(for_backward) and backward(), for sequences of seq_len tokens: kept logits in one block
// (azr-tiny), kept in column blocks (a vocabulary of 140,000 and 599 head rows: 83.9M logits), and
// row blocks, not kept (4,200 columns and 16,400 head rows: 68.9M logits, and 768 columns would
// fit a tile, fewer than 1,024). In fp32, and with bf16 GEMMs on the CPU's Bf16 table, where the configs of hidden size 16
// have bf16 output gradients (bf16_training_buffers) and so the tile's dlogits in bf16 as well.
TEST(MemoryPlan, PlanPredictsTheLmHeadsAllocationExactly) {
  struct Shape {
    int64_t vocab, hidden, B, T;
    HeadTiles tiles;
  };
  for (const Shape& sh : {Shape{263, 128, 3, 17, {48, 263, true}}, Shape{140000, 16, 1, 600, {599, 27904, true}},
                          Shape{4200, 16, 4, 4101, {16384, 1024, false}}}) {
    SCOPED_TRACE("vocabulary " + std::to_string(sh.vocab));
    ModelConfig c = preset_config("azr-tiny");
    c.vocab_size = sh.vocab, c.hidden_size = sh.hidden, c.intermediate_size = 32, c.num_hidden_layers = 1;
    c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8;
    EXPECT_EQ(plan_head_tiles(sh.B * (sh.T - 1), sh.vocab, true), sh.tiles);
    EXPECT_EQ(bf16_training_buffers(c), sh.hidden == 16);
    const SequenceBatch batch = SequenceBatch::from(
        std::vector<std::vector<int32_t>>(size_t(sh.B), std::vector<int32_t>(size_t(sh.T), 3)));
    for (const bool bf16 : {false, true}) {
      Transformer m = Transformer::random(c, 1, 0.02f, bf16 ? kernels::cpu_bf16_matmul_ops() : kernels::cpu_ops());
      m.score(batch, 1.f, /*for_backward=*/true);
      m.backward(std::vector<float>(size_t(sh.B * sh.T), 1.f), {});
      MemoryPlanSettings s;
      s.precision = bf16 ? Precision::Fp32Bf16Gemm : Precision::Fp32;
      s.micro_batch = sh.B, s.seq_len = sh.T;
      const MemoryPlan p = plan_memory(c, s);
      EXPECT_EQ(p.lm_head, double(m.head_bytes())) << (bf16 ? "bf16" : "fp32");
      if (bf16 && sh.hidden == 16) {  // the bf16 dlogits tile: rows x columns x 2 bytes more than fp32's
        MemoryPlanSettings fp32 = s;
        fp32.precision = Precision::Fp32;
        EXPECT_EQ(p.lm_head - plan_memory(c, fp32).lm_head, double(sh.tiles.rows) * double(sh.tiles.cols) * 2);
      }
    }
  }
}

// Qwen2.5-1.5B, 256 slots of 4096 positions: groups of 16384 / 4096 = 4 prompts, 16,384 tokens.
// Per token: the residual stream's two buffers 2 x 1536; one layer slot 3 x 1536 + 2 x 1536 +
// 2 x 256 + 2 x 8960 = 26,112 values and 2 + 12 fp32; the tail 2 x 1536 + 8960 and one rstd:
// (3072 + 26112 + 12032) x 4 + 14 x 4 + 4 = 164,924 bytes. Logits: 256 x 151,936 x 4.
TEST(MemoryPlan, PrefillByHand) {
  MemoryPlanSettings s;
  s.precision = Precision::Fp32;
  s.kv_slots = 256, s.kv_capacity = 4096;
  const MemoryPlan p = plan_memory(qwen("1.5b"), s);
  EXPECT_EQ(p.prefill_activations, 16384.0 * 164924);
  EXPECT_EQ(p.prefill_logits, 256.0 * 151936 * 4);
  EXPECT_EQ(p.generation_peak(),
            p.persistent() + p.kv_cache + p.prefill_activations + p.prefill_logits + p.sampler + p.reserve);
  s.kv_slots = 0;
  EXPECT_EQ(plan_memory(qwen("1.5b"), s).prefill_activations, 0.0);
}

// The CUDA sampler's scratch (memory_plan.h's `sampler`, kernels/cuda/sampling.cu) by hand, per
// row: a 4-byte ticket; at most 128 parts of 4 + 8 + 16 bytes, at least 4, and 512 in all below
// that; and for top-k / top-p, up to 256 rows at once, 2,048 bins of 4 + 8 bytes, 8 + 4 + 4 bytes
// of total, last bin and list count, and a list of 16,384 keys of 8 bytes: 155,664 bytes a row.
// Past 65,535 rows a row is one block's and there is no scratch.
TEST(MemoryPlan, SamplerScratchByHand) {
  auto sampler = [](int64_t slots) {
    MemoryPlanSettings s;
    s.kv_slots = slots, s.kv_capacity = 64;
    return plan_memory(qwen("1.5b"), s).sampler;
  };
  EXPECT_EQ(sampler(0), 0.0);
  EXPECT_EQ(sampler(1), 128.0 * 28 + 4 + 155664);                   // 128 parts: the cap
  EXPECT_EQ(sampler(256), 1024.0 * 28 + 256 * 4 + 256 * 155664.0);  // 4 parts a row
  EXPECT_EQ(sampler(100), 512.0 * 28 + 100 * 4 + 100 * 155664.0);   // 512 parts in all
  EXPECT_EQ(sampler(4096), 16384.0 * 28 + 4096 * 4 + 256 * 155664.0);
  EXPECT_EQ(sampler(70000), 0.0);
  MemoryPlanSettings s;
  s.kv_slots = 256, s.kv_capacity = 64;
  const std::string table = format_memory_plan(plan_memory(qwen("1.5b"), s), s);
  EXPECT_NE(table.find("sampler scratch             0.04 GiB"), std::string::npos) << table;
}

TEST(MemoryPlan, BadSettingsAndPrecisionNamesAreErrors) {
  MemoryPlanSettings s;
  s.seq_len = 0;
  EXPECT_THROW(plan_memory(qwen("0.5b"), s), std::invalid_argument);
  EXPECT_EQ(parse_precision("fp32"), Precision::Fp32);
  EXPECT_EQ(parse_precision("bf16-mixed"), Precision::Bf16Mixed);
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace azr::model
