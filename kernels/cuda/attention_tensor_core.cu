// Launches of the tensor-core attention kernels (attention_tensor_core.cuh and, on mma.sync,
// attention_mma.cuh and attention_mma_backward.cuh, which describe them) and the choice between
// them and the Simt ones (cuda_ops.h: CudaAttentionKernel).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_mma_backward.cuh"
#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace tensor_core;
using tensor_core::kWarp;

TcDims tc_dims_of(const AttentionShape& s) {
  return TcDims{s.T, s.heads, s.heads / s.kv_heads, s.kv_seq_stride, s.kv_heads * s.d, s.lengths,
                1.f / std::sqrt(float(s.d))};
}

// More than 48 KiB of dynamic shared memory needs the kernel's opt-in. The attribute belongs to
// the current device's context, and a process may drive several devices, so it is set before
// every launch (a host-side call of about a microsecond, once per layer).
template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  AZR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

CudaAttentionKernel& attention_choice();

bool& masks_every_tile() {  // cuda_set_attention_masks_every_tile
  static bool every_tile = false;
  return every_tile;
}

// Scratch of the tensor-core attention: backward's per-query-head dK and dV shares [2, B, T,
// heads, D] fp32, and the mma.sync kernels' bf16 copies of q, k, v (and in backward dout) after
// them. Grow-only, one per process (ops run on one stream): each op call fills what it reads.
// model/memory_plan.cpp counts the largest call.
float* attention_scratch(size_t floats) {
  static DeviceScratch<> scratch;
  return scratch.get(floats);
}

// dst [B, T, row] bf16 = src's rows (sequence b's at b * seq_stride, `row` floats apart) rounded
// to nearest even: the mma.sync kernels' inputs. A sequence a grid row (blockIdx.y), so no
// element needs a 64-bit division to find it; four values a thread where the rows allow it (the
// model's do: row = heads x head_dim, a multiple of 8, and 16-byte aligned activations).
__global__ void round_rows_kernel(__nv_bfloat16* dst, const float* src, int64_t per_seq, int64_t seq_stride) {
  const float* from = src + int64_t(blockIdx.y) * seq_stride;
  __nv_bfloat16* to = dst + int64_t(blockIdx.y) * per_seq;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  if (per_seq % 4 == 0 && seq_stride % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    for (int64_t i = first; i < per_seq / 4; i += step) {
      const float4 x = reinterpret_cast<const float4*>(from)[i];
      __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo), packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      reinterpret_cast<uint2*>(to)[i] = packed;  // dst: per_seq % 4 == 0 keeps it 8-byte aligned
    }
    return;
  }
  for (int64_t i = first; i < per_seq; i += step) to[i] = __float2bfloat16_rn(from[i]);
}

void round_rows(__nv_bfloat16* dst, const float* src, int64_t B, int64_t T, int64_t row, int64_t seq_stride) {
  if (B == 0 || T == 0) return;
  const unsigned per_seq_blocks = std::max(1u, grid_for(B * T * row / 4) / unsigned(B));
  round_rows_kernel<<<dim3(per_seq_blocks, unsigned(B)), 256, 0, op_stream()>>>(dst, src, T * row, seq_stride);
  AZR_CUDA_LAUNCHED();
}

CudaAttentionBackward& backward_choice() {  // cuda_set_attention_backward
  static CudaAttentionBackward backward = [] {
    const char* e = std::getenv("AZR_CUDA_ATTENTION_BACKWARD");
    return parse_cuda_attention_backward(e ? e : "");
  }();
  return backward;
}

// The mma.sync kernels' inputs: q, k and v rounded into q16 [B, T, heads * D] and k16, v16
// [B, T, kv_heads * D] (compact), and the dims the kernels read them with.
TcDims round_qkv(__nv_bfloat16* q16, __nv_bfloat16* k16, __nv_bfloat16* v16, const float* q, const float* k,
                 const float* v, const AttentionShape& shape) {
  const int64_t q_row = shape.heads * shape.d, kv_row = shape.kv_heads * shape.d;
  round_rows(q16, q, shape.B, shape.T, q_row, shape.T * q_row);
  round_rows(k16, k, shape.B, shape.T, kv_row, shape.kv_seq_stride);
  round_rows(v16, v, shape.B, shape.T, kv_row, shape.kv_seq_stride);
  TcDims s = tc_dims_of(shape);
  s.kv_seq_stride = shape.T * kv_row;
  return s;
}

