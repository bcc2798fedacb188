// Elementwise and gather/scatter ops of the CUDA backend: the embedding's forward, RoPE, SwiGLU,
// add, scale, AdamW (the embedding's backward, the sum of squares and the column sums are in
// ordered_sums.cu). Memory-bound, so each is one grid-stride pass; the formulas are kernels/cpu's,
// line for line. SwiGLU's kernels are in swiglu.cuh, add's and AdamW's in streaming.cuh (four
// values a thread), RoPE's in rope.cuh.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/decode_epilogues.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/streaming.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace azr::kernels::cuda_detail {
namespace {

// A negative id gives a row of NaN, not a read before the table: a decode step launched ahead
// (model/generate.cpp) embeds the sampler's ids before the host has checked them, and the filtered
// sampler writes -1 where its kept set is empty (NaN logits). The host's check then reports it,
// with the device still usable.
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* wte, int64_t N, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int32_t id = ids[n];
    out[i] = id < 0 ? __int_as_float(0x7fc00000) : wte[int64_t(id) * C + c];
  }
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= factor;
}

__global__ void gather_rows_kernel(float* out, const float* src, const int32_t* rows, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = src[int64_t(rows[i / C]) * C + i % C];
}

// rows are distinct, so no two threads add into one element: no atomics.
__global__ void scatter_add_rows_kernel(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x)
    dst[int64_t(rows[i / C]) * C + i % C] += src[i];
}

// One thread per float of k (and the same float of v): rows of a decode step are few and short, so
// one flat launch for the layer beats R copies.
// KV: float, or __nv_bfloat16 for a bf16 cache (store_as, swiglu.cuh).

template <class KV>
__global__ void kv_store_kernel(KV* kcache, KV* vcache, const float* k, const float* v, const int32_t* slot,
                                const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * row; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / row;
    if (pos[r] < 0) continue;
    const int64_t at = int64_t(slot[r]) * slot_stride + int64_t(pos[r]) * row + i % row;
    store_as(kcache + at, k[i]);
    store_as(vcache + at, v[i]);
  }
}

}  // namespace

void kv_store(float* kcache, float* vcache, const float* k, const float* v, const int32_t* slot, const int32_t* pos,
              int64_t R, int64_t row, int64_t slot_stride) {
  if (R * row == 0) return;
  kv_store_kernel<<<grid_for(R * row), 256, 0, op_stream()>>>(kcache, vcache, k, v, slot, pos, R, row, slot_stride);
  AZR_CUDA_LAUNCHED();
}

void kv_store_w16(uint16_t* kcache, uint16_t* vcache, const float* k, const float* v, const int32_t* slot,
                  const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride) {
  if (R * row == 0) return;
  kv_store_kernel<<<grid_for(R * row), 256, 0, op_stream()>>>(reinterpret_cast<__nv_bfloat16*>(kcache),
                                              reinterpret_cast<__nv_bfloat16*>(vcache), k, v, slot, pos, R, row,
                                              slot_stride);
  AZR_CUDA_LAUNCHED();
}

void rope_kv_store_w16(float* q, const float* qkv, const int32_t* pos, const float* cos, const float* sin,
                       const int32_t* slot, uint16_t* kcache, uint16_t* vcache, int64_t R, int64_t heads,
                       int64_t kv_heads, int64_t d, int64_t slot_stride) {
  const int64_t pairs = R * (heads + 2 * kv_heads) * (d / 2);
  if (pairs == 0) return;
  const RopeKvStoreArgs a{q, qkv, pos, slot, cos, sin, reinterpret_cast<__nv_bfloat16*>(kcache),
                          reinterpret_cast<__nv_bfloat16*>(vcache), R, heads, kv_heads, d, slot_stride};
  if (fits_32_bit_index(pairs))
    rope_kv_store_kernel<uint32_t><<<grid_for(pairs), 256, 0, op_stream()>>>(a);
  else
    rope_kv_store_kernel<int64_t><<<grid_for(pairs), 256, 0, op_stream()>>>(a);
  AZR_CUDA_LAUNCHED();
}


void gather_rows(float* out, const float* src, const int32_t* rows, int64_t n, int64_t C) {
  if (n * C == 0) return;
  gather_rows_kernel<<<grid_for(n * C), 256, 0, op_stream()>>>(out, src, rows, n, C);
  AZR_CUDA_LAUNCHED();
}

void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t C) {
  if (n * C == 0) return;
  scatter_add_rows_kernel<<<grid_for(n * C), 256, 0, op_stream()>>>(dst, src, rows, n, C);
  AZR_CUDA_LAUNCHED();
}

