#pragma once
// RMSNorm's backward on the CUDA backend (rmsnorm.cu launches it): dx, dw and, for the bf16
// training path, dx's bf16 rounding, in one pass over dout and x.
//
//   y = x r w,  r = (mean(x^2) + eps)^-1/2
//   dx += r (dy w) - x r^3 / C * sum(dy w x),   dw += sum over rows of dy x r
//
// Why one pass: the kernel this replaced took dx with a block per row and then dw with a second
// kernel over columns, which read dout and x again: six passes of N x C floats where four do (read
// dout, x, dx; write dx). On an H100 (2026-11-26) the two took 4.9 ms of a 1.5B step. Here a block
// takes rows_per_block rows one after another: per row a block sum for the dot, then dx, and dw's
// terms added into a partial of the block's own in shared memory, which goes at the end to the
// block's row of a scratch that add_column_parts then adds to dw in block order, so dw's bits are
// the same every run (add_dw_part; with AZR_CUDA_GRADIENT_SUMS=atomic, to dw with one atomic per
// column, in whatever order the blocks finish).
//
// dx16 (may be null): the updated dx rounded to bf16, written in the same pass: the bf16 training
// path's next GEMMs read the gradient only as bf16 (kernels::Ops::rmsnorm_backward_w16), where a
// to_bf16 pass after this kernel would read dx again.
//
// V: values a thread takes at a time, 4 (quads.cuh) where C % 4 == 0 and the pointers fit, else
// 1. Each thread owns the columns of its groups of V (group g = threadIdx.x + k blockDim.x) for
// every row, so its dw partial is its own: no barrier between its writes and its reads.
//
// In this header, apart from the launch, so that tests/kernels/rmsnorm_backward_emulated_test.cpp
// runs it on the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/quads.cuh"
#include "kernels/cuda/reductions.cuh"

#include <cstdint>

namespace azr::kernels::cuda_detail {

constexpr int kNormBackwardThreads = 128;  // C = 1536 (1.5B): 384 quads, 3 a thread

struct RmsnormBackwardArgs {
  float* dx;
  __nv_bfloat16* dx16;  // may be null
  float* dw;
  const float *dout, *x, *w, *rstd;
  int64_t N, C, rows_per_block;
  float* dw_parts;  // [blocks, C] where the kernel's kParts, else unused
};

// The block's dw partial of group g: kParts, to its row of dw_parts, which add_column_parts then
// adds to dw in block order (ordered_sums.cuh); else (AZR_CUDA_GRADIENT_SUMS=atomic, or one block)
// to dw with one atomic a column, in whatever order the blocks finish. A template parameter, not a
// test of dw_parts: both paths in one kernel cost the held form 4 registers at K = 3 and 16 at
// K = 4 (ptxas, sm_90), past the 128 that keep 4 blocks a multiprocessor.
template <int V, bool kParts>
AZR_DEVICE_INLINE void add_dw_part(const RmsnormBackwardArgs& a, int64_t g, const Group<V>& part) {
  if constexpr (kParts)
    store_group<V>(a.dw_parts + int64_t(blockIdx.x) * a.C, g, part);
  else
    for (int j = 0; j < V; j++) atomicAdd(a.dw + g * V + j, part.v[j]);
}

// The launch: dynamic shared memory of C floats (the block's dw partial).
template <int V, bool kParts>
__global__ void __launch_bounds__(kNormBackwardThreads) rmsnorm_backward_kernel(RmsnormBackwardArgs a) {
  release_next_grid();  // the parts' sum may launch now and wait (an ordinary launch: ordered_sums.cuh)
  AZR_DYNAMIC_SHARED(smem);
  float* dw_part = reinterpret_cast<float*>(smem);
  __shared__ float shared[32];
  const int64_t C = a.C, groups = C / V;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) store_group<V>(dw_part, g, Group<V>{});
  const int64_t r0 = blockIdx.x * a.rows_per_block;
  const int64_t r1 = r0 + a.rows_per_block < a.N ? r0 + a.rows_per_block : a.N;
  for (int64_t n = r0; n < r1; n++) {
    const float *dy = a.dout + n * C, *xr = a.x + n * C;
    float* dxr = a.dx + n * C;
    const float r = a.rstd[n];
    float dot = 0.f;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      const Group<V> d = load_group<V>(dy, g), w = load_group<V>(a.w, g), x = load_group<V>(xr, g);
      for (int j = 0; j < V; j++) dot += d.v[j] * w.v[j] * x.v[j];
    }
    dot = block_sum(dot, shared);
    const float k = dot * r * r * r / float(C);
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      const Group<V> d = load_group<V>(dy, g), w = load_group<V>(a.w, g), x = load_group<V>(xr, g);
      Group<V> out = load_group<V>(dxr, g), part = load_group<V>(dw_part, g);
      for (int j = 0; j < V; j++) {
        out.v[j] += d.v[j] * w.v[j] * r - x.v[j] * k;
        part.v[j] += d.v[j] * x.v[j] * r;
      }
      store_group<V>(dxr, g, out);
      if (a.dx16) store_group<V>(a.dx16 + n * C, g, out);
      store_group<V>(dw_part, g, part);
    }
  }
  if (r0 >= a.N) return;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) add_dw_part<V, kParts>(a, g, load_group<V>(dw_part, g));
}

