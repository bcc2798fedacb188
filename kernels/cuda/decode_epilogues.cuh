#pragma once
// What follows the GEMMs of a decode step of more rows than the few-row kernels take (gemv.cuh),
// one launch each (ops.h):
//
// - rope_kv_store_kernel: from the q/k/v GEMM's output (one GEMM over the adjacent [Wq; Wk; Wv]),
//   RoPE on q into q, RoPE on k and k into the bf16 cache, v into the bf16 cache
//   (rope_kv_store_w16). At batch 256 that was three GEMMs and three small launches a layer.
// - SwiGLU on the gate/up GEMM's rows [gate | up] (one GEMM over the adjacent [Wg; Wu],
//   swiglu_rows_w16) is swiglu.cuh's swiglu_rows_forward_kernel, which the training step's one
//   gate/up GEMM takes too.
//
// The arithmetic is the unfused kernels' (elementwise.cu's rope_kernel, kv_store_kernel and
// swiglu_forward_kernel), shared through rope_pair and swiglu_value: the same bits on the same
// values. In this header, apart from the launches (elementwise.cu), so that
// tests/kernels/decode_epilogues_emulated_test.cpp can run them on the CPU through
// tests/kernels/cuda_emulation.h.
#include "kernels/cuda/device_or_emulation.cuh"

#include <cmath>
#include <cstdint>

namespace azr::kernels::cuda_detail {

// A RoPE rotation of the pair (x1, x2) = (x[i], x[i + d/2]) by the angle whose cosine and sine
// are c and s (s negated for the backward).
AZR_DEVICE_INLINE void rope_pair(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

// silu(g) * u, as SwiGLU computes it everywhere on the device.
AZR_DEVICE_INLINE float swiglu_value(float g, float u) { return g / (1.f + expf(-g)) * u; }

// x rounded to bf16 (nearest even) and back: the value a bf16 store of x holds.
AZR_DEVICE_INLINE float rounded_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

struct RopeKvStoreArgs {
  float* q;            // [R, heads * d] out, rotated
  const float* qkv;    // [R, (heads + 2 kv_heads) * d]: each row q's heads, k's, v's
  const int32_t *pos, *slot;
  const float *cos, *sin;  // [positions, d / 2]
  __nv_bfloat16 *kcache, *vcache;
  int64_t R, heads, kv_heads, d, slot_stride;
};

// Index: the type of the thread's item index and of what is divided out of it. A 64-bit division
// on the device is a software routine of dozens of instructions (two of them per item here; on an
// H100, 2026-11-26, this kernel was 3.7% of a 1.5B decode step at batch 256), so a launch takes
// uint32_t wherever the items fit 31 bits (fits_32_bit_index), which every decode step's do: the
// index stays below 2^31 and the grid's stride below 2^27, so nothing wraps. RoPE's training
// kernel (rope.cuh) takes the same loop.
template <class Index>
AZR_DEVICE_INLINE Index first_item() {
  return Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x);
}
template <class Index>
AZR_DEVICE_INLINE Index grid_stride() {
  return Index(gridDim.x) * Index(blockDim.x);
}
inline bool fits_32_bit_index(int64_t items) { return items <= (int64_t(1) << 31); }

// One thread per pair (i, i + d/2) of a head of a row: the q heads, then the k heads, then the v
// heads (stored as they are; pairing them the same way keeps one kind of item). Every pos[r] >= 0.
template <class Index>
__global__ void rope_kv_store_kernel(RopeKvStoreArgs a) {
  const Index half = Index(a.d / 2), per_row = Index(a.heads + 2 * a.kv_heads) * half;
  const int64_t qd = a.heads * a.d, kd = a.kv_heads * a.d, width = (a.heads + 2 * a.kv_heads) * a.d;
  const Index total = Index(a.R) * per_row;
  for (Index e = first_item<Index>(); e < total; e += grid_stride<Index>()) {
    const Index ri = e / per_row, item = e - ri * per_row, hi = item / half, ii = item - hi * half;
    const int64_t r = int64_t(ri), head = int64_t(hi), i = int64_t(ii);
    const float* x = a.qkv + r * width + head * a.d + i;  // the pair's first value
    const int64_t p = a.pos[r], table = p * half + i;
    if (head < a.heads) {
      float* y = a.q + r * qd + head * a.d + i;
      rope_pair(x[0], x[half], a.cos[table], a.sin[table], y[0], y[half]);
      continue;
    }
    const int64_t at = int64_t(a.slot[r]) * a.slot_stride + p * kd;
    if (head < a.heads + a.kv_heads) {
      const int64_t o = (head - a.heads) * a.d + i;
      float y1, y2;
      rope_pair(x[0], x[half], a.cos[table], a.sin[table], y1, y2);
      a.kcache[at + o] = __float2bfloat16_rn(y1);
      a.kcache[at + o + half] = __float2bfloat16_rn(y2);
    } else {
      const int64_t o = (head - a.heads - a.kv_heads) * a.d + i;
      a.vcache[at + o] = __float2bfloat16_rn(x[0]);
      a.vcache[at + o + half] = __float2bfloat16_rn(x[half]);
    }
  }
}

}  // namespace azr::kernels::cuda_detail
