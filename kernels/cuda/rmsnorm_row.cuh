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

// r of the row xr[0 .. C). Every thread of the block calls it (a block reduction); `shared` holds
// 32 floats.
AZR_DEVICE_INLINE float row_rstd(const float* xr, int64_t C, float eps, float* shared) {
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  ss = block_sum(ss, shared);
  return rsqrtf(ss / float(C) + eps);
}

AZR_DEVICE_INLINE float normalized(float x, float r, float w) { return x * r * w; }

}  // namespace azr::kernels::cuda_detail
