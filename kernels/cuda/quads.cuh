#pragma once
// Four values a thread: the loads, stores and grid-stride loop of the memory-bound kernels that
// take 16 bytes of each fp32 operand at a time (swiglu.cuh, streaming.cuh, rmsnorm_backward.cuh,
// token_stats.cuh), written once for V = 4 and the one value a thread they fall back to.
//
// On an H100 (2026-11-26, a 1.5B training step's op profile) the one-value-a-thread SwiGLU moved
// about 1.8 TB/s of the 3.35 the memory allows: one 4-byte load of each operand in flight per
// thread is too little to cover the memory's latency. A quad is one 16-byte load or store (8 bytes
// for bf16); it needs the pointer 16-byte aligned (8-byte for bf16), which quads_fit checks, and a
// launch falls back to one value a thread where it does not hold.
//
// Device code that also compiles on the CPU stand-in (tests/kernels/cuda_emulation.h).
#include "kernels/cuda/device_or_emulation.cuh"

#include <cstdint>
#include <initializer_list>

namespace azr::kernels::cuda_detail {

// A value stored as fp32, or rounded to bf16 (nearest even, the bits to_bf16 writes).
AZR_DEVICE_INLINE void store_as(float* dst, float x) { *dst = x; }
AZR_DEVICE_INLINE void store_as(__nv_bfloat16* dst, float x) { *dst = __float2bfloat16_rn(x); }

AZR_DEVICE_INLINE uint32_t bf16_bits(float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
#ifdef AZR_CUDA_EMULATION
  return b.bits;
#else
  return __bfloat16_as_ushort(b);
#endif
}

// Four values into the quad-th group of four of dst: one 16-byte store, or 8 bytes of bf16.
AZR_DEVICE_INLINE void store_quad(float* dst, int64_t quad, float a, float b, float c, float d) {
  float4 v;
  v.x = a, v.y = b, v.z = c, v.w = d;
  reinterpret_cast<float4*>(dst)[quad] = v;
}
AZR_DEVICE_INLINE void store_quad(__nv_bfloat16* dst, int64_t quad, float a, float b, float c, float d) {
  uint2 v;
  v.x = bf16_bits(a) | bf16_bits(b) << 16;
  v.y = bf16_bits(c) | bf16_bits(d) << 16;
  reinterpret_cast<uint2*>(dst)[quad] = v;
}

AZR_DEVICE_INLINE float4 load_quad(const float* src, int64_t quad) {
  return reinterpret_cast<const float4*>(src)[quad];
}

// V values of a thread at a time, for kernels written once for both widths: V = 4, one quad; V = 1,
// one value (the fallback). Group g is values g V .. g V + V - 1.
template <int V>
struct Group {
  float v[V];
};

template <int V>
AZR_DEVICE_INLINE Group<V> load_group(const float* p, int64_t g) {
  Group<V> out;
  if constexpr (V == 4) {
    const float4 q = load_quad(p, g);
    out.v[0] = q.x, out.v[1] = q.y, out.v[2] = q.z, out.v[3] = q.w;
  } else {
    out.v[0] = p[g];
  }
  return out;
}

// V bf16 values widened to fp32 (exact): one 8-byte load for V = 4.
template <int V>
AZR_DEVICE_INLINE Group<V> load_group(const __nv_bfloat16* p, int64_t g) {
  Group<V> out;
  if constexpr (V == 4) {
    const uint2 q = reinterpret_cast<const uint2*>(p)[g];  // values 4g, 4g + 1 in q.x (low half first)
    out.v[0] = __uint_as_float(q.x << 16), out.v[1] = __uint_as_float(q.x & 0xFFFF0000u);
    out.v[2] = __uint_as_float(q.y << 16), out.v[3] = __uint_as_float(q.y & 0xFFFF0000u);
  } else {
    out.v[0] = __bfloat162float(p[g]);
  }
  return out;
}

template <int V, class T>
AZR_DEVICE_INLINE void store_group(T* p, int64_t g, const Group<V>& in) {
  if constexpr (V == 4)
    store_quad(p, g, in.v[0], in.v[1], in.v[2], in.v[3]);
  else
    store_as(p + g, in.v[0]);
}

// The grid-stride loop of an element-wise kernel over n values, V at a time: this thread's share
// of groups 0 .. n/V - 1, then (V > 1) of the values V (n/V) .. n - 1 one at a time. body(g)
// handles group g; tail(i) value i.
template <int V, class Body, class Tail>
AZR_DEVICE_INLINE void for_each_group(int64_t n, Body body, Tail tail) {
  const int64_t groups = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t g = first; g < groups; g += stride) body(g);
  if constexpr (V > 1)
    for (int64_t i = V * groups + first; i < n; i += stride) tail(i);
}

// Whether quads may take these pointers: the fp32 ones 16-byte aligned, the bf16 ones 8-byte (null
// ones are not read or written).
inline bool quads_fit(std::initializer_list<const void*> fp32, std::initializer_list<const void*> bf16) {
  for (const void* p : fp32)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (const void* p : bf16)
    if (reinterpret_cast<uintptr_t>(p) % 8 != 0) return false;
  return true;
}

}  // namespace azr::kernels::cuda_detail
