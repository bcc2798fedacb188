// Filtered sampling (top-k, top-p) on the CUDA backend. The CPU (kernels/cpu/sampling.cpp) walks
// the candidates by descending probability; here the walk goes through "chunks" of that order,
// each the next (at most) kChunk candidates, found by radix select, gathered and sorted in shared
// memory; one thread walks them with the CPU's own loops, so the kept set's sums run in the CPU's
// order. A kept set usually fits one chunk; a flat distribution with top_p near 1 walks many:
// slower, same result.
//
// Two ways to cover a row:
// - filtered_kernel, one block per row, reading the row itself: every radix pass of every chunk
//   reads the whole row, from one multiprocessor. It was 2.3 ms a token at batch 1 on an H100
//   (top_p 0.9, 2026-11-23), longer than the decode step it ends.
// - the split (rows split over blocks, as the unfiltered sampler does): part_max_kernel
//   (sampling_unfiltered.cuh) finds each part's largest logit; part_bins_kernel sums each part's
//   mass and counts its tokens, or adds up their mass, into bins by distance from the row's
//   maximum (mass_bin); the row's last block finds the last bin that the kept set can reach;
//   gather_kernel gathers the keys of every token in the bins up to it, a prefix of the order
//   that holds the whole kept set; filtered_list_kernel then walks that short list instead of the
//   row, one block per row. A row whose prefix is longer than the list's capacity (a nearly flat
//   row with top_p near 1) is walked from the row itself, as filtered_kernel does.
// The kernels are in this header, apart from their launches (sampling.cu), so that
// tests/kernels/sampling_emulated_test.cpp also runs them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cstdint>

#include "kernels/cuda/sampling_common.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"

namespace azr::kernels::cuda_detail::sampling {

constexpr int kChunk = 2048;  // candidates sorted at a time: 2048 keys + their p = 32 KiB of shared memory
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr uint64_t kNoCursor = ~uint64_t(0);  // above every key: the walk starts at the top
// Chunks whose start a prefix-summing walk marks (Chunk::mark_*): a list's kept set spans at most
// 8 (16,384 keys), a row walked whole may span more, whose later chunks the inverse CDF then
// reaches from the 16th.
constexpr int kMarks = 16;
// Keys a thread loads at once in a pass over the candidates, and candidates thread 0 reads at once
// in a walk, before it visits them in order.
constexpr int kKeysAtOnce = 4;
constexpr int kVisitsAtOnce = 8;

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
  uint64_t cursor;        // the key it was loaded below (kNoCursor for rank 0)
  int n;                  // candidates held
  // Where the last walk that summed the probabilities from rank 0 found each of its first kMarks
  // chunks: the cursor it was loaded below, its first rank, and the sum of the probabilities of
  // the ranks before it, added in order (mark_chunk). The inverse CDF starts from one of them.
  int marks, resume;  // resume: the mark the inverse CDF starts from, -1 for rank 0
  uint64_t mark_cursor[kMarks];
  int64_t mark_start[kMarks];
  double mark_sum[kMarks];
  int hist[kBins];
  int digit, above, in_bin;
  bool stop;
  float shared_f[32];
  double shared_d[32];
};

// Where a walk finds its candidates: a row of logits, each key made from the logit and its id;
// or, on the split path, a list of keys gathered from the row (a prefix of the order, in any order).
struct Candidates {
  const float* z;        // the row; nullptr for a list
  const uint64_t* keys;  // the list
  int64_t n;
  double inv_t, mx;
  __device__ __forceinline__ uint64_t key(int64_t j) const { return z != nullptr ? order_key(z[j], j) : keys[j]; }
};

// The candidates' keys j, j + blockDim.x, ... (kKeysAtOnce of them), loaded before any is used:
// the loads then wait on L2 together, where one at a time each would wait behind the previous
// key's use. Past the end, the cursor: not below itself, so never counted nor taken.
__device__ __forceinline__ void load_keys(const Candidates& row, int64_t j, uint64_t cursor,
                                          uint64_t (&k)[kKeysAtOnce]) {
#pragma unroll
  for (int u = 0; u < kKeysAtOnce; u++, j += blockDim.x) k[u] = j < row.n ? row.key(j) : cursor;
}

