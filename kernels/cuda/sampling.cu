// Token sampling of the CUDA backend (kernels/ops.h: sample_rows): a block per row, so a decode
// step downloads R tokens and R log-probs instead of R x V logits. The CPU backend
// (kernels/cpu/sampling.cpp) is the reference; tests/kernels/cuda_ops_test.cpp checks this one
// against it token for token.
//
// Probabilities are the CPU's to the last bit but for exp's rounding: p_j = exp(z_j / t - max) in
// double, the product and the difference rounded separately (the CPU build does not fuse them
// either). Sums are in double too; where they run in another order than the CPU's (noted below),
// they differ from its sums by a few units in the 16th digit, so a token can only differ when u
// (or top_p) lies that close to a boundary of the cumulative distribution, and log-probs agree
// to float rounding.
//
// One kernel per mode, the mode being the same for every row of a call:
// - greedy: block argmax (ties: lowest id, as std::max_element), then the winner's log-softmax at
//   temperature 1 (sampling_greedy.cuh): a block per row, or, with too few rows to fill the GPU,
//   each row split over up to 128 blocks.
// - unfiltered: inverse CDF in id order, like the CPU (sampling_unfiltered.cuh): a block per row,
//   or, with too few rows to fill the GPU, each row split over up to 128 blocks.
// - filtered (top-k, top-p): the CPU walks the candidates by descending probability. Here the
//   walk goes through "chunks" of that order, each the next (at most) kChunk candidates, found by
//   radix select, gathered and sorted in shared memory; one thread walks them with the CPU's own
//   loops, so the kept set's sums run in the CPU's order. A kept set usually fits one chunk; a
//   flat distribution with top_p near 1 walks many: slower, same result.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/sampling_greedy.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"

namespace azr::kernels::cuda_detail {
namespace {

using sampling::kThreads;
using sampling::prob;
using sampling::SampleArgs;

constexpr int kChunk = 2048;  // candidates sorted at a time: 2048 keys + their p = 32 KiB of shared memory
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr uint64_t kNoCursor = ~uint64_t(0);  // above every key: the walk starts at the top

// ---- filtered: top-k and top-p --------------------------------------------------------------

// The CPU's candidate order, descending probability then ascending id, as one unsigned 64-bit
// key in descending order: the logit's bits mapped so that unsigned order is float order, then
// ~id. At any temperature > 0 descending logit is descending probability, except for distinct
// logits whose probabilities round to the same double (both more than ~745 below the maximum
// after scaling, so 0; or closer together than z / t - max's rounding, like 1e-20 and 2e-20 beside
// a maximum of 10), which the CPU orders by id and this by logit: a different order only among
// tokens of equal probability. -0 counts as +0, whose probability it has.
__device__ __forceinline__ uint64_t order_key(float z, int64_t j) {
  uint32_t b = __float_as_uint(z == 0.f ? 0.f : z);
  b ^= (b & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u;
  return (uint64_t(b) << 32) | (0xFFFFFFFFu - uint32_t(j));
}
__device__ __forceinline__ float key_logit(uint64_t k) {
  uint32_t b = uint32_t(k >> 32);
  b ^= (b & 0x80000000u) ? 0x80000000u : 0xFFFFFFFFu;
  return __uint_as_float(b);
}
__device__ __forceinline__ int32_t key_id(uint64_t k) { return int32_t(0xFFFFFFFFu - uint32_t(k)); }

struct Chunk {
  uint64_t keys[kChunk];  // sorted descending; padding 0 (below every key) up to a power of two
  double p[kChunk];
  int64_t start;          // rank of keys[0] in the whole order; -1 before the first load
  int n;                  // candidates held
  int hist[kBins];
  int digit, above, in_bin;
  bool stop;
  float shared_f[32];
  double shared_d[32];
};

struct Row {
  const float* z;
  int64_t n;
  double inv_t, mx;
};

// hist[bin] += 1 for every lane whose bin >= 0, with one atomic per distinct bin of the warp: a
// row's logits share a few leading bytes, and lanes adding to one shared counter serialise.
__device__ __forceinline__ void count_into(int* hist, int bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && int(threadIdx.x % kWarp) == __ffs(int(peers)) - 1) atomicAdd(&hist[bin], __popc(peers));
}

// Warp 0: the bin, counted from the top, that holds the need-th key. Sets digit (-1 when there
// are fewer than `need` keys), above (keys in higher bins) and in_bin.
__device__ void find_bin(Chunk& c, int need) {
  const int lane = threadIdx.x;
  constexpr int kPerLane = kBins / kWarp;
  int count[kPerLane], sum = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; i++) sum += count[i] = c.hist[kBins - 1 - (lane * kPerLane + i)];
  int inclusive = sum;
#pragma unroll
  for (int o = 1; o < kWarp; o *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  int before = inclusive - sum;
  if (before < need && need <= inclusive) {
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
      if (before < need && need <= before + count[i]) {
        c.digit = kBins - 1 - (lane * kPerLane + i), c.above = before, c.in_bin = count[i];
      }
      before += count[i];
    }
  }
  if (lane == kWarp - 1 && inclusive < need) c.digit = -1;
}

// The threshold T for which exactly min(need, #keys below cursor) of the row's keys below the
// cursor are >= T: radix select, most significant byte first, among the keys still tied with
// the answer. Keys are distinct (they end in the id), so it ends by the last byte at the latest,
// usually as soon as the answer's bin is taken whole.
__device__ uint64_t select_threshold(const Row& row, uint64_t cursor, int need, Chunk& c) {
  uint64_t prefix = 0, mask = 0;
  for (int shift = 64 - kRadixBits; shift >= 0; shift -= kRadixBits) {
    for (int i = threadIdx.x; i < kBins; i += blockDim.x) c.hist[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < row.n; base += blockDim.x) {  // whole warps: count_into needs them
      const int64_t j = base + threadIdx.x;
      int bin = -1;
      if (j < row.n) {
        const uint64_t k = order_key(row.z[j], j);
        if (k < cursor && (k & mask) == prefix) bin = int(k >> shift) & (kBins - 1);
      }
      count_into(c.hist, bin);
    }
    __syncthreads();
    if (threadIdx.x < kWarp) find_bin(c, need);
    __syncthreads();
    const int digit = c.digit, above = c.above, in_bin = c.in_bin;
    if (digit < 0) return 0;  // fewer candidates than asked for: all of them
    prefix |= uint64_t(digit) << shift;
    mask |= uint64_t(kBins - 1) << shift;
    if (above + in_bin == need) return prefix;
    need -= above;
  }
  return prefix;
}

// Descending bitonic sort of keys[0, width), width a power of two.
__device__ void sort_descending(uint64_t* keys, int width) {
  for (int k = 2; k <= width; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner > i) {
          const uint64_t x = keys[i], y = keys[partner];
          if ((i & k) == 0 ? x < y : x > y) keys[i] = y, keys[partner] = x;
        }
      }
      __syncthreads();
    }
}

