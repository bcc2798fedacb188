#pragma once
// The op table: every piece of math the transformer needs, as plain functions over raw float
// buffers. The model (model/transformer.cpp) calls only these, so it never branches on the
// device; a backend is one table (kernels/cpu today, kernels/cuda next, checked against this one).
//
// Conventions, shared by every backend:
// - Row-major fp32. A "row" is one token: activations are [N, C] with N = B * T, and row
//   n = b * T + t. Linear weights are PyTorch nn.Linear layout [out, in].
// - Forward ops overwrite their outputs. Backward ops ACCUMULATE (+=) into parameter gradients
//   and into input gradients unless the comment says "overwrites": a residual stream's gradient
//   then flows through a branch and the skip connection without extra adds.
// - Attention is causal within each sequence. Sequences are right-padded: rows t >= lengths[b]
//   are padding; attention skips them (their outputs and gradients are zero), and they never
//   influence a real row because a real row only looks left.
#include <cstddef>
#include <cstdint>

namespace azr::kernels {

// Shape of one attention call. q is [B, T, heads, d]; k and v hold the keys and values of each
// sequence at a stride of kv_seq_stride elements (T * kv_heads * d for training activations,
// capacity * kv_heads * d for a KV cache), with row stride kv_heads * d.
struct AttentionShape {
  int64_t B = 0, T = 0, heads = 0, kv_heads = 0, d = 0;
  int64_t kv_seq_stride = 0;
  const int32_t* lengths = nullptr;  // [B] real tokens per sequence; nullptr = all T
};

// The input rows [R, IC] of a decode step's few-row products (decode_qkv_w16, gate_up_swiglu_w16,
// decode_linear_w16): x16, bf16; or, where norm is set, the op normalizes them itself, as
// rmsnorm_forward_w16's out16 of x with weight norm and eps (x16 is then not read). On a GPU the
// norm then costs no launch of its own: each block of the product normalizes the rows it reads, in
// the norm kernel's arithmetic (the same bits). R * IC <= kDecodeNormedMaxElements.
struct DecodeInput {
  const uint16_t* x16 = nullptr;
  const float* x = nullptr;  // the residual stream, fp32
  const float* norm = nullptr;
  float eps = 0.f;
};
// A GPU block keeps its normalized rows in shared memory, in bf16: at most 128 KiB of them.
constexpr int64_t kDecodeNormedMaxElements = 65536;

// The arguments of decode_qkv_w16 (below): one layer's q, k and v for R decode rows.
struct DecodeQkv {
  DecodeInput in;  // [R, H] the layer's first norm
  const uint16_t *wq = nullptr, *wk = nullptr, *wv = nullptr;  // bf16 [heads*d, H], [kv_heads*d, H] x2
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;     // may be null
  const float *cos = nullptr, *sin = nullptr;                  // RoPE tables [max_pos, d/2]
  const int32_t *slot = nullptr, *pos = nullptr;               // [R]; every pos[r] >= 0
  float* q = nullptr;                                          // [R, heads*d] out, rotated
  uint16_t *kcache = nullptr, *vcache = nullptr;               // the layer's bf16 KV cache
  int64_t R = 0, H = 0, heads = 0, kv_heads = 0, d = 0, slot_stride = 0;
};

// A decode step's layers at one row (decode_layers_w16 below), in the flat buffers' layout: layer
// l's tensors are layer 0's below plus l * param_stride elements (the fp32 parameters and their
// bf16 copy alike: model/transformer.cpp, build_layout), its caches layer 0's plus l * cache_stride.
struct DecodeLayers {
  float* x = nullptr;  // [1, H] the residual stream: the first layer's input, the last one's output
  const float *ln1 = nullptr, *ln2 = nullptr;
  const uint16_t *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;  // bf16
  const uint16_t *wg = nullptr, *wu = nullptr, *wd = nullptr;                 // bf16
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;     // may be null
  const float *bg = nullptr, *bu = nullptr, *bd = nullptr;                    // may be null
  const float *cos = nullptr, *sin = nullptr;  // RoPE tables [max_pos, d/2]
  const int32_t *slot = nullptr, *pos = nullptr;  // [1]; pos[0] >= 0
  uint16_t *kcache = nullptr, *vcache = nullptr;  // layer 0's bf16 KV cache
  float* q = nullptr;         // [1, heads d] scratch: the rotated queries
  float* att = nullptr;       // [1, heads d] the attention's output
  uint16_t* att16 = nullptr;  // [1, heads d] its bf16 rounding, the o projection's input
  float* h = nullptr;         // [1, H] the residual stream after the attention
  uint16_t* mlp16 = nullptr;  // [1, I] SwiGLU's output, bf16
  int64_t H = 0, heads = 0, kv_heads = 0, d = 0, I = 0, slot_stride = 0;
  int64_t layers = 0, param_stride = 0, cache_stride = 0;
  float eps = 0.f;
  bool round_gate_up = false;
};

// The most rows decode_qkv_w16 and gate_up_swiglu_w16 take: their GPU kernels read each weight
// once for all rows and keep every row's sums in registers, which pays below about this many rows;
// past it a decode step runs the unfused ops, whose GEMMs reuse weights across rows on tensor cores.
constexpr int64_t kDecodeFusedMaxRows = 8;

// Past one row, the few-row kernels pay only for small weights. On an H100 (2026-11-26,
// cuda_ops_bench --only decode_products), the GEMV against cuBLASLt: at 1 row 1.04x to 2.7x as
// fast at every shape; at 2 to 8 rows still faster for 0.5B's q/o (1.6 MB) and down (8.7 MB),
// but not for 1.5B's down (27.5 MB: 1.0x at 2 rows, 0.73x at 4, 0.53x at 8), 1.5B's gate/up
// (55 MB: 0.73x at 2 rows) or 0.5B's LM head (136 MB: 0.88x at 2 rows). Its work per weight grows
// with the rows (each row's product, the row read from shared memory), where cuBLASLt's tensor
// cores take 8 rows for the price of one.
constexpr int64_t kDecodeFewRowsMaxWeightBytes = int64_t(16) << 20;
// Whether a decode product of R rows over a bf16 [OC, IC] weight runs on the few-row kernels (the
// GEMV, decode_qkv_w16, gate_up_swiglu_w16) rather than a GEMM.
constexpr bool decode_few_rows_pay(int64_t R, int64_t IC, int64_t OC) {
  return R >= 1 && R <= kDecodeFusedMaxRows && (R == 1 || 2 * IC * OC <= kDecodeFewRowsMaxWeightBytes);
}

// The rows up to which a decode step folds its norms and residual adds into the few-row products
// (DecodeInput's norm, decode_linear_w16's residual). On an H100 (2026-11-26, the same bench's
// "o+norm+gate_up folded" row against the norm in a launch of its own) at 1.5B: 1.08x as fast at
// 1 row, 0.84x at 4, 0.71x at 8 (each of gate/up's 1,120 blocks normalizes every row again); a
// whole 1.5B step at batch 1 took 2.01 ms folded, 2.11 ms apart (model_speed_bench).
constexpr int64_t kDecodeNormFoldMaxRows = 1;

// A recording of ops (OpRecorder below): opaque, each backend casts its own type.
struct OpGraph;

// Recording a sequence of ops to replay it (CUDA graphs), where a backend can: a decode step at a
// few rows is hundreds of launches that each cost more than their work, and a replay is one. While
// recording (between begin() and end()), the ops called are recorded with their arguments, not
// run; replay() runs them as recorded, the same kernels on the same pointers and sizes, reading
// what the buffers hold at that time. The caller's duties: while recording, nothing uploads,
// downloads, allocates, frees or returns a value to the host (sum_squares); the backend then fails
// the recording with an exception, after which abandon() discards it. A recording holds every
// pointer it was made with, the ops' own scratch included: it must be made anew after any of them
// is freed, which generation() tells of for the scratch.
struct OpRecorder {
  void (*begin)() = nullptr;
  OpGraph* (*end)() = nullptr;  // the recording, to replay() until release()
  void (*abandon)() = nullptr;  // ends a recording that an exception interrupted, discarding it
  void (*replay)(OpGraph* g) = nullptr;
  void (*release)(OpGraph* g) = nullptr;  // g may be null
  // Changes whenever an op reallocates its own scratch.
  uint64_t (*generation)() = nullptr;
};

// Which outputs of a backward product (Ops::matmul_backward_g16) are written rather than added
// to: a bit set. Plain bits, not an enum class, so that `kWriteDinp | kWriteDw` needs no operators.
using GemmWrites = unsigned;
inline constexpr GemmWrites kAddBoth = 0, kWriteDinp = 1, kWriteDw = 2;

struct Ops {
  const char* name;
  // True when the backend's memory is host memory the program may read directly (kernels/cpu).
  // Code that needs backend data on the host goes through download() unless this is set; the
  // flag only lets the CPU skip a copy (checkpoint writes, the host all-reduce).
  bool host_memory;