// hist[bin] += 1 for every lane whose bin >= 0, with one atomic per distinct bin of the warp: a
// row's logits share a few leading bytes, and lanes adding to one shared counter serialise.
__device__ __forceinline__ void count_into(int* hist, int bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && int(threadIdx.x % kWarp) == __ffs(int(peers)) - 1) atomicAdd(&hist[bin], int(__popc(peers)));
}

// Warp 0: the bin, counted from the top, that holds the need-th key. Sets digit (-1 when there
// are fewer than `need` keys), above (keys in higher bins) and in_bin.
__device__ inline void find_bin(Chunk& c, int need) {
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

// The threshold T for which exactly min(need, #keys below cursor) of the candidates' keys below
// the cursor are >= T: radix select, most significant byte first, among the keys still tied with
// the answer. Keys are distinct (they end in the id), so it ends by the last byte at the latest,
// usually as soon as the answer's bin is taken whole.
__device__ inline uint64_t select_threshold(const Candidates& row, uint64_t cursor, int need, Chunk& c) {
  uint64_t prefix = 0, mask = 0;
  for (int shift = 64 - kRadixBits; shift >= 0; shift -= kRadixBits) {
    for (int i = threadIdx.x; i < kBins; i += blockDim.x) c.hist[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < row.n; base += kKeysAtOnce * blockDim.x) {  // whole warps: count_into needs them
      uint64_t k[kKeysAtOnce];
      load_keys(row, base + threadIdx.x, cursor, k);
#pragma unroll
      for (int u = 0; u < kKeysAtOnce; u++)
        count_into(c.hist, k[u] < cursor && (k[u] & mask) == prefix ? int(k[u] >> shift) & (kBins - 1) : -1);
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
__device__ inline void sort_descending(uint64_t* keys, int width) {
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
__device__ inline void load_chunk(const Candidates& row, uint64_t cursor, int size, int64_t start, Chunk& c) {
  const uint64_t threshold = select_threshold(row, cursor, size, c);
  if (threadIdx.x == 0) c.n = 0;
  __syncthreads();
  for (int64_t base = threadIdx.x; base < row.n; base += kKeysAtOnce * blockDim.x) {
    uint64_t k[kKeysAtOnce];
    load_keys(row, base, cursor, k);
#pragma unroll
    for (int u = 0; u < kKeysAtOnce; u++) {
      if (k[u] >= threshold && k[u] < cursor) {
        const int slot = atomicAdd(&c.n, 1);
        if (slot < kChunk) c.keys[slot] = k[u];  // always: the threshold admits at most `size` keys
      }
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
  if (threadIdx.x == 0) c.start = start, c.cursor = cursor, c.n = n;
  __syncthreads();
}

// A prefix-summing walk's visitor, on thread 0, at rank `rank` whose preceding ranks' probabilities
// add up to `sum` (in order): marks the chunk held when `rank` is its first.
__device__ __forceinline__ void mark_chunk(Chunk& c, int64_t rank, double sum) {
  if (rank != c.start || c.marks >= kMarks) return;
  c.mark_cursor[c.marks] = c.cursor, c.mark_start[c.marks] = rank, c.mark_sum[c.marks] = sum;
  c.marks++;
}

// walk from the chunk held now: visit(p, id) on thread 0 for its candidates and the ones after
// them, in order, up to rank limit, until it returns true. Every thread calls it (chunks load
// block-wide); limit must be the same for all, and no larger than in the walk that loaded the
// chunk held now.
template <class Visit>
__device__ void walk_on(const Candidates& row, int64_t limit, Chunk& c, Visit visit) {
  for (;;) {
    if (threadIdx.x == 0) {
      // The visits run one after another (their sums are the CPU's, in its order), but the loads
      // of the next kVisitsAtOnce candidates need not wait for them: they go first, together.
      const int end = c.start + c.n <= limit ? c.n : int(limit - c.start);
      bool done = false;
      int i = 0;
      for (; i + kVisitsAtOnce <= end && !done; i += kVisitsAtOnce) {
        double p[kVisitsAtOnce];
        uint64_t key[kVisitsAtOnce];
#pragma unroll
        for (int v = 0; v < kVisitsAtOnce; v++) p[v] = c.p[i + v], key[v] = c.keys[i + v];
#pragma unroll
        for (int v = 0; v < kVisitsAtOnce; v++)
          if (!done) done = visit(p[v], key_id(key[v]));
      }
      for (; i < end && !done; i++) done = visit(c.p[i], key_id(c.keys[i]));
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

// walk_on from rank 0: loads the first chunk unless it is the one held (then limit is no larger
// than in the walk that loaded it).
template <class Visit>
__device__ void walk(const Candidates& row, int64_t limit, Chunk& c, Visit visit) {
  if (c.start != 0) load_chunk(row, kNoCursor, int(limit < kChunk ? limit : kChunk), 0, c);
  walk_on(row, limit, c, visit);
}

// The CPU's filtered sampling of row r, step for step, over `row`: the whole row, or a list that
// holds every token the filters can keep. row_total: the row's mass when the caller has summed
// it (the split path), else nullptr (summed here from the row). Walks run on thread 0, so its locals
// carry the results (the other threads only load chunks). c.start must be -1.
__device__ inline void filtered_row(const SampleArgs& a, int64_t r, const Candidates& row, const double* row_total,
                                    Chunk& c, int64_t* keep_s) {
  // The mass that top-p renormalises against: of the top-k set, summed in order as on the CPU;
  // without top-k, of the whole row, summed by the block (the CPU sums it in id order).
  const int64_t filter_k = a.top_k > 0 && a.top_k < a.n ? a.top_k : a.n;
  const int64_t keep_k = filter_k < row.n ? filter_k : row.n;
  double kept_total = 0;
  if (threadIdx.x == 0) c.marks = 0;  // walks mark on thread 0 alone: no barrier needed
  if (filter_k < a.n) {
    int64_t rank = 0;
    walk(row, keep_k, c, [&](double p, int32_t) {
      mark_chunk(c, rank++, kept_total);
      kept_total += p;
      return false;
    });
  } else if (row_total != nullptr) {
    kept_total = *row_total;
  } else {
    double s = 0;
    for (int64_t j = threadIdx.x; j < row.n; j += blockDim.x) s += prob(row.z[j], row.inv_t, row.mx);
    kept_total = block_sum(s, c.shared_d);
  }

  // Top-p: the smallest prefix whose mass reaches top_p * kept_total, at least one token.
  int64_t keep = keep_k;
  if (a.top_p < 1.f) {
    const double cut = double(a.top_p) * kept_total;
    double before = 0;
    int64_t taken = 0;
    if (threadIdx.x == 0) c.marks = 0;  // the same sums as top-k's walk, over the same chunks
    walk(row, keep_k, c, [&](double p, int32_t) {
      mark_chunk(c, taken, before);
      if (taken > 0 && !(before < cut)) return true;
      before += p;
      taken++;
      return false;
    });
    keep = taken, kept_total = before;
  }
  if (threadIdx.x == 0) *keep_s = keep;
  __syncthreads();
  keep = *keep_s;

  // Inverse CDF over the kept set in order; without a crossing, its last token. It starts at the
  // last marked chunk whose preceding mass is at most the target, so no earlier rank crosses it,
  // with that mass: the same additions in the same order as from rank 0, without walking the
  // chunks before again (a kept set of several chunks, which top-p's walk has just passed).
  const double target = threadIdx.x == 0 ? a.u[r] * kept_total : 0.0;
  if (threadIdx.x == 0) {
    int from = 0;
    for (int i = 1; i < c.marks; i++)
      if (c.mark_start[i] < keep && c.mark_sum[i] <= target) from = i;
    c.resume = c.marks > 0 ? from : -1;
  }
  __syncthreads();
  const int from = c.resume;
  const int64_t start = from < 0 ? 0 : c.mark_start[from];
  double acc = from < 0 || threadIdx.x != 0 ? 0.0 : c.mark_sum[from], p_pick = 0;
  int32_t pick = -1;
  if (c.start != start)
    load_chunk(row, from < 0 ? kNoCursor : c.mark_cursor[from], int(keep - start < kChunk ? keep - start : kChunk),
               start, c);
  walk_on(row, keep, c, [&](double p, int32_t id) {
    acc += p, pick = id, p_pick = p;
    return acc > target;
  });
  if (threadIdx.x == 0) {
    a.tokens[r] = pick;
    a.logprobs[r] = float(log(p_pick / kept_total));
  }
}

// One block per row, reading the row.
__global__ void __launch_bounds__(kThreads) filtered_kernel(SampleArgs a) {
  __shared__ Chunk c;
  __shared__ int64_t keep_s;
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.V;
  if (threadIdx.x == 0) c.start = -1;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) m = fmaxf(m, z[j]);
  const Candidates row{z, nullptr, a.n, a.inv_t, __dmul_rn(double(block_max(m, c.shared_f)), a.inv_t)};
  filtered_row(a, r, row, nullptr, c, &keep_s);
}

// ---- the split: bins by distance from the maximum, then a list of the tokens the filters can keep

// Tokens fall into kMassBins bins by how far below the row's maximum their scaled logit lies,
// kBinsPerNat bins to a unit of log-probability: 32 below the maximum, where a token's probability
// is under 1e-14 of the top one's, all share the last bin. The bin is monotonic in the logit, so
// the tokens of bins 0..b are a prefix of the CPU's order, and tokens of equal logit share a bin.
// (kMassBins: sampling_limits.h.)
constexpr double kBinsPerNat = 64;
// top-p's bins are chosen with mass to spare, so that the CPU's sum over the same tokens, in its
// order, reaches the cut too: two double sums of at most a few 100k positive terms differ by ~1e-11
// of the total at most.
constexpr double kCutSlack = 1e-9;
constexpr int kBinsPerThread = kMassBins / kThreads;

__device__ __forceinline__ int mass_bin(float z, double inv_t, double mx) {
  const double d = __dsub_rn(mx, __dmul_rn(double(z), inv_t)) * kBinsPerNat;
  return d < double(kMassBins - 1) ? int(d) : kMassBins - 1;  // -inf and NaN too
}

// Whether the filters keep a subset of the top-k set (then bins are counted), or only top-p
// applies (then bins weigh their mass).
__device__ __forceinline__ bool kept_by_count(const SampleArgs& a) { return a.top_k > 0 && a.top_k < a.n; }

// Second kernel (after part_max_kernel): part p of row r (blockIdx.x = p, blockIdx.y = r) sums its
// mass into part_mass and adds its tokens' counts, or masses, into the row's bins (bin_count or
// bin_mass, zero before the launch). The row's last block (by tickets) writes the row's total mass
// (the parts' in part order) and last_bin[r], the last bin the kept set can reach, and zeroes the
// row's bins for the next launch. The last bin is never counted: it is where every token lies.
__global__ void __launch_bounds__(kThreads)
    part_bins_kernel(SampleArgs a, const float* part_max, double* part_mass, unsigned* bin_count, double* bin_mass,
                     unsigned* tickets, double* totals, int32_t* last_bin) {
  __shared__ unsigned count_s[kMassBins];
  __shared__ double mass_s[kMassBins];
  __shared__ float shared_f[32];
  __shared__ double shared_d[32];
  __shared__ int shared_i[32];
  __shared__ double total_s;
  __shared__ bool last_s;
  __shared__ double parts_s[kMaxParts];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;
  const bool by_count = kept_by_count(a);
  for (int i = threadIdx.x; i < kMassBins; i += blockDim.x) count_s[i] = 0, mass_s[i] = 0;
  const double mx = row_max(a, part_max, r, parts, shared_f);  // ends with a barrier: the bins are zero
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  double s = 0;
  for (int64_t j = from + threadIdx.x; j < to; j += blockDim.x) {
    const double pj = prob(z[j], a.inv_t, mx);
    s += pj;
    const int b = mass_bin(z[j], a.inv_t, mx);
    if (b < kMassBins - 1) {
      if (by_count)
        atomicAdd(&count_s[b], 1u);
      else
        atomicAdd(&mass_s[b], pj);
    }
  }
  s = block_sum(s, shared_d);  // its barriers: every thread's bins are in
  if (threadIdx.x == 0) part_mass[r * parts + p] = s;
  unsigned* row_count = bin_count + r * kMassBins;
  double* row_mass = bin_mass + r * kMassBins;
  for (int i = threadIdx.x; i < kMassBins - 1; i += blockDim.x) {
    if (count_s[i] != 0) atomicAdd(&row_count[i], count_s[i]);
    if (mass_s[i] != 0) atomicAdd(&row_mass[i], mass_s[i]);
  }
  if (!last_block_done(tickets + r, parts, &last_s)) return;

  // The row's last block: every part's mass and bins are in.
  load_parts(part_mass + r * parts, parts, parts_s);
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t q = 0; q < parts; q++) total += parts_s[q];
    total_s = total;
    totals[r] = total;
  }
  __syncthreads();
  const double need = by_count ? double(a.top_k) : double(a.top_p) * total_s * (1 + kCutSlack);
  // Thread t holds bins kBinsPerThread * t, ...: a scan over the threads orders them.
  double v[kBinsPerThread], own = 0;
  for (int i = 0; i < kBinsPerThread; i++) {
    const int b = int(threadIdx.x) * kBinsPerThread + i;
    v[i] = by_count ? double(load_past_l1(row_count + b)) : load_past_l1(row_mass + b);
    own += v[i];
    row_count[b] = 0, row_mass[b] = 0;
  }
  double all = 0;
  double before = block_inclusive_scan(own, shared_d, &all) - own;
  int first = kMassBins - 1;
  for (int i = 0; i < kBinsPerThread && first == kMassBins - 1; i++) {
    before += v[i];
    if (before >= need) first = int(threadIdx.x) * kBinsPerThread + i;
  }
  first = block_reduce(first, kMassBins - 1, Min{}, shared_i);
  if (threadIdx.x == 0) last_bin[r] = first;
}

// Third kernel: part p of row r appends the keys of its tokens in bins up to last_bin[r] to the
// row's list (capacity keys from keys + r * capacity); counts[r] counts them all, past the
// capacity too, and is zero before the launch.
__global__ void __launch_bounds__(kThreads)
    gather_kernel(SampleArgs a, const float* part_max, const int32_t* last_bin, uint64_t* keys, unsigned* counts,
                  int64_t capacity) {
  __shared__ float shared_f[32];
  const int64_t r = blockIdx.y, p = blockIdx.x, parts = gridDim.x;
  const float* z = a.logits + r * a.V;
  const double mx = row_max(a, part_max, r, parts, shared_f);
  const int last = last_bin[r];
  const unsigned lane = threadIdx.x % kWarp;
  int64_t from, to;
  part_range(a.n, parts, p, &from, &to);
  for (int64_t base = from; base < to; base += blockDim.x) {  // whole warps: the ballot needs them
    const int64_t j = base + threadIdx.x;
    const bool in = j < to && mass_bin(z[j], a.inv_t, mx) <= last;
    const unsigned lanes = __ballot_sync(0xffffffffu, in);
    if (lanes == 0) continue;
    const int leader = __ffs(int(lanes)) - 1;
    unsigned slot = 0;
    if (int(lane) == leader) slot = atomicAdd(&counts[r], unsigned(__popc(lanes)));
    slot = __shfl_sync(0xffffffffu, slot, leader) + unsigned(__popc(lanes & ((1u << lane) - 1u)));
    if (in && int64_t(slot) < capacity) keys[r * capacity + slot] = order_key(z[j], j);
  }
}

// Last kernel, one block per row: the filtered sampling of row r over its list, or over the row
// when the list overflowed; then counts[r] back to zero for the next launch.
__global__ void __launch_bounds__(kThreads)
    filtered_list_kernel(SampleArgs a, const float* part_max, int64_t parts, const double* totals,
                         const uint64_t* keys, unsigned* counts, int64_t capacity) {
  __shared__ Chunk c;
  __shared__ int64_t keep_s;
  const int64_t r = blockIdx.x;
  if (threadIdx.x == 0) c.start = -1;
  const double mx = row_max(a, part_max, r, parts, c.shared_f);
  const int64_t listed = counts[r];
  const Candidates row = listed <= capacity ? Candidates{nullptr, keys + r * capacity, listed, a.inv_t, mx}
                                            : Candidates{a.logits + r * a.V, nullptr, a.n, a.inv_t, mx};
  filtered_row(a, r, row, totals + r, c, &keep_s);
  __syncthreads();  // every thread has read counts[r]
  if (threadIdx.x == 0) counts[r] = 0;
}

}  // namespace azr::kernels::cuda_detail::sampling