int& warp_rows_choice() {  // cuda_set_attention_warp_rows
  static int rows = [] {
    const char* e = std::getenv("AZR_CUDA_ATTENTION_WARP_ROWS");
    return parse_cuda_attention_warp_rows(e ? e : "");
  }();
  return rows;
}

// The mma.sync forward on bf16 q16, k16, v16 (compact) as round_qkv leaves them; out16 may be null.
// M m-tiles of 16 query rows a warp (attention_mma.cuh: kForwardBlockRows, kForwardKeys).
template <int D, int M>
void mma_forward_m(float* out, __nv_bfloat16* out16, float* lse, const __nv_bfloat16* q16, const __nv_bfloat16* k16,
                   const __nv_bfloat16* v16, const TcDims& s16, const AttentionShape& shape) {
  constexpr int64_t rows = kForwardBlockRows<M>;
  const dim3 grid(unsigned((shape.T + rows - 1) / rows), unsigned(shape.heads), unsigned(shape.B));
  const auto kernel = masks_every_tile() ? mma_forward_kernel<D, true, M> : mma_forward_kernel<D, false, M>;
  allow_shared_memory(kernel, kMmaForwardSmem<D, M>);
  constexpr size_t smem = kMmaForwardSmem<D, M>;
  kernel<<<grid, kWarps * kWarp, smem, op_stream()>>>(out, out16, lse, q16, k16, v16, s16);
  AZR_CUDA_LAUNCHED();
}

template <int D>
void mma_forward(float* out, __nv_bfloat16* out16, float* lse, const __nv_bfloat16* q16, const __nv_bfloat16* k16,
                 const __nv_bfloat16* v16, const TcDims& s16, const AttentionShape& shape) {
  if (warp_rows_choice() == 32) return mma_forward_m<D, 2>(out, out16, lse, q16, k16, v16, s16, shape);
  mma_forward_m<D, 1>(out, out16, lse, q16, k16, v16, s16, shape);
}

template <int D>
void forward_d(float* out, float* lse, const float* q, const float* k, const float* v, const AttentionShape& shape) {
  if (attention_choice() == CudaAttentionKernel::Mma) {
    // bf16 copies first ([B, T, heads * D] and [B, T, kv_heads * D] x 2, 16-byte aligned: D is a
    // multiple of 8), which the kernel copies into its tiles with cp.async.
    const int64_t qn = shape.B * shape.T * shape.heads * D, kvn = shape.B * shape.T * shape.kv_heads * D;
    auto* q16 = reinterpret_cast<__nv_bfloat16*>(attention_scratch(size_t(qn + 2 * kvn + 1) / 2));
    __nv_bfloat16 *k16 = q16 + qn, *v16 = k16 + kvn;
    const TcDims s = round_qkv(q16, k16, v16, q, k, v, shape);
    return mma_forward<D>(out, nullptr, lse, q16, k16, v16, s, shape);
  }
  const dim3 grid(unsigned((shape.T + kBlockRows - 1) / kBlockRows), unsigned(shape.heads), unsigned(shape.B));
  allow_shared_memory(tc_forward_kernel<D>, kForwardSmem<D>);
  constexpr size_t smem = kForwardSmem<D>;
  tc_forward_kernel<D><<<grid, kWarps * kWarp, smem, op_stream()>>>(out, lse, q, k, v, tc_dims_of(shape));
  AZR_CUDA_LAUNCHED();
}

