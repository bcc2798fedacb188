#pragma once
// SwiGLU's training kernels (elementwise.cu launches them), V values a thread: 4 (quads.cuh: why)
// loads 16 bytes of each operand and stores 16 (fp32) or 8 (bf16) bytes at a time, with the same
// arithmetic on each value (swiglu_value, swiglu_grads), so the same bits as V = 1; the last n % 4
// values go one a thread. The launch takes V = 1 where a call's pointers do not fit quads
// (quads_fit).
//
// In this header, apart from the launches, so that tests/kernels/swiglu_emulated_test.cpp runs
// both kinds on the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/decode_epilogues.cuh"  // swiglu_value
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/quads.cuh"

#include <cmath>
#include <cstdint>

namespace azr::kernels::cuda_detail {

// silu(g) = g sigma(g); silu'(g) = sigma(g) (1 + g (1 - sigma(g))): d(silu(g) u)/dg and /du.
AZR_DEVICE_INLINE void swiglu_grads(float dy, float g, float u, float& dgate, float& dup) {
  const float sig = 1.f / (1.f + expf(-g));
  dup = dy * g * sig;
  dgate = dy * u * sig * (1.f + g * (1.f - sig));
}

// out (may be null) = silu(gate) * up; out16 (may be null) its bf16 rounding, for the down
// projection's GEMM.
template <int V>
__global__ void swiglu_forward_kernel(float* out, __nv_bfloat16* out16, const float* gate, const float* up,
                                      int64_t n) {
  for_each_group<V>(
      n,
      [&](int64_t g) {
        const Group<V> gg = load_group<V>(gate, g), ug = load_group<V>(up, g);
        Group<V> y;
        for (int j = 0; j < V; j++) y.v[j] = swiglu_value(gg.v[j], ug.v[j]);
        if (out) store_group<V>(out, g, y);
        if (out16) store_group<V>(out16, g, y);
      },
      [&](int64_t i) {
        const float y = swiglu_value(gate[i], up[i]);
        if (out) out[i] = y;
        if (out16) out16[i] = __float2bfloat16_rn(y);
      });
}

// dgate, dup from dout = d(silu(gate) * up). G: float, or __nv_bfloat16 for swiglu_backward_w16
// (the same fp32 values, rounded as stored).
template <int V, class G>
__global__ void swiglu_backward_kernel(G* dgate, G* dup, const float* dout, const float* gate, const float* up,
                                       int64_t n) {
  for_each_group<V>(
      n,
      [&](int64_t g) {
        const Group<V> dy = load_group<V>(dout, g), gg = load_group<V>(gate, g), ug = load_group<V>(up, g);
        Group<V> dg, du;
        for (int j = 0; j < V; j++) swiglu_grads(dy.v[j], gg.v[j], ug.v[j], dg.v[j], du.v[j]);
        store_group<V>(dup, g, du);
        store_group<V>(dgate, g, dg);
      },
      [&](int64_t i) {
        float dg, du;
        swiglu_grads(dout[i], gate[i], up[i], dg, du);
        store_as(dup + i, du);
        store_as(dgate + i, dg);
      });
}

// SwiGLU on rows [gate | up] in bf16, the output of one GEMM over [Wg; Wu] (matmul_forward_o16;
// model/transformer.cpp: decode past a few rows, and the bf16 training step): row r's gate at
// gate_up16 + 2 I r, its up I after. A grid row (blockIdx.y, strided past gridDim.y) per row and
// its I values along x, V a thread: no index is divided. V = 4 needs I % 4 == 0, so a group never
// crosses a row, and the pointers quads_fit (the launch checks both).
//
// Forward: out16 [R, I] = bf16(silu(gate) * up), swiglu_forward_kernel's values on the widened
// gate and up.
template <int V>
__global__ void swiglu_rows_forward_kernel(__nv_bfloat16* out16, const __nv_bfloat16* gate_up16, int64_t R,
                                           int64_t I) {
  const int64_t groups = I / V, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < R; r += gridDim.y) {
    const __nv_bfloat16 *gate = gate_up16 + 2 * I * r, *up = gate + I;
    __nv_bfloat16* out = out16 + I * r;
    for (int64_t g = first; g < groups; g += stride) {
      const Group<V> gg = load_group<V>(gate, g), ug = load_group<V>(up, g);
      Group<V> y;
      for (int j = 0; j < V; j++) y.v[j] = swiglu_value(gg.v[j], ug.v[j]);
      store_group<V>(out, g, y);
    }
  }
}

// Backward: rows [dgate | dup] of dgate_up16 [R, 2 I] (the one GEMM's output gradient) from dout16
// [R, I] (bf16: the down projection's dinp16), swiglu_backward_kernel's values on the widened
// dout, gate and up, rounded to bf16.
template <int V>
__global__ void swiglu_rows_backward_kernel(__nv_bfloat16* dgate_up16, const __nv_bfloat16* dout16,
                                            const __nv_bfloat16* gate_up16, int64_t R, int64_t I) {
  const int64_t groups = I / V, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < R; r += gridDim.y) {
    const __nv_bfloat16 *gate = gate_up16 + 2 * I * r, *up = gate + I;
    const __nv_bfloat16* dy = dout16 + I * r;
    __nv_bfloat16 *dgate = dgate_up16 + 2 * I * r, *dup = dgate + I;
    for (int64_t g = first; g < groups; g += stride) {
      const Group<V> yg = load_group<V>(dy, g), gg = load_group<V>(gate, g), ug = load_group<V>(up, g);
      Group<V> dg, du;
      for (int j = 0; j < V; j++) swiglu_grads(yg.v[j], gg.v[j], ug.v[j], dg.v[j], du.v[j]);
      store_group<V>(dup, g, du);
      store_group<V>(dgate, g, dg);
    }
  }
}

}  // namespace azr::kernels::cuda_detail
