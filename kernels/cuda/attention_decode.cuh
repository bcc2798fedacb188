// Decode attention over the KV cache, the parts shared by attention.cu's kernels and the
// lane-group kernel for head dims of 32, 64 and 128 (Qwen2.5's 64 and 128).
//
// attention.cu's attention_decode_kernel gives a warp one cache position at a time, each lane E =
// d / 32 elements of it, so every position costs a whole-warp reduction (five shuffles) and two
// exponentials per query head: at d = 64 and 7 query heads per kv head, 35 shuffles and 14 exps for
// 256 bytes of cache, and the kernel is bound by them, not by memory (the 2026-11-23 decode profile
// at batch 256: 71 us a call for about 25 MB of cache, 355 GB/s, 32% of the step). Here a position takes LP = d / 8 lanes,
// each holding 8 elements (one 16-byte load in bf16), so a warp scores 32 / LP positions at once
// (4 at d = 64, 2 at d = 128), each group of LP lanes keeping its own online softmax; a score is a
// reduction over LP lanes (log2 LP shuffles) and each lane's two exps cover its group's position.
// At the end the groups of a warp merge by shuffles, then the warps through shared memory as
// attention_decode_kernel's do (decode_write_merged). Same arithmetic per position (fp32 dot
// products of bf16-rounded queries with the cached keys, an online softmax in fp32), in another
// order.
//
// The kernels are in this header, apart from their launches (attention.cu), so that
// tests/kernels/attention_decode_emulated_test.cpp can also run them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include "kernels/cuda/device_or_emulation.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/internal.h"  // DecodeSplit
#include "kernels/cuda/reductions.cuh"