// The same arithmetic with a thread's groups of a row in registers: K of them at most (the groups
// g = threadIdx.x + k blockDim.x, k < K), so the loops over them unroll. Why: in the loop above
// each group's loads wait on the previous group's use of its own (the trip count is not known, so
// the loop does not unroll), and a row's second pass reads dx only after the block sum. Here a
// row's loads of dout, x and dx all go out at once, ahead of the block sum; w and the dw partial
// stay in registers for all the block's rows (a thread owns the same columns in every row), which
// also saves the partial's shared memory. Every sum is taken in the loop form's order, so the two
// give the same bits (RmsnormBackwardEmulated; on an H200 too, CudaOps). The launch: no dynamic
// shared memory. Measured on an H200 (2026-11-27, cuda_ops_bench --only rmsnorm, 4096 x 1536):
// 1,863 GB/s against the loop form's 1,605, 39% of the bandwidth, where the add kernel reaches 59%:
// the latencies were a part of the loop form's time, not most of it. What holds the rest back was
// not profiled (gpu_check.sh pending asks Nsight Compute next). Registers (ptxas, CUDA 13, sm_90),
// no spills: 60, 87, 120, 128, 186 and 238 at K = 1, 2, 3, 4, 6, 8 (the first three with the next
// row's copies, below); 4 blocks a multiprocessor at 1.5B's K = 3, enough for the ~512 blocks of
// the launch in one wave.
//
// And at K <= 3 (0.5B's and 1.5B's widths), the next row's loads go out before this row's block
// sum, not after its stores: a block's rows then overlap their memory latency with the sums' two
// barriers, where each row waited on both in turn (2026-11-27, fourth session; not yet timed on a
// GPU). At K = 3 the kernel takes 120 registers a thread (110 before), inside the 128 that keep
// 4 blocks a multiprocessor; past K = 3 the copies would cost blocks, so the rows load in turn.
// Same arithmetic, same bits (RmsnormBackwardEmulated; a prefetch of the wrong row fails it).
template <int V, int K>
__device__ __forceinline__ void load_norm_row(Group<V> (&d)[K], Group<V> (&x)[K], Group<V> (&dx)[K],
                                              const RmsnormBackwardArgs& a, int64_t n, int64_t groups) {
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int64_t g = threadIdx.x + int64_t(k) * blockDim.x;
    d[k] = x[k] = dx[k] = Group<V>{};
    if (g < groups)
      d[k] = load_group<V>(a.dout + n * a.C, g), x[k] = load_group<V>(a.x + n * a.C, g),
      dx[k] = load_group<V>(a.dx + n * a.C, g);
  }
}

