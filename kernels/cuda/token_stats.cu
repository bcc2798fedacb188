// Token statistics of the CUDA backend: the launches of token_stats.cuh's kernels (the kernels and
// their arithmetic are described there).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/token_stats.cuh"

namespace azr::kernels::cuda_detail {

using namespace token_stats_kernels;

namespace {

void launch_backward(int64_t n, const BackwardArgs& a) {
  if (backward_quads_fit(a))
    backward_kernel<4><<<unsigned(n), kThreads, 0, op_stream()>>>(a);
  else
    backward_kernel<1><<<unsigned(n), kThreads, 0, op_stream()>>>(a);
  AZR_CUDA_LAUNCHED();
}

}  // namespace

void token_stats(float* lse, float* logp, float* entropy, double* state, const float* logits, const int32_t* targets,
                 int64_t n, int64_t col0, int64_t cols, int64_t V, float inv_temp) {
  if (n == 0) return;
  const StatsArgs a{lse, logp, entropy, state, logits, targets, col0, cols, V, inv_temp};
  if (stats_quads_fit(a))
    stats_kernel<4><<<unsigned(n), kThreads, 0, op_stream()>>>(a);
  else
    stats_kernel<1><<<unsigned(n), kThreads, 0, op_stream()>>>(a);
  AZR_CUDA_LAUNCHED();
}

void token_stats_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                          const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                          int64_t cols, float inv_temp) {
  if (n == 0) return;
  launch_backward(n, {dlogits, nullptr, logits, lse, entropy, dlogp, dent, targets, col0, cols, inv_temp});
}

void token_stats_backward_w16(uint16_t* dlogits16, const float* logits, const int32_t* targets, const float* lse,
                              const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                              int64_t cols, float inv_temp) {
  if (n == 0) return;
  launch_backward(n, {nullptr, reinterpret_cast<__nv_bfloat16*>(dlogits16), logits, lse, entropy, dlogp, dent,
                      targets, col0, cols, inv_temp});
}

}  // namespace azr::kernels::cuda_detail
