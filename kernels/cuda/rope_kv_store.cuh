#pragma once
// The three ops between a decode step's q/k/v products and its attention, in one launch, for the
// steps of more rows than the fused few-row kernels take (gemv.cuh): RoPE on q in place, RoPE on k
// and k into the bf16 cache, v into the bf16 cache (ops.h: rope_kv_store_w16). At batch 256 they
// were three launches of a few microseconds each in every layer. The arithmetic is rope_kernel's
// and kv_store_kernel's (elementwise.cu), the rotation shared through rope_pair: the same bits.
//
// In this header, apart from its launch (elementwise.cu), so that tests/kernels/rope_kv_store_emulated_test.cpp
// can run it on the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/device_or_emulation.cuh"

#include <cstdint>

namespace azr::kernels::cuda_detail {

// A RoPE rotation of the pair (x1, x2) = (x[i], x[i + d/2]) by the angle whose cosine and sine
// are c and s (s negated for the backward).
AZR_DEVICE_INLINE void rope_pair(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

struct RopeKvStoreArgs {
  float* q;           // [R, heads * d], rotated in place
  const float *k, *v;  // [R, kv_heads * d] each; k is read, not written
  const int32_t *pos, *slot;
  const float *cos, *sin;  // [positions, d / 2]
  __nv_bfloat16 *kcache, *vcache;
  int64_t R, heads, kv_heads, d, slot_stride;
};

// One thread per pair (i, i + d/2) of a head of a row: the q heads, then the k heads, then the v
// heads (stored as they are; pairing them the same way keeps one kind of item). Every pos[r] >= 0.
__global__ void rope_kv_store_kernel(RopeKvStoreArgs a) {
  const int64_t half = a.d / 2, heads = a.heads + 2 * a.kv_heads, per_row = heads * half, kd = a.kv_heads * a.d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < a.R * per_row;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / per_row, item = e - r * per_row, head = item / half, i = item - head * half;
    const int64_t p = a.pos[r];
    if (head < a.heads) {
      float* x = a.q + r * (a.heads * a.d) + head * a.d;
      const int64_t table = p * half + i;
      rope_pair(x[i], x[i + half], a.cos[table], a.sin[table], x[i], x[i + half]);
      continue;
    }
    const int64_t at = int64_t(a.slot[r]) * a.slot_stride + p * kd;
    if (head < a.heads + a.kv_heads) {
      const int64_t o = (head - a.heads) * a.d + i;
      const float* x = a.k + r * kd + o;
      const int64_t table = p * half + i;
      float y1, y2;
      rope_pair(x[0], x[half], a.cos[table], a.sin[table], y1, y2);
      a.kcache[at + o] = __float2bfloat16_rn(y1);
      a.kcache[at + o + half] = __float2bfloat16_rn(y2);
    } else {
      const int64_t o = (head - a.heads - a.kv_heads) * a.d + i;
      a.vcache[at + o] = __float2bfloat16_rn(a.v[r * kd + o]);
      a.vcache[at + o + half] = __float2bfloat16_rn(a.v[r * kd + o + half]);
    }
  }
}

}  // namespace azr::kernels::cuda_detail