template <int V, int K, bool kParts>
__global__ void __launch_bounds__(kNormBackwardThreads) rmsnorm_backward_held_kernel(RmsnormBackwardArgs a) {
  static_assert(K > 0, "K: the groups a thread holds");
  release_next_grid();  // the parts' sum may launch now and wait (an ordinary launch: ordered_sums.cuh)
  constexpr bool kPrefetch = K <= 3;
  __shared__ float shared[32];
  const int64_t C = a.C, groups = C / V;
  const int64_t r0 = blockIdx.x * a.rows_per_block;
  if (r0 >= a.N) return;  // before any barrier: the whole block returns
  const int64_t r1 = r0 + a.rows_per_block < a.N ? r0 + a.rows_per_block : a.N;
  Group<V> w[K], part[K];
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int64_t g = threadIdx.x + int64_t(k) * blockDim.x;
    part[k] = Group<V>{};
    w[k] = g < groups ? load_group<V>(a.w, g) : Group<V>{};
  }
  Group<V> d[K], x[K], out[K];
  if (kPrefetch) load_norm_row<V, K>(d, x, out, a, r0, groups);
  for (int64_t n = r0; n < r1; n++) {
    float* dxr = a.dx + n * C;
    Group<V> next_d[K], next_x[K], next_out[K];
    if (!kPrefetch) load_norm_row<V, K>(d, x, out, a, n, groups);
    else if (n + 1 < r1) load_norm_row<V, K>(next_d, next_x, next_out, a, n + 1, groups);
    const float r = a.rstd[n];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
      if (threadIdx.x + int64_t(k) * blockDim.x < groups)
#pragma unroll
        for (int j = 0; j < V; j++) dot += d[k].v[j] * w[k].v[j] * x[k].v[j];
    dot = block_sum(dot, shared);
    const float kk = dot * r * r * r / float(C);
#pragma unroll
    for (int k = 0; k < K; k++) {
      const int64_t g = threadIdx.x + int64_t(k) * blockDim.x;
      if (g >= groups) continue;
#pragma unroll
      for (int j = 0; j < V; j++) {
        out[k].v[j] += d[k].v[j] * w[k].v[j] * r - x[k].v[j] * kk;
        part[k].v[j] += d[k].v[j] * x[k].v[j] * r;
      }
      store_group<V>(dxr, g, out[k]);
      if (a.dx16) store_group<V>(a.dx16 + n * C, g, out[k]);
    }
    if (kPrefetch && n + 1 < r1) {
#pragma unroll
      for (int k = 0; k < K; k++) d[k] = next_d[k], x[k] = next_x[k], out[k] = next_out[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int64_t g = threadIdx.x + int64_t(k) * blockDim.x;
    if (g < groups) add_dw_part<V, kParts>(a, g, part[k]);
  }
}

// The K that rmsnorm_backward_held_kernel takes for `groups` groups a row (blockDim.x =
// kNormBackwardThreads): the fewest of 1, 2, 3, 4, 6 and 8 that hold them (1.5B's C = 1536 in quads:
// 3), else 0 for the loop form (past 4,096 columns in quads, where the registers would spill).
inline int rmsnorm_backward_held_groups(int64_t groups) {
  for (int k : {1, 2, 3, 4, 6, 8})
    if (groups <= int64_t(k) * kNormBackwardThreads) return k;
  return 0;
}

// Calls launch(rmsnorm_backward_held_kernel<V, K, kParts>) at the K that
// rmsnorm_backward_held_groups gives for `groups`, and says whether it did (false: the loop form
// takes the width). The launch (rmsnorm.cu) and the emulated test pick the kernel through this one
// switch.
template <int V, bool kParts, class Launch>
bool launch_held_form(int64_t groups, Launch launch) {
  switch (rmsnorm_backward_held_groups(groups)) {
    case 1: launch(rmsnorm_backward_held_kernel<V, 1, kParts>); return true;
    case 2: launch(rmsnorm_backward_held_kernel<V, 2, kParts>); return true;
    case 3: launch(rmsnorm_backward_held_kernel<V, 3, kParts>); return true;
    case 4: launch(rmsnorm_backward_held_kernel<V, 4, kParts>); return true;
    case 6: launch(rmsnorm_backward_held_kernel<V, 6, kParts>); return true;
    case 8: launch(rmsnorm_backward_held_kernel<V, 8, kParts>); return true;
  }
  return false;
}

// Whether the four-value kernel takes this call.
inline bool rmsnorm_backward_quads_fit(const RmsnormBackwardArgs& a) {
  return a.C % 4 == 0 && quads_fit({a.dx, a.dout, a.x, a.w, a.dw_parts}, {a.dx16});
}

}  // namespace azr::kernels::cuda_detail
