// Decode attention over a bf16 KV cache in shared-memory tiles: the default for head dims 32, 64
// and 128 (Qwen2.5's 64 and 128) where the cache is bf16, as the Bf16 table's decode keeps it.
//
// Why another kernel: the H200 run of 2026-11-26 put the lane-group kernel (attention_decode.cuh)
// at 714-742 GB/s, 15% of the bandwidth, and at batch 256 it took about 1.9 ms of 1.5B's 5.2 ms
// decode step (67 us a layer for 50 MB of cache). It keeps one 16-byte load of K and of V per lane
// in flight, then waits, then spends a shuffle reduction and two exps per position and query head:
// too few bytes in flight to cover the memory's latency, and arithmetic that grows with the GQA
// group. Here a block (one row, one kv head, up to kHeads of its query heads, one split of the
// positions) works through kTile positions at a time:
//   - every thread loads its share of the next tile's K and V (D / 32 16-byte loads of each) into
//     registers before the current tile's arithmetic, so 2 x kTile x D x 2 bytes (32 KB at
//     D = 128) per block are in flight while the block computes;
//   - the scores S [16 x kTile] = Q [16 x D] K^T take four warps one WMMA product each (bf16
//     inputs, fp32 sums; the query rows past the block's heads are zeros): the products of bf16
//     values are exact in fp32, as in the CPU's fp32 dot products, and only the sums' order differs;
//   - one warp per query head takes the tile's softmax: its max and sum by shuffles, once per tile,
//     not once per position; the probabilities stay fp32;
//   - P V in fp32 on the CUDA cores: each warp takes every 8th position of the tile, each lane D / 32
//     elements of the value row for all the block's heads, so a value read serves every head;
//   - at the end the warps' partial sums (same running max: the softmax state is the block's) add
//     in warp order through shared memory, no atomics.
// Same outputs as the lane-group kernel: out (and out16, its bf16 rounding) when the positions are
// not split, else a (max, sum, acc[D]) record per split, which the last split of the row to finish
// merges into out (decode::merge_splits_if_last: one atomic count per block).
//
// In a header, apart from its launch (attention.cu), so that tests/kernels/
// attention_decode_emulated_test.cpp can run it on the CPU through tests/kernels/cuda_emulation.h.
#pragma once

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/wmma_tiles.cuh"

