#pragma once
// The Qwen2/Llama decoder on the op table (kernels/ops.h): explicit forward and backward passes
// in the style of llm.c, activations kept for backward, no autograd. fp32.
//
//   x_0 = embed(ids)
//   per layer:  h = x + attn(rmsnorm(x))          q/k/v (+bias) -> RoPE -> causal GQA -> o_proj
//               x' = h + mlp(rmsnorm(h))          down(silu(gate(.)) * up(.))
//   logits = rmsnorm(x_L) lm_head^T               lm_head = embed_tokens when tied
//
// Parameters live in ONE flat buffer (and gradients in a second of the same layout), in the
// order of hf_config's expected_tensors() but for q, k and v's weights and gate and up's, each
// stored adjacent (build_layout); AdamW, grad-norm clipping and the all-reduce then each see one
// array. Tensor names are Hugging Face's, so loading and saving is a copy.
//
// Batches are right-padded: row (b, t) is real when t < lengths[b]. Scores follow the
// "position t scores token t" convention of `azr logprobs`: logp[b, t] = log p(ids[b,t] |
// ids[b,<t]), defined for 1 <= t < lengths[b] and 0 elsewhere.
#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/ops.h"
#include "model/decode_graphs.h"
#include "model/flat_range.h"
#include "model/hf_config.h"
#include "model/memory_plan.h"

namespace azr::model {

struct SequenceBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> ids;      // [B * T], right-padded with pad_id
  std::vector<int32_t> lengths;  // [B]

  // T = the longest sequence. Throws std::invalid_argument on an empty list or empty sequence.
  static SequenceBatch from(const std::vector<std::vector<int32_t>>& seqs, int32_t pad_id = 0);
};

// Per-token statistics, [B * T] each, in the convention above (index b * T + t).
struct TokenScores {
  int64_t B = 0, T = 0;
  std::vector<float> logp;     // log p(ids[b,t] | ids[b,<t]) at temperature
  std::vector<float> entropy;  // entropy of the distribution that predicted ids[b,t]
};

// Where one Hugging Face tensor lives in the flat parameter buffer.
struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t numel = 0;
};


// Keys and values of every layer for `slots` sequences of up to `capacity` positions:
// [layer][slot][position][kv_heads * head_dim], in the memory of the model's backend (pass
// model.ops()).
// On a table with a bf16 KV cache (a Bf16 table: kernels/ops.h kv_store_w16) the cache is bf16
// (k16, v16) and k, v are empty; else fp32.
struct KVCache {
  int64_t layers = 0, slots = 0, capacity = 0, row = 0;
  bool bf16 = false;
  kernels::Buffer<float> k, v;
  kernels::Buffer<uint16_t> k16, v16;

  KVCache(const ModelConfig& c, int64_t slots, int64_t capacity, const kernels::Ops& ops = kernels::cpu_ops());
  float* k_at(int64_t layer) { return k.data() + layer * slots * capacity * row; }
  float* v_at(int64_t layer) { return v.data() + layer * slots * capacity * row; }
  uint16_t* k16_at(int64_t layer) { return k16.data() + layer * slots * capacity * row; }
  uint16_t* v16_at(int64_t layer) { return v16.data() + layer * slots * capacity * row; }
  int64_t slot_stride() const { return capacity * row; }
  // Positions 0..n-1 of every layer's keys and values, from slot `from` into slot `to` (a
  // duplicate prompt's cache, which then diverges as its sequence samples its own tokens).
  void copy_positions(int64_t from, int64_t to, int64_t n);
};

// What the last prefill computed: prompts that appear more than once in a batch (a task's
// learnability rollouts, pass@k samples, a solver batch topped up with repeats) run through the
// layers once and their keys, values and last-token logits are copied to the others.
struct PrefillStats {
  int64_t prompts = 0, distinct_prompts = 0;
  int64_t tokens = 0, computed_tokens = 0;  // prompt tokens, and those the layers ran on
  PrefillStats& operator+=(const PrefillStats& o) {
    prompts += o.prompts, distinct_prompts += o.distinct_prompts;
    tokens += o.tokens, computed_tokens += o.computed_tokens;
    return *this;
  }
};

