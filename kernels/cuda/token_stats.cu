// Token statistics of the CUDA backend: the launches of token_stats.cuh's kernels (the kernels and
// their arithmetic are described there).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/token_stats.cuh"

namespace azr::kernels::cuda_detail {

using namespace token_stats_kernels;

void token_stats(float* lse, float* logp, float* entropy, double* state, const float* logits, const int32_t* targets,
                 int64_t n, int64_t col0, int64_t cols, int64_t V, float inv_temp) {
  if (n == 0) return;
  stats_kernel<<<unsigned(n), kThreads, 0, op_stream()>>>(
      StatsArgs{lse, logp, entropy, state, logits, targets, col0, cols, V, inv_temp});
  AZR_CUDA_LAUNCHED();
}

void token_stats_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                          const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                          int64_t cols, float inv_temp) {
  if (n == 0) return;
  backward_kernel<<<unsigned(n), kThreads, 0, op_stream()>>>(
      BackwardArgs{dlogits, logits, lse, entropy, dlogp, dent, targets, col0, cols, inv_temp});
  AZR_CUDA_LAUNCHED();
}

}  // namespace azr::kernels::cuda_detail