void embedding_forward(float* out, const int32_t* ids, const float* wte, int64_t N, int64_t C) {
  if (N * C == 0) return;
  embedding_forward_kernel<<<grid_for(N * C), 256, 0, op_stream()>>>(out, ids, wte, N, C);
  AZR_CUDA_LAUNCHED();
}

namespace {

// 32-bit indices where the call fits them (rope.cuh), 64-bit otherwise: the same pairs.
template <int Sign>
void launch_rope(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                 int64_t d) {
  const int64_t pairs = N * heads * (d / 2);
  if (pairs == 0) return;
  if (rope_fits_32_bits(N, heads, d))
    rope_kernel<Sign, uint32_t><<<grid_for(pairs), 256, 0, op_stream()>>>(x, pos, cos, sin, uint32_t(N),
                                                                         uint32_t(heads), uint32_t(d));
  else
    rope_kernel<Sign, int64_t><<<grid_for(pairs), 256, 0, op_stream()>>>(x, pos, cos, sin, N, heads, d);
  AZR_CUDA_LAUNCHED();
}

}  // namespace

void rope_forward(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                  int64_t d) {
  launch_rope<1>(x, pos, cos, sin, N, heads, d);
}

void rope_backward(float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                   int64_t d) {
  launch_rope<-1>(dx, pos, cos, sin, N, heads, d);
}

void rope_round_qkv_w16(uint16_t* q16, uint16_t* k16, uint16_t* v16, const float* qkv, const int32_t* pos,
                        const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads, int64_t d) {
  const int64_t pairs = N * (heads + 2 * kv_heads) * (d / 2);
  if (pairs == 0) return;
  auto* q = reinterpret_cast<__nv_bfloat16*>(q16);
  auto* k = reinterpret_cast<__nv_bfloat16*>(k16);
  auto* v = reinterpret_cast<__nv_bfloat16*>(v16);
  if (fits_32_bit_index(pairs))
    rope_round_qkv_kernel<uint32_t><<<grid_for(pairs), 256, 0, op_stream()>>>(
        q, k, v, qkv, pos, cos, sin, uint32_t(N), uint32_t(heads), uint32_t(kv_heads), uint32_t(d));
  else
    rope_round_qkv_kernel<int64_t><<<grid_for(pairs), 256, 0, op_stream()>>>(q, k, v, qkv, pos, cos, sin, N, heads,
                                                                             kv_heads, d);
  AZR_CUDA_LAUNCHED();
}

void rope_backward_round_w16(uint16_t* dqkv16, float* dq, float* dk, const float* dv, float* dbias, const int32_t* pos,
                             const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads,
                             int64_t d) {
  const int64_t per_row = (heads + 2 * kv_heads) * (d / 2), pairs = N * per_row;
  if (pairs == 0) return;
  auto* out = reinterpret_cast<__nv_bfloat16*>(dqkv16);
  const RopeBackwardGrid g = rope_backward_grid(N, per_row);
  const dim3 grid(g.x, g.y);
  // The chunks' bias sums to rows of a scratch, added in order after the kernel (ordered_sums.cuh).
  const int64_t width = 2 * per_row;
  float* parts = dbias ? column_parts(g.y, width) : nullptr;
  if (fits_32_bit_index(pairs))
    rope_backward_round_kernel<uint32_t><<<grid, 256, 0, op_stream()>>>(
        out, dq, dk, dv, dbias, parts, pos, cos, sin, uint32_t(N), uint32_t(heads), uint32_t(kv_heads), uint32_t(d),
        uint32_t(g.rows_per_chunk));
  else
    rope_backward_round_kernel<int64_t><<<grid, 256, 0, op_stream()>>>(out, dq, dk, dv, dbias, parts, pos, cos, sin,
                                                                       N, heads, kv_heads, d, g.rows_per_chunk);
  AZR_CUDA_LAUNCHED();
  if (parts) add_column_parts(dbias, parts, g.y, width);
}

namespace {

// Four values a thread where the pointers allow (swiglu.cuh), one otherwise: the same values.
void launch_swiglu_forward(float* out, __nv_bfloat16* out16, const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  if (quads_fit({out, gate, up}, {out16}))
    swiglu_forward_kernel<4><<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(out, out16, gate, up, n);
  else
    swiglu_forward_kernel<1><<<grid_for(n), 256, 0, op_stream()>>>(out, out16, gate, up, n);
  AZR_CUDA_LAUNCHED();
}

template <class G>
void launch_swiglu_backward(G* dgate, G* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  const bool quads = std::is_same_v<G, float> ? quads_fit({dgate, dup, dout, gate, up}, {})
                                              : quads_fit({dout, gate, up}, {dgate, dup});
  if (quads)
    swiglu_backward_kernel<4><<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(dgate, dup, dout, gate, up, n);
  else
    swiglu_backward_kernel<1><<<grid_for(n), 256, 0, op_stream()>>>(dgate, dup, dout, gate, up, n);
  AZR_CUDA_LAUNCHED();
}

// The rows kernels' grid: a row per grid row (at most 65,535, then strided), a row's groups of V
// along x (at most 64 blocks of 256).
dim3 swiglu_rows_grid(int64_t R, int64_t groups_per_row) {
  const int64_t x = std::min<int64_t>(64, std::max<int64_t>(1, (groups_per_row + 255) / 256));
  return dim3(unsigned(x), unsigned(std::min<int64_t>(R, 65535)));
}

}  // namespace

