#pragma once
// RMSNorm's forward on the CUDA backend (rmsnorm.cu launches it), a block of kNormThreads per row,
// with an optional residual add in front (res = x + delta) and an optional bf16 copy of the output
// for the GEMMs it feeds:
//
//   y = x r w,  r = (mean(x^2) + eps)^-1/2
//
// Two forms with the same bits (rmsnorm_row.cuh's sums: each thread adds the squares of its
// columns threadIdx.x + k blockDim.x in k order, then the block tree):
// - rmsnorm_forward_kernel, the loop form: the row streams through three loops (the add, the
//   squares, the output), each value read from memory, or from cache, in each.
// - rmsnorm_forward_held_kernel<K>, for rows of at most K kNormThreads columns: a thread loads its
//   K values (and K of delta) at once, keeps them in registers for the squares and the output, and
//   stores res once. Why: res may alias x or delta, so the loop form's add could not issue a
//   row's next loads before its last store, one load in flight per thread; and every value was
//   read three times. The H200's op profile of a 1.5B step (2026-11-27) had the residual norm at
//   2.7 ms, about 45% of the bandwidth its bytes need.
//
// out (may be null where out16 is not), out16 (may be null), delta and res (null together, or
// neither; res may alias x or delta).
//
// In this header, apart from the launches, so that tests/kernels/rmsnorm_forward_emulated_test.cpp
// runs both forms on the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/rmsnorm_row.cuh"

#include <cstdint>

namespace azr::kernels::cuda_detail {

struct RmsnormForwardArgs {
  float* out;
  __nv_bfloat16* out16;
  float* rstd;
  const float *x, *w;
  int64_t C;
  float eps;
  const float* delta;
  float* res;
};

__global__ void __launch_bounds__(kNormThreads) rmsnorm_forward_kernel(RmsnormForwardArgs a) {
  __shared__ float shared[32];
  wait_for_prior_grids();  // x and delta come from the kernels before (launch_after_prior)
  release_next_grid();
  const int64_t n = blockIdx.x, C = a.C;
  const float* xr = a.x + n * C;
  if (a.delta) {
    const float* dr = a.delta + n * C;
    float* rr = a.res + n * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) rr[c] = xr[c] + dr[c];
    xr = rr;
  }
  const float r = row_rstd(xr, C, a.eps, shared);
  if (threadIdx.x == 0) a.rstd[n] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = normalized(xr[c], r, a.w[c]);
    if (a.out) a.out[n * C + c] = y;
    if (a.out16) a.out16[n * C + c] = __float2bfloat16_rn(y);
  }
}

// This thread's K values of a row (columns threadIdx.x + k blockDim.x; 0 past C), loaded at once.
template <int K>
AZR_DEVICE_INLINE void load_held_row(float (&v)[K], const float* row, int64_t C) {
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    v[k] = c < C ? row[c] : 0.f;
  }
}

// The columns of a row past C are skipped (a row of C <= K blockDim.x).
template <int K>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_forward_held_kernel(RmsnormForwardArgs a) {
  __shared__ float shared[32];
  wait_for_prior_grids();
  release_next_grid();
  const int64_t n = blockIdx.x, C = a.C;
  float v[K];
  load_held_row<K>(v, a.x + n * C, C);
  if (a.delta) {
    float d[K];
    load_held_row<K>(d, a.delta + n * C, C);
    float* rr = a.res + n * C;  // every load of the row above is issued before its first store
#pragma unroll
    for (int k = 0; k < K; k++) {
      const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
      v[k] = v[k] + d[k];
      if (c < C) rr[c] = v[k];
    }
  }
  // row_rstd's sum: this thread's columns in k order (a column past C adds nothing: it is last).
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < K; k++)
    if (threadIdx.x + int64_t(k) * blockDim.x < C) ss = row_square_sum_step(ss, v[k]);
  ss = block_sum(ss, shared);
  const float r = row_rstd_of(ss, C, a.eps);
  if (threadIdx.x == 0) a.rstd[n] = r;
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    if (c >= C) continue;
    const float y = normalized(v[k], r, a.w[c]);
    if (a.out) a.out[n * C + c] = y;
    if (a.out16) a.out16[n * C + c] = __float2bfloat16_rn(y);
  }
}

// The held form's values a thread for C columns (K = ceil(C / kNormThreads) rounded up to one of
// the compiled 1, 2, 4, 6, 8, 12, 16: up to 4,096 columns, every Qwen2.5 width to 7B's 3,584),
// or 0 where C is wider: the loop form.
inline int rmsnorm_forward_held_values(int64_t C) {
  const int64_t k = (C + kNormThreads - 1) / kNormThreads;
  for (int held : {1, 2, 4, 6, 8, 12, 16})
    if (k <= held) return held;
  return 0;
}

// Calls launch(kernel) with the held form for C, or the loop form.
template <class Launch>
void launch_rmsnorm_forward_form(int64_t C, bool loop_form, Launch&& launch) {
  switch (loop_form ? 0 : rmsnorm_forward_held_values(C)) {
    case 1: return launch(rmsnorm_forward_held_kernel<1>);
    case 2: return launch(rmsnorm_forward_held_kernel<2>);
    case 4: return launch(rmsnorm_forward_held_kernel<4>);
    case 6: return launch(rmsnorm_forward_held_kernel<6>);
    case 8: return launch(rmsnorm_forward_held_kernel<8>);
    case 12: return launch(rmsnorm_forward_held_kernel<12>);
    case 16: return launch(rmsnorm_forward_held_kernel<16>);
    default: return launch(rmsnorm_forward_kernel);
  }
}

}  // namespace azr::kernels::cuda_detail