  // Memory of this backend (host memory for the CPU, device memory for CUDA). The model keeps
  // every buffer here and moves data across only through upload/download, so one model code
  // runs on either backend.
  void* (*alloc_zeroed)(size_t bytes);  // throws std::bad_alloc / std::runtime_error
  void (*release)(void* p);             // p may be null
  void (*upload)(void* dst, const void* host, size_t bytes);     // host -> backend
  void (*download)(void* host, const void* src, size_t bytes);   // backend -> host
  // A download that does not wait for the backend: the copy follows every op called before it, and
  // `host` holds the bytes once download_wait(ticket) has returned, not before (a GPU's copy is
  // queued on its stream; the CPU's is done at once). Meanwhile the host may queue more work:
  // generation launches step t+1 from step t's sampled tokens on the backend, then reads step t's.
  // Each ticket is waited for once; until then `host` must stay alive and unread. Ticket 0 is a
  // download done at once (the CPU's; a GPU's past its staging), whose wait does nothing.
  int64_t (*download_start)(void* host, const void* src, size_t bytes);
  void (*download_wait)(int64_t ticket);
  void (*copy)(void* dst, const void* src, size_t bytes);        // within the backend
  void (*fill_zero)(float* x, int64_t n);
  // out[i] = src[rows[i]] for i < n, rows of C floats (rows on the backend), copied bit for bit:
  // any 4-byte values (generation gathers sampled token ids with it)
  void (*gather_rows)(float* out, const float* src, const int32_t* rows, int64_t n, int64_t C);
  // dst[rows[i]] += src[i] for i < n; rows are distinct
  void (*scatter_add_rows)(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t C);