namespace azr::kernels::cuda_detail::decode {

constexpr int kDecodeWarps = 8;
constexpr int kDecodeHeads = 8;  // query heads per block
constexpr unsigned kFull = 0xffffffffu;

struct DecodeDims {
  int64_t H, d, group, kv_seq_stride, kv_row;
  float scale;
  bool merge_each_element = false;  // cuda_set_decode_merge's baseline (merge_splits_if_last)
};

// The most splits of a row's positions (decode_split, attention.cu, caps its plans here): the block
// that merges them keeps each split's weight and sum, for each of its heads, in shared memory.
constexpr int kMaxMergeSplits = 256;
constexpr int kMergeStride = kMaxMergeSplits + 1;  // floats a head: the heads' serial sums in different banks
// The merge's shared memory (merge_splits_if_last): weights, then sums, [kDecodeHeads][kMergeStride].
constexpr size_t kMergeSmemBytes = sizeof(float) * 2 * kDecodeHeads * kMergeStride;

constexpr int64_t kMinSplitKeys = 64;  // cache positions per split, at least

// `splits` splits of a slot's `capacity` positions, `chunk` each; tile > 1: whole tiles of that many
// positions a split (the tile kernel's), the splits then as many as it takes.
inline DecodeSplit split_positions(int head_chunks, int splits, int64_t capacity, int64_t tile) {
  int64_t chunk = (capacity + splits - 1) / splits;
  if (tile > 1) {
    chunk = (chunk + tile - 1) / tile * tile;
    splits = int((capacity + chunk - 1) / chunk);
  }
  return {head_chunks, splits, chunk};
}

// How a decode of R rows divides among blocks (attention.cu's decode_split, with the device's
// multiprocessors; host code here so that the emulated test checks it): a block per row, kv head
// and chunk of up to kDecodeHeads of its query heads; and where those would not give every
// multiprocessor two, the positions split too, down to kMinSplitKeys of the slot's `capacity` a
// split and at most kMaxMergeSplits (splits past a row's position exit at once); tile as in
// split_positions.
inline DecodeSplit plan_decode_split(int64_t R, int64_t heads, int64_t kv_heads, int64_t capacity, int64_t tile,
                                     int multiprocessors) {
  const int64_t group = heads / kv_heads;
  const int head_chunks = int((group + kDecodeHeads - 1) / kDecodeHeads);
  const int64_t blocks = std::max<int64_t>(1, R * kv_heads * head_chunks);
  const int64_t want = (2 * int64_t(multiprocessors) + blocks - 1) / blocks;
  const int64_t most = std::min<int64_t>(kMaxMergeSplits, std::max<int64_t>(1, capacity / kMinSplitKeys));
  return split_positions(head_chunks, int(std::clamp<int64_t>(want, 1, most)), capacity, tile);
}

// Shared memory of a decode block: each warp's accumulators [kDecodeWarps][kDecodeHeads][d], and
// after them, the space of a split row's merge.
inline size_t decode_smem_bytes(int64_t d) {
  const size_t accumulators = sizeof(float) * size_t(kDecodeWarps * kDecodeHeads * d);
  return accumulators > kMergeSmemBytes ? accumulators : kMergeSmemBytes;
}

// Element i of output row `row` (of d) from its merged softmax state (max M, sum L, unnormalised
// O): out (and out16, its bf16 rounding, unless null) when splits == 1; otherwise split z's record
// of (max, sum, acc[d]) in part, [R, H, splits] records, for merge_splits_if_last.
__device__ __forceinline__ void decode_write_element(int64_t row, int64_t i, int64_t d, float M, float L, float O,
                                                     int splits, int z, float* out, __nv_bfloat16* out16,
                                                     float* part) {
  if (splits == 1) {
    out[row * d + i] = O / L;
    if (out16) out16[row * d + i] = __float2bfloat16_rn(O / L);
  } else {
    float* rec = part + (row * splits + z) * (d + 2);
    if (i == 0) rec[0] = M, rec[1] = L;
    rec[2 + i] = O;
  }
}

// The splits of a row's n positions that hold any of them: the first ones, since split z of
// `chunk` positions each starts at z * chunk. The others write no record and take no part in the
// merge, so that a cache much longer than the row (a batch-1 step early in a long generation: 128
// splits of 64 positions for 8,192, four of them holding the first 256) is not merged over
// `splits` records.
// At least one: split 0 runs whatever n is (outside the op's contract, n < 1 gives NaN rows, as a
// row with no position always did).
__device__ __forceinline__ int splits_with_positions(int64_t n, int64_t chunk, int splits) {
  const int64_t used = n > 0 ? (n + chunk - 1) / chunk : 1;
  return used < splits ? int(used) : splits;
}

// cuda_ops_bench's baseline for merge_splits_if_last (cuda_set_decode_merge), the merge as it was
// before 2026-11-28's fifth session: output row `row`'s element i on its own, from the first `used`
// records of its `splits`, walked twice kEachElementBatch at a time, the max, then the sums.
constexpr int kEachElementBatch = 4;
AZR_DEVICE_INLINE void merge_split_element(int64_t row, int64_t i, int64_t d, int splits, int used,
                                           const float* part, float* out, __nv_bfloat16* out16) {
  const float* rec = part + row * splits * (d + 2);
  float M = -INFINITY;
  for (int z0 = 0; z0 < used; z0 += kEachElementBatch) {
    float m[kEachElementBatch];
#pragma unroll
    for (int k = 0; k < kEachElementBatch; k++)
      m[k] = z0 + k < used ? load_past_l1(rec + (z0 + k) * (d + 2)) : -INFINITY;
#pragma unroll
    for (int k = 0; k < kEachElementBatch; k++) M = fmaxf(M, m[k]);
  }
  float L = 0.f, O = 0.f;
  for (int z0 = 0; z0 < used; z0 += kEachElementBatch) {
    float m[kEachElementBatch], l[kEachElementBatch], o[kEachElementBatch];
#pragma unroll
    for (int k = 0; k < kEachElementBatch; k++) {
      const float* r = rec + (z0 + k) * (d + 2);
      const bool in = z0 + k < used;
      m[k] = in ? load_past_l1(r) : -INFINITY;
      l[k] = in ? load_past_l1(r + 1) : 0.f;
      o[k] = in ? load_past_l1(r + 2 + i) : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kEachElementBatch; k++) {
      if (m[k] == -INFINITY) continue;
      const float c = expf(m[k] - M);
      L += l[k] * c;
      O += o[k] * c;
    }
  }
  out[row * d + i] = O / L;
  if (out16) out16[row * d + i] = __float2bfloat16_rn(O / L);
}

constexpr int kMergeBatch = 8;  // splits whose accumulators a merging thread loads at once
constexpr int kMergeElems = 2;  // output elements a merging thread merges side by side

// A split decode block's last step, after its records are written (decode_write_element): the
// last of the `used` splits of its (row, kv head, head chunk) that hold positions
// (splits_with_positions) to finish (last_block_done, reductions.cuh; count: theirs) merges their
// records into output rows r H + h0 .. + nh - 1 (flash-decoding's combine, in the same launch: one
// kernel less per layer at batch 1). smem: kMergeSmemBytes of the block's shared memory, free once
// last_block_done's barrier is passed. each_element: merge_split_element instead, the baseline.
// Per output row, in split order as the definition reads: M, the max of the records' maxima; the
// weights c_z = exp(m_z - M); the sum L = sum of l_z c_z and each element O = sum of acc_z c_z,
// skipping splits that scored nothing (m_z = -inf); out = O / L. The maxima, weights and sums are
// worked out once a row, by a warp that loads all its records' (m, l) together, not once an
// element: at batch 1 over a long cache (128 splits) each thread's elements walked the records
// twice, 4 loads at a time, one round trip to L2 after another (64 per element). Now a thread
// waits one round trip for its row's (m, l), then used / kMergeBatch for each kMergeElems of its
// elements' acc_z (the loads of both in flight together; more would cost the kernels registers).
// Not inlined: one block a launch runs it, and inlined its registers counted against the attention
// loop's (ptxas, sm_90: the lane-group kernels at d = 64 and 128 spilled, 128 registers a thread).
AZR_DEVICE_NOINLINE void merge_splits_if_last(unsigned* count, int64_t r, int64_t h0, int nh, int64_t d, int64_t H,
                                            int splits, int used, const float* part, float* out,
                                            __nv_bfloat16* out16, float* smem, bool each_element) {
  constexpr int kPerLane = kMaxMergeSplits / kWarp;
  __shared__ bool last;
  __shared__ float L_s[kDecodeHeads];
  if (!last_block_done(count, used, &last)) return;
  if (each_element) {
    for (int64_t idx = threadIdx.x; idx < nh * d; idx += blockDim.x)
      merge_split_element(r * H + h0 + idx / d, idx % d, d, splits, used, part, out, out16);
    return;
  }
  float* c_s = smem;                                // [head][split]: c_z, or -inf for a split to skip
  float* l_s = smem + kDecodeHeads * kMergeStride;  // [head][split]: l_z
  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp, warps = int(blockDim.x) / kWarp;
  for (int h = warp; h < nh; h += warps) {
    const float* rec = part + (r * H + h0 + h) * splits * (d + 2);
    float m[kPerLane], l[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {  // the loads go out together (load_past_l1: other blocks wrote them)
      const int z = lane + k * kWarp;
      m[k] = z < used ? load_past_l1(rec + z * (d + 2)) : -INFINITY;
      l[k] = z < used ? load_past_l1(rec + z * (d + 2) + 1) : 0.f;
    }
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerLane; k++) M = fmaxf(M, m[k]);  // a max in any order is the max
    M = warp_max(M);
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int z = lane + k * kWarp;
      if (z >= used) continue;
      c_s[h * kMergeStride + z] = m[k] == -INFINITY ? -INFINITY : expf(m[k] - M);
      l_s[h * kMergeStride + z] = l[k];
    }
  }
  __syncthreads();
  if (int(threadIdx.x) < nh) {  // a thread a row: L in split order
    const float* c = c_s + threadIdx.x * kMergeStride;
    const float* lz = l_s + threadIdx.x * kMergeStride;
    float L = 0.f;
    for (int z = 0; z < used; z++)
      if (c[z] != -INFINITY) L += lz[z] * c[z];
    L_s[threadIdx.x] = L;
  }
  __syncthreads();
  // A thread's elements idx0 + e blockDim, kMergeElems at a time (1.5B's 768 are 3 a thread of 256)
  // merged together, so that their accumulators' loads are in flight at once.
  const int64_t n = nh * d, stride = blockDim.x;
  for (int64_t idx0 = threadIdx.x; idx0 < n; idx0 += kMergeElems * stride) {
    const float* acc[kMergeElems];
    const float* c[kMergeElems];
    float O[kMergeElems];
#pragma unroll
    for (int e = 0; e < kMergeElems; e++) {
      const int64_t idx = idx0 + e * stride < n ? idx0 + e * stride : idx0;  // past n: a copy of the first
      const int h = int(idx / d);
      acc[e] = part + (r * H + h0 + h) * splits * (d + 2) + 2 + idx % d;
      c[e] = c_s + h * kMergeStride;
      O[e] = 0.f;
    }
    for (int z0 = 0; z0 < used; z0 += kMergeBatch) {
      float o[kMergeElems][kMergeBatch];
#pragma unroll
      for (int e = 0; e < kMergeElems; e++)
#pragma unroll
        for (int k = 0; k < kMergeBatch; k++)
          o[e][k] = z0 + k < used ? load_past_l1(acc[e] + (z0 + k) * (d + 2)) : 0.f;
#pragma unroll
      for (int e = 0; e < kMergeElems; e++)
#pragma unroll
        for (int k = 0; k < kMergeBatch; k++)
          if (z0 + k < used && c[e][z0 + k] != -INFINITY) O[e] += o[e][k] * c[e][z0 + k];
    }
#pragma unroll
    for (int e = 0; e < kMergeElems; e++) {
      const int64_t idx = idx0 + e * stride;
      if (idx >= n) break;
      const int h = int(idx / d);
      const int64_t at = (r * H + h0 + h) * d + idx % d;
      out[at] = O[e] / L_s[h];
      if (out16) out16[at] = __float2bfloat16_rn(O[e] / L_s[h]);
    }
  }
}

