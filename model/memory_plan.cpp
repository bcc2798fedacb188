#include "model/memory_plan.h"

#include <cmath>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "kernels/cuda/ordered_sums_limits.h"
#include "kernels/cuda/sampling_limits.h"

namespace azr::model {

Precision parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::Fp32;
  if (s == "bf16-mixed") return Precision::Bf16Mixed;
  if (s == "fp32+bf16-gemm") return Precision::Fp32Bf16Gemm;
  throw std::invalid_argument("unknown precision '" + std::string(s) + "' (known: fp32, bf16-mixed, fp32+bf16-gemm)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16Mixed: return "bf16-mixed";
    case Precision::Fp32Bf16Gemm: return "fp32+bf16-gemm";
  }
  return "?";
}

namespace {

// Elements each token keeps per layer slot for backward, as Transformer::forward_layers carves
// them (LayerActs, the layer's input aside): ln1, h, ln2 [H]; q, att [q_dim]; k, v [kv_dim]; gate,
// up [I] in the activation dtype, and rstd1, rstd2, lse (one per head) in fp32. With bf16 GEMMs
// and bf16 training buffers (bf16_training_buffers), ln1 and ln2 are kept in bf16 only, gate and
// up as well (2I bf16 values in I floats), and SwiGLU's output [I] in bf16 too.
struct PerToken {
  double act_elems, bf16_elems, fp32_elems;
};

PerToken layer_acts(const ModelConfig& c, bool norms16) {
  const double H = double(c.hidden_size), I = double(c.intermediate_size);
  const double qd = double(c.num_attention_heads * c.head_dim), kd = double(c.num_key_value_heads * c.head_dim);
  const double stats = 2 + double(c.num_attention_heads);
  // With bf16 buffers gate and up come from one GEMM as bf16 rows (Transformer::mlp_rows16), in a
  // slot of I floats that the q/k/v GEMM's fp32 rows borrow first: max(I, q_dim + 2 kv_dim).
  if (norms16) return {H + 2 * qd + 2 * kd + std::max(I, qd + 2 * kd), 2 * H + I, stats};
  return {3 * H + 2 * qd + 2 * kd + 2 * I, 0, stats};
}

// The CUDA sampler's scratch after calls of up to R rows, of every mode (kernels/cuda/sampling.cu):
// each buffer grows to its largest call and stays. Rows up to kMaxSplitRows may be split into parts
// (parts_for): R x parts partial values, indices and sums (4 + 8 + 16 bytes: the temperature
// sampler's one pass keeps a maximum and a mass a part, both double) and a ticket a row;
// parts_for aims at 2 blocks a multiprocessor, at least kMinParts and at most kMaxParts a row, so
// R x parts <= max(kMinParts R, 2 x kPlanMaxMultiprocessors) below kMaxParts R. Top-k and top-p
// split up to kSplitGroupRows rows at once: a count and a mass a bin, a total, a last bin, a list
// count and kListCapacity 8-byte keys a row.
constexpr double kPlanMaxMultiprocessors = 256;  // more than any GPU has (an H100 SXM: 132)

double sampler_scratch_bytes(int64_t R) {
  namespace smp = kernels::cuda_detail::sampling;
  if (R <= 0 || R > smp::kMaxSplitRows) return 0;  // past kMaxSplitRows a row is a block's
  const double rows = double(R), group = double(std::min(R, smp::kSplitGroupRows));
  const double parts = std::min(rows * double(smp::kMaxParts),
                                std::max(rows * double(smp::kMinParts), 2 * kPlanMaxMultiprocessors));
  return parts * (4.0 + 8.0 + 16.0) + rows * 4.0 +
         group * (double(smp::kMassBins) * (4.0 + 8.0) + 8.0 + 4.0 + 4.0 + double(smp::kListCapacity) * 8.0);
}

}  // namespace

