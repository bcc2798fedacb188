// Greedy decoding on the CUDA backend (temperature 0: evaluation): the first maximum of each row,
// as std::max_element, and its log-prob at temperature 1, -log sum_j exp(z_j - max) in double, as
// the CPU (kernels/cpu/sampling.cpp) computes it.
//
// Two ways to cover a row, as for unfiltered sampling (sampling_unfiltered.cuh):
// - greedy_kernel, one block per row (many rows);
// - few rows (the tail of a batch, where most sequences have finished): each row split into
//   gridDim.x parts, a block each. part_greedy_kernel reads its part once for its first maximum
//   and its mass against a running maximum (sampling_unfiltered.cuh's RunningMass, at t = 1); the
//   row's last block to finish takes the row's first maximum from the parts' (ties to the lowest
//   id), weighs each part's mass by exp(part max - max) and adds them in part order. Until
//   2026-11-29 two kernels read each part twice (part_argmax_kernel, then part_expsum_kernel's
//   exp(z - max) against the row's maximum): cuda_ops_bench's baseline now
//   (cuda_set_split_sampling_one_pass(false)).
//
// The kernels are in this header, apart from their launches (sampling.cu), so that
// tests/kernels/sampling_emulated_test.cpp can also run them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cstdint>

#include "kernels/cuda/sampling_common.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"  // RunningMass

namespace azr::kernels::cuda_detail::sampling {

// The largest value and, among equal ones, the lowest index; every thread gets both.
__device__ inline void block_argmax(float& v, int64_t& at, float* shared_v, int64_t* shared_at) {
  auto merge = [&] {
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
      const int64_t at2 = __shfl_xor_sync(0xffffffffu, at, o);
      if (v2 > v || (v2 == v && at2 < at)) v = v2, at = at2;
    }
  };
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp, warps = int(blockDim.x) / kWarp;
  merge();
  if (lane == 0) shared_v[warp] = v, shared_at[warp] = at;
  __syncthreads();
  v = lane < warps ? shared_v[lane] : -INFINITY;
  at = lane < warps ? shared_at[lane] : INT64_MAX;
  merge();
  __syncthreads();
}

// Value v of id j into a thread's running first maximum (ascending j), as std::max_element over the
// row takes it: strict > keeps the first maximum, and a thread's first entry is taken whatever it
// is, so that even an all -inf range gives its first id. A NaN is never taken (max_element compares
// with <, which no NaN passes), but at the row's first id, where max_element starts and then never
// leaves: it enters as +inf, so that every merge of values (block_argmax, the parts') keeps it.
__device__ __forceinline__ void take_first_maximum(float v, int64_t j, float& best, int64_t& at) {
  if (v != v) {
    if (j == 0) best = INFINITY, at = 0;
  } else if (v > best || at == INT64_MAX) {
    best = v, at = j;
  }
}

// The first maximum of z[from, to) over the block; every thread gets it.
__device__ inline void range_argmax(const float* z, int64_t from, int64_t to, float& best, int64_t& at,
                                    float* shared_v, int64_t* shared_at) {
  best = -INFINITY, at = INT64_MAX;
  for (int64_t j = from + threadIdx.x; j < to; j += blockDim.x) take_first_maximum(z[j], j, best, at);
  block_argmax(best, at, shared_v, shared_at);
}

// One block per row.
__global__ void __launch_bounds__(kThreads) greedy_kernel(SampleArgs a) {
  __shared__ float shared_v[32];
  __shared__ int64_t shared_at[32];
  __shared__ double shared_d[32];
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.V;
  float best;
  int64_t at;
  range_argmax(z, 0, a.n, best, at, shared_v, shared_at);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) sum += exp(double(z[j]) - double(best));
  sum = block_sum(sum, shared_d);
  if (threadIdx.x == 0) {
    a.tokens[r] = int32_t(at);
    a.logprobs[r] = float(-log(sum));
  }
}

// Few rows, first kernel: part p of row r's first maximum, into part_v and part_at [R, parts]
// (blockIdx.x = p, blockIdx.y = r, gridDim.x = parts).
__global__ void __launch_bounds__(kThreads) part_argmax_kernel(SampleArgs a, float* part_v, int64_t* part_at) {
  __shared__ float shared_v[32];
  __shared__ int64_t shared_at[32];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  float best;
  int64_t at;
  range_argmax(a.logits + r * a.V, from, to, best, at, shared_v, shared_at);
  if (threadIdx.x == 0) part_v[r * parts + p] = best, part_at[r * parts + p] = at;
}