// The block's last step: the warps' softmax states (running max m_s, sum l_s, accumulators acc_s)
// merged, then the output rows h0 .. h0 + nh - 1 of row r written (decode_write_element), and with
// splits, merged by the last of the `used` that hold positions (merge_splits_if_last; merge_count:
// the count of the block's row and head chunk), in acc_s's space (decode_smem_bytes). Called after
// the barrier that follows the stores.
__device__ inline void decode_write_merged(float* acc_s, const float (*m_s)[kDecodeHeads],
                                           const float (*l_s)[kDecodeHeads], int nh, int64_t d, int64_t H,
                                           int64_t r, int64_t h0, int splits, int used, int z, float* out,
                                           __nv_bfloat16* out16, float* part, unsigned* merge_count,
                                           bool merge_each_element) {
  for (int64_t idx = threadIdx.x; idx < nh * d; idx += blockDim.x) {
    const int g = int(idx / d);
    const int64_t i = idx % d;
    float M = -INFINITY;
    for (int w = 0; w < kDecodeWarps; w++) M = fmaxf(M, m_s[w][g]);
    float L = 0.f, O = 0.f;
    for (int w = 0; w < kDecodeWarps; w++) {
      const float c = m_s[w][g] == -INFINITY ? 0.f : expf(m_s[w][g] - M);  // a warp with no positions
      L += l_s[w][g] * c;
      O += acc_s[(w * kDecodeHeads + g) * d + i] * c;
    }
    decode_write_element(r * H + h0 + g, i, d, M, L, O, splits, z, out, out16, part);
  }
  if (splits > 1)
    merge_splits_if_last(merge_count, r, h0, nh, d, H, splits, used, part, out, out16, acc_s, merge_each_element);
}

