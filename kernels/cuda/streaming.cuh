#pragma once
// The element-wise kernels that stream whole tensors (elementwise.cu and matmul.cu launch them):
// add, the bf16 rounding behind to_bf16, and AdamW. Each is one template over V, the values a
// thread takes at a time (quads.cuh): V = 4 where every pointer of the call fits 16-byte loads
// (8-byte for bf16), else 1. A thread takes groups of V from the start, then (V = 4) the last
// n % 4 values one at a time, with the same arithmetic on every value, so the two widths give the
// same bits.
//
// Why four: on an H100 (2026-11-26, a 1.5B training step's op profile) the activations' 168
// to_bf16 calls took 5.3 ms, four times their bytes' time at the memory's bandwidth, and AdamW
// 16.3 ms, about 85% of it; one 4-byte load of each operand in flight per thread is too little to
// cover the memory's latency.
//
// In this header, apart from the launches, so that tests/kernels/streaming_emulated_test.cpp runs
// them on the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/quads.cuh"

#include <cmath>
#include <cstdint>

namespace azr::kernels::cuda_detail {

// out = a + b; out may alias a or b (each value read and written by one thread).
template <int V>
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for_each_group<V>(
      n,
      [&](int64_t g) {
        Group<V> x = load_group<V>(a, g);
        const Group<V> y = load_group<V>(b, g);
        for (int j = 0; j < V; j++) x.v[j] += y.v[j];
        store_group<V>(out, g, x);
      },
      [&](int64_t i) { out[i] = a[i] + b[i]; });
}

// dst = src rounded to bf16, nearest even.
template <int V>
__global__ void round_to_bf16_kernel(__nv_bfloat16* dst, const float* src, int64_t n) {
  for_each_group<V>(
      n, [&](int64_t g) { store_group<V>(dst, g, load_group<V>(src, g)); },
      [&](int64_t i) { dst[i] = __float2bfloat16_rn(src[i]); });
}

// torch.optim.AdamW's update of one value (kernels/ops.h). g_scale: a clip's coefficient; g *
// g_scale is a product alone (nothing to contract it into an FMA with), so it rounds to fp32
// exactly as scale_kernel's stored value does.
struct AdamwStep {
  float beta1, beta2, eps, step_size, bc2_sqrt, decay, g_scale;
};

AZR_DEVICE_INLINE void adamw_value(const AdamwStep& s, float g, float& p, float& m, float& v) {
  const float gi = __fmul_rn(g, s.g_scale);
  float pi = p * s.decay;
  const float mi = s.beta1 * m + (1.f - s.beta1) * gi;
  const float vi = s.beta2 * v + (1.f - s.beta2) * gi * gi;
  pi -= s.step_size * mi / (sqrtf(vi) / s.bc2_sqrt + s.eps);
  p = pi, m = mi, v = vi;
}

// p16 (may be null): the updated p rounded to bf16 as well, the model's bf16 copy (adamw_w16).
template <int V>
__global__ void adamw_kernel(float* p, __nv_bfloat16* p16, const float* g, float* m, float* v, int64_t n,
                             AdamwStep s) {
  for_each_group<V>(
      n,
      [&](int64_t i) {
        Group<V> pg = load_group<V>(p, i), mg = load_group<V>(m, i), vg = load_group<V>(v, i);
        const Group<V> gg = load_group<V>(g, i);
        for (int j = 0; j < V; j++) adamw_value(s, gg.v[j], pg.v[j], mg.v[j], vg.v[j]);
        store_group<V>(p, i, pg);
        store_group<V>(m, i, mg);
        store_group<V>(v, i, vg);
        if (p16) store_group<V>(p16, i, pg);
      },
      [&](int64_t i) {
        adamw_value(s, g[i], p[i], m[i], v[i]);
        if (p16) p16[i] = __float2bfloat16_rn(p[i]);
      });
}

}  // namespace azr::kernels::cuda_detail
