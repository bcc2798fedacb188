// Sampling without filters (a temperature, no top-k or top-p: self-play's rollouts) on the CUDA
// backend: the inverse CDF in id order, like the CPU (kernels/cpu/sampling.cpp), with p_j =
// exp(z_j / t - max) in double (sampling.cu's file comment says how close to the CPU that is).
//
// Two ways to cover a row:
// - unfiltered_kernel, one block per row (many rows). Each warp sums one contiguous segment of the
//   row, so the segment where the cumulative mass passes u * total is found from 16 numbers, and
//   only from there on is the row scanned, in tiles, for the first token that passes it.
// - few rows (a decode step at batch 1 puts one block on one of the GPU's 132 SMs, 230 us for a
//   151,936-token row in the 2026-11-23 profile): each row is split into gridDim.x parts, a block
//   each. part_stats_kernel reads its part once, keeping a running maximum m of z / t and the mass
//   against it (scaled by exp(m_old - m) when m grows, FlashAttention's online softmax), and the
//   last block of the row to finish (a ticket counter) takes the row's maximum from the parts' (a
//   maximum is exact in any order), weighs each part's mass by exp(m_part - max), adds them in
//   part order, finds the part where the cumulative mass passes u * total, and from there does
//   what unfiltered_kernel does over the whole row, within that part: warp segments, then the
//   scan in tiles, on p_j = exp(z_j / t - max) as the CPU computes them.
//   Until 2026-11-29 the parts read the row twice, first for the maxima (part_max_kernel), then
//   for the masses against the row's maximum (part_mass_kernel): still there, as cuda_ops_bench's
//   baseline (cuda_set_split_sampling_one_pass(false)).
// The sums therefore run in another order than the CPU's in both, and the online masses round
// otherwise (a product of exponentials for an exponential of a sum), which only matters when u lies
// within a few units of the 16th digit of a boundary of the cumulative distribution.
//
// The kernels are in this header, apart from their launches (sampling.cu), so that
// tests/kernels/sampling_emulated_test.cpp can also run them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cstdint>

#include "kernels/cuda/sampling_common.cuh"

namespace azr::kernels::cuda_detail::sampling {

// Inclusive prefix sum over the block in thread order; *total gets the block's sum. `shared`
// holds 32 values; the call ends with a barrier.
__device__ inline double block_inclusive_scan(double v, double* shared, double* total) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp, warps = int(blockDim.x) / kWarp;
  auto warp_scan = [&](double x) {
#pragma unroll
    for (int o = 1; o < kWarp; o *= 2) {
      const double y = __shfl_up_sync(0xffffffffu, x, unsigned(o));
      if (lane >= o) x += y;
    }
    return x;
  };
  v = warp_scan(v);
  if (lane == kWarp - 1) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const double w = warp_scan(lane < warps ? shared[lane] : 0.0);
    if (lane < warps) shared[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += shared[warp - 1];
  *total = shared[warps - 1];
  __syncthreads();
  return v;
}

// mass[w] = the mass of warp w's segment of [from, to), kWarps contiguous segments of `seg`
// tokens, lanes striding within each; returns seg. Ends with a barrier.
__device__ inline int64_t segment_masses(const float* z, double inv_t, double mx, int64_t from, int64_t to,
                                         double* mass) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t seg = (to - from + kWarps - 1) / kWarps, begin = from + warp * seg;
  double s = 0;
  for (int64_t j = begin + lane; j < to && j < begin + seg; j += kWarp) s += prob(z[j], inv_t, mx);
  s = warp_sum(s);
  if (lane == 0) mass[warp] = s;
  __syncthreads();
  return seg;
}

// One thread: the segment of `mass` where the cumulative mass, from *carry, passes target (the
// last segment when none does). *from becomes its first token, *carry the mass before it.
__device__ inline void choose_segment(const double* mass, int64_t seg, double target, int64_t* from, double* carry) {
  int w = 0;
  double before = *carry;
  while (w < kWarps - 1 && !(before + mass[w] > target)) before += mass[w++];
  *from += w * seg;
  *carry = before;
}

