// RMSNorm of the CUDA backend: the forward a block per row (its mean square a block reduction;
// rmsnorm_forward.cuh); the backward a block per few rows, dx, dw and dx's bf16 rounding in one
// pass (rmsnorm_backward.cuh).
//
//   y = x r w,  r = (mean(x^2) + eps)^-1/2
//   dx += r (dy w) - x r^3 / C * sum(dy w x),   dw += sum over rows of dy x r
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/ordered_sums_limits.h"
#include "kernels/cuda/rmsnorm_backward.cuh"
#include "kernels/cuda/rmsnorm_forward.cuh"
#include "kernels/cuda/rmsnorm_row.cuh"

namespace azr::kernels::cuda_detail {
namespace {

constexpr int kThreads = kNormThreads;  // the forward's bits depend on it (rmsnorm_row.cuh)

bool& forward_loop_form() {  // cuda_set_rmsnorm_forward_loop
  static bool loop = false;
  return loop;
}

// The forward, a block per row: the held form where the width allows (rmsnorm_forward.cuh). The
// sums run in the same order with a residual add in front or not, so the fused call is the add and
// the norm bit for bit.
void launch_rmsnorm_forward(const RmsnormForwardArgs& a, int64_t N) {
  if (N == 0) return;
  launch_rmsnorm_forward_form(a.C, forward_loop_form(),
                              [&](auto kernel) { launch_after_prior(kernel, unsigned(N), kThreads, 0, a); });
}

bool& backward_loop_form() {  // cuda_set_rmsnorm_backward_loop
  static bool loop = false;
  return loop;
}

// Blocks of the backward: about kBackwardBlocks, each rows_per_block rows (at least
// kMinRowsPerBlock, so that the dw partials stay a fraction of the elements).
constexpr int64_t kBackwardBlocks = ordered_sums::kNormBackwardBlocks, kMinRowsPerBlock = 4;

void launch_rmsnorm_backward(const RmsnormBackwardArgs& args) {
  RmsnormBackwardArgs a = args;
  a.rows_per_block = std::max(kMinRowsPerBlock, (a.N + kBackwardBlocks - 1) / kBackwardBlocks);
  const unsigned blocks = unsigned((a.N + a.rows_per_block - 1) / a.rows_per_block);
  // Each block's dw partial to its row of a scratch, added in order after the kernel
  // (ordered_sums.cuh).
  a.dw_parts = column_parts(blocks, a.C);
  const size_t smem = sizeof(float) * size_t(a.C);  // the block's dw partial
  auto launch = [&](auto kernel) {
    // Past the default 48 KiB with the kernel's static 128 bytes (C past 12,256 columns): opt in.
    if (smem + 128 > 48 * 1024)
      AZR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<blocks, kNormBackwardThreads, smem, op_stream()>>>(a);
    AZR_CUDA_LAUNCHED();
  };
  auto launch_held = [&](auto kernel) {
    kernel<<<blocks, kNormBackwardThreads, 0, op_stream()>>>(a);
    AZR_CUDA_LAUNCHED();
  };
  // One value a thread where quads do not fit; else the register-held form where the width fits
  // it; else the loop form in quads. Each writing its dw partials to the scratch, or not.
  auto pick = [&](auto parts) {
    constexpr bool kParts = decltype(parts)::value;
    if (!rmsnorm_backward_quads_fit(a))
      launch(rmsnorm_backward_kernel<1, kParts>);
    else if (backward_loop_form() || !launch_held_form<4, kParts>(a.C / 4, launch_held))
      launch(rmsnorm_backward_kernel<4, kParts>);
  };
  if (a.dw_parts) {
    pick(std::true_type{});
    add_column_parts(a.dw, a.dw_parts, blocks, a.C);
  } else {
    pick(std::false_type{});
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps) {
  launch_rmsnorm_forward({out, nullptr, rstd, x, w, C, eps, nullptr, nullptr}, N);
}

void rmsnorm_forward_w16(float* out, uint16_t* out16, float* rstd, const float* x, const float* w, int64_t N,
                         int64_t C, float eps) {
  launch_rmsnorm_forward({out, reinterpret_cast<__nv_bfloat16*>(out16), rstd, x, w, C, eps, nullptr, nullptr}, N);
}

void residual_rmsnorm_forward_w16(float* res_out, float* out, uint16_t* out16, float* rstd, const float* x,
                                  const float* delta, const float* w, int64_t N, int64_t C, float eps) {
  launch_rmsnorm_forward({out, reinterpret_cast<__nv_bfloat16*>(out16), rstd, x, w, C, eps, delta, res_out}, N);
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C) {
  if (N == 0) return;
  launch_rmsnorm_backward({dx, nullptr, dw, dout, x, w, rstd, N, C, 0});
}

void rmsnorm_backward_w16(float* dx, uint16_t* dx16, float* dw, const float* dout, const float* x, const float* w,
                          const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  launch_rmsnorm_backward({dx, reinterpret_cast<__nv_bfloat16*>(dx16), dw, dout, x, w, rstd, N, C, 0});
}

}  // namespace azr::kernels::cuda_detail

namespace azr::kernels {

void cuda_set_rmsnorm_backward_loop(bool loop) { cuda_detail::backward_loop_form() = loop; }
void cuda_set_rmsnorm_forward_loop(bool loop) {
  if (cuda_detail::forward_loop_form() == loop) return;
  cuda_detail::forward_loop_form() = loop;
  cuda_detail::scratch_generation()++;  // recorded decode steps are made anew with the other form
}

}  // namespace azr::kernels
