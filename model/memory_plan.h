#pragma once
// Where a run's device memory goes, from the model config and the run's shapes alone, and the
// largest training micro-batch that fits a budget. The byte counts mirror the buffers the
// trainer allocates (model/transformer.cpp's activation arena and backward scratch, the chunked
// LM head, the KV cache), so the plan is a prediction of the allocation, not a rule of thumb.
//
// Precision profiles:
//   fp32       the CPU backend: fp32 weights (no separate master copy), fp32 everything.
//   fp32+bf16-gemm  what model.matmul_precision = "bf16" allocates on a GPU today: the fp32 model
//              (weights as master), its bf16 copy of the weights, the bf16 scratch its GEMMs
//              round activations into (the largest GEMM input and output gradient, held once
//              grown), attention's rounded fp32 copies of k and v, and a bf16 KV cache. 18 bytes
//              per parameter before any activation, activations fp32.
//   bf16-mixed the GPU plan of DESIGN.md: bf16 compute weights, activations and KV cache; fp32
//              master weights, gradients (so micro-batches accumulate in fp32) and AdamW m, v.
//              18 bytes per parameter before any activation.
//
// Training and generation alternate within a step and never hold their buffers at once (the KV
// cache is freed before the learner runs, and the learner's activations, backward scratch, LM
// head tiles and GEMM-input rounding after it: Transformer::release_training_buffers, called by
// trainer/policy.cpp since 2026-11-29; before, they stayed grown under the next generation's
// cache), so the peak is the larger of the two phases on top of the persistent state (weights,
// master, gradients, Adam, the ops' GEMM rounding scratch). The ops' own grow-only scratch
// (attention, GEMM rounding, ordered sums, sampler) is not released: the GEMM rounding's is
// counted in both phases, the ordered sums' (training) and the sampler's (generation) only in the
// phase that grows them, tens of MiB under the other, small beside the plan's 2 GiB reserve.
#include <cstdint>
#include <string>
#include <string_view>

#include "model/hf_config.h"