// The first token j >= from with p > 0 whose inclusive cumulative mass (carry, plus the tokens
// from `from` on) exceeds target: the CPU's first crossing, which always has p > 0. Scans in tiles
// of the block to the row's end; without a crossing (u within rounding of 1) the CPU takes the
// last token, stepping back over zero probabilities. Thread 0 writes the token and its log-prob.
__device__ inline void finish_row(const SampleArgs& a, int64_t r, const float* z, double mx, double total,
                                  double target, int64_t from, double carry, double* shared_d, int64_t* shared_i) {
  int64_t pick = INT64_MAX;
  for (int64_t base = from; base < a.n; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    const double p = j < a.n ? prob(z[j], a.inv_t, mx) : 0.0;
    double tile = 0;
    const double inclusive = block_inclusive_scan(p, shared_d, &tile);
    pick = block_reduce(p > 0 && carry + inclusive > target ? j : INT64_MAX, INT64_MAX, Min{}, shared_i);
    if (pick != INT64_MAX) break;
    carry += tile;
  }
  if (pick == INT64_MAX) {
    int64_t last = 0;  // the CPU steps back over p == 0 only: a NaN p is a token it may take
    for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x)
      if (!(prob(z[j], a.inv_t, mx) == 0.0)) last = j;
    pick = block_reduce(last, int64_t(0), Max{}, shared_i);
  }
  if (threadIdx.x == 0) {
    a.tokens[r] = int32_t(pick);
    a.logprobs[r] = float(log(prob(z[pick], a.inv_t, mx) / total));
  }
}

// One block per row.
__global__ void __launch_bounds__(kThreads) unfiltered_kernel(SampleArgs a) {
  __shared__ float shared_f[32];
  __shared__ double shared_d[32];
  __shared__ int64_t shared_i[32];
  __shared__ double mass[kWarps];
  __shared__ double total_s, target_s, carry_s;
  __shared__ int64_t from_s;
  const int64_t r = blockIdx.x, n = a.n;
  const float* z = a.logits + r * a.V;

  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, z[j]);
  // max_j (z_j * inv_t) = (max_j z_j) * inv_t: rounding is monotonic and inv_t > 0.
  const double mx = __dmul_rn(double(block_max(m, shared_f)), a.inv_t);
  const int64_t seg = segment_masses(z, a.inv_t, mx, 0, n, mass);
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kWarps; w++) total += mass[w];
    total_s = total, target_s = a.u[r] * total, from_s = 0, carry_s = 0;
    choose_segment(mass, seg, target_s, &from_s, &carry_s);
  }
  __syncthreads();
  finish_row(a, r, z, mx, total_s, target_s, from_s, carry_s, shared_d, shared_i);
}

// The row's last block, once every part's mass against the row's maximum mx is in shared
// `masses`: thread 0 adds them in part order and finds the part where the cumulative mass passes
// u * total (the last part when none does), and the block draws within it as unfiltered_kernel
// does within the row: warp segments, then the scan in tiles.
__device__ inline void draw_from_parts(const SampleArgs& a, int64_t r, const float* z, double mx, const double* masses,
                                       int64_t parts, double* shared_d, int64_t* shared_i) {
  __shared__ double mass[kWarps];
  __shared__ double total_s, target_s, carry_s;
  __shared__ int64_t from_s, part_end_s;
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t q = 0; q < parts; q++) total += masses[q];
    const double target = a.u[r] * total;
    int64_t q = 0;
    double before = 0;
    while (q < parts - 1 && !(before + masses[q] > target)) before += masses[q++];
    total_s = total, target_s = target, carry_s = before;
    part_range(a.n, parts, q, &from_s, &part_end_s);
  }
  __syncthreads();
  const int64_t seg = segment_masses(z, a.inv_t, mx, from_s, part_end_s, mass);
  if (threadIdx.x == 0) choose_segment(mass, seg, target_s, &from_s, &carry_s);
  __syncthreads();
  finish_row(a, r, z, mx, total_s, target_s, from_s, carry_s, shared_d, shared_i);
}

// Few rows, first kernel: part_max[r * parts + p] = the largest logit of part p of row r
// (blockIdx.x = p, blockIdx.y = r, gridDim.x = parts).
__global__ void __launch_bounds__(kThreads) part_max_kernel(SampleArgs a, float* part_max) {
  __shared__ float shared_f[32];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  float m = -INFINITY;
  for (int64_t j = from + threadIdx.x; j < to; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, shared_f);
  if (threadIdx.x == 0) part_max[r * parts + p] = m;
}

// The largest scaled logit of row r from its parts' maxima (exact in any order); every thread
// calls it, and it ends with a barrier.
__device__ inline double row_max(const SampleArgs& a, const float* part_max, int64_t r, int64_t parts,
                                 float* shared_f) {
  float m = -INFINITY;
  for (int64_t q = threadIdx.x; q < parts; q += blockDim.x) m = fmaxf(m, part_max[r * parts + q]);
  return __dmul_rn(double(block_max(m, shared_f)), a.inv_t);
}