// Which block of the grid (R, kv_heads * head_chunks, splits) this is, with the grid's y and z
// extents: blockIdx and gridDim in a launch of its own (launched_block), or a turn of a
// persistent kernel's block (decode_layers.cuh).
// Unsigned 32-bit, as blockIdx is: 64-bit or signed divisions by head_chunks would cost the
// kernels registers.
struct DecodeGridIndex {
  unsigned x, y, z, gy, gz;
};
__device__ __forceinline__ DecodeGridIndex launched_block() {
  return {blockIdx.x, blockIdx.y, blockIdx.z, gridDim.y, gridDim.z};
}

// What decode block g works on: row r, query heads h0 .. h0 + nh - 1 (of kv head kvh, at most
// kDecodeHeads), positions begin .. end - 1 (split z of `splits`, `chunk` positions each; the last
// split runs to the row's end). Splits z >= used hold none of the row's positions
// (splits_with_positions): such a block returns at once.
struct DecodeBlock {
  int64_t r, kvh, h0, begin, end;
  int nh, splits, used, z;
};
__device__ __forceinline__ DecodeBlock decode_block(const DecodeGridIndex& g, const int32_t* pos, int64_t group,
                                                    int head_chunks, int64_t chunk) {
  DecodeBlock b;
  b.r = g.x, b.kvh = g.y / head_chunks;
  b.h0 = b.kvh * group + int64_t(g.y % head_chunks) * kDecodeHeads;
  b.nh = int(min(int64_t(kDecodeHeads), (b.kvh + 1) * group - b.h0));
  b.splits = int(g.gz), b.z = int(g.z);
  const int64_t n = int64_t(pos[b.r]) + 1;
  b.begin = int64_t(b.z) * chunk;
  b.end = b.z == b.splits - 1 ? n : min(n, b.begin + chunk);
  b.used = splits_with_positions(n, chunk, b.splits);
  return b;
}

