#pragma once
// SwiGLU's training kernels (elementwise.cu launches them), one value a thread and four.
//
// The four-value kernels (quads.cuh: why) load 16 bytes of each operand and store 16 (fp32) or 8
// (bf16) bytes at a time, with the same arithmetic on each value (swiglu_value, swiglu_grads), so
// the same bits; the last n % 4 values go one a thread. The launch falls back to the one-value
// kernels where a call's pointers do not fit quads (quads_fit).
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
// projection's GEMM. One value a thread.
__global__ void swiglu_forward_kernel(float* out, __nv_bfloat16* out16, const float* gate, const float* up,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float y = swiglu_value(gate[i], up[i]);
    if (out) out[i] = y;
    if (out16) out16[i] = __float2bfloat16_rn(y);
  }
}

// The same, four values a thread: quads 0 .. n/4 - 1, then the last n % 4 values one a thread.
__global__ void swiglu_forward_quads_kernel(float* out, __nv_bfloat16* out16, const float* gate, const float* up,
                                            int64_t n) {
  const int64_t quads = n / 4, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t q = first; q < quads; q += stride) {
    const float4 g = load_quad(gate, q), u = load_quad(up, q);
    const float y0 = swiglu_value(g.x, u.x), y1 = swiglu_value(g.y, u.y);
    const float y2 = swiglu_value(g.z, u.z), y3 = swiglu_value(g.w, u.w);
    if (out) store_quad(out, q, y0, y1, y2, y3);
    if (out16) store_quad(out16, q, y0, y1, y2, y3);
  }
  for (int64_t i = 4 * quads + first; i < n; i += stride) {
    const float y = swiglu_value(gate[i], up[i]);
    if (out) out[i] = y;
    if (out16) out16[i] = __float2bfloat16_rn(y);
  }
}

// dgate, dup from dout = d(silu(gate) * up). G: float, or __nv_bfloat16 for swiglu_backward_w16
// (the same fp32 values, rounded as stored). One value a thread.
template <class G>
__global__ void swiglu_backward_kernel(G* dgate, G* dup, const float* dout, const float* gate, const float* up,
                                       int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float dg, du;
    swiglu_grads(dout[i], gate[i], up[i], dg, du);
    store_as(dup + i, du);
    store_as(dgate + i, dg);
  }
}

// The same, four values a thread, then the last n % 4 one a thread.
template <class G>
__global__ void swiglu_backward_quads_kernel(G* dgate, G* dup, const float* dout, const float* gate, const float* up,
                                             int64_t n) {
  const int64_t quads = n / 4, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t q = first; q < quads; q += stride) {
    const float4 dy = load_quad(dout, q), g = load_quad(gate, q), u = load_quad(up, q);
    float dg[4], du[4];
    swiglu_grads(dy.x, g.x, u.x, dg[0], du[0]);
    swiglu_grads(dy.y, g.y, u.y, dg[1], du[1]);
    swiglu_grads(dy.z, g.z, u.z, dg[2], du[2]);
    swiglu_grads(dy.w, g.w, u.w, dg[3], du[3]);
    store_quad(dup, q, du[0], du[1], du[2], du[3]);
    store_quad(dgate, q, dg[0], dg[1], dg[2], dg[3]);
  }
  for (int64_t i = 4 * quads + first; i < n; i += stride) {
    float dg, du;
    swiglu_grads(dout[i], gate[i], up[i], dg, du);
    store_as(dup + i, du);
    store_as(dgate + i, dg);
  }
}

}  // namespace azr::kernels::cuda_detail