// The mma.sync backward on bf16 q16, k16, v16 (compact): the row dots D with dout's rounding into
// the scratch after the shares (one pass over dout), then dQ, the shares of dK and dV, and their
// group sums; merged (backward_choice), dq, dk and dv zeroed and one kernel adding into all three.
template <int D>
void mma_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                  const __nv_bfloat16* q16, const __nv_bfloat16* k16, const __nv_bfloat16* v16, float* dk_h,
                  __nv_bfloat16* do16, const AttentionShape& shape) {
  const int64_t qn = shape.B * shape.T * shape.heads * D;
  float* dv_h = dk_h + qn;
  TcDims s16 = tc_dims_of(shape);
  s16.kv_seq_stride = shape.T * shape.kv_heads * D;
  const float* Drow = attention_row_dots_round(reinterpret_cast<uint16_t*>(do16), dout, out, shape);
  const dim3 grid(unsigned((shape.T + kBlockRows - 1) / kBlockRows), unsigned(shape.heads), unsigned(shape.B));
  const bool every = masks_every_tile();
  if (backward_choice() == CudaAttentionBackward::Merged) {
    // dk and dv: each sequence's T rows of kv_row floats, kv_seq_stride apart (what the group sum
    // writes; the rest of a wider stride is not theirs to touch).
    const size_t kv_bytes = size_t(shape.T * s16.kv_row) * sizeof(float);
    const size_t pitch = size_t(shape.kv_seq_stride) * sizeof(float);
    AZR_CUDA_CHECK(cudaMemsetAsync(dq, 0, size_t(qn) * sizeof(float), op_stream()));
    AZR_CUDA_CHECK(cudaMemset2DAsync(dk, pitch, 0, kv_bytes, size_t(shape.B), op_stream()));
    AZR_CUDA_CHECK(cudaMemset2DAsync(dv, pitch, 0, kv_bytes, size_t(shape.B), op_stream()));
    const auto kernel = every ? mma_dkdv_kernel<D, true, true> : mma_dkdv_kernel<D, false, true>;
    allow_shared_memory(kernel, kMmaMergedSmem<D>);
    constexpr size_t smem = kMmaMergedSmem<D>;
    kernel<<<grid, kWarps * kWarp, smem, op_stream()>>>(dk, dv, dq, do16, lse, Drow, q16, k16, v16, s16,
                                                        shape.kv_seq_stride);
    AZR_CUDA_LAUNCHED();
    return;
  }
  // Split: dQ, then the shares of dK and dV and their group sums.
  const auto dq_kernel = every ? mma_dq_kernel<D, true> : mma_dq_kernel<D, false>;
  const auto dkdv_kernel = every ? mma_dkdv_kernel<D, true> : mma_dkdv_kernel<D, false>;
  allow_shared_memory(dq_kernel, kMmaDqSmem<D>);
  allow_shared_memory(dkdv_kernel, kMmaDkDvSmem<D>);
  constexpr size_t dq_smem = kMmaDqSmem<D>, dkdv_smem = kMmaDkDvSmem<D>;
  dq_kernel<<<grid, kWarps * kWarp, dq_smem, op_stream()>>>(dq, do16, lse, Drow, q16, k16, v16, s16);
  AZR_CUDA_LAUNCHED();
  dkdv_kernel<<<grid, kWarps * kWarp, dkdv_smem, op_stream()>>>(dk_h, dv_h, nullptr, do16, lse, Drow, q16, k16,
                                                                v16, s16, 0);
  AZR_CUDA_LAUNCHED();
  // dk and dv in the shape's kv layout (ops.h), as the merged kernel writes them: s16's stride is
  // the compact bf16 copies'.
  TcDims out_dims = s16;
  out_dims.kv_seq_stride = shape.kv_seq_stride;
  tc_group_sum_kernel<<<grid_for(shape.B * shape.T * shape.kv_heads * D), 256, 0, op_stream()>>>(dk, dv, dk_h, dv_h,
                                                                                               out_dims, shape.B, D);
  AZR_CUDA_LAUNCHED();
}