// Few rows, second kernel: each part's mass into part_mass; the row's last block (by tickets,
// last_block_done) picks the token.
__global__ void __launch_bounds__(kThreads)
    part_mass_kernel(SampleArgs a, const float* part_max, double* part_mass, unsigned* tickets) {
  __shared__ float shared_f[32];
  __shared__ double shared_d[32];
  __shared__ int64_t shared_i[32];
  __shared__ bool last_s;
  __shared__ double parts_s[kMaxParts];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;

  const double mx = row_max(a, part_max, r, parts, shared_f);
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  double s = 0;
  for (int64_t j = from + threadIdx.x; j < to; j += blockDim.x) s += prob(z[j], a.inv_t, mx);
  s = block_sum(s, shared_d);
  if (threadIdx.x == 0) part_mass[r * parts + p] = s;
  if (!last_block_done(tickets + r, parts, &last_s)) return;

  // The row's last block: every part's mass is in.
  load_parts(part_mass + r * parts, parts, parts_s);
  draw_from_parts(a, r, z, mx, parts_s, parts, shared_d, shared_i);
}

// The mass of the values x seen so far against their maximum m: s = sum of exp(x - m), in double.
// Values of -inf (masked logits) add nothing; a pair that has seen none is (-inf, 0). A NaN value
// (a diverged model's logit) makes s NaN for good, as it makes the CPU's sum NaN: m ignores it
// (no comparison with NaN is true), s carries it through every rescale and merge.
struct RunningMass {
  double m, s;
};

__device__ __forceinline__ void add_value(RunningMass& r, double x) {
  if (x > r.m) {  // exp(-inf - x) = 0 for the first finite value: s = 1
    r.s = r.s * exp(r.m - x) + 1.0;
    r.m = x;
  } else if (x > -INFINITY) {
    r.s += exp(x - r.m);
  } else if (x != x) {
    r.s = x;
  }
}

// Commutative, bit for bit (the same products, added in either order), so a butterfly leaves
// every lane of a warp with the same pair. The products are rounded apart (__dmul_rn): nvcc would
// fuse one of them into the add, and which one follows the order of the arguments.
__device__ __forceinline__ RunningMass merged(const RunningMass& a, const RunningMass& b) {
  const double m = fmax(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};  // 0, or NaN where either saw a NaN
  return {m, __dadd_rn(__dmul_rn(a.s, exp(a.m - m)), __dmul_rn(b.s, exp(b.m - m)))};
}

// The block's pair, merged a warp at a time (xor butterfly), then the warps' pairs in warp order
// by thread 0, which alone returns it. `shared` holds 2 kWarps doubles; ends with a barrier.
__device__ inline RunningMass block_running_mass(RunningMass r, double* shared) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2)
    r = merged(r, {__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o)});
  if (lane == 0) shared[2 * warp] = r.m, shared[2 * warp + 1] = r.s;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; w++) r = merged(r, {shared[2 * w], shared[2 * w + 1]});
  __syncthreads();
  return r;
}

// Few rows, one pass: each part's (maximum, mass against it) into part_stats [R * parts][2]; the
// row's last block (by tickets, last_block_done) picks the token.
__global__ void __launch_bounds__(kThreads)
    part_stats_kernel(SampleArgs a, double* part_stats, unsigned* tickets) {
  __shared__ double shared_d[2 * kWarps > 32 ? 2 * kWarps : 32];
  __shared__ int64_t shared_i[32];
  __shared__ bool last_s;
  __shared__ double weighed_s[kMaxParts];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;

  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  RunningMass run{-INFINITY, 0.0};
  // 8 loads a thread in flight (for_each_value): at 2 blocks a multiprocessor (56 registers,
  // ptxas sm_90), 32 KiB a multiprocessor, as many as part_max_kernel's 64 warps had with their
  // loads unrolled 4 times.
  for_each_value(z, from, to, [&](float v, int64_t) { add_value(run, __dmul_rn(double(v), a.inv_t)); });
  run = block_running_mass(run, shared_d);
  if (threadIdx.x == 0) {
    part_stats[2 * (r * parts + p)] = run.m;
    part_stats[2 * (r * parts + p) + 1] = run.s;
  }
  if (!last_block_done(tickets + r, parts, &last_s)) return;

  // The row's last block: every part's pair is in. Max_j (z_j * inv_t) is the largest part
  // maximum, the value part_max_kernel's route gives; each part's mass is weighed against it.
  static_assert(kMaxParts <= kThreads, "a thread a part");
  const int q = int(threadIdx.x);
  RunningMass part{-INFINITY, 0.0};
  if (q < int(parts)) {
    const double* stats = part_stats + 2 * (r * parts + q);
    part = {load_past_l1(stats), load_past_l1(stats + 1)};
  }
  const double mx = block_reduce(part.m, -double(INFINITY), Max{}, shared_d);
  // A part of only -inf (and NaN) weighs its s: 0, or NaN, which the draw then carries as the CPU's.
  if (q < int(parts)) weighed_s[q] = part.m == -INFINITY ? part.s : part.s * exp(part.m - mx);
  __syncthreads();
  draw_from_parts(a, r, z, mx, weighed_s, parts, shared_d, shared_i);
}

}  // namespace azr::kernels::cuda_detail::sampling