namespace azr::kernels::cuda_detail::decode_tiles {

using decode::DecodeDims;
namespace wmma = nvcuda::wmma;
using wmma_tiles::bf16;
using wmma_tiles::FragA;
using wmma_tiles::FragBCol;
using wmma_tiles::FragC;
using wmma_tiles::kLd;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTile = 64;   // cache positions per shared-memory tile
constexpr int kHeads = decode::kDecodeHeads;  // query heads per block: a 16-row WMMA tile, the rest zeros
constexpr int kSLd = kTile + 4;  // fp32 score stride (WMMA: a multiple of 4)
static_assert(kTile == 4 * 16, "four warps take one 16-position column block of the scores each");
static_assert(kTile % kWarps == 0, "P V: each warp takes every kWarps-th position");

// Shared memory, in bytes; every region is a multiple of 32 bytes, so each starts 256-bit aligned
// as WMMA asks. The warps' final sums reuse the K and V tiles' space.
template <int D>
constexpr size_t kKvTileBytes = size_t(kTile) * kLd<D> * sizeof(bf16);
template <int D>
constexpr size_t kQBytes = size_t(16) * kLd<D> * sizeof(bf16);
constexpr size_t kScoreBytes = size_t(16) * kSLd * sizeof(float);
constexpr size_t kProbBytes = size_t(kTile) * kHeads * sizeof(float);  // [position][head]
template <int D>
constexpr size_t smem_bytes() {
  return 2 * kKvTileBytes<D> + kQBytes<D> + kScoreBytes + kProbBytes + 32 * sizeof(float);
}
template <int D>
constexpr size_t kSumBytes = size_t(kWarps) * kHeads * D * sizeof(float);
static_assert(kSumBytes<128> <= 2 * kKvTileBytes<128> && kSumBytes<64> <= 2 * kKvTileBytes<64> &&
                  kSumBytes<32> <= 2 * kKvTileBytes<32>,
              "the warps' sums fit where the K and V tiles were");
static_assert(smem_bytes<32>() >= decode::kMergeSmemBytes, "a split row's merge fits in the block's shared memory");

// A tile's K and V rows, D / 8 16-byte pieces each, kTile rows: this thread's share.
template <int D>
struct TileShare {
  static constexpr int kPieces = kTile * (D / 8) / kThreads;
  static_assert(kPieces >= 1 && kTile * (D / 8) % kThreads == 0, "whole pieces per thread");
  uint4 k[kPieces], v[kPieces];
};

// Loads positions first .. first + kTile - 1 (those before `end`; zeros past it, so the padding
// adds nothing and never carries NaN into a product).
template <int D>
__device__ __forceinline__ void load_share(TileShare<D>& t, const bf16* kb, const bf16* vb, int64_t kv_row,
                                           int64_t first, int64_t end) {
#pragma unroll
  for (int u = 0; u < TileShare<D>::kPieces; u++) {
    const int piece = int(threadIdx.x) + u * kThreads;
    const int64_t j = first + piece / (D / 8), col = int64_t(piece % (D / 8)) * 8;
    if (j < end) {
      t.k[u] = *reinterpret_cast<const uint4*>(kb + j * kv_row + col);
      t.v[u] = *reinterpret_cast<const uint4*>(vb + j * kv_row + col);
    } else {
      t.k[u] = uint4{0u, 0u, 0u, 0u};
      t.v[u] = uint4{0u, 0u, 0u, 0u};
    }
  }
}

template <int D>
__device__ __forceinline__ void store_share(bf16* k_s, bf16* v_s, const TileShare<D>& t) {
#pragma unroll
  for (int u = 0; u < TileShare<D>::kPieces; u++) {
    const int piece = int(threadIdx.x) + u * kThreads;
    const int row = piece / (D / 8), col = (piece % (D / 8)) * 8;
    *reinterpret_cast<uint4*>(k_s + row * kLd<D> + col) = t.k[u];
    *reinterpret_cast<uint4*>(v_s + row * kLd<D> + col) = t.v[u];
  }
}

// x[0 .. E) = the bf16 values at p as fp32 (E = 1, 2 or 4; p aligned to 2E bytes).
template <int E>
__device__ __forceinline__ void load_values(float (&x)[E], const bf16* p) {
  if constexpr (E == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    x[0] = decode::bf16_bits_value(raw.x & 0xffffu), x[1] = decode::bf16_bits_value(raw.x >> 16);
    x[2] = decode::bf16_bits_value(raw.y & 0xffffu), x[3] = decode::bf16_bits_value(raw.y >> 16);
  } else if constexpr (E == 2) {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    x[0] = decode::bf16_bits_value(raw & 0xffffu), x[1] = decode::bf16_bits_value(raw >> 16);
  } else {
    x[0] = __bfloat162float(p[0]);
  }
}

// Block g of the grid (R, kv_heads * head_chunks, splits): kThreads threads, smem_bytes<D>() of
// shared memory at smem_raw, every thread of the block calling it. Positions begin .. end - 1 of
// row r's slot: split z of `chunk` positions each.
template <int D>
__device__ __forceinline__ void decode_tiles_block(const decode::DecodeGridIndex& g, float* out, bf16* out16,
                                                   float* part, unsigned* merge_counts, const float* q,
                                                   const bf16* kcache, const bf16* vcache, const int32_t* slot,
                                                   const int32_t* pos, const DecodeDims& s, int head_chunks,
                                                   int64_t chunk, unsigned char* smem_raw) {
  static_assert(D == 32 || D == 64 || D == 128, "head dims 32, 64, 128");
  constexpr int E = D / kWarp;  // value elements per lane in P V
  bf16* k_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* v_s = k_s + kTile * kLd<D>;
  bf16* q_s = v_s + kTile * kLd<D>;
  float* s_s = reinterpret_cast<float*>(q_s + 16 * kLd<D>);
  float* p_s = s_s + 16 * kSLd;
  float* corr_s = p_s + kTile * kHeads;  // [kHeads]
  float* m_s = corr_s + kHeads;          // [kHeads]
  float* l_s = m_s + kHeads;             // [kHeads]
  float* sum_s = reinterpret_cast<float*>(smem_raw);  // at the end: [kWarps][kHeads][D]

  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
  // pos and slot, the step's inputs, are uploaded before its first kernel and written by none: read
  // before the wait, so that the block has its positions and cache row when the kernel before ends.
  const decode::DecodeBlock blk = decode::decode_block(g, pos, s.group, head_chunks, chunk);
  if (blk.z >= blk.used) return;  // no position of the row: no record, no part in the merge
  const int64_t r = blk.r, kvh = blk.kvh, h0 = blk.h0, begin = blk.begin, end = blk.end;
  const int nh = blk.nh, splits = blk.splits, z = blk.z;
  const bf16* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * D;
  const bf16* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * D;
  // The first tile's loads go out before the queries': the two round trips overlap. Where the tile
  // ends before the row's last position (pos[r], whose key and value the kernel before writes this
  // step), before the wait too: its positions were written by earlier steps, whose kernels have all
  // finished once the kernel before has passed its own wait (device_or_emulation.cuh). At batch 1
  // that is every split but the row's last.
  TileShare<D> share;
  const bool first_tile_early = begin < end && min(begin + int64_t(kTile), end) <= int64_t(pos[r]);
  if (first_tile_early) load_share(share, kb, vb, s.kv_row, begin, end);
  wait_for_prior_grids();  // q and this step's key and value come from the kernel before
  release_next_grid();
  if (begin < end && !first_tile_early) load_share(share, kb, vb, s.kv_row, begin, end);

  // The block's queries, rounded to bf16 (a bf16 cache: bf16 queries, as the CPU's decode does),
  // rows past nh zero; probabilities of the heads past nh zero for good, corrections one.
  for (int i = int(threadIdx.x); i < 16 * D; i += kThreads) {
    const int h = i / D, e = i % D;
    q_s[h * kLd<D> + e] = __float2bfloat16_rn(h < nh ? q[(r * s.H + h0 + h) * D + e] : 0.f);
  }
  for (int i = int(threadIdx.x); i < kTile * kHeads; i += kThreads) p_s[i] = 0.f;
  if (threadIdx.x < kHeads) corr_s[threadIdx.x] = 1.f;
  float acc[kHeads][E];
#pragma unroll
  for (int h = 0; h < kHeads; h++)
#pragma unroll
    for (int u = 0; u < E; u++) acc[h][u] = 0.f;
  float m = -INFINITY, l = 0.f;  // warp `warp`'s head (warp < nh): the running max and sum

  for (int64_t first = begin; first < end; first += kTile) {
    __syncthreads();  // the last tile's P V is done with v_s and p_s
    store_share(k_s, v_s, share);
    __syncthreads();
    if (first + kTile < end) load_share(share, kb, vb, s.kv_row, first + kTile, end);  // in flight from here on

    if (warp < kTile / 16) {  // S[:, 16 warp ..] = Q K[16 warp .., :]^T
      FragC sc;
      wmma::fill_fragment(sc, 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        FragA a;
        FragBCol b;  // K's rows read column-major: K^T's 16 x 16 block
        wmma::load_matrix_sync(a, q_s + kk * 16, kLd<D>);
        wmma::load_matrix_sync(b, k_s + warp * 16 * kLd<D> + kk * 16, kLd<D>);
        wmma::mma_sync(sc, a, b, sc);
      }
      wmma::store_matrix_sync(s_s + warp * 16, sc, kSLd, wmma::mem_row_major);
    }
    __syncthreads();

    if (warp < nh) {  // head `warp`'s softmax over the tile
      float x[kTile / kWarp], tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < kTile / kWarp; c++) {
        const int j = lane + c * kWarp;
        x[c] = first + j < end ? s_s[warp * kSLd + j] * s.scale : -INFINITY;
        tile_max = fmaxf(tile_max, x[c]);
      }
      const float m_new = fmaxf(m, warp_max(tile_max));  // finite: a tile holds a position before end
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < kTile / kWarp; c++) {
        const float p = expf(x[c] - m_new);
        p_s[(lane + c * kWarp) * kHeads + warp] = p;
        sum += p;
      }
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
      l = l * corr + warp_sum(sum);
      m = m_new;
      if (lane == 0) corr_s[warp] = corr;
    }
    __syncthreads();