template <int D>
void backward_d(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse, const float* q,
                const float* k, const float* v, const AttentionShape& shape) {
  // dQ, then each query head's share of dK and dV, then each group's sum (attention_tensor_core.cuh).
  const int64_t qn = shape.B * shape.T * shape.heads * D, kvn = shape.B * shape.T * shape.kv_heads * D;
  if (attention_choice() == CudaAttentionKernel::Mma) {
    // The shares, then bf16 copies of q, dout, k and v (16-byte aligned: qn is a multiple of 8).
    float* dk_h = attention_scratch(2 * size_t(qn) + size_t(2 * qn + 2 * kvn + 1) / 2);
    auto* q16 = reinterpret_cast<__nv_bfloat16*>(dk_h + 2 * qn);
    __nv_bfloat16 *do16 = q16 + qn, *k16 = do16 + qn, *v16 = k16 + kvn;
    round_qkv(q16, k16, v16, q, k, v, shape);
    return mma_backward<D>(dq, dk, dv, dout, out, lse, q16, k16, v16, dk_h, do16, shape);
  }
  const float* Drow = attention_row_dots(dout, out, shape);
  const TcDims s = tc_dims_of(shape);
  float* dk_h = attention_scratch(2 * size_t(qn));
  float* dv_h = dk_h + qn;
  const dim3 grid(unsigned((shape.T + kBlockRows - 1) / kBlockRows), unsigned(shape.heads), unsigned(shape.B));
  allow_shared_memory(tc_dq_kernel<D>, kDqSmem<D>);
  allow_shared_memory(tc_dkdv_kernel<D>, kDkDvSmem<D>);
  constexpr size_t dq_smem = kDqSmem<D>, dkdv_smem = kDkDvSmem<D>;
  tc_dq_kernel<D><<<grid, kWarps * kWarp, dq_smem, op_stream()>>>(dq, dout, lse, Drow, q, k, v, s);
  AZR_CUDA_LAUNCHED();
  tc_dkdv_kernel<D><<<grid, kWarps * kWarp, dkdv_smem, op_stream()>>>(dk_h, dv_h, dout, lse, Drow, q, k, v, s);
  AZR_CUDA_LAUNCHED();
  tc_group_sum_kernel<<<grid_for(shape.B * shape.T * shape.kv_heads * D), 256, 0, op_stream()>>>(dk, dv, dk_h, dv_h, s,
                                                                                               shape.B, D);
  AZR_CUDA_LAUNCHED();
}

// dst [n] fp32 = the bf16 values of src: the operands of attention_forward_w16 for the kernels
// that read fp32 (the Simt and WMMA ones), whose rounding then leaves each value as it is.
__global__ void widen_kernel(float* dst, const __nv_bfloat16* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

void widen(float* dst, const uint16_t* src, int64_t n) {
  if (n <= 0) return;
  widen_kernel<<<grid_for(n), 256, 0, op_stream()>>>(dst, reinterpret_cast<const __nv_bfloat16*>(src), n);
  AZR_CUDA_LAUNCHED();
}

bool mma_applies(const AttentionShape& s) {
  return tensor_core_attention_applies(s) && attention_choice() == CudaAttentionKernel::Mma;
}

CudaAttentionKernel attention_from_environment() {
  const char* e = std::getenv("AZR_CUDA_ATTENTION");
  return parse_cuda_attention(e ? e : "");
}

CudaAttentionKernel& attention_choice() {
  static CudaAttentionKernel choice = attention_from_environment();
  return choice;
}

}  // namespace

bool tensor_core_attention_applies(const AttentionShape& s) {
  return attention_choice() != CudaAttentionKernel::Simt && (s.d == 64 || s.d == 128) && s.kv_heads > 0 &&
         s.heads % s.kv_heads == 0;
}

void tensor_core_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionShape& s) {
  if (s.B == 0 || s.T == 0) return;
  if (s.d == 64) return forward_d<64>(out, lse, q, k, v, s);
  forward_d<128>(out, lse, q, k, v, s);
}

void tensor_core_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                    const float* lse, const float* q, const float* k, const float* v,
                                    const AttentionShape& s) {
  if (s.B == 0 || s.T == 0) return;
  if (s.d == 64) return backward_d<64>(dq, dk, dv, dout, out, lse, q, k, v, s);
  backward_d<128>(dq, dk, dv, dout, out, lse, q, k, v, s);
}

