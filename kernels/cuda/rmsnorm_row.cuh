#pragma once
// One row's RMSNorm by a whole block, shared by the norm kernel (rmsnorm.cu) and the few-row
// products that normalize their own input rows (gemv.cuh), so that a norm folded into a product
// gives the bits the norm kernel gives: the same per-thread strided sums, the same block tree (at
// the same block size, kNormThreads) and the same expressions.
//
//   y = x r w,  r = (mean(x^2) + eps)^-1/2
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/reductions.cuh"

namespace azr::kernels::cuda_detail {

constexpr int kNormThreads = 256;

// One square added to a thread's sum: a fused multiply-add, written out, so that every form that
// sums a row (here, and rmsnorm_forward.cuh's held kernel) rounds alike whatever the compiler
// would contract (nvcc contracts `ss += x * x` into this same instruction by default).
AZR_DEVICE_INLINE float row_square_sum_step(float ss, float x) { return __fmaf_rn(x, x, ss); }

// r from the block's sum of squares.
AZR_DEVICE_INLINE float row_rstd_of(float ss, int64_t C, float eps) { return rsqrtf(ss / float(C) + eps); }

// r of the row xr[0 .. C). Every thread of the block calls it (a block reduction); `shared` holds
// 32 floats.
AZR_DEVICE_INLINE float row_rstd(const float* xr, int64_t C, float eps, float* shared) {
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss = row_square_sum_step(ss, xr[c]);
  ss = block_sum(ss, shared);
  return row_rstd_of(ss, C, eps);
}

AZR_DEVICE_INLINE float normalized(float x, float r, float w) { return x * r * w; }

}  // namespace azr::kernels::cuda_detail