HeadTiles plan_head_tiles(int64_t R, int64_t V, bool for_backward) {
  R = std::max<int64_t>(R, 1);
  HeadTiles t;
  if (R * V <= kHeadTileFloats) {
    t = {R, V, false};
  } else if (const int64_t cols = kHeadTileFloats / R / kHeadColAlign * kHeadColAlign; cols >= kHeadMinCols) {
    t = {R, cols, false};
  } else {
    const int64_t min_cols = std::min(V, kHeadMinCols);
    t = {kHeadTileFloats / min_cols, min_cols, false};
  }
  t.keep = for_backward && t.rows == R && R * V <= kHeadKeepFloats;  // kept blocks hold every row
  return t;
}

bool bf16_training_buffers(const ModelConfig& c) {
  const int64_t qd = c.num_attention_heads * c.head_dim, kd = c.num_key_value_heads * c.head_dim;
  return !c.mlp_bias && std::max(c.hidden_size, qd + 2 * kd) <= 2 * c.intermediate_size && c.hidden_size % 8 == 0 &&
         c.intermediate_size % 8 == 0;
}

MemoryPlan plan_memory(const ModelConfig& c, const MemoryPlanSettings& s) {
  if (s.seq_len < 1 || s.micro_batch < 0 || s.kv_slots < 0 || s.kv_capacity < 0 || s.prefill_group_tokens < 1)
    throw std::invalid_argument("memory plan: seq_len and prefill_group_tokens must be >= 1, the rest >= 0");
  const bool mixed = s.precision == Precision::Bf16Mixed;
  const double a = mixed ? 2.0 : 4.0;  // bytes per activation / compute-weight element
  const double P = double(parameter_count(c));
  const double H = double(c.hidden_size), I = double(c.intermediate_size), V = double(c.vocab_size);
  const double L = double(c.num_hidden_layers);
  const double qd = double(c.num_attention_heads * c.head_dim), kd = double(c.num_key_value_heads * c.head_dim);

  MemoryPlan p;
  p.parameters = parameter_count(c);
  p.weights = a * P;
  p.master_weights = mixed ? 4.0 * P : 0.0;
  p.gradients = 4.0 * P;
  p.adam = 8.0 * P;
  p.reserve = s.reserve_bytes;

  const double N = double(s.micro_batch) * double(s.seq_len);  // tokens in a micro-batch
  const bool gemm16 = s.precision == Precision::Fp32Bf16Gemm;
  const PerToken per = layer_acts(c, gemm16 && bf16_training_buffers(c));
  const double layer_bytes = per.act_elems * a + per.bf16_elems * 2.0 + per.fp32_elems * 4.0;
  // The residual stream: every layer's input and the last layer's output. The layer slots: every
  // layer's set when kept, one set (refilled layer by layer in backward) with recomputation. Once:
  // the final norm's output and rstd, and the MLP / projection scratch (act [I], tmp [H]). With
  // bf16 GEMMs SwiGLU writes only its bf16 rounding (in the layer's slot with bf16 training
  // buffers, else in the GEMM-input scratch, below): no act.
  const double residual_bytes = (L + 1) * H * a;
  const double slots = s.recompute ? 1.0 : L;
  const double tail_bytes = (2 * H + (gemm16 ? 0 : I)) * a + 4.0;
  p.activations = N * (residual_bytes + slots * layer_bytes + tail_bytes);
  // dres, dln [H]; datt, dq [q_dim]; dk, dv [kv_dim]; dact, dgate, dup [I]. With bf16 GEMMs and
  // bf16 output gradients (bf16_training_buffers), dgate and dup are bf16 and so are the other
  // products' output gradients [max(H, q_dim + 2 kv_dim)], in whole floats.
  p.backward_scratch = N * (2 * H + 2 * qd + 2 * kd + 3 * I) * a;
  if (gemm16 && bf16_training_buffers(c))
    p.backward_scratch = N * (2 * H + 2 * qd + 2 * kd + I) * a +
                         4.0 * std::ceil(N * (2 * I + std::max(H, qd + 2 * kd)) / 2.0);
  // The LM head (Transformer::score, backward): each sequence's seq_len - 1 rows that predict a
  // token. Its logits tile (or the kept logits) in fp32; a tile's gathered rows and their
  // gradients [rows, H]; per head row, the row index and target (int32), lse, logp, entropy and
  // the gradients dlogp, dentropy (fp32), and with column blocks the running statistics (4 doubles).
  const int64_t head_rows = s.micro_batch * (s.seq_len - 1);
  const HeadTiles tiles = plan_head_tiles(head_rows, c.vocab_size, /*for_backward=*/true);
  const double R = double(std::max<int64_t>(head_rows, 1));
  const double head_logits = tiles.keep ? R * V : double(tiles.rows) * double(tiles.cols);
  // With bf16 output gradients, the tile's dlogits in bf16 too (Transformer::backward).
  const bool grads16 = s.precision == Precision::Fp32Bf16Gemm && bf16_training_buffers(c);
  if (head_rows > 0)
    p.lm_head = head_logits * 4.0 + 2.0 * double(tiles.rows) * H * 4.0 + R * (2 * 4.0 + 5 * 4.0) +
                (tiles.cols < c.vocab_size ? R * 4 * 8.0 : 0.0) +
                (grads16 ? double(tiles.rows) * double(tiles.cols) * 2.0 : 0.0);

  p.kv_cache = 2.0 * L * double(s.kv_slots) * double(s.kv_capacity) * kd * a;
  // one decode step: Transformer::decode's buffers (x, ln, tmp, h; q, att and the q/k/v GEMM's
  // rows; gate and up; rstd) plus the fp32 next-token logits
  p.decode_buffers = double(s.kv_slots) * ((4 * H + 3 * qd + 2 * kd + 2 * I) * a + 4.0 + V * 4.0);
  // Prefill (Transformer::prefill_on_backend): groups of prompts, each a forward that keeps one
  // layer slot and two residual buffers (Keep::Nothing), with prompts kv_capacity long.
  double prefill_tokens = 0;
  if (s.kv_slots > 0 && s.kv_capacity > 0) {
    const int64_t per_group = std::max<int64_t>(1, s.prefill_group_tokens / s.kv_capacity);
    prefill_tokens = double(std::min(s.kv_slots, per_group)) * double(s.kv_capacity);
    p.prefill_activations = prefill_tokens * (2 * H * a + layer_bytes + tail_bytes);
    p.prefill_logits = double(s.kv_slots) * V * 4.0;
  }
  p.sampler = sampler_scratch_bytes(s.kv_slots);
  p.gradient_sums = kernels::cuda_detail::ordered_sums::scratch_bytes(N, H, qd + 2 * kd);

  if (s.precision == Precision::Fp32Bf16Gemm) {
    // The fp32 model is the master; the GEMMs read a bf16 copy of it and round their other
    // operands into two scratch buffers that keep their largest size: a GEMM input (a layer's
    // N x max(H, q_dim, I); the head's come rounded, below) and an output gradient (the same, or
    // the head's logits tile in backward).
    p.master_weights = p.weights;
    p.weights = 2.0 * P;
    // A prefill group's forward rounds its inputs into the same scratch (no backward).
    // With bf16 output gradients (bf16_training_buffers) no GEMM rounds a gradient: the layers'
    // and the LM head's come rounded by their producers, and the second buffer is never used.
    const double widest = std::max({H, qd, I}), forward_rows = std::max(N, prefill_tokens);
    const double head_grad = head_rows > 0 ? head_logits : 0.0;
    p.gemm_scratch = 2.0 * (forward_rows * widest + (grads16 ? 0.0 : std::max(N * widest, head_grad)));
    // The Simt attention reads its keys and values rounded to bf16 from two fp32 copies [N,
    // kv_dim] and rounds its queries as it reads them; the tensor-core kernels (the CUDA default)
    // round all three as they read, so this is an upper bound for them. The KV cache holds bf16.
    p.gemm_scratch += 2.0 * forward_rows * kd * 4.0;
    // The tensor-core attention's backward keeps each query head's share of dK and dV before
    // adding each group's ([2, N, q_dim] fp32); on mma.sync (AZR_CUDA_ATTENTION=mma) the same
    // buffer holds bf16 copies of q, dout, k and v after them ([N, 2 q_dim + 2 kv_dim]), and in
    // forward of q, k and v ([rows, q_dim + 2 kv_dim]); the training attention on bf16 operands
    // (attention_forward_w16) with the Simt or WMMA kernels holds fp32 copies of them after the
    // shares ([N, 3 q_dim + 2 kv_dim] in all): the largest call
    // (kernels/cuda/attention_tensor_core.cu's attention_scratch).
    p.gemm_scratch += std::max({2.0 * N * qd * 4.0 + N * (2 * qd + 2 * kd) * 2.0, forward_rows * (qd + 2 * kd) * 2.0,
                                N * (3 * qd + 2 * kd) * 4.0});
    // A GEMM input rounded once by its producer for the GEMMs it feeds (Transformer::GemmInput):
    // a norm's output (unless the layer keeps it in bf16) or SwiGLU's, or in backward attention's,
    // for the rows of a training batch, a prefill group or a decode step, in bf16. Freed after each
    // update (Transformer::release_training_buffers) and grown again: while the learner runs, to
    // its rows or the generation's before it; while a generation runs, to the generation's own.
    const double generation_rows = std::max(prefill_tokens, double(s.kv_slots));
    p.gemm_inputs = std::max(N, generation_rows) * std::max({H, I, qd}) * 2.0;
    p.generation_gemm_inputs = generation_rows * std::max({H, I, qd}) * 2.0;
    p.kv_cache /= 2.0;
  }
  return p;
}