// save_pretrained's refusal of weights that are not all finite numbers.
struct NotFiniteWeights : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Transformer {
 public:
  // Loads a Hugging Face checkpoint directory (config.json + model.safetensors or a sharded
  // index). Throws ConfigError / SafetensorsError naming the file and the field or tensor.
  // The model lives in `ops`' memory (kernels/cpu: host; kernels/cuda: the GPU): parameters(),
  // gradients() and the KV cache are that backend's memory, everything else is host data.
  static Transformer from_pretrained(const std::filesystem::path& dir, const kernels::Ops& ops = kernels::cpu_ops());
  // A new model, initialised as transformers does (normal(0, init_std) weights, zero biases,
  // unit norms), reproducibly from `seed`.
  static Transformer random(const ModelConfig& config, uint64_t seed, float init_std = 0.02f,
                            const kernels::Ops& ops = kernels::cpu_ops());
  // The same config and weights on another op table (another device, or another matmul
  // precision), through one host copy; nothing else (gradients, activations) comes along.
  Transformer copy_to(const kernels::Ops& ops) const;
  // Writes config.json and model.safetensors (F32; sharded past 4 GiB) into dir.
  // Throws NotFiniteWeights, writing nothing, if a weight is NaN or infinite.
  void save_pretrained(const std::filesystem::path& dir) const;