void swiglu_rows_w16(uint16_t* out16, const uint16_t* gate_up16, int64_t R, int64_t I) {
  if (R * I == 0) return;
  auto* out = reinterpret_cast<__nv_bfloat16*>(out16);
  const auto* in = reinterpret_cast<const __nv_bfloat16*>(gate_up16);
  if (I % 4 == 0 && quads_fit({}, {gate_up16, out16}))
    swiglu_rows_forward_kernel<4><<<swiglu_rows_grid(R, I / 4), 256, 0, op_stream()>>>(out, in, R, I);
  else
    swiglu_rows_forward_kernel<1><<<swiglu_rows_grid(R, I), 256, 0, op_stream()>>>(out, in, R, I);
  AZR_CUDA_LAUNCHED();
}

void swiglu_rows_backward_w16(uint16_t* dgate_up16, const uint16_t* dout16, const uint16_t* gate_up16, int64_t R,
                              int64_t I) {
  if (R * I == 0) return;
  auto* out = reinterpret_cast<__nv_bfloat16*>(dgate_up16);
  const auto* in = reinterpret_cast<const __nv_bfloat16*>(gate_up16);
  const auto* dout = reinterpret_cast<const __nv_bfloat16*>(dout16);
  if (I % 4 == 0 && quads_fit({}, {dout16, gate_up16, dgate_up16}))
    swiglu_rows_backward_kernel<4><<<swiglu_rows_grid(R, I / 4), 256, 0, op_stream()>>>(out, dout, in, R, I);
  else
    swiglu_rows_backward_kernel<1><<<swiglu_rows_grid(R, I), 256, 0, op_stream()>>>(out, dout, in, R, I);
  AZR_CUDA_LAUNCHED();
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  launch_swiglu_forward(out, nullptr, gate, up, n);
}

void swiglu_forward_w16(float* out, uint16_t* out16, const float* gate, const float* up, int64_t n) {
  launch_swiglu_forward(out, reinterpret_cast<__nv_bfloat16*>(out16), gate, up, n);
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  launch_swiglu_backward(dgate, dup, dout, gate, up, n);
}

void swiglu_backward_w16(uint16_t* dgate16, uint16_t* dup16, const float* dout, const float* gate, const float* up,
                         int64_t n) {
  launch_swiglu_backward(reinterpret_cast<__nv_bfloat16*>(dgate16), reinterpret_cast<__nv_bfloat16*>(dup16), dout,
                         gate, up, n);
}

void add(float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  if (quads_fit({out, a, b}, {}))
    add_kernel<4><<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(out, a, b, n);
  else
    add_kernel<1><<<grid_for(n), 256, 0, op_stream()>>>(out, a, b, n);
  AZR_CUDA_LAUNCHED();
}

void scale(float* x, float factor, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), 256, 0, op_stream()>>>(x, factor, n);
  AZR_CUDA_LAUNCHED();
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, float bc1, float bc2, float grad_scale) {
  adamw_w16(p, nullptr, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);  // no bf16 copy
}

void adamw_w16(float* p, uint16_t* p16, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale) {
  if (n == 0) return;
  const AdamwStep s{beta1, beta2, eps, lr / bc1, std::sqrt(bc2), 1.f - lr * weight_decay, grad_scale};
  auto* p16b = reinterpret_cast<__nv_bfloat16*>(p16);
  if (quads_fit({p, g, m, v}, {p16}))
    adamw_kernel<4><<<grid_for((n + 3) / 4), 256, 0, op_stream()>>>(p, p16b, g, m, v, n, s);
  else
    adamw_kernel<1><<<grid_for(n), 256, 0, op_stream()>>>(p, p16b, g, m, v, n, s);
  AZR_CUDA_LAUNCHED();
  // It wrote weights, which a kernel launched after it programmatically reads before its wait
  // (the few-row products' held packs, gemv.cuh; the q/k/v epilogue's biases): none may follow it.
  next_launch_ordinary() = true;
}

}  // namespace azr::kernels::cuda_detail
