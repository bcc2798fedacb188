#pragma once
// The CUDA op implementations, one file per family; cuda_ops.cu puts them in the table.
// Signatures and semantics are kernels/ops.h's, on device pointers.
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace azr::kernels::cuda_detail {

// elementwise.cu
void embedding_forward(float* out, const int32_t* ids, const float* wte, int64_t N, int64_t C);
void rope_forward(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads, int64_t d);
void rope_backward(float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                   int64_t d);
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_forward_w16(float* out, uint16_t* out16, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);
void swiglu_backward_w16(uint16_t* dgate16, uint16_t* dup16, const float* dout, const float* gate, const float* up,
                         int64_t n);
void add(float* out, const float* a, const float* b, int64_t n);
void scale(float* x, float factor, int64_t n);
void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, float bc1, float bc2, float grad_scale);
void adamw_w16(float* p, uint16_t* p16, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale);

// ordered_sums.cu: the gradient sums over rows in a fixed order (ordered_sums.cuh), or with
// atomics where gradient_sums_ordered() is false (AZR_CUDA_GRADIENT_SUMS=atomic).
bool& gradient_sums_ordered();
// dst[c] += column sums of src [N, C] (matmul's dbias; rmsnorm's dw uses its own).
void column_sums_accumulate(float* dst, const float* src, int64_t N, int64_t C);
void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int64_t N, int64_t C);
double sum_squares(const float* x, int64_t n);
// A grow-only scratch for `rows` rows of C partial sums, valid until the next call, shared by the
// ops that sum columns through add_column_parts (ops run in order on one stream, and each is done
// with it once its add_column_parts has been queued); or null where the kernel should add its
// partials to the gradient itself, with atomics: the sums are atomic (gradient_sums_ordered()
// false), or there is one row, the only add into each element, which no order can change.
float* column_parts(int64_t rows, int64_t C);
// dst[c] += parts[p C + c] summed over p < P, in the order ordered_sums.cuh gives.
void add_column_parts(float* dst, const float* parts, int64_t P, int64_t C);
// The bytes the ordered sums' grow-only scratch holds now (the memory plan's `gradient_sums` line
// bounds it: ordered_sums_limits.h).
size_t cuda_gradient_sums_scratch_bytes();

// out[i] = src[rows[i]]; dst[rows[i]] += src[i] (rows of C floats, rows distinct for the add)
void gather_rows(float* out, const float* src, const int32_t* rows, int64_t n, int64_t C);
void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t C);
void kv_store(float* kcache, float* vcache, const float* k, const float* v, const int32_t* slot, const int32_t* pos,
              int64_t R, int64_t row, int64_t slot_stride);
void rope_kv_store_w16(float* q, const float* qkv, const int32_t* pos, const float* cos, const float* sin,
                       const int32_t* slot, uint16_t* kcache, uint16_t* vcache, int64_t R, int64_t heads,
                       int64_t kv_heads, int64_t d, int64_t slot_stride);
void swiglu_rows_w16(uint16_t* out16, const uint16_t* gate_up16, int64_t R, int64_t I);
void swiglu_rows_backward_w16(uint16_t* dgate_up16, const uint16_t* dout16, const uint16_t* gate_up16, int64_t R,
                              int64_t I);
void kv_store_w16(uint16_t* kcache, uint16_t* vcache, const float* k, const float* v, const int32_t* slot,
                  const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride);

// rmsnorm.cu
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C);
void rmsnorm_backward_w16(float* dx, uint16_t* dx16, float* dw, const float* dout, const float* x, const float* w,
                          const float* rstd, int64_t N, int64_t C);
void rmsnorm_forward_w16(float* out, uint16_t* out16, float* rstd, const float* x, const float* w, int64_t N,
                         int64_t C, float eps);
void residual_rmsnorm_forward_w16(float* res_out, float* out, uint16_t* out16, float* rstd, const float* x,
                                  const float* delta, const float* w, int64_t N, int64_t C, float eps);

// matmul.cu
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC);
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC);
// MatmulPrecision::Bf16: the operands rounded to bf16, fp32 sums and outputs
void matmul_forward_bf16(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                         int64_t OC);
void matmul_backward_bf16(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                          int64_t N, int64_t IC, int64_t OC);
void to_bf16(uint16_t* dst, const float* src, int64_t n);
void matmul_forward_w16(float* out, const float* inp, const uint16_t* w16, const float* bias, int64_t N, int64_t IC,
                        int64_t OC);
void matmul_backward_w16(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                         const uint16_t* w16, int64_t N, int64_t IC, int64_t OC);
void matmul_forward_a16w16(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias, int64_t N,
                           int64_t IC, int64_t OC);
void matmul_backward_a16w16(float* dinp, float* dw, float* dbias, const float* dout, const uint16_t* inp16,
                            const uint16_t* w16, int64_t N, int64_t IC, int64_t OC);