// Few rows, second kernel: each part's sum of exp(z - max) into part_sum; the row's last block (by
// tickets, last_block_done) adds them in part order and writes the token and its log-prob.
__global__ void __launch_bounds__(kThreads)
    part_expsum_kernel(SampleArgs a, const float* part_v, const int64_t* part_at, double* part_sum,
                       unsigned* tickets) {
  __shared__ float shared_v[32];
  __shared__ int64_t shared_at[32];
  __shared__ double shared_d[32];
  __shared__ bool last_s;
  __shared__ double parts_s[kMaxParts];
  __shared__ int64_t at_s;  // the row's token, for the last block's thread 0: no register through the sum
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;
  // The row's first maximum from the parts' (a part's is its own first maximum, so the lowest id
  // among the parts holding the largest value is the row's).
  float best = -INFINITY;
  int64_t at = INT64_MAX;
  for (int64_t q = threadIdx.x; q < parts; q += blockDim.x) {
    const float v = part_v[r * parts + q];
    const int64_t i = part_at[r * parts + q];
    if (v > best || (v == best && i < at) || at == INT64_MAX) best = v, at = i;
  }
  block_argmax(best, at, shared_v, shared_at);
  if (threadIdx.x == 0) at_s = at;
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  double sum = 0;
  for (int64_t j = from + threadIdx.x; j < to; j += blockDim.x) sum += exp(double(z[j]) - double(best));
  sum = block_sum(sum, shared_d);
  if (threadIdx.x == 0) part_sum[r * parts + p] = sum;
  if (!last_block_done(tickets + r, parts, &last_s)) return;
  load_parts(part_sum + r * parts, parts, parts_s);
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t q = 0; q < parts; q++) total += parts_s[q];
    a.tokens[r] = int32_t(at_s);
    a.logprobs[r] = float(-log(total));
  }
}

// Few rows, one pass: part p of row r's first maximum into part_v and part_at, and its mass
// against its maximum into part_stats [R * parts][2]; the row's last block (by tickets,
// last_block_done) writes the token and its log-prob.
__global__ void __launch_bounds__(kThreads) part_greedy_kernel(SampleArgs a, float* part_v, int64_t* part_at,
                                                               double* part_stats, unsigned* tickets) {
  __shared__ float shared_v[32];
  __shared__ int64_t shared_at[32];
  __shared__ double shared_d[2 * kWarps > 32 ? 2 * kWarps : 32];
  __shared__ bool last_s;
  __shared__ double weighed_s[kMaxParts];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  // Ascending j a thread (take_first_maximum's rule).
  float best = -INFINITY;
  int64_t at = INT64_MAX;
  RunningMass run{-INFINITY, 0.0};
  for_each_value(z, from, to, [&](float v, int64_t j) {
    take_first_maximum(v, j, best, at);
    add_value(run, double(v));
  });
  block_argmax(best, at, shared_v, shared_at);
  run = block_running_mass(run, shared_d);
  if (threadIdx.x == 0) {
    part_v[r * parts + p] = best, part_at[r * parts + p] = at;
    part_stats[2 * (r * parts + p)] = run.m, part_stats[2 * (r * parts + p) + 1] = run.s;
  }
  if (!last_block_done(tickets + r, parts, &last_s)) return;

  // The row's last block: the row's first maximum from the parts' (a part's is its own first
  // maximum, so the lowest id among the parts holding the largest value is the row's), and each
  // part's mass against it.
  static_assert(kMaxParts <= kThreads, "a thread a part");
  const int q = int(threadIdx.x);
  RunningMass part{-INFINITY, 0.0};
  best = -INFINITY, at = INT64_MAX;
  if (q < int(parts)) {
    best = load_past_l1(part_v + r * parts + q), at = load_past_l1(part_at + r * parts + q);
    const double* stats = part_stats + 2 * (r * parts + q);
    part = {load_past_l1(stats), load_past_l1(stats + 1)};
  }
  block_argmax(best, at, shared_v, shared_at);
  const double mx = double(best);
  // A part of only -inf (and NaN) weighs its s: 0, or NaN, so a NaN logit's log-prob is the CPU's NaN.
  if (q < int(parts)) weighed_s[q] = part.m == -INFINITY ? part.s : part.s * exp(part.m - mx);
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t k = 0; k < parts; k++) total += weighed_s[k];
    a.tokens[r] = int32_t(at);
    // A row of -inf weighs every part 0: NaN, not -log(0), as the CPU's and the other kernels'
    // exp(-inf - -inf) give.
    a.logprobs[r] = float(mx == -INFINITY ? mx - mx : -log(total));
  }
}

}  // namespace azr::kernels::cuda_detail::sampling