// Block g's merge count (merge_splits_if_last): one per (row, kv head, head chunk), [R, gy].
__device__ __forceinline__ int64_t merge_count_index(const DecodeGridIndex& g) { return int64_t(g.x) * g.gy + g.y; }

__device__ __forceinline__ float bf16_bits_value(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// x[0..8) = p[0..8) as fp32; p 16-byte aligned (bf16) or 32-byte aligned (fp32).
__device__ __forceinline__ void load8(float (&x)[8], const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; i++) x[2 * i] = bf16_bits_value(w[i] & 0xffffu), x[2 * i + 1] = bf16_bits_value(w[i] >> 16);
}
__device__ __forceinline__ void load8(float (&x)[8], const float* p) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

__device__ __forceinline__ float round_through_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// grid (R, kv_heads * head_chunks, splits), block kDecodeWarps warps; LP = d / 8 lanes per
// position (4, 8 or 16). As attention.cu's attention_decode_kernel in what it reads and writes.
// Two blocks per multiprocessor (at most 128 registers a thread): with one, 8 warps are too few to
// hide the cache's latency. The queries sit in shared memory, not registers, for that.
template <int LP, class KV>
__global__ void __launch_bounds__(kDecodeWarps * kWarp, 2)
    decode_lane_groups_kernel(float* out, __nv_bfloat16* out16, float* part, unsigned* merge_counts, const float* q,
                              const KV* kcache, const KV* vcache, const int32_t* slot, const int32_t* pos,
                              DecodeDims s, int head_chunks, int64_t chunk) {
  static_assert(LP == 4 || LP == 8 || LP == 16, "head dims 32, 64, 128");
  constexpr int kGroups = kWarp / LP;  // positions a warp scores at once
  constexpr int64_t d = LP * 8;
  AZR_DYNAMIC_SHARED(smem_raw);
  float* acc_s = reinterpret_cast<float*>(smem_raw);
  __shared__ float m_s[kDecodeWarps][kDecodeHeads], l_s[kDecodeWarps][kDecodeHeads];
  __shared__ __align__(16) float q_s[kDecodeHeads * d];
  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp, group = lane / LP;
  const int64_t e0 = int64_t(lane % LP) * 8;
  wait_for_prior_grids();  // q and this step's key and value come from the kernel before
  release_next_grid();
  const DecodeBlock blk = decode_block(launched_block(), pos, s.group, head_chunks, chunk);
  if (blk.z >= blk.used) return;  // no position of the row: no record, no part in the merge
  const int64_t r = blk.r, kvh = blk.kvh, h0 = blk.h0, begin = blk.begin, end = blk.end;
  const int nh = blk.nh, splits = blk.splits, z = blk.z;

  // The block's nh query heads are adjacent in q's row.
  for (int64_t i = threadIdx.x; i < nh * d; i += blockDim.x) {
    const float x = q[(r * s.H + h0) * d + i];
    q_s[i] = std::is_same_v<KV, __nv_bfloat16> ? round_through_bf16(x) : x;  // a bf16 cache: bf16 queries
  }
  float acc[kDecodeHeads][8], m[kDecodeHeads], l[kDecodeHeads];
#pragma unroll
  for (int g = 0; g < kDecodeHeads; g++) {
    m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
    for (int u = 0; u < 8; u++) acc[g][u] = 0.f;
  }
  __syncthreads();
  const KV* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * d + e0;
  const KV* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * d + e0;
  constexpr int64_t kStep = int64_t(kDecodeWarps) * kGroups;
  float kx[8] = {}, vx[8] = {};
  int64_t j = begin + int64_t(warp) * kGroups + group;
  // Every lane of the warp runs the same iterations (the shuffles need them all); a group whose
  // position is past the end scores -inf, which adds nothing. No prefetch of the next positions
  // (it would cost the registers that let two blocks share a multiprocessor).
  for (int64_t j0 = begin + int64_t(warp) * kGroups; j0 < end; j0 += kStep, j += kStep) {
    const bool valid = j < end;
    if (valid) load8(kx, kb + j * s.kv_row), load8(vx, vb + j * s.kv_row);
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++) {
      if (g >= nh) break;  // uniform across the block
      const float4 qa = reinterpret_cast<const float4*>(q_s + g * d + e0)[0],
                   qb = reinterpret_cast<const float4*>(q_s + g * d + e0)[1];
      float dot = qa.x * kx[0] + qa.y * kx[1] + qa.z * kx[2] + qa.w * kx[3];
      dot += qb.x * kx[4] + qb.y * kx[5] + qb.z * kx[6] + qb.w * kx[7];
#pragma unroll
      for (int o = LP / 2; o > 0; o /= 2) dot += __shfl_xor_sync(kFull, dot, o);
      const float sc = valid ? dot * s.scale : -INFINITY;
      const float m_new = fmaxf(m[g], sc);
      if (m_new == -INFINITY) continue;  // nothing scored in this group yet: its state stays empty
      const float corr = expf(m[g] - m_new), p = expf(sc - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int u = 0; u < 8; u++) acc[g][u] = acc[g][u] * corr + p * vx[u];
      m[g] = m_new;
    }
  }

  // The warp's groups merge: lanes LP apart hold the same elements of different positions.