  // out[n] = wte[ids[n]]   (out [N, C], wte [V, C])
  void (*embedding_forward)(float* out, const int32_t* ids, const float* wte, int64_t N, int64_t C);
  // dwte[ids[n]] += dout[n]
  void (*embedding_backward)(float* dwte, const float* dout, const int32_t* ids, int64_t N, int64_t C);

  // out = x * rsqrt(mean(x^2) + eps) * w, per row; rstd[n] saved for backward.
  void (*rmsnorm_forward)(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps);
  // dx += ..., dw += ...
  void (*rmsnorm_backward)(float* dx, float* dw, const float* dout, const float* x, const float* w,
                           const float* rstd, int64_t N, int64_t C);

  // out[N, OC] = inp[N, IC] w[OC, IC]^T + bias[OC]   (bias may be null)
  void (*matmul_forward)(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                         int64_t OC);
  // dinp += dout w; dw += dout^T inp; dbias += column sums of dout. Any of the three may be null.
  void (*matmul_backward)(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                          int64_t N, int64_t IC, int64_t OC);

  // In place, x [N, heads, d]: rotate pairs (i, i + d/2) of row n by angle pos[n] * inv_freq[i].
  // cos/sin are tables [max_pos, d/2]. Half-split (NeoX/HF) convention.
  void (*rope_forward)(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                       int64_t d);
  // In place, the transpose (rotation by -angle): turns d(rotated) into d(unrotated).
  void (*rope_backward)(float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t N,
                        int64_t heads, int64_t d);

  // out [B, T, heads, d] = softmax(q k^T / sqrt(d), causal) v, GQA: q head h reads kv head
  // h / (heads / kv_heads). lse [B, heads, T] (log-sum-exp of each row's scaled scores) is saved
  // so backward recomputes the probabilities instead of storing a T x T matrix per head.
  void (*attention_forward)(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& s);
  // Overwrites dq [B, T, heads, d], dk and dv (kv layout of the shape, real rows only).
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const AttentionShape& s);
  // One query row per active sequence (generation): row r is sequence slot[r] at position pos[r];
  // it attends to cache positions 0..pos[r] inclusive. q/out [R, heads, d]; the shape's B, T and
  // lengths are unused, kv_seq_stride is the cache's per-slot stride.
  void (*attention_decode)(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                           const int32_t* pos, int64_t R, const AttentionShape& s);

  // Stores rows of keys and values in a KV cache: row r of k and v ([R, row] each) goes to slot
  // slot[r], position pos[r], i.e. at slot[r] * slot_stride + pos[r] * row of each cache; rows with
  // pos[r] < 0 are skipped (padding). One call per layer, where a copy per row would cost a GPU
  // one transfer per row and layer.
  void (*kv_store)(float* kcache, float* vcache, const float* k, const float* v, const int32_t* slot,
                   const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride);