// The Bf16 table's attention on operands already in bf16 (Ops::attention_forward_w16). The
// mma.sync kernels read them as they are; the others read widened fp32 copies in the scratch,
// placed past backward's dK and dV shares (2 qn floats, which the WMMA backward takes from the
// scratch's start).
void attention_forward_w16(float* out, uint16_t* out16, float* lse, const uint16_t* q16, const uint16_t* k16,
                           const uint16_t* v16, const AttentionShape& s) {
  if (s.B == 0 || s.T == 0) return;
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(q16);
  const auto* k = reinterpret_cast<const __nv_bfloat16*>(k16);
  const auto* v = reinterpret_cast<const __nv_bfloat16*>(v16);
  auto* o16 = reinterpret_cast<__nv_bfloat16*>(out16);
  if (mma_applies(s)) {
    TcDims s16 = tc_dims_of(s);
    s16.kv_seq_stride = s.T * s.kv_heads * s.d;
    if (s.d == 64) return mma_forward<64>(out, o16, lse, q, k, v, s16, s);
    return mma_forward<128>(out, o16, lse, q, k, v, s16, s);
  }
  const int64_t qn = s.B * s.T * s.heads * s.d, kvn = s.B * s.kv_seq_stride;
  float* wq = attention_scratch(size_t(3 * qn + 2 * kvn)) + 2 * qn;
  widen(wq, q16, qn);
  widen(wq + qn, k16, kvn);
  widen(wq + qn + kvn, v16, kvn);
  attention_forward_bf16(out, lse, wq, wq + qn, wq + qn + kvn, s);
  to_bf16(out16, out, qn);
}

void attention_backward_w16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const uint16_t* q16, const uint16_t* k16, const uint16_t* v16, const AttentionShape& s) {
  if (s.B == 0 || s.T == 0) return;
  const int64_t qn = s.B * s.T * s.heads * s.d, kvn = s.B * s.kv_seq_stride;
  if (mma_applies(s)) {
    float* dk_h = attention_scratch(2 * size_t(qn) + size_t(qn + 1) / 2);  // the shares, then dout's rounding
    auto* do16 = reinterpret_cast<__nv_bfloat16*>(dk_h + 2 * qn);
    const auto* q = reinterpret_cast<const __nv_bfloat16*>(q16);
    const auto* k = reinterpret_cast<const __nv_bfloat16*>(k16);
    const auto* v = reinterpret_cast<const __nv_bfloat16*>(v16);
    if (s.d == 64) return mma_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, dk_h, do16, s);
    return mma_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, dk_h, do16, s);
  }
  float* wq = attention_scratch(size_t(3 * qn + 2 * kvn)) + 2 * qn;
  widen(wq, q16, qn);
  widen(wq + qn, k16, kvn);
  widen(wq + qn + kvn, v16, kvn);
  attention_backward_bf16(dq, dk, dv, dout, out, lse, wq, wq + qn, wq + qn + kvn, s);
}

}  // namespace azr::kernels::cuda_detail

namespace azr::kernels {

void cuda_set_attention_kernel(CudaAttentionKernel kernel) { cuda_detail::attention_choice() = kernel; }
CudaAttentionKernel cuda_attention_kernel() { return cuda_detail::attention_choice(); }
void cuda_set_attention_masks_every_tile(bool every_tile) { cuda_detail::masks_every_tile() = every_tile; }
void cuda_set_attention_warp_rows(int rows) {
  if (rows != 16 && rows != 32)
    throw std::invalid_argument("cuda_set_attention_warp_rows(" + std::to_string(rows) + "): expected 16 or 32");
  cuda_detail::warp_rows_choice() = rows;
}
int cuda_attention_warp_rows() { return cuda_detail::warp_rows_choice(); }
void cuda_set_attention_backward(CudaAttentionBackward backward) { cuda_detail::backward_choice() = backward; }
CudaAttentionBackward cuda_attention_backward() { return cuda_detail::backward_choice(); }

}  // namespace azr::kernels