#pragma unroll
  for (int o = LP; o < kWarp; o *= 2)
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++) {
      if (g >= nh) break;
      const float m2 = __shfl_xor_sync(kFull, m[g], o), l2 = __shfl_xor_sync(kFull, l[g], o);
      const float M = fmaxf(m[g], m2);
      const float c1 = m[g] == -INFINITY ? 0.f : expf(m[g] - M), c2 = m2 == -INFINITY ? 0.f : expf(m2 - M);
      l[g] = l[g] * c1 + l2 * c2;
#pragma unroll
      for (int u = 0; u < 8; u++) acc[g][u] = acc[g][u] * c1 + __shfl_xor_sync(kFull, acc[g][u], o) * c2;
      m[g] = M;
    }
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++) m_s[warp][g] = m[g], l_s[warp][g] = l[g];
  if (lane < LP)
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++)
      if (g < nh)
#pragma unroll
        for (int u = 0; u < 8; u++) acc_s[(warp * kDecodeHeads + g) * d + e0 + u] = acc[g][u];
  __syncthreads();
  // used again from pos, not kept from the start: one register less through the loop above.
  const int used = splits_with_positions(int64_t(pos[r]) + 1, chunk, splits);
  decode_write_merged(acc_s, m_s, l_s, nh, d, s.H, r, h0, splits, used, z, out, out16, part,
                      merge_counts + merge_count_index(launched_block()), s.merge_each_element);
}

}  // namespace azr::kernels::cuda_detail::decode