// Loads the (at most) `size` candidates that follow `cursor` in the order, which hold ranks
// start, start + 1, ...: selected, gathered in any order, sorted, with their probabilities.
__device__ void load_chunk(const Row& row, uint64_t cursor, int size, int64_t start, Chunk& c) {
  const uint64_t threshold = select_threshold(row, cursor, size, c);
  if (threadIdx.x == 0) c.n = 0;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < row.n; j += blockDim.x) {
    const uint64_t k = order_key(row.z[j], j);
    if (k >= threshold && k < cursor) {
      const int slot = atomicAdd(&c.n, 1);
      if (slot < kChunk) c.keys[slot] = k;  // always: the threshold admits at most `size` keys
    }
  }
  __syncthreads();
  const int n = c.n < kChunk ? c.n : kChunk;
  int width = 1;
  while (width < n) width *= 2;
  for (int i = n + threadIdx.x; i < width; i += blockDim.x) c.keys[i] = 0;
  __syncthreads();
  sort_descending(c.keys, width);
  for (int i = threadIdx.x; i < n; i += blockDim.x) c.p[i] = prob(key_logit(c.keys[i]), row.inv_t, row.mx);
  if (threadIdx.x == 0) c.start = start, c.n = n;
  __syncthreads();
}

// Calls visit(p, id) on thread 0 for the candidates of rank 0, 1, ... < limit, in order, until
// it returns true. Every thread calls it (chunks load block-wide); limit must be the same for
// all, and no larger than in the walk that loaded the chunk held now, if that is the first.
template <class Visit>
__device__ void walk(const Row& row, int64_t limit, Chunk& c, Visit visit) {
  if (c.start != 0) load_chunk(row, kNoCursor, int(limit < kChunk ? limit : kChunk), 0, c);
  for (;;) {
    if (threadIdx.x == 0) {
      bool done = false;
      for (int i = 0; i < c.n && c.start + i < limit && !done; i++) done = visit(c.p[i], key_id(c.keys[i]));
      c.stop = done || c.n == 0 || c.start + c.n >= limit;
    }
    __syncthreads();
    if (c.stop) break;
    const int64_t next = c.start + c.n;
    const uint64_t cursor = c.keys[c.n - 1];
    const int64_t left = limit - next;
    __syncthreads();  // everyone has read the chunk before it is replaced
    load_chunk(row, cursor, int(left < kChunk ? left : kChunk), next, c);
  }
  __syncthreads();  // everyone has read c.stop before the next walk writes it
}