  const ModelConfig& config() const { return config_; }
  const kernels::Ops& ops() const { return *ops_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Each tensor's range in the flat buffers and in a file of them in expected_tensors()' order.
  std::vector<FlatRange> file_order() const;
  // Write access: a model on a Bf16 table re-rounds its bf16 copy of the weights before it next
  // uses them (so an optimizer step, a load or a broadcast through this span is seen).
  std::span<float> parameters() {
    weights16_stale_ = true;
    return params_.span();
  }
  std::span<const float> parameters() const { return params_.span(); }
  // The bf16 copy of the weights for an optimizer that writes it as it updates them (AdamW::step
  // through kernels::Ops::adamw_w16), so no second pass rounds them again: the copy counts as
  // fresh from this call on, and the caller writes to_bf16 of every parameter into it before the
  // model next runs. Null where the table has no bf16 copy (an Fp32 table).
  uint16_t* weights16_for_writing();
  // Allocated (zeroed) on first use.
  std::span<float> gradients();
  std::span<float> param(std::string_view name);  // throws std::out_of_range
  std::span<float> grad(std::string_view name);
  const ParamTensor* find_tensor(std::string_view name) const;

  // Logits of every real row, [B * T, V] (padding rows are zero). Keeps nothing for backward.
  std::vector<float> logits(const SequenceBatch& batch);

  // Per-token log-probs and entropies at `temperature` (logits divided by it). With
  // for_backward, the activations are kept so backward() can follow.
  TokenScores score(const SequenceBatch& batch, float temperature = 1.f, bool for_backward = false);

  // Accumulates into gradients() the gradient of sum_{b,t} dlogp[b,t] * logp[b,t] +
  // dentropy[b,t] * entropy[b,t] for the batch of the last score(..., true). Empty spans = 0.
  void backward(std::span<const float> dlogp, std::span<const float> dentropy);
  // Sets the gradients to zero. In the bf16 training step (bf16_training()) it fills only the
  // tensors that no backward product writes whole (norms, biases, an untied embedding): the first
  // backward() after it writes each weight matrix's gradient rather than adding to it
  // (kernels::kWriteDw), which saves filling 4 bytes a weight and then reading them again (about
  // 12 GB an optimizer step at 1.5B). gradients() fills the rest itself if no backward() came
  // between. Micro-batches after the first add up as before; the values are the same.
  void zero_grad();
  // Off, zero_grad() fills every gradient: the benches' baseline (model_speed_bench's "zero filled").
  void set_deferred_zero_grad(bool on);
  // Whether zero_grad() leaves the weight gradients to the next backward: on, in the bf16 step.
  bool defers_zero_grad() const { return deferred_zero_grad_ && bf16_training(); }

  // Activation recomputation (off by default): score(..., for_backward) keeps only each layer's
  // input (the residual stream), and backward() reruns each layer's forward, up to the MLP's
  // gate and up projections, just before its backward. Per token and layer that keeps `hidden`
  // floats instead of 4 hidden + 2 q_dim + 2 kv_dim + 2 intermediate + heads + 2 (1/18 of them
  // at Qwen2.5-1.5B's shapes), for one extra forward of the layers. The gradients are those without it,
  // bit for bit on a deterministic backend (the same ops run on the same inputs).
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  // The bf16 training step's joined products (on by default, where the table has their ops):
  // q, k and v as one GEMM with the attention's operands made once in bf16 (attention16), gate
  // and up as one GEMM (mlp_rows16). Off, the step runs them apart as before, with the same
  // values up to backward's summation order: the benches' baseline (model_speed_bench).
  void set_joined_products(bool on) { joined_products_ = on; }

  // Generation. prefill() runs prompts (one per cache slot, slots 0..B-1) and returns the logits
  // at each prompt's last token, [B, V]. It runs the prompts in groups of at most
  // prefill_group_tokens() padded tokens (one prompt at least), one layer's activations at a time,
  // so its memory does not grow with the batch (256 prompts of 128 tokens at Qwen2.5-1.5B would
  // otherwise keep 28 layers of activations for 32,768 tokens, more than an 80 GB GPU holds). decode() feeds tokens[r] at position pos[r] of cache
  // slot slot[r] and returns the next-token logits [R, V].
  void set_prefill_group_tokens(int64_t n) { prefill_group_tokens_ = std::max<int64_t>(1, n); }
  int64_t prefill_group_tokens() const { return prefill_group_tokens_; }
  //
  // Identical prompts are computed once (PrefillStats): the first copy runs through the layers in
  // a batch of the distinct prompts, and its keys, values and logits row are copied (bytes, through
  // the op table) to the other copies' slots and rows. On the CPU the samples are those of
  // computing every copy (generate_test); a KV copy is 2 x layers device-to-device copies.
  // set_prefill_duplicates_once(false) computes every copy (bench/duplicate_prompts_bench.cpp's
  // baseline).
  void set_prefill_duplicates_once(bool on) { prefill_duplicates_once_ = on; }
  bool prefill_duplicates_once() const { return prefill_duplicates_once_; }
  const PrefillStats& prefill_stats() const { return prefill_stats_; }
  std::vector<float> prefill(KVCache& cache, const SequenceBatch& prompts);
  void decode(KVCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> slot,
              std::span<const int32_t> pos, std::vector<float>& logits);
  // The same, leaving the logits in the backend's memory (for the op table's sample_rows, so a
  // GPU sends back tokens, not R x V logits): valid until the model's next call.
  const float* prefill_on_backend(KVCache& cache, const SequenceBatch& prompts);
  const float* decode_on_backend(KVCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> slot,
                                 std::span<const int32_t> pos);
  // A decode step whose tokens are already in the backend's memory, `token_count` of them: row r's
  // token is tokens[rows[r]] (a sampler's output, gathered on the backend). Generation launches
  // step t+1 from step t's samples this way before it has read them (model/generate.cpp). The
  // tokens are not checked here, as they cannot be without waiting for them: sample_rows draws ids
  // below the vocabulary. Slots, positions and rows are checked as above.
  const float* decode_on_backend(KVCache& cache, const int32_t* tokens, int64_t token_count,
                                 std::span<const int32_t> rows, std::span<const int32_t> slot,
                                 std::span<const int32_t> pos);

  // Decode steps recorded once and replayed (model/decode_graphs.h) where the table can record
  // (kernels::Ops::recorder: CUDA graphs), for the launch latency a step at a few rows is made of.
  // A replay runs the recorded kernels on the same inputs, so its logits are the eager step's bit for
  // bit. On by default (on an H200 it made decode 6-13% faster); model.decode_graphs in a run
  // config. No effect on a table that cannot record (the CPU).
  void set_decode_graphs(bool on);
  bool decode_graphs() const { return decode_graphs_on_; }
  const DecodeGraphs& decode_graph_cache() const { return decode_graphs_; }

  // Frees what a training step grew: the activations, the backward scratch, the LM head's tiles and
  // the GEMM inputs' bf16 rounding; the next score() grows them again. The memory plan
  // (memory_plan.h) has a step's training and generation never hold their buffers at once, and
  // these only grow: the trainer calls this after each update (trainer/policy.cpp), so the next
  // generation's KV cache does not sit on top of them. Decode recordings that point into them are
  // keyed on their addresses and sizes (decode_graphs.h), so they are recorded again, not replayed.
  void release_training_buffers();

  // Bytes held by activations and buffers for the largest batch seen (for memory reports).
  size_t activation_bytes() const { return acts_.size() * sizeof(float); }
  size_t backward_scratch_bytes() const { return bwd_.size() * sizeof(float); }
  size_t head_bytes() const;  // the LM head's logits, scratch and per-row statistics
  size_t gemm_input_bytes() const { return gemm_in16_.size() * sizeof(uint16_t); }  // bf16 GEMM inputs

  // The LM head's tiles (memory_plan.h, plan_head_tiles) are planned from the number of rows
  // unless set here: logits of `rows` x `cols` at a time, kept for backward when `keep` and the
  // rows are all the head's. For tests and benchmarks (other tilings must give the same scores and
  // gradients); rows = 0 restores the plan.
  void set_head_tiles(int64_t rows, int64_t cols, bool keep = false) {
    head_tiles_override_ = {rows, std::max<int64_t>(cols, 1), keep};
  }

 private:
  struct LayerWeights;
  struct Layout;
  Transformer(ModelConfig c, const kernels::Ops& ops);
  void build_layout();
  LayerWeights layer_weights(int64_t l, bool grads);
  void ensure_rope(int64_t positions);
  // What forward_layers keeps for backward (see set_recompute).
  enum class Keep { Nothing, LayerInputs, Everything };
  // With `cache`, each layer's keys and values go into it as the layer finishes (row b of the
  // batch to slot cache_slots[b]), so a prefill keeps one layer's activations, not every layer's.
  void forward_layers(const SequenceBatch& batch, Keep keep, KVCache* cache = nullptr,
                      std::span<const int32_t> cache_slots = {});
  // Prefills `prompts` (prompt b into cache slot slots[b]), writing the logits at each prompt's
  // last token to logits [B, V]: in groups of prefill_group_tokens_ padded tokens.
  void prefill_rows(KVCache& cache, const SequenceBatch& prompts, std::span<const int32_t> slots, float* logits);
  // Where layer_forward stops: after gate and up (backward's recomputation needs no more), after
  // the down projection (its output in tmp_, the residual add left to the next layer's input
  // norm), or after the residual add into the layer's output.
  enum class LayerEnd { GateUp, Down, ResidualAdd };
  // pending_h: the previous layer's h when its residual add was left (LayerEnd::Down) to this
  // layer's input norm, which makes res_in = pending_h + tmp_ in its own pass; else null.
  void layer_forward(int64_t l, int64_t N, LayerEnd end, const float* pending_h);
  struct LayerActs;
  // One layer of backward() with a Bf16 table's bf16 output gradients (kernels::Ops::matmul_backward_g16).
  // On entry dres holds d(res_out) and dout16 its bf16 rounding; on exit dres holds d(res_in), and
  // so does dout16, rounded, when round_dres_in (the layer below reads it; the embedding does not).
  // dw_write: kernels::kWriteDw where the layer's weight gradients are to be written (the first
  // backward after zero_grad()), else kAddBoth.
  void layer_backward_grads16(const LayerWeights& w, const LayerWeights& g, const LayerActs& a, float* dres,
                              float* dln, float* datt, float* dq, float* dk, float* dv, float* dact, uint16_t* dgate16,
                              uint16_t* dup16, uint16_t* dout16, bool round_dres_in,
                              const kernels::AttentionShape& shape, kernels::GemmWrites dw_write);
  // The gradients' storage, allocated (zeroed) on first use; unlike gradients(), leaves the
  // weight gradients that zero_grad() left to the next backward as they are.
  float* grads_storage();
  // [begin, end) offsets of the gradients that the bf16 backward's products write whole when told
  // to (kWriteDw): each layer's weight matrices and the LM head's, in order, adjacent ones merged.
  std::vector<std::pair<size_t, size_t>> product_written_grads() const;
  // Fills with zeros what zero_grad() left unset, if it did.
  void fill_unset_weight_grads();
  void lm_head_rows(const SequenceBatch& batch);
  HeadTiles head_tiles(int64_t R, bool for_backward) const;
  float* take_head_scratch(const HeadTiles& t, int64_t R);
  // The GEMMs on a weight w of params_: through the table's bf16-weight ops and the bf16 copy
  // when the table has them (MatmulPrecision::Bf16), else the table's plain GEMMs.
  void gemm_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC);
  void gemm_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC);
  const uint16_t* weights16(const float* w);  // w's place in the bf16 copy, refreshed if stale
  // A GEMM input: fp32, and with a Bf16 table also its bf16 rounding (in gemm_in16_), written by
  // the op that produces it (a norm, SwiGLU), so the GEMMs that read it (q, k, v; gate, up; down;
  // the LM head) do not each round it. One rounding is live at a time: each call overwrites it.
  struct GemmInput {
    const float* x;
    const uint16_t* x16;  // null: the GEMM rounds x itself (or the table is fp32)
  };
  // rmsnorm of N rows of the hidden size into out; with keep16 (a layer's bf16 norm output,
  // bf16_training_buffers) into keep16 only, its bf16 rounding, and out is not written.
  GemmInput norm_for_gemms(float* out, float* rstd, const float* x, const float* w, int64_t N,
                           uint16_t* keep16 = nullptr);
  // res_out = x + delta (a residual add), then its rmsnorm into out (or keep16), in one op where
  // the table has it.
  GemmInput residual_norm_for_gemms(float* res_out, float* out, float* rstd, const float* x, const float* delta,
                                    const float* w, int64_t N, uint16_t* keep16 = nullptr);
  // Whether this model on this table keeps its bf16-only training buffers in bf16 (the norm
  // outputs, the backward's GEMM output gradients: model/memory_plan.h's bf16_training_buffers).
  bool bf16_training() const;
  // Whether a training forward (and its backward) keeps the attention's operands in bf16, made
  // once (kernels::Ops::rope_round_qkv_w16 and the rest), with q, k and v as one GEMM over
  // [Wq; Wk; Wv]: bf16_training() with those ops. Their q, k, v and attention-output roundings live
  // in the layer's fp32 q, k and v slots, and the GEMM's fp32 rows in its gate and up slots
  // before the gate and up GEMMs fill them, so the activations take no more memory.
  bool attention16() const;
  // Whether [Wq; Wk; Wv] of w is one matrix, and their biases one vector or none (build_layout).
  bool qkv_one_matrix(const LayerWeights& w) const;
  // The same for [Wg; Wu] and their biases.
  bool gate_up_one_matrix(const LayerWeights& w) const;
  // Whether a training forward runs gate and up as one GEMM over [Wg; Wu] (build_layout), its rows
  // [gate | up] in bf16 in the layer's gate slot (kernels::Ops::matmul_forward_o16, then
  // swiglu_rows_w16 forward, swiglu_rows_backward_w16 backward): bf16_training() with those ops,
  // and no MLP biases.
  bool mlp_rows16() const;
  // Whether the forward gives SwiGLU gate and up rounded to bf16 (mlp_rows16() on w's layout):
  // decode then rounds them too (gate_up_swiglu_w16's round_gate_up), so that a sampled token's
  // log-prob is the learner's.
  bool gate_up_rounded(const LayerWeights& w) const;
  // out = silu(gate) * up over n values; a Bf16 table writes only its bf16 rounding (x null), which
  // is all the down projection reads.
  GemmInput swiglu_for_gemm(float* out, const float* gate, const float* up, int64_t n);
  // x [n] rounded to bf16 once (backward's dw products on a kept norm output).
  GemmInput rounded_for_gemms(const float* x, int64_t n);
  void gemm_forward(float* out, GemmInput in, const float* w, const float* bias, int64_t N, int64_t IC, int64_t OC);
  void gemm_backward(float* dinp, float* dw, float* dbias, const float* dout, GemmInput in, const float* w,
                     int64_t N, int64_t IC, int64_t OC);
  // A layer's keys and values into the cache, in the cache's type.
  void store_kv(KVCache& cache, int64_t layer, const float* k, const float* v, const int32_t* slot,
                const int32_t* pos, int64_t R);
  // Decode attention over the cache; with a bf16 cache (the Bf16 table) its output comes rounded
  // too, for the o projection.
  GemmInput attend_cache(float* out, const float* q, KVCache& cache, int64_t layer, const int32_t* slot,
                         const int32_t* pos, int64_t R);
  // Decode's q (rotated, into q), and k and v (rotated k) into the cache, from the layer's first
  // norm: one fused op for a few rows where the table has it (kernels::Ops::decode_qkv_w16); past
  // them one GEMM over [Wq; Wk; Wv] and rope_kv_store_w16 where the table has it; the three
  // projections, RoPE and the cache store otherwise. scratch: R x (q_dim + 2 kv_dim) floats.
  void decode_qkv(float* q, float* scratch, GemmInput ln1, const LayerWeights& w, KVCache& cache, int64_t layer,
                  const int32_t* slot, const int32_t* pos, int64_t R);
  kernels::DecodeQkv decode_qkv_args(const kernels::DecodeInput& in, float* q, const LayerWeights& w,
                                     KVCache& cache, int64_t layer, const int32_t* slot, const int32_t* pos,
                                     int64_t R);
  // A decode step of one row (kernels::kDecodeNormFoldMaxRows) on a table with the fused decode
  // ops: every layer's norms folded
  // into the products that read them, its residual adds into the products before them
  // (kernels::DecodeInput, decode_linear_w16), five ops a layer; the same values as the unfused
  // ops, which run the step otherwise. decode_layers_folded: from the embeddings in x to the logits,
  // the layers as one op (kernels::DecodeLayers; the CUDA table's may be one persistent kernel).
  bool decode_norms_fold(const KVCache& cache, int64_t R) const;
  void decode_layers_folded(float* x, float* h, float* q, float* att, float* gate, float* rstd, float* logits,
                            KVCache& cache, const int32_t* slot, const int32_t* pos, int64_t R);
  // Decode's MLP input to the down projection, silu(gate) * up, from the layer's second norm: one
  // fused op for a few rows where the table has it (gate_up_swiglu_w16, its bf16 result written
  // over gate's storage); past them, where the forward rounds gate and up (gate_up_rounded), one
  // GEMM over [Wg; Wu] into bf16 rows and swiglu_rows_w16; the two GEMMs and SwiGLU otherwise.
  // gate: R x 2I floats (gate, then up).
  GemmInput decode_gate_up(float* gate, GemmInput ln2, const LayerWeights& w, int64_t R);

  // Every address and size a decode step's recording holds, for DecodeGraphs::use_key.
  DecodeGraphs::Key decode_graph_key(const KVCache& cache) const;
  // decode_on_backend's checks of a step's slots and positions, and its step once step_idx_ holds
  // the step's tokens, slots and positions.
  void check_decode_rows(const KVCache& cache, std::span<const int32_t> slot, std::span<const int32_t> pos) const;
  const float* decode_step_on_backend(KVCache& cache, int64_t R);

  ModelConfig config_;
  const kernels::Ops* ops_;
  std::vector<ParamTensor> tensors_;
  // Per layer, the offsets of its 16 weight slots (LayerWeights order; npos = absent bias), so the
  // hot path never looks tensors up by name.
  static constexpr size_t kNoTensor = size_t(-1);
  std::vector<std::array<size_t, 16>> layer_offsets_;
  size_t layer_stride_ = 0;  // layer l's offsets are layer 0's plus l * layer_stride_ (build_layout)
  kernels::Buffer<float> params_, grads_;
  bool deferred_zero_grad_ = true;
  // zero_grad() left the weight matrices' gradients (product_written_grads) to the next backward:
  // they hold stale values until it writes them, or gradients() fills them.
  bool weight_grads_unset_ = false;
  kernels::Buffer<uint16_t> params16_;  // bf16 copy of params_ (Bf16 tables only), same layout
  bool weights16_stale_ = true;
  kernels::Buffer<uint16_t> gemm_in16_;  // GemmInput's rounding (Bf16 tables only): rows x max(hidden, MLP)
  size_t embed_off_ = 0, head_off_ = 0, norm_off_ = 0;

  kernels::Buffer<float> rope_cos_, rope_sin_;  // [positions, head_dim / 2]
  int64_t rope_positions_ = 0;

  // Activations of the last forward (llm.c style: one arena, carved per batch shape). Unless
  // everything is kept, every layer shares layer 0's slots; keeping nothing, the residual stream
  // also ping-pongs between two buffers.
  struct LayerActs {
    float *res_in, *ln1, *rstd1, *q, *k, *v, *att, *lse, *h, *ln2, *rstd2, *gate, *up, *res_out;
    uint16_t *ln1_16 = nullptr, *ln2_16 = nullptr;  // with bf16_training(), ln1 and ln2 as kept (and null)
    uint16_t* act16 = nullptr;  // with bf16_training(), SwiGLU's bf16 output [N, I], kept for backward
    // With attention16(): rope(q), rope(k), v and the attention's output in bf16, kept for backward
    // (in the q, k and v slots, whose fp32 pointers are then null), and the q/k/v GEMM's rows.
    uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr, *att16 = nullptr;
    float* qkv = nullptr;
    // With mlp_rows16(): gate and up as bf16 rows [gate | up] [N, 2I], in the gate slot (whose
    // other half, and the up slot, are then unused).
    uint16_t* gate_up16 = nullptr;
  };
  std::vector<LayerActs> layer_acts_;
  float *lnf_ = nullptr, *rstdf_ = nullptr, *act_ = nullptr, *tmp_ = nullptr;
  kernels::Buffer<float> acts_;
  kernels::Buffer<float> bwd_;  // backward scratch
  kernels::Buffer<int32_t> positions_, ids_, lengths_;  // [N], [N], [B]: the batch on the backend
  int64_t prefill_group_tokens_ = kDefaultPrefillGroupTokens;  // memory_plan.h
  kernels::Buffer<int32_t> step_idx_;  // decode: tokens, slots, positions, rows of the tokens gathered [4 * R]
  int64_t fwd_B_ = 0, fwd_T_ = 0;
  bool fwd_kept_ = false;
  bool fwd_recomputes_ = false;  // the last forward kept layer inputs only
  bool recompute_ = false;
  bool joined_products_ = true;
  float fwd_inv_temp_ = 1.f;
  SequenceBatch fwd_batch_;
  // LM-head rows of the last score(): rows that predict a token, their targets, lse and entropy,
  // and their logits when the plan keeps them (else made again, tile by tile, in backward).
  std::vector<int32_t> head_rows_, head_targets_;          // host
  kernels::Buffer<int32_t> head_rows_dev_, head_targets_dev_;  // the same on the backend
  kernels::Buffer<float> head_lse_, head_logp_, head_entropy_, head_logits_;
  kernels::Buffer<float> head_scratch_;  // a tile's gathered rows and their gradients, dlogp/dent, the logits tile
  kernels::Buffer<double> head_state_;   // [R, 4] token_stats' running statistics across column blocks
  kernels::Buffer<uint16_t> head_dlogits16_;  // with bf16_training(): a tile's dlogits in bf16
  bool head_logits_kept_ = false;
  HeadTiles head_tiles_override_;  // rows 0: planned
  kernels::Buffer<float> prefill_logits_;  // [B, V] of the last prefill
  bool prefill_duplicates_once_ = true;
  PrefillStats prefill_stats_;
  bool decode_graphs_on_ = true;
  DecodeGraphs decode_graphs_;
};

}  // namespace azr::model