void matmul_forward_o16(uint16_t* out16, const uint16_t* inp16, const uint16_t* w16, int64_t N, int64_t IC,
                        int64_t OC);
void matmul_backward_g16_dinp16(uint16_t* dinp16, float* dw, const uint16_t* dout16, const uint16_t* inp16,
                                const uint16_t* w16, int64_t N, int64_t IC, int64_t OC, GemmWrites writes);
void matmul_backward_g16(float* dinp, float* dw, const uint16_t* dout16, const uint16_t* inp16, const uint16_t* w16,
                         int64_t N, int64_t IC, int64_t OC, GemmWrites writes);

// For cuda_ops_bench: would timing cuBLASLt's candidates (autotuning) beat the heuristic's first,
// which every GEMM runs? One bf16 product of a model's step, as lt_gemm plans it: the forward
// (out [N, OC] = x16 w16^T), backward's dinp (out [N, IC] = dout16 w16, overwritten) or dW (out
// [OC, IC] += dout16^T x16). Returns the mean milliseconds of `reps` runs under each of the
// heuristic's first `count` algorithms, in its order (entry 0 is the one the ops run; NaN where
// an algorithm refuses the problem).
enum class GemmProduct { Forward, BackwardDinp, BackwardDw };
std::vector<double> gemm_algorithm_ms(GemmProduct which, float* out, const uint16_t* x16, const uint16_t* w16,
                                      const uint16_t* dout16, int64_t N, int64_t IC, int64_t OC, int count, int reps);

// The same product on cuBLASLt whatever the row count (matmul_forward_a16w16 takes gemv_linear
// for a few rows): the baseline the GEMV is measured against.
void matmul_forward_a16w16_cublaslt(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias,
                                    int64_t N, int64_t IC, int64_t OC);

// gemv.cu: products of 1..kDecodeFusedMaxRows rows with bf16 weights (gemv.cuh), and the decode
// ops fused around them.
bool gemv_applies(int64_t rows);
// gemv_linear is the table's decode_linear_w16 (and matmul_forward_a16w16's few-row path).
void gemv_linear(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias, const float* residual,
                 int64_t R, int64_t IC, int64_t OC);
// A later product's weights that a launch asks L2 for before its wait: `bytes` from the start of
// `first` and as many from `second` (null: none), 16-byte aligned, bytes a multiple of 16; the
// launch's blocks take consecutive slices (gemv.cuh, prefetch_ahead). None where bytes is 0.
struct DecodeAhead {
  const uint16_t* first = nullptr;
  const uint16_t* second = nullptr;
  int64_t bytes = 0;
};
// gemv_linear whose launch also asks L2 for `ahead` (decode_layers.cu: gate and up during the
// attention); with 16-byte loads only (the scalar kernels ask for nothing).
void gemv_linear_ahead(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                       const float* residual, int64_t R, int64_t IC, int64_t OC, const DecodeAhead& ahead);
void decode_qkv_w16(const DecodeQkv& a);
void gate_up_swiglu_w16(uint16_t* out16, const DecodeInput& in, const uint16_t* wg, const float* bg,
                        const uint16_t* wu, const float* bu, int64_t R, int64_t IC, int64_t I, bool round_gate_up);

// attention.cu
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& s);
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                      const int32_t* pos, int64_t R, const AttentionShape& s);
// The Bf16 table's: attention on q, k and v rounded to bf16 (Simt, or the tensor-core kernels where
// cuda_attention_kernel() selects them); decode of bf16-rounded queries over a bf16 cache.
// The training attention's operands made once in bf16 (Ops::rope_round_qkv_w16 and the rest;
// elementwise.cu, and attention_tensor_core.cu for the attention). rope_backward_round_w16 writes
// dqkv16 as rows [dq | dk | dv], the one GEMM over [Wq; Wk; Wv]'s output gradient.
void rope_round_qkv_w16(uint16_t* q16, uint16_t* k16, uint16_t* v16, const float* qkv, const int32_t* pos,
                        const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads, int64_t d);
void rope_backward_round_w16(uint16_t* dqkv16, float* dq, float* dk, const float* dv, float* dbias, const int32_t* pos,
                             const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads,
                             int64_t d);
void attention_forward_w16(float* out, uint16_t* out16, float* lse, const uint16_t* q16, const uint16_t* k16,
                           const uint16_t* v16, const AttentionShape& s);
void attention_backward_w16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const uint16_t* q16, const uint16_t* k16, const uint16_t* v16, const AttentionShape& s);
void attention_forward_bf16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& s);
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const AttentionShape& s);
void attention_decode_w16(float* out, uint16_t* out16, const float* q, const uint16_t* kcache,
                          const uint16_t* vcache, const int32_t* slot, const int32_t* pos, int64_t R,
                          const AttentionShape& s);