namespace {

constexpr int64_t kMaxMicroBatch = int64_t(1) << 30;

// The largest m in [first, kMaxMicroBatch] with holds(m), for a predicate that holds up to some m
// and not after it; first - 1 when it does not hold at first. Doubling steps, then bisection.
template <class Holds>
int64_t last_holding(int64_t first, Holds holds) {
  if (first > kMaxMicroBatch || !holds(first)) return first - 1;
  int64_t lo = first, hi = first + 1;  // holds(lo); hi not yet known
  while (hi <= kMaxMicroBatch && holds(hi)) {
    lo = hi;
    hi = first + 2 * (hi - first);
  }
  hi = std::min(hi, kMaxMicroBatch + 1);  // !holds(hi), or hi is past the largest micro-batch tried
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (holds(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

int64_t micro_batch_limit(int64_t seq_len) {
  constexpr int64_t kGridRows = 65535;  // a CUDA grid's y and z
  return std::min(kGridRows, kernels::cuda_detail::ordered_sums::kEmbeddingRowsPerCall / std::max<int64_t>(seq_len, 1));
}

std::string micro_batch_limit_problem(int64_t seq_len, int64_t micro_batch) {
  const std::string why =
      " (2,097,120 tokens: the GPU's embedding backward takes 65,535 pieces of 32 rows a call; 65,535 sequences: its "
      "attention's grid)";
  const int64_t limit = micro_batch_limit(seq_len);
  if (limit == 0)
    return "a sequence of up to " + std::to_string(seq_len) + " tokens is past what one micro-batch can hold" + why;
  if (micro_batch > limit)
    return std::to_string(micro_batch) + " sequences of up to " + std::to_string(seq_len) + " tokens are past the " +
           std::to_string(limit) + " one micro-batch can hold" + why;
  return "";
}

int64_t max_micro_batch(const ModelConfig& c, MemoryPlanSettings s, double budget_bytes) {
  // The training peak grows with the micro-batch but for one step down: the LM head keeps the
  // forward's logits for backward while the micro-batch's rows fit kHeadKeepFloats
  // (plan_head_tiles), and past that holds one tile, so the peak drops by the kept logits (up to
  // 4 GiB) where the keeping stops. On each side of that micro-batch it grows, so each side is
  // searched on its own, the larger micro-batches first (a test tries every micro-batch against
  // budgets across the drop).
  const int64_t rows_per_sequence = s.seq_len - 1;
  const int64_t limit = micro_batch_limit(s.seq_len);
  // The bound on mb first: past it no micro-batch keeps, and its rows times V could overflow.
  const int64_t last_keeping = last_holding(1, [&](int64_t mb) {
    return rows_per_sequence > 0 && mb <= limit && mb <= kHeadKeepFloats / c.vocab_size / rows_per_sequence &&
           plan_head_tiles(mb * rows_per_sequence, c.vocab_size, /*for_backward=*/true).keep;
  });
  auto fits = [&](int64_t mb) {
    if (mb > limit) return false;
    s.micro_batch = mb;
    return plan_memory(c, s).training_peak() <= budget_bytes;
  };
  const int64_t past_keeping = last_holding(last_keeping + 1, fits);
  if (past_keeping > last_keeping) return past_keeping;
  return last_holding(1, [&](int64_t mb) { return mb <= last_keeping && fits(mb); });
}

std::string format_memory_plan(const MemoryPlan& p, const MemoryPlanSettings& s, double budget_bytes) {
  // snprintf, not fmt: model/ builds with nothing but what the transformer needs (GPU checks).
  const double gib = double(1ull << 30), P = double(p.parameters);
  char buf[256];
  std::snprintf(buf, sizeof buf, "memory plan: %.2f%s parameters, %s, micro-batch %lld x %lld tokens%s, %lld KV slots x %lld positions\n",
                P >= 1e9 ? P / 1e9 : P / 1e6, P >= 1e9 ? "B" : "M", precision_name(s.precision),
                (long long)s.micro_batch, (long long)s.seq_len, s.recompute ? ", recompute" : "", (long long)s.kv_slots,
                (long long)s.kv_capacity);
  std::string out = buf;
  auto line = [&](const char* name, double bytes) {
    std::snprintf(buf, sizeof buf, "  %-22s%10.2f GiB\n", name, bytes / gib);
    out += buf;
  };
  line("weights", p.weights);
  line("master weights (fp32)", p.master_weights);
  line("gradients (fp32)", p.gradients);
  line("AdamW m, v (fp32)", p.adam);
  if (p.gemm_scratch > 0) line("bf16 GEMM scratch", p.gemm_scratch);
  line("activations", p.activations);
  line("backward scratch", p.backward_scratch);
  line("LM head (tiles)", p.lm_head);
  if (p.gemm_inputs > 0) line("bf16 GEMM inputs", p.gemm_inputs);
  line("gradient sums", p.gradient_sums);
  line("KV cache", p.kv_cache);
  line("decode buffers", p.decode_buffers);
  if (s.kv_slots > 0) {
    line("prefill activations", p.prefill_activations);
    line("prefill logits", p.prefill_logits);
    line("sampler scratch", p.sampler);
    if (p.generation_gemm_inputs > 0) line("bf16 GEMM inputs (gen)", p.generation_gemm_inputs);
  }
  line("reserve", p.reserve);
  line("peak: training", p.training_peak());
  line("peak: generation", p.generation_peak());
  if (budget_bytes > 0) {
    std::snprintf(buf, sizeof buf, "  budget %.2f GiB: %s\n", budget_bytes / gib,
                  p.peak() <= budget_bytes ? "fits" : "DOES NOT FIT");
    out += buf;
  }
  return out;
}

}  // namespace azr::model
