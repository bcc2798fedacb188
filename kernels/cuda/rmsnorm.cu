// RMSNorm of the CUDA backend: one block per row for the row reductions (forward's mean square,
// backward's dot), and a column-parallel pass for dw, which sums over rows.
//
//   y = x r w,  r = (mean(x^2) + eps)^-1/2
//   dx += r (dy w) - x r^3 / C * sum(dy w x),   dw += sum over rows of dy x r
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/rmsnorm_row.cuh"

namespace azr::kernels::cuda_detail {
namespace {

constexpr int kThreads = kNormThreads;  // the forward's bits depend on it (rmsnorm_row.cuh)

// out16 (may be null): the output rounded to bf16 as well, for the GEMMs it feeds; out (may be null
// where out16 is not): the fp32 output, which a bf16 model does not keep. delta (may be
// null): the row is x + delta, a residual add fused in front, written to res (which may alias x or
// delta: each thread rereads only what it wrote). The sums run in the same order either way, so
// the fused call is the add and the norm bit for bit.
__global__ void rmsnorm_forward_kernel(float* out, __nv_bfloat16* out16, float* rstd, const float* x, const float* w,
                                       int64_t C, float eps, const float* delta, float* res) {
  __shared__ float shared[32];
  wait_for_prior_grids();  // x and delta come from the kernels before (launch_after_prior)
  release_next_grid();
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  if (delta) {
    const float* dr = delta + n * C;
    float* rr = res + n * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) rr[c] = xr[c] + dr[c];
    xr = rr;
  }
  const float r = row_rstd(xr, C, eps, shared);
  if (threadIdx.x == 0) rstd[n] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = normalized(xr[c], r, w[c]);
    if (out) out[n * C + c] = y;
    if (out16) out16[n * C + c] = __float2bfloat16_rn(y);
  }
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* w,
                                           const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  const float* dy = dout + n * C;
  const float r = rstd[n];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dy[c] * w[c] * xr[c];
  dot = block_sum(dot, shared);
  const float k = dot * r * r * r / float(C);
  float* dxr = dx + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] += dy[c] * w[c] * r - xr[c] * k;
}

// Threads own columns; blockIdx.y takes a chunk of rows and adds its partial with one atomic.
__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dout, const float* x, const float* rstd, int64_t N,
                                           int64_t C, int64_t rows_per_chunk) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float acc = 0.f;
  for (int64_t r = r0; r < r1; r++) acc += dout[r * C + c] * x[r * C + c] * rstd[r];
  atomicAdd(dw + c, acc);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  launch_after_prior(rmsnorm_forward_kernel, unsigned(N), kThreads, 0, out, nullptr, rstd, x, w, C, eps, nullptr,
                     nullptr);
}

void rmsnorm_forward_w16(float* out, uint16_t* out16, float* rstd, const float* x, const float* w, int64_t N,
                         int64_t C, float eps) {
  if (N == 0) return;
  launch_after_prior(rmsnorm_forward_kernel, unsigned(N), kThreads, 0, out, reinterpret_cast<__nv_bfloat16*>(out16),
                     rstd, x, w, C, eps, nullptr, nullptr);
}

void residual_rmsnorm_forward_w16(float* res_out, float* out, uint16_t* out16, float* rstd, const float* x,
                                  const float* delta, const float* w, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  launch_after_prior(rmsnorm_forward_kernel, unsigned(N), kThreads, 0, out, reinterpret_cast<__nv_bfloat16*>(out16),
                     rstd, x, w, C, eps, delta, res_out);
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_backward_dx_kernel<<<unsigned(N), kThreads, 0, op_stream()>>>(dx, dout, x, w, rstd, C);
  AZR_CUDA_LAUNCHED();
  constexpr int64_t kRowsPerChunk = 64;
  const dim3 grid(unsigned((C + kThreads - 1) / kThreads),
                  unsigned(std::min<int64_t>((N + kRowsPerChunk - 1) / kRowsPerChunk, 65535)));
  rmsnorm_backward_dw_kernel<<<grid, kThreads, 0, op_stream()>>>(dw, dout, x, rstd, N, C, (N + grid.y - 1) / grid.y);
  AZR_CUDA_LAUNCHED();
}

}  // namespace azr::kernels::cuda_detail