namespace azr::model {

enum class Precision { Fp32, Bf16Mixed, Fp32Bf16Gemm };
// "fp32" | "bf16-mixed" | "fp32+bf16-gemm"; throws std::invalid_argument
Precision parse_precision(std::string_view s);
const char* precision_name(Precision p);

// Transformer's default group size for prefill: one layer's fp32 activations of 16,384 tokens,
// about 2.5 GiB at Qwen2.5-1.5B.
inline constexpr int64_t kDefaultPrefillGroupTokens = 16384;

// The LM head's tiles (Transformer::score and backward): the logits of `rows` head rows (tokens
// that predict a token) by `cols` columns of the vocabulary exist at once, never R x V unless
// `keep`. The vocabulary is split before the rows, so that each GEMM of the head runs over every
// row: the head's weight gradient is then written once per column block, where row blocks would
// read and write all of it (V x H fp32) once per block.
// - tiles of at most kHeadTileFloats: the whole rows when they fit, else column blocks of a
//   multiple of kHeadColAlign columns, and only when even kHeadMinCols columns of every row do
//   not fit, row blocks too;
// - keep: for backward, while R x V logits fit kHeadKeepFloats and the tiles are column blocks
//   of every row, score() keeps each block's logits, one block after the other (block by block:
//   the block from column v0 at v0 x R), for backward() to read instead of making them again. At
//   Qwen2.5-1.5B and 4 x 1,024 tokens that second GEMM would be 1.9 TFLOP (5% of the step's,
//   about 3.6 ms at the H100's measured 535 TFLOP/s), against 2.5 GB of kept logits.
inline constexpr int64_t kHeadKeepFloats = int64_t(1) << 30;  // 4 GiB of fp32 logits
inline constexpr int64_t kHeadTileFloats = int64_t(16) << 20;  // 64 MiB
inline constexpr int64_t kHeadMinCols = 1024;
inline constexpr int64_t kHeadColAlign = 256;
struct HeadTiles {
  int64_t rows = 0, cols = 0;
  bool keep = false;
  bool operator==(const HeadTiles&) const = default;
};
HeadTiles plan_head_tiles(int64_t R, int64_t V, bool for_backward);

// Whether a model with bf16 GEMMs keeps in bf16 the training buffers that only bf16 GEMMs read:
// its norm outputs (ln1, ln2: only their roundings are GEMM inputs), SwiGLU's output (kept for
// backward, not made again) and its backward's GEMM output gradients
// (Transformer::layer_backward_grads16). Needs no MLP biases (whose gradients are column sums of
// the fp32 gate and up gradients); the other products' bf16 gradients [max(H, q_dim + 2 kv_dim)]
// fitting beside dgate and dup in the space the fp32 dgate and dup [2 I] take; and a hidden and
// an intermediate size that are multiples of 8, so a bf16 row is whole 16-byte pieces and every
// tensor carved after one stays 16-byte aligned for the GPU's loads.
bool bf16_training_buffers(const ModelConfig& c);

// What a run holds beside the plan's terms. On a GPU: the CUDA context, cuBLASLt's workspace and
// the caching allocator's fragmentation. On the CPU none of those: the program, the tokenizer,
// the sandbox pool's supervisor and malloc's slack (the tiny fixture's run held 0.22 GiB at step
// 0). The GPU's 2 GiB on the CPU planned a 0.77M-parameter model out of model.memory_gib = 1.
constexpr double kGpuReserveBytes = double(2ull << 30);
constexpr double kCpuReserveBytes = double(1ull << 29);
// The reserve of a device name as model.device spells it ("cuda"; "cpu" and "cpu-guarded" run on
// the CPU).
inline double reserve_bytes_for(std::string_view device) {
  return device == "cuda" ? kGpuReserveBytes : kCpuReserveBytes;
}

struct MemoryPlanSettings {
  Precision precision = Precision::Bf16Mixed;
  int64_t seq_len = 4096;      // tokens per training sequence (prompt + response)
  int64_t micro_batch = 1;     // sequences per training micro-batch
  bool recompute = false;      // keep each layer's input only; recompute the layer in backward
  int64_t kv_slots = 0;        // generation: sequences decoded together (0 = no generation phase)
  int64_t kv_capacity = 0;     // positions per sequence in the KV cache
  // Padded prompt tokens a prefill runs at once (Transformer::set_prefill_group_tokens); the plan
  // assumes prompts as long as kv_capacity, the worst case.
  int64_t prefill_group_tokens = kDefaultPrefillGroupTokens;
  double reserve_bytes = kGpuReserveBytes;
};

struct MemoryPlan {
  int64_t parameters = 0;
  // persistent
  double weights = 0, master_weights = 0, gradients = 0, adam = 0, gemm_scratch = 0;
  // training phase; lm_head: the head's logits tile (or kept logits), gathered rows and their
  // gradients, and per-row statistics (plan_head_tiles); gemm_inputs: with bf16 GEMMs, the bf16
  // rounding of a GEMM input (Transformer::gemm_input_bytes), freed after each update
  double activations = 0, backward_scratch = 0, lm_head = 0, gemm_inputs = 0;
  // generation phase: prefill's activations (one layer, one group of prompts) and decode's
  // buffers share one arena, so the larger of the two counts; prefill's logits [slots, V] stay
  // through decode.
  double kv_cache = 0, decode_buffers = 0, prefill_activations = 0, prefill_logits = 0;
  // With bf16 GEMMs, the GEMM inputs' rounding grown again by a generation after an update: its
  // prefill group's rows or its decode step's, fewer than the learner's (gemm_inputs) as a rule.
  double generation_gemm_inputs = 0;
  // The CUDA sampler's grow-only scratch at kv_slots rows (kernels/cuda/sampling.cu), an upper
  // bound: top-k / top-p's bins and lists of kept tokens for up to 256 rows at once (38 MiB), and
  // the split rows' partial results. Counted for every precision: the CPU sampler's per-call
  // buffers are smaller.
  double sampler = 0;
  // The CUDA training step's ordered gradient sums' grow-only scratch (kernels/cuda/ordered_sums.cu,
  // ordered_sums_limits.h), an upper bound: partial sums, the embedding's sort and pieces. Counted
  // for every precision; the CPU's sums need none.
  double gradient_sums = 0;
  double reserve = 0;

  double persistent() const { return weights + master_weights + gradients + adam + gemm_scratch; }
  double training_peak() const {
    return persistent() + activations + backward_scratch + lm_head + gemm_inputs + gradient_sums + reserve;
  }
  double generation_peak() const {
    return persistent() + kv_cache + (decode_buffers > prefill_activations ? decode_buffers : prefill_activations) +
           prefill_logits + generation_gemm_inputs + sampler + reserve;
  }
  double peak() const { return training_peak() > generation_peak() ? training_peak() : generation_peak(); }
};

MemoryPlan plan_memory(const ModelConfig& c, const MemoryPlanSettings& s);

// The most sequences of seq_len tokens one micro-batch holds on any device, from the CUDA kernels'
// grids: the embedding's ordered gradient sums take 65,535 pieces of 32 rows a call (2,097,120
// tokens), the attention kernels a sequence a grid row (65,535). Only a small model on a large GPU
// gets near it (azr-tiny fits about 4 million tokens of activations on an H200).
int64_t micro_batch_limit(int64_t seq_len);
// "" when `micro_batch` sequences of seq_len tokens (0: the automatic choice, at least one) are
// within micro_batch_limit; otherwise why not, for the caller to prefix with its setting's name.
std::string micro_batch_limit_problem(int64_t seq_len, int64_t micro_batch);

// The largest micro-batch (settings.micro_batch ignored), up to micro_batch_limit, whose training
// peak fits `budget_bytes`; 0 when not even one sequence does. The peak drops where the LM head
// stops keeping its logits (plan_head_tiles), so a smaller micro-batch may not fit where a larger
// one does.
int64_t max_micro_batch(const ModelConfig& c, MemoryPlanSettings s, double budget_bytes);

// A table of the plan in GiB, one category per line, with the phase peaks and the budget verdict.
std::string format_memory_plan(const MemoryPlan& p, const MemoryPlanSettings& s, double budget_bytes = 0);

}  // namespace azr::model