    // acc[h][:] = acc[h][:] * corr[h] + sum over this warp's positions of p[j][h] V[j][lane E ..]
#pragma unroll
    for (int h = 0; h < kHeads; h++) {
      const float c = corr_s[h];
#pragma unroll
      for (int u = 0; u < E; u++) acc[h][u] *= c;
    }
#pragma unroll
    for (int j = warp; j < kTile; j += kWarps) {
      float v[E];
      load_values<E>(v, v_s + j * kLd<D> + lane * E);
      const float4 pa = reinterpret_cast<const float4*>(p_s + j * kHeads)[0],
                   pb = reinterpret_cast<const float4*>(p_s + j * kHeads)[1];
      const float p[kHeads] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
      for (int h = 0; h < kHeads; h++)
#pragma unroll
        for (int u = 0; u < E; u++) acc[h][u] += p[h] * v[u];
    }
  }

  __syncthreads();  // the tiles are done with: their space takes the warps' sums
#pragma unroll
  for (int h = 0; h < kHeads; h++)
    if (h < nh)
#pragma unroll
      for (int u = 0; u < E; u++) sum_s[(warp * kHeads + h) * D + lane * E + u] = acc[h][u];
  if (warp < nh && lane == 0) m_s[warp] = m, l_s[warp] = l;
  __syncthreads();
  for (int i = int(threadIdx.x); i < nh * D; i += kThreads) {
    const int h = i / D, e = i % D;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; w++) o += sum_s[(w * kHeads + h) * D + e];
    decode::decode_write_element(r * s.H + h0 + h, e, D, m_s[h], l_s[h], o, splits, z, out, out16, part);
  }
  if (splits > 1) {
    // used again from pos, not kept from the start: a register less through the tiles' loop.
    const int used = decode::splits_with_positions(int64_t(pos[r]) + 1, chunk, splits);
    decode::merge_splits_if_last(merge_counts + decode::merge_count_index(g), r, h0, nh, D, s.H, splits, used, part,
                                 out, out16, reinterpret_cast<float*>(smem_raw), s.merge_each_element);
  }
}

// grid (R, kv_heads * head_chunks, splits), kThreads threads, smem_bytes<D>() of dynamic shared
// memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    decode_tiles_kernel(float* out, bf16* out16, float* part, unsigned* merge_counts, const float* q,
                        const bf16* kcache, const bf16* vcache, const int32_t* slot, const int32_t* pos, DecodeDims s,
                        int head_chunks, int64_t chunk) {
  AZR_DYNAMIC_SHARED(smem_raw);
  decode_tiles_block<D>(decode::launched_block(), out, out16, part, merge_counts, q, kcache, vcache, slot, pos, s,
                        head_chunks, chunk, smem_raw);
}

}  // namespace azr::kernels::cuda_detail::decode_tiles