// How attention_decode_w16 divides R rows' work among blocks: head chunks of up to 8 query heads a
// kv head, and `splits` splits of `chunk` positions each; tiles: the tile kernel's whole tiles a
// split (decode_layers.cu runs the same blocks). With the splits' records and merge counts
// (grow-only scratch, one each per process).
struct DecodeSplit {
  int head_chunks, splits;
  int64_t chunk;
};
DecodeSplit decode_split(int64_t R, const AttentionShape& shape, bool tiles);
float* decode_partials(size_t n);
unsigned* decode_merge_counts(size_t n);
// decode_layers.cu: the table's decode_layers_w16.
void decode_layers_w16(const DecodeLayers& a);

// grid_barrier_timing.cu, for cuda_ops_bench: seconds per grid barrier (grid_barrier.cuh) of a
// cooperative grid of `blocks` blocks (blocks_per_multiprocessor on each multiprocessor, at most as
// many as fit), over `barriers` of them in one launch, the launch's own time taken off; and, the
// baseline, seconds per kernel of as many launches of an empty kernel on the same grid, recorded
// as a graph and replayed. Throws std::invalid_argument on a count below 1, std::runtime_error
// where the device launches no cooperative grids.
struct BarrierTiming {
  double barrier_s = 0, launch_s = 0;
  int blocks = 0;
};
BarrierTiming time_grid_barriers(int blocks_per_multiprocessor, int barriers);
// Decode attention's kernel for head dims 32, 64 and 128, for benchmarks and tests: Tiles (the
// default; attention_decode_tiles.cuh, over a bf16 cache; an fp32 cache takes the lane groups),
// LaneGroups (attention_decode.cuh) or WarpPerPosition (attention.cu). Other head dims always run
// one position per warp.
enum class CudaDecodeKernel { Tiles, LaneGroups, WarpPerPosition };
void cuda_set_decode_kernel(CudaDecodeKernel kernel);
// How the last block of a split row merges it (attention_decode.cuh, merge_splits_if_last): each
// head's weights once (the default), or each element on its own, cuda_ops_bench's baseline.
enum class CudaDecodeMerge { WeightsOnce, EachElement };
void cuda_set_decode_merge(CudaDecodeMerge merge);
// The blocks per multiprocessor the temperature and greedy samplers aim for when they split rows
// into parts (sampling_common.cuh, parts_for; default 2, at least 1), for benchmarks.
void cuda_set_sampling_blocks_per_sm(int n);
// Whether the filtered sampler (top-k, top-p) splits rows over blocks when the temperature sampler
// would (sampling_filtered.cuh; default on), for benchmarks: off, a block per row reads its row.
void cuda_set_filtered_sampling_split(bool on);
bool cuda_filtered_sampling_split();
// Whether the temperature and greedy samplers' parts read their logits once (part_stats_kernel,
// part_greedy_kernel: each part's maximum and its mass against it; default on) or twice (the
// maxima, then the masses against the row's; sampling_unfiltered.cuh, sampling_greedy.cuh), for
// benchmarks and tests.
void cuda_set_split_sampling_one_pass(bool on);
bool cuda_split_sampling_one_pass();
// The bytes the sampler's grow-only scratch holds now (the memory plan's `sampler` line bounds it).
size_t cuda_sampler_scratch_bytes();
// D[b, h, t] = dot(dout, out) of each real row, 0 for padding ([B, H, T], backward's first step),
// in a grow-only scratch valid until the next call.
const float* attention_row_dots(const float* dout, const float* out, const AttentionShape& s);
// The same, and do16 [B, T, heads d] = dout rounded to bf16, in one pass over dout.
const float* attention_row_dots_round(uint16_t* do16, const float* dout, const float* out, const AttentionShape& s);

// attention_tensor_core.cu: the Bf16 table's training attention on tensor cores, where
// cuda_attention_kernel() selects it and the head dim is one its kernels take (64, 128).
bool tensor_core_attention_applies(const AttentionShape& s);
void tensor_core_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionShape& s);
void tensor_core_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                    const float* lse, const float* q, const float* k, const float* v,
                                    const AttentionShape& s);

// token_stats.cu
void token_stats(float* lse, float* logp, float* entropy, double* state, const float* logits, const int32_t* targets,
                 int64_t n, int64_t col0, int64_t cols, int64_t V, float inv_temp);
void token_stats_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                          const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                          int64_t cols, float inv_temp);
void token_stats_backward_w16(uint16_t* dlogits16, const float* logits, const int32_t* targets, const float* lse,
                              const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                              int64_t cols, float inv_temp);

// sampling.cu
void sample_rows(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                 int64_t V_limit, float temperature, int32_t top_k, float top_p);

// graphs.cu: Ops::recorder, CUDA graphs of op_stream() (kernels/ops.h, OpRecorder).
void graph_begin();
OpGraph* graph_end();
void graph_abandon();
void graph_replay(OpGraph* g);
void graph_release(OpGraph* g);
uint64_t graph_scratch_generation();

}  // namespace azr::kernels::cuda_detail
