// Token statistics of the CUDA backend: per row of logits, the log-sum-exp, the target's
// log-probability and the entropy, and their backward. One block per row; each thread keeps an
// online (max, sum) over its slice of the vocabulary, and the block merges them.
//
//   z = logits * inv_temp,  lse = logsumexp(z),  logp = z[target] - lse,  H = -sum p (z - lse)
//   d logp / dz_j = [j == target] - p_j,   dH / dz_j = -p_j (log p_j + H)
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

constexpr int kThreads = 512;  // V = 151,936: ~300 logits per thread

__global__ void token_stats_kernel(float* lse, float* logp, float* entropy, const float* logits,
                                   const int32_t* targets, int64_t V, float inv_temp) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* z = logits + r * V;
  float m = -INFINITY, sum = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float zj = z[j] * inv_temp;
    if (zj > m) {
      sum = sum * expf(m - zj) + 1.f;
      m = zj;
    } else {
      sum += expf(zj - m);
    }
  }
  const float M = block_max(m, shared);
  const float S = block_sum(m == -INFINITY ? 0.f : sum * expf(m - M), shared);
  const float l = M + logf(S);
  if (entropy) {
    float h = 0.f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const float lp = z[j] * inv_temp - l;
      h -= expf(lp) * lp;
    }
    h = block_sum(h, shared);
    if (threadIdx.x == 0) entropy[r] = h;
  }
  if (threadIdx.x == 0) {
    lse[r] = l;
    if (logp) logp[r] = targets && targets[r] >= 0 ? z[targets[r]] * inv_temp - l : 0.f;
  }
}

// Each element is read and written by the same thread, so dlogits may alias logits.
__global__ void token_stats_backward_kernel(float* dlogits, const float* logits, const int32_t* targets,
                                            const float* lse, const float* entropy, const float* dlogp,
                                            const float* dent, int64_t V, float inv_temp) {
  const int64_t r = blockIdx.x;
  const float* z = logits + r * V;
  float* dz = dlogits + r * V;
  const float gl = dlogp ? dlogp[r] : 0.f, ge = dent ? dent[r] : 0.f, H = entropy ? entropy[r] : 0.f;
  const float l = lse[r];
  const int64_t target = targets ? targets[r] : -1;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float lp = z[j] * inv_temp - l, p = expf(lp);
    float g = (-gl * p - ge * p * (lp + H)) * inv_temp;
    if (j == target) g += gl * inv_temp;
    dz[j] = g;
  }
}

}  // namespace

void token_stats(float* lse, float* logp, float* entropy, const float* logits, const int32_t* targets, int64_t n,
                 int64_t V, float inv_temp) {
  if (n == 0) return;
  token_stats_kernel<<<unsigned(n), kThreads, 0, op_stream()>>>(lse, logp, entropy, logits, targets, V, inv_temp);
  AZR_CUDA_LAUNCHED();
}

void token_stats_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                          const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t V,
                          float inv_temp) {
  if (n == 0) return;
  token_stats_backward_kernel<<<unsigned(n), kThreads, 0, op_stream()>>>(dlogits, logits, targets, lse, entropy, dlogp,
                                                                         dent, V, inv_temp);
  AZR_CUDA_LAUNCHED();
}

}  // namespace azr::kernels::cuda_detail
