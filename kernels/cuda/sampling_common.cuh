#pragma once
// What the CUDA sampler's kernels share (sampling.cu, sampling_unfiltered.cuh, sampling_greedy.cuh):
// the call's arguments, the block size, and how a row is split over blocks when the rows are too
// few to fill the GPU.
#include <cstdint>

#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/sampling_limits.h"

namespace azr::kernels::cuda_detail::sampling {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarp;

struct SampleArgs {
  int32_t* tokens;
  float* logprobs;
  const float* logits;
  const double* u;
  int64_t V, n;  // row stride; candidates are ids < n (V_limit)
  double inv_t;  // 1 / temperature, as the CPU computes it (unused by greedy)
  int32_t top_k;
  float top_p;
};

__device__ __forceinline__ double prob(float z, double inv_t, double mx) {
  return exp(__dsub_rn(__dmul_rn(double(z), inv_t), mx));
}

// The length of each of `parts` parts of a row of n candidates (the last may be shorter).
__device__ __forceinline__ int64_t part_length(int64_t n, int64_t parts) { return (n + parts - 1) / parts; }

// The parts per row for R rows of n candidates on a GPU of `sms` multiprocessors: about
// `blocks_per_sm` blocks per multiprocessor in all but at least kMinParts a row, each part at
// least two tokens per thread, at most kMaxParts. 1 means one block per row (unfiltered_kernel).
// The CUDA table takes 2 blocks per multiprocessor unless a benchmark sets another
// (cuda_set_sampling_blocks_per_sm). The floor of 4 parts: at a decode step's 256 rows of the
// 151,936-token vocabulary, 4 parts a row read the logits 1.2x (t = 1) and 1.5x (greedy) faster
// than 1 on an H200 (cuda_ops_bench, 2026-11-26), while 16 parts at 64 rows, where 2 blocks per
// multiprocessor give 4, was 0.8x for greedy: parts beyond 4 are not what helps.
inline int64_t parts_for(int64_t R, int64_t n, int sms, int blocks_per_sm = 2) {
  if (R > kMaxSplitRows) return 1;
  int64_t parts = int64_t(blocks_per_sm) * int64_t(sms) / (R > 0 ? R : 1);
  if (parts < kMinParts) parts = kMinParts;
  if (parts > kMaxParts) parts = kMaxParts;
  if (parts > n / (2 * kThreads)) parts = n / (2 * kThreads);
  return parts < 2 ? 1 : parts;
}

// Part p of a row of n split into parts: [*from, *to).
__device__ __forceinline__ void part_range(int64_t n, int64_t parts, int64_t p, int64_t* from, int64_t* to) {
  const int64_t len = part_length(n, parts);
  *from = p * len;
  *to = *from + len < n ? *from + len : n;
}

// visit(z[j], j) for this thread's j of [from, to): from + threadIdx.x on, a block apart, in
// ascending order; kLoadsInFlight loads at a time before the values they feed, as the visits
// (the one-pass samplers' running maximum and mass) branch on each value.
constexpr int kLoadsInFlight = 8;
template <class Visit>
__device__ __forceinline__ void for_each_value(const float* z, int64_t from, int64_t to, Visit&& visit) {
  const int64_t step = blockDim.x;
  int64_t j = from + threadIdx.x;
  for (; j + (kLoadsInFlight - 1) * step < to; j += kLoadsInFlight * step) {
    float zs[kLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; k++) zs[k] = z[j + k * step];
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; k++) visit(zs[k], j + k * step);
  }
  for (; j < to; j += step) visit(z[j], j);
}

// The row's last block (last_block_done): the parts' sums part[0 .. parts), which the other blocks
// wrote, into shared `parts_s` (kMaxParts values), a thread a part at once; every thread of the
// block calls it, and it ends with a barrier. The block then adds them in part order from shared
// memory: the sums a walk over `part` itself would make, without one round trip to L2 a part
// (load_past_l1).
__device__ __forceinline__ void load_parts(const double* part, int64_t parts, double* parts_s) {
  static_assert(kMaxParts <= kThreads, "a thread a part");
  const int q = int(threadIdx.x);
  if (q < int(parts)) parts_s[q] = load_past_l1(part + q);
  __syncthreads();
}

}  // namespace azr::kernels::cuda_detail::sampling