// The CPU's filtered sampling, step for step; walks run on thread 0, so its locals carry the
// results (the other threads only load chunks).
__global__ void __launch_bounds__(kThreads) filtered_kernel(SampleArgs a) {
  __shared__ Chunk c;
  __shared__ int64_t keep_s;
  const int64_t r = blockIdx.x, n = a.n;
  const float* z = a.logits + r * a.V;
  if (threadIdx.x == 0) c.start = -1;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, z[j]);
  const Row row{z, n, a.inv_t, __dmul_rn(double(block_max(m, c.shared_f)), a.inv_t)};

  // The mass that top-p renormalises against: of the top-k set, summed in order as on the CPU;
  // without top-k, of the whole row, summed by the block (the CPU sums it in sorted order).
  const int64_t keep_k = a.top_k > 0 && a.top_k < n ? a.top_k : n;
  double kept_total = 0;
  if (keep_k < n) {
    walk(row, keep_k, c, [&](double p, int32_t) {
      kept_total += p;
      return false;
    });
  } else {
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += prob(z[j], row.inv_t, row.mx);
    kept_total = block_sum(s, c.shared_d);
  }

  // Top-p: the smallest prefix whose mass reaches top_p * kept_total, at least one token.
  int64_t keep = keep_k;
  if (a.top_p < 1.f) {
    const double cut = double(a.top_p) * kept_total;
    double before = 0;
    int64_t taken = 0;
    walk(row, keep_k, c, [&](double p, int32_t) {
      if (taken > 0 && !(before < cut)) return true;
      before += p;
      taken++;
      return false;
    });
    keep = taken, kept_total = before;
  }
  if (threadIdx.x == 0) keep_s = keep;
  __syncthreads();
  keep = keep_s;

  // Inverse CDF over the kept set in order; without a crossing, its last token.
  const double target = threadIdx.x == 0 ? a.u[r] * kept_total : 0.0;
  double acc = 0, p_pick = 0;
  int32_t pick = -1;
  walk(row, keep, c, [&](double p, int32_t id) {
    acc += p, pick = id, p_pick = p;
    return acc > target;
  });
  if (threadIdx.x == 0) {
    a.tokens[r] = pick;
    a.logprobs[r] = float(log(p_pick / kept_total));
  }
}

// Greedy and unfiltered sampling (sampling_greedy.cuh, sampling_unfiltered.cuh): a block per row,
// or with few rows each row split over blocks so that the whole GPU reads it.
DeviceScratch<float> g_part_value;
DeviceScratch<int64_t> g_part_at;
DeviceScratch<double> g_part_sum;
ZeroedCounts g_tickets;  // the split kernels' per-row tickets (last_block_done)

// sampling::parts_for's target; cuda_set_sampling_blocks_per_sm.
int g_sampling_blocks_per_sm = 2;

void unfiltered(const SampleArgs& a, int64_t R) {
  const int64_t parts = sampling::parts_for(R, a.n, multiprocessors(), g_sampling_blocks_per_sm);
  if (parts == 1) {
    sampling::unfiltered_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
    return;
  }
  float* part_max = g_part_value.get(size_t(R * parts));
  double* part_mass = g_part_sum.get(size_t(R * parts));
  unsigned* tickets = g_tickets.get(size_t(R));
  const dim3 grid{unsigned(parts), unsigned(R), 1u};
  sampling::part_max_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_max);
  AZR_CUDA_LAUNCHED();
  sampling::part_mass_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_max, part_mass, tickets);
}

void greedy(const SampleArgs& a, int64_t R) {
  const int64_t parts = sampling::parts_for(R, a.n, multiprocessors(), g_sampling_blocks_per_sm);
  if (parts == 1) {
    sampling::greedy_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
    return;
  }
  float* part_v = g_part_value.get(size_t(R * parts));
  int64_t* part_at = g_part_at.get(size_t(R * parts));
  double* part_sum = g_part_sum.get(size_t(R * parts));
  unsigned* tickets = g_tickets.get(size_t(R));
  const dim3 grid{unsigned(parts), unsigned(R), 1u};
  sampling::part_argmax_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_v, part_at);
  AZR_CUDA_LAUNCHED();
  sampling::part_expsum_kernel<<<grid, kThreads, 0, op_stream()>>>(a, part_v, part_at, part_sum, tickets);
}

}  // namespace

void sample_rows(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                 int64_t V_limit, float temperature, int32_t top_k, float top_p) {
  if (R == 0) return;
  const SampleArgs a{tokens, logprobs, logits, u, V, V_limit, temperature == 0.f ? 0.0 : 1.0 / temperature,
                     top_k, top_p};
  if (temperature == 0.f)
    greedy(a, R);
  else if ((top_k > 0 && top_k < V_limit) || top_p < 1.f)
    filtered_kernel<<<unsigned(R), kThreads, 0, op_stream()>>>(a);
  else
    unfiltered(a, R);
  AZR_CUDA_LAUNCHED();
}

void cuda_set_sampling_blocks_per_sm(int n) { g_sampling_blocks_per_sm = n < 1 ? 1 : n; }

}  // namespace azr::kernels::cuda_detail