  // out = silu(gate) * up, elementwise over n values.
  void (*swiglu_forward)(float* out, const float* gate, const float* up, int64_t n);
  // Overwrites dgate and dup.
  void (*swiglu_backward)(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

  // out = a + b (out may alias a or b).
  void (*add)(float* out, const float* a, const float* b, int64_t n);

  // Token statistics of logits at temperature 1/inv_temp, for an LM head that makes its logits a
  // block of the vocabulary at a time (so that n x V logits never exist at once): logits [n, cols]
  // are the columns col0 .. col0 + cols - 1 of rows V wide. Over each whole row, with z = logits *
  // inv_temp: lse[r] = logsumexp(z_r), logp[r] = z_r[targets[r]] - lse[r] (0 when targets[r] < 0),
  // entropy[r] = -sum p log p. state [n, 4] carries each row's running maximum, sum e^(z - max),
  // sum e^(z - max) (z - max) and target logit from block to block, in column order: the block at
  // col0 = 0 starts it (whatever state held), the one that ends at V writes lse, logp and entropy
  // (logp, entropy may be null). state may be null when one block covers the rows (cols = V).
  void (*token_stats)(float* lse, float* logp, float* entropy, double* state, const float* logits,
                      const int32_t* targets, int64_t n, int64_t col0, int64_t cols, int64_t V, float inv_temp);
  // Overwrites dlogits [n, cols], the same block of columns, with d/dlogits of sum_r (dlogp[r] *
  // logp[r] + dent[r] * entropy[r]), from the whole rows' lse and entropy. dlogits may alias logits.
  void (*token_stats_backward)(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                               const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                               int64_t cols, float inv_temp);

  // One sampling decision per row of logits [R, V], so that generation downloads R tokens and R
  // log-probs instead of R x V logits. In model/generate.h's order: temperature (0 = greedy),
  // then top-k (0 = off), then top-p, renormalised; only ids < V_limit are candidates. u[r] in
  // [0, 1) is row r's uniform draw, used by inverse CDF over the candidates in descending
  // probability (ties by id), or in id order when nothing is filtered (top_k == 0 or
  // >= V_limit, and top_p == 1). Overwrites tokens[r] and logprobs[r]: the log-prob of the token
  // under the distribution it was drawn from; greedy takes the first maximum and reports the
  // log-prob at temperature 1. logits are only read. The CPU backend is exactly
  // model::sample_token (kernels/cpu/sampling.h) row by row, with probabilities and sums in
  // double; another backend picks the same token except where u (or top_p) lies within rounding
  // of a boundary of the cumulative distribution (or among distinct logits of equal double
  // probability, kernels/cuda/sampling.cu), and its log-probs agree to float rounding.
  // Preconditions (the caller's, unchecked): 0 < V_limit <= V < 2^31, temperature >= 0 and
  // finite, top_k >= 0, 0 < top_p <= 1, logits without NaN or +inf and with a finite entry
  // below V_limit in every row.
  void (*sample_rows)(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                      int64_t V_limit, float temperature, int32_t top_k, float top_p);

  // sum of squares, accumulated in double.
  double (*sum_squares)(const float* x, int64_t n);
  void (*scale)(float* x, float factor, int64_t n);
  // torch.optim.AdamW, step already counted: p *= 1 - lr*wd; m, v updated;
  // p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with bc_i = 1 - beta_i^step. Each g[i] is
  // read as the fp32 product g[i] * grad_scale: a gradient-norm clip's coefficient folded into
  // the update, the values scale() would have stored, without its pass over the gradients (1: g).
  void (*adamw)(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, float bc1, float bc2, float grad_scale);

  // MatmulPrecision::Bf16 tables only (null in the Fp32 ones): the GEMMs with the weight operand
  // already in bf16 (bit patterns, as to_bf16 writes them), so a model that keeps a bf16 copy of
  // its weights reads 2 bytes per weight instead of rounding 4 bytes on every call. The results
  // are matmul_forward/backward's on the fp32 weights that round to w16.
  // dst[i] = bf16 bits of src[i], rounded to nearest even (the high half of the fp32 bits).
  void (*to_bf16)(uint16_t* dst, const float* src, int64_t n);
  void (*matmul_forward_w16)(float* out, const float* inp, const uint16_t* w16, const float* bias, int64_t N,
                             int64_t IC, int64_t OC);
  void (*matmul_backward_w16)(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                              const uint16_t* w16, int64_t N, int64_t IC, int64_t OC);
  // A KV cache in bf16 (half the bytes a decode step reads from it): kv_store's rows rounded to
  // bf16, and attention_decode over such a cache, its queries rounded to bf16; out16 (may be null)
  // gets out rounded to bf16 as well, the o projection's GEMM input. A Bf16 table's
  // attention_forward and attention_backward round q, k and v to bf16 first, so the training
  // forward attends with exactly the queries, keys and values the sampler uses.
  void (*kv_store_w16)(uint16_t* kcache, uint16_t* vcache, const float* k, const float* v, const int32_t* slot,
                       const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride);
  void (*attention_decode_w16)(float* out, uint16_t* out16, const float* q, const uint16_t* kcache,
                               const uint16_t* vcache, const int32_t* slot, const int32_t* pos, int64_t R,
                               const AttentionShape& s);
  // GEMM inputs rounded once, by their producer (Bf16 tables only, null in the Fp32 ones). A norm's
  // output feeds three GEMMs (q, k, v) or two (gate, up); each _w16 GEMM would round it again.
  // rmsnorm_forward_w16 is rmsnorm_forward that also writes out16 = to_bf16(out) (out may be null
  // where only the rounding is read: a bf16 model keeps its norm outputs in bf16); the _a16w16
  // GEMMs take that rounding as their activation operand, and their results are the _w16 GEMMs'
  // on any fp32 inp that rounds to inp16.
  void (*rmsnorm_forward_w16)(float* out, uint16_t* out16, float* rstd, const float* x, const float* w, int64_t N,
                              int64_t C, float eps);
  void (*matmul_forward_a16w16)(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias, int64_t N,
                                int64_t IC, int64_t OC);
  void (*matmul_backward_a16w16)(float* dinp, float* dw, float* dbias, const float* dout, const uint16_t* inp16,
                                 const uint16_t* w16, int64_t N, int64_t IC, int64_t OC);
  // matmul_forward_a16w16 without a bias whose output is stored as its bf16 rounding only:
  // out16 [N, OC] = to_bf16(inp16 w16^T). The MLP's gate and up (one GEMM over [Wg; Wu],
  // Transformer::mlp_rows16) are read by SwiGLU alone, forward and backward: in fp32 they were an
  // N x 2I write and two N x 2I reads a layer (1.5B, 4,096 tokens: 294 MB each), by their bytes
  // about 3% of an H200's training step, and 2I floats a token of kept activations. PyTorch's autocast rounds
  // every linear output to bf16 the same way.
  void (*matmul_forward_o16)(uint16_t* out16, const uint16_t* inp16, const uint16_t* w16, int64_t N, int64_t IC,
                             int64_t OC);
  // The other producers of GEMM inputs, fused likewise: res_out = x + delta (add) and then
  // rmsnorm_forward_w16 of res_out (a residual add and the norm after it, one pass; res_out may
  // alias x or delta); swiglu_forward that also writes out16 = to_bf16(out) (out may alias gate, or
  // be null where only the bf16 result is read: a bf16 model's down projection reads nothing else).
  void (*residual_rmsnorm_forward_w16)(float* res_out, float* out, uint16_t* out16, float* rstd, const float* x,
                                       const float* delta, const float* w, int64_t N, int64_t C, float eps);
  void (*swiglu_forward_w16)(float* out, uint16_t* out16, const float* gate, const float* up, int64_t n);
  // A decode step's fused ops, for R <= kDecodeFusedMaxRows rows (Bf16 tables only). On a GPU a
  // step at batch 1 is a chain of small launches, each one's latency larger than its work; these
  // fold six launches (q, k and v, RoPE on q and on k, the cache store) into one, and three (gate,
  // up, SwiGLU) into one. decode_qkv_w16's results are those of matmul_forward_a16w16 for q, k and
  // v (with their biases), rope_forward on q and k at pos, and kv_store_w16 of k and v;
  // gate_up_swiglu_w16's out16 [R, I] is swiglu_forward_w16's out16 for gate = x16 wg^T + bg and
  // up = x16 wu^T + bu, each rounded to bf16 first where round_gate_up: the values the training
  // forward gives SwiGLU (matmul_forward_o16, then swiglu_rows_w16) where it rounds them, so that
  // generation's log-probs stay the learner's. A backend may sum the products in another order
  // than its GEMMs do.
  void (*decode_qkv_w16)(const DecodeQkv& a);
  void (*gate_up_swiglu_w16)(uint16_t* out16, const DecodeInput& in, const uint16_t* wg, const float* bg,
                             const uint16_t* wu, const float* bu, int64_t R, int64_t IC, int64_t I,
                             bool round_gate_up);
  // A decode step of more rows than the fused ops take, where the model's q, k and v weights are
  // one matrix [Wq; Wk; Wv] and so are gate and up [Wg; Wu] (model/transformer.cpp, build_layout):
  // what follows each of those two GEMMs, in one op. rope_kv_store_w16: qkv [R, (heads +
  // 2 kv_heads) d] (each row q, k, v); q [R, heads d] = rope_forward of the q part, and
  // kv_store_w16 of rope_forward of the k part and of the v part (qkv is not written; every
  // pos[r] >= 0). swiglu_rows_w16: gate_up16 [R, 2I] (each row gate, up, in bf16: matmul_forward_o16
  // writes them); out16 [R, I] = swiglu_forward_w16's out16 of the two parts' values.
  void (*rope_kv_store_w16)(float* q, const float* qkv, const int32_t* pos, const float* cos, const float* sin,
                            const int32_t* slot, uint16_t* kcache, uint16_t* vcache, int64_t R, int64_t heads,
                            int64_t kv_heads, int64_t d, int64_t slot_stride);
  void (*swiglu_rows_w16)(uint16_t* out16, const uint16_t* gate_up16, int64_t R, int64_t I);
  // out [R, OC] = (in w16^T + bias) + residual: matmul_forward_a16w16 and then add (bias and
  // residual may be null; residual may alias out, in.x may not). With the inputs normalized in the
  // op (DecodeInput) and the residual add in it, a decode layer's two residual adds and two norms
  // take no launches of their own: the o and down projections add, the next products normalize.
  void (*decode_linear_w16)(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                            const float* residual, int64_t R, int64_t IC, int64_t OC);
  // A decode step's layers at one row (DecodeLayers above), each layer as five of the ops above:
  // decode_qkv_w16 (in = {x, the layer's first norm, eps}, into q and the caches),
  // attention_decode_w16 (into att and att16), decode_linear_w16 of the o projection into h with x
  // as the residual, gate_up_swiglu_w16 into mlp16 (in = {h, the second norm, eps}), and
  // decode_linear_w16 of the down projection into x with h as the residual. Their values bit for bit; a backend may run
  // them as one kernel (kernels/cuda/decode_layers.cuh). Null where a backend has nothing to gain
  // over the model's own loop of those ops (kernels/cpu).
  void (*decode_layers_w16)(const DecodeLayers& a);

  // Training's backward and update with bf16 where the next reader only wants bf16 (Bf16 tables
  // only). A GEMM output's gradient is rounded to bf16 by the GEMMs that read it (dout16 below);
  // written rounded by its producer instead, the N x I gradients of the MLP are never written or
  // read in fp32 at all, as the forward's GEMM inputs are not (rmsnorm_forward_w16 and the rest).
  // swiglu_backward_w16 is swiglu_backward with dgate and dup written only as their bf16 roundings.
  void (*swiglu_backward_w16)(uint16_t* dgate16, uint16_t* dup16, const float* dout, const float* gate,
                              const float* up, int64_t n);
  // matmul_backward_a16w16 on dout16 = to_bf16(dout), without dbias (its column sums want the
  // fp32 dout: matmul_backward_a16w16 with dinp and dw null gives them). `writes` (GemmWrites)
  // says which outputs are written (=) rather than accumulated (+=): with kWriteDinp, dinp =
  // dout16 w, so the first product into a gradient buffer needs no fill_zero before it and reads
  // nothing; with kWriteDw, dw = dout16^T inp16, for the first backward after a zero_grad() that
  // left the weight gradients to their products (model::Transformer::zero_grad).
  void (*matmul_backward_g16)(float* dinp, float* dw, const uint16_t* dout16, const uint16_t* inp16,
                              const uint16_t* w16, int64_t N, int64_t IC, int64_t OC, GemmWrites writes);
  // matmul_backward_g16 whose dinp is written (never added to) and stored as its bf16 rounding
  // only, dinp16 [N, IC]; `writes` applies to dw. The down projection's input gradient in a
  // joined-MLP step (Transformer::mlp_rows16): only SwiGLU's backward reads it, and it rounds what
  // it writes anyway, so an N x I fp32 write and read a layer become bf16 (at 1.5B x 4,096 tokens
  // 147 MB a layer less), as PyTorch's autocast keeps every activation gradient.
  void (*matmul_backward_g16_dinp16)(uint16_t* dinp16, float* dw, const uint16_t* dout16, const uint16_t* inp16,
                                     const uint16_t* w16, int64_t N, int64_t IC, int64_t OC, GemmWrites writes);
  // adamw that also writes p16 = to_bf16(p) of the updated p: a model's bf16 copy of its weights
  // refreshed in the pass that updates them, not in a second pass that reads them all again.
  void (*adamw_w16)(float* p, uint16_t* p16, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale);
  // rmsnorm_backward that also writes dx16 = to_bf16(dx) of the updated dx (dx16 may be null): the
  // residual stream's gradient, which the next GEMMs read as dout16, rounded in the pass that makes
  // it rather than by a to_bf16 pass that reads it again.
  void (*rmsnorm_backward_w16)(float* dx, uint16_t* dx16, float* dw, const float* dout, const float* x,
                               const float* w, const float* rstd, int64_t N, int64_t C);
  // token_stats_backward with dlogits written only as their bf16 rounding, dlogits16 [n, cols] (the
  // LM head's GEMMs read nothing else); logits are only read.
  void (*token_stats_backward_w16)(uint16_t* dlogits16, const float* logits, const int32_t* targets,
                                   const float* lse, const float* entropy, const float* dlogp, const float* dent,
                                   int64_t n, int64_t col0, int64_t cols, float inv_temp);

  // The training attention's operands in bf16, made once (Bf16 tables only). A Bf16 table's
  // attention_forward and attention_backward round q, k and v first, each call: a pass over them
  // in the forward and again in backward, after RoPE's own passes; the o projection's GEMMs then
  // round the attention's output, forward and again in backward. Here RoPE writes the roundings
  // the attention reads, which the model keeps for backward, the forward writes its output's
  // rounding, and backward's RoPE writes the rounding the q, k and v GEMM reads. With these the
  // model runs q, k and v as one GEMM over [Wq; Wk; Wv] (build_layout), forward and backward.
  // rope_round_qkv_w16: qkv [N, (heads + 2 kv_heads) d] (each row q, k, v, as that GEMM writes
  // them; only read); q16 [N, heads d] = to_bf16(rope_forward(q part)), k16 [N, kv_heads d] =
  // to_bf16(rope_forward(k part)), v16 = to_bf16(v part).
  // attention_forward_w16 and attention_backward_w16: attention_forward and attention_backward
  // on the values of q16, k16 and v16 (k16 and v16 compact: kv_seq_stride = T kv_heads d), the
  // same bits, and out16 = to_bf16(out).
  // rope_backward_round_w16: rope_backward on dq [N, heads d] and dk [N, kv_heads d] in place,
  // then dqkv16 [N, (heads + 2 kv_heads) d] = rows [dq | dk | dv] rounded to bf16, and where dbias
  // is not null, dbias [(heads + 2 kv_heads) d] += the column sums of those rows in fp32: the q, k
  // and v biases' gradients (adjacent, as their biases are), in the pass that reads the rows, where
  // three column-sum launches read them again (1.5B: 84 launches and 0.9 GB a step).
  void (*rope_round_qkv_w16)(uint16_t* q16, uint16_t* k16, uint16_t* v16, const float* qkv, const int32_t* pos,
                             const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads,
                             int64_t d);
  void (*attention_forward_w16)(float* out, uint16_t* out16, float* lse, const uint16_t* q16, const uint16_t* k16,
                                const uint16_t* v16, const AttentionShape& s);
  void (*attention_backward_w16)(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                 const float* lse, const uint16_t* q16, const uint16_t* k16, const uint16_t* v16,
                                 const AttentionShape& s);
  void (*rope_backward_round_w16)(uint16_t* dqkv16, float* dq, float* dk, const float* dv, float* dbias,
                                  const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                                  int64_t kv_heads, int64_t d);
  // The MLP's gate and up as one GEMM over [Wg; Wu] in training too (Bf16 tables only): its rows
  // [gate | up], in bf16 (matmul_forward_o16), go to swiglu_rows_w16 forward, and backward's SwiGLU
  // writes its gradients as the rows that GEMM's backward reads. swiglu_rows_backward_w16:
  // dgate_up16 [R, 2I] = rows [dgate | dup] of swiglu_backward_w16 on the values of the two parts
  // of gate_up16 [R, 2I] and of dout16 [R, I] (matmul_backward_g16_dinp16's).
  void (*swiglu_rows_backward_w16)(uint16_t* dgate_up16, const uint16_t* dout16, const uint16_t* gate_up16,
                                   int64_t R, int64_t I);

  // Recording and replay of ops (kernels/cuda: CUDA graphs); every field null where the backend
  // cannot record (kernels/cpu, whose ops are not launch-bound).
  OpRecorder recorder;
};

// Every function of Ops, in declaration order, for the tables that wrap another table's ops
// (kernels/guarded, kernels/op_profile.h). A function added to Ops but not here fails the
// static_assert below, so no wrapper can leave it unwrapped by accident.
#define AZR_OPS_FUNCTIONS(X)                                                                                    \
  X(alloc_zeroed) X(release) X(upload) X(download) X(download_start) X(download_wait) X(copy) X(fill_zero)     \
  X(gather_rows) X(scatter_add_rows)                                                                            \
  X(embedding_forward) X(embedding_backward) X(rmsnorm_forward) X(rmsnorm_backward) X(matmul_forward)           \
  X(matmul_backward) X(rope_forward) X(rope_backward) X(attention_forward) X(attention_backward)                \
  X(attention_decode) X(kv_store) X(swiglu_forward) X(swiglu_backward) X(add) X(token_stats)                    \
  X(token_stats_backward) X(sample_rows) X(sum_squares) X(scale) X(adamw) X(to_bf16) X(matmul_forward_w16)      \
  X(matmul_backward_w16) X(kv_store_w16) X(attention_decode_w16) X(rmsnorm_forward_w16)                         \
  X(matmul_forward_a16w16) X(matmul_backward_a16w16) X(matmul_forward_o16) X(residual_rmsnorm_forward_w16)      \
  X(swiglu_forward_w16) X(decode_qkv_w16) X(gate_up_swiglu_w16) X(rope_kv_store_w16) X(swiglu_rows_w16)         \
  X(decode_linear_w16) X(decode_layers_w16) X(swiglu_backward_w16) X(matmul_backward_g16)                       \
  X(matmul_backward_g16_dinp16) X(adamw_w16) X(rmsnorm_backward_w16) X(token_stats_backward_w16)                \
  X(rope_round_qkv_w16)                                                                                         \
  X(attention_forward_w16) X(attention_backward_w16) X(rope_backward_round_w16) X(swiglu_rows_backward_w16)

#define AZR_OPS_COUNT_ONE(field) +1
constexpr int kOpsFunctionCount = 0 AZR_OPS_FUNCTIONS(AZR_OPS_COUNT_ONE);
#undef AZR_OPS_COUNT_ONE
static_assert(offsetof(Ops, recorder) - offsetof(Ops, alloc_zeroed) == size_t(kOpsFunctionCount) * sizeof(void*),
              "AZR_OPS_FUNCTIONS must list every function of Ops");

// How a table's GEMMs (matmul_forward, matmul_backward) multiply. Fp32: exactly, in fp32. Bf16:
// each operand of each product (inp and w forward; dout and w for dinp; dout and inp for dw) is
// rounded to bfloat16 (to nearest, ties to even) and the products are summed in fp32, which is
// what tensor cores do with bf16 inputs (and PyTorch's set_float32_matmul_precision("medium")).
// Outputs, bias and the bias gradient (summed from the fp32 dout) stay fp32. Attention rounds
// its queries, keys and values to bf16 (the operands of a tensor core; the keys and values are
// what a bf16 KV cache holds) and works in fp32 on them (a backend may also round the
// probabilities for its tensor cores, kernels/cuda/cuda_ops.h says where); every other
// op is unchanged, so the rest of the model keeps fp32 activations, weights and gradients. A
// backend's Bf16 table is its Fp32 table with those ops replaced and the bf16-weight and bf16-cache
// ops of the table (the last fields of Ops) added: the CPU's is the reference the GPU's is checked against (both round the same
// operands; only the order of the fp32 sums differs).
enum class MatmulPrecision { Fp32, Bf16 };

// The CPU backend: OpenBLAS (OpenMP build) GEMMs and OpenMP loops.
const Ops& cpu_ops();
// The MatmulPrecision::Bf16 table (kernels/cpu/bf16_matmul.cpp): the operands are rounded (or the
// bf16 weights widened) into scratch copies, then multiplied by the fp32 GEMM. A reference, not a
// speed-up: a CPU without bf16 instructions gains nothing from it.
const Ops& cpu_bf16_matmul_ops();

// Threads the CPU backend uses (OpenMP and OpenBLAS); 0 = all cores.
void set_cpu_threads(int n);
int cpu_threads();

}  // namespace azr::kernels
