// Causal GQA attention of the Bf16 table on tensor cores: WMMA 16x16x16 products of bf16 operands
// with fp32 accumulators, flash-style (no T x T matrix in memory), for head dims 64 and 128.
//
// The arithmetic, which tests/kernels/tensor_core_reference.h emulates on the host:
// - q, k, v (and backward's dout) are rounded to bf16 as tiles are read; every score is a sum of
//   exact bf16 x bf16 products in fp32, as in the Simt kernels of the Bf16 table.
// - Forward runs two passes over the keys. The first keeps each row's online max and sum of
//   exponentials (fp32) and ends with lse; the second forms P = exp(scale s - lse), already
//   normalised, and accumulates P V in fp32 fragments. Recomputing the scores costs a third of a
//   pass more than FlashAttention-2's single pass, and buys two things: the output never needs
//   rescaling (a WMMA accumulator's element layout is opaque, so rescaling would mean a round
//   trip through shared memory per tile), and P's rounding does not depend on the tiling, so the
//   host can reproduce it.
// - P enters P V as two bf16 terms, hi = bf16(P) and lo = bf16(P - hi), so it carries about 16
//   significant bits and the output is the Simt kernels' to fp32-level noise. With P in one bf16
//   term (FlashAttention's bf16 arithmetic), the learner's log-probs moved from the sampler's
//   (whose decode keeps P in fp32) by 4e-3 on average and 1.5e-2 at worst on the Qwen-shaped test
//   model, as much as all of bf16's GEMM rounding together (measured with these kernels on the
//   CPU emulation of the device, 2026-11-23). The second product costs a quarter more forward
//   work. Backward keeps one bf16 term for P and dS: those feed gradients, which the bf16 GEMMs
//   round as coarsely.
// - Backward is FlashAttention-2's: P from the saved lse, dP = dout v^T, dS = P (dP - D) in
//   fp32 with D = rowsum(dout * out); dV += bf16(P)^T bf16(dout), dK += bf16(dS)^T q,
//   dQ += bf16(dS) k. dK and dV are one kernel (a block owns 64 keys of one query head and loops
//   over its queries, writing that head's share), then a second adds the shares of each kv
//   head's group in head order (no atomics: the sums do not depend on scheduling); dQ is
//   another (a block owns 64 queries).
// - Blocks are numbered longest first: under the causal mask a block's work grows with its
//   queries' positions (forward, dQ) or falls with its keys' (dK, dV), and the GPU starts blocks
//   roughly in index order, so the longest start first and the short ones fill the tail.
//
// Layout: a block is 4 warps; each warp owns 16 rows of the block's 64 (queries, or keys in
// dK/dV) and scores them against a tile of 64 rows of the other side staged in shared memory as
// bf16. Score tiles go through shared memory (fp32, 16 x 64 per warp) for the softmax, where two
// lanes share a row and take alternate columns.
//
// The kernels are in this header, apart from their launches (attention_tensor_core.cu), so that
// tests/kernels/tensor_core_emulated_test.cpp can also run them on the CPU through a stand-in for
// the few CUDA features they use (tests/kernels/cuda_emulation.h), where CI has no GPU.
#pragma once

#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/wmma_tiles.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace azr::kernels::cuda_detail::tensor_core {

namespace wmma = nvcuda::wmma;
using wmma_tiles::bf16;

constexpr int kWarp = 32;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // this block's queries (or keys)
constexpr int kTileRows = 64;                      // rows of the other side per shared-memory tile
constexpr int kSLd = kTileRows + 4;                // fp32 score tile stride (WMMA: a multiple of 4)
constexpr int kPLd = kTileRows + 8;                // bf16 probability tile stride (a multiple of 8)
constexpr unsigned kFull = 0xffffffffu;
static_assert(kBlockRows == kTileRows, "the tile loader and the output staging assume square tiles");

using wmma_tiles::FragA;
using wmma_tiles::FragBCol;
using wmma_tiles::FragBRow;
using wmma_tiles::FragC;
using wmma_tiles::kLd;

template <int N>
__device__ __forceinline__ void zero_fragments(FragC (&acc)[N]) {
#pragma unroll
  for (int c = 0; c < N; c++) wmma::fill_fragment(acc[c], 0.f);
}

struct TcDims {
  int64_t T, H, group, kv_seq_stride, kv_row;
  const int32_t* lengths;
  float scale;
};

__device__ __forceinline__ int64_t tc_seq_len(const TcDims& s, int64_t b) { return s.lengths ? s.lengths[b] : s.T; }

// The block copies rows first .. first + kTileRows - 1 of an fp32 tensor (row stride `stride`,
// head offset applied) into a bf16 tile; rows at or past `end` become zeros, so they add nothing
// and never carry NaN into a product. The caller synchronises.
//
// Where the rows are 16-byte aligned (the model's activations are: Transformer::forward_layers
// carves them so, and backward's gradient buffers are all widths of four floats), each thread
// issues kLoadBatch float4 loads before it converts any, so a tile's loads are in flight together.
// One float per thread per step, as the fallback for unaligned rows does, waits out the memory
// latency 64 x D / 128 times a tile, and the products between two tiles are a small fraction of
// that wait.
constexpr int kLoadBatch = 8;  // float4s in flight per thread: 32 registers
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const float* src, int64_t stride, int64_t first, int64_t end) {
  constexpr int kRowVecs = D / 4, kVecs = kTileRows * kRowVecs, kThreads = kWarps * kWarp;
  static_assert(kVecs % (kThreads * kLoadBatch) == 0, "whole batches of loads per thread");
  if ((reinterpret_cast<uintptr_t>(src) % 16 == 0) && stride % 4 == 0) {
#pragma unroll
    for (int e0 = 0; e0 < kVecs; e0 += kThreads * kLoadBatch) {
      float4 x[kLoadBatch];
#pragma unroll
      for (int i = 0; i < kLoadBatch; i++) {
        const int e = e0 + i * kThreads + int(threadIdx.x);
        const int64_t row = first + e / kRowVecs;
        x[i] = row < end ? *reinterpret_cast<const float4*>(src + row * stride + (e % kRowVecs) * 4)
                         : float4{0.f, 0.f, 0.f, 0.f};
      }
#pragma unroll
      for (int i = 0; i < kLoadBatch; i++) {
        const int e = e0 + i * kThreads + int(threadIdx.x);
        bf16* out = dst + (e / kRowVecs) * kLd<D> + (e % kRowVecs) * 4;
        out[0] = __float2bfloat16_rn(x[i].x), out[1] = __float2bfloat16_rn(x[i].y);
        out[2] = __float2bfloat16_rn(x[i].z), out[3] = __float2bfloat16_rn(x[i].w);
      }
    }
    return;
  }
  for (int e = threadIdx.x; e < kTileRows * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    const int64_t row = first + r;
    dst[r * kLd<D> + c] = __float2bfloat16_rn(row < end ? src[row * stride + c] : 0.f);
  }
}

// S [16 x kTileRows] (fp32, stride kSLd) = A [16 rows] B [kTileRows rows]^T, both bf16 tiles of
// stride kLd<D>: one warp.
template <int D>
__device__ __forceinline__ void warp_scores(float* S, const bf16* A, const bf16* B) {
  FragC acc[kTileRows / 16];
  zero_fragments(acc);
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    FragA a;
    wmma::load_matrix_sync(a, A + kk * 16, kLd<D>);
#pragma unroll
    for (int n = 0; n < kTileRows / 16; n++) {
      FragBCol b;  // B^T's 16 x 16 block (kk, n) is B's rows n*16.., columns kk*16.., read column-major
      wmma::load_matrix_sync(b, B + n * 16 * kLd<D> + kk * 16, kLd<D>);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kTileRows / 16; n++) wmma::store_matrix_sync(S + n * 16, acc[n], kSLd, wmma::mem_row_major);
}

// acc [16 x D] += P [16 x kTileRows] (bf16, stride kPLd) X [kTileRows x D] (bf16 tile): one warp.
template <int D>
__device__ __forceinline__ void warp_accumulate(FragC (&acc)[D / 16], const bf16* P, const bf16* X) {
#pragma unroll
  for (int kk = 0; kk < kTileRows / 16; kk++) {
    FragA a;
    wmma::load_matrix_sync(a, P + kk * 16, kPLd);
#pragma unroll
    for (int c = 0; c < D / 16; c++) {
      FragBRow b;
      wmma::load_matrix_sync(b, X + kk * 16 * kLd<D> + c * 16, kLd<D>);
      wmma::mma_sync(acc[c], a, b, acc[c]);
    }
  }
}

// Writes a warp's 16 rows (first .. first + 15) of acc * factor to dst (row stride `stride`):
// rows at or past `real_end` are padding and get zeros, rows at or past `T` do not exist.
// `stage` is this warp's [16][D + 4] floats of shared memory.
template <int D>
__device__ __forceinline__ void warp_store_rows(float* dst, int64_t stride, int64_t first, int64_t real_end,
                                                int64_t T, FragC (&acc)[D / 16], float factor, float* stage) {
#pragma unroll
  for (int c = 0; c < D / 16; c++) wmma::store_matrix_sync(stage + c * 16, acc[c], D + 4, wmma::mem_row_major);
  __syncwarp();
  for (int e = threadIdx.x % kWarp; e < kRowsPerWarp * D; e += kWarp) {
    const int r = e / D, c = e % D;
    const int64_t row = first + r;
    if (row < T) dst[row * stride + c] = row < real_end ? stage[r * (D + 4) + c] * factor : 0.f;
  }
}

// Zeros rows first .. first + kBlockRows - 1 (those below T) of a [*, stride] tensor: a block of
// padding rows.
template <int D>
__device__ __forceinline__ void zero_rows(float* dst, int64_t stride, int64_t first, int64_t T) {
  for (int e = threadIdx.x; e < kBlockRows * D; e += blockDim.x) {
    const int64_t row = first + e / D;
    if (row < T) dst[row * stride + e % D] = 0.f;
  }
}

// zero_rows of a bf16 tensor (the forward's out16).
template <int D>
__device__ __forceinline__ void zero_rows16(bf16* dst, int64_t stride, int64_t first, int64_t T) {
  for (int e = threadIdx.x; e < kBlockRows * D; e += blockDim.x) {
    const int64_t row = first + e / D;
    if (row < T) dst[row * stride + e % D] = __float2bfloat16_rn(0.f);
  }
}

// A forward block whose queries are all padding (t0 at or past the sequence's length; uniform
// across the block): zero outputs and lse for the rows below T.
template <int D>
__device__ __forceinline__ void padding_forward_block(float* ob, float* lse_bh, int64_t q_row, int64_t t0, int64_t T) {
  zero_rows<D>(ob, q_row, t0, T);
  for (int e = threadIdx.x; e < kBlockRows; e += blockDim.x)
    if (t0 + e < T) lse_bh[t0 + e] = 0.f;
}

// A dK/dV block whose keys are all padding (j0 at or past the sequence's length): zero shares.
template <int D>
__device__ __forceinline__ void padding_key_block(float* dkb, float* dvb, int64_t q_row, int64_t j0, int64_t T) {
  zero_rows<D>(dkb, q_row, j0, T);
  zero_rows<D>(dvb, q_row, j0, T);
}

// The lse and D of queries i0 .. i0 + Rows - 1 into shared memory (zeros past L); the caller
// synchronises.
template <int Rows>
__device__ __forceinline__ void stage_row_stats(float* lse_s, float* D_s, const float* lse_bh, const float* D_bh,
                                                int64_t i0, int64_t L) {
  for (int e = threadIdx.x; e < Rows; e += blockDim.x) {
    lse_s[e] = i0 + e < L ? lse_bh[i0 + e] : 0.f;
    D_s[e] = i0 + e < L ? D_bh[i0 + e] : 0.f;
  }
}

// Shared memory of each kernel, in bytes; every region's size is a multiple of 32 bytes, so each
// starts 256-bit aligned as WMMA's loads and stores require.
template <int D>
constexpr size_t kTileBytes = size_t(kTileRows) * kLd<D> * sizeof(bf16);
constexpr size_t kScoreBytes = size_t(kWarps) * kRowsPerWarp * kSLd * sizeof(float);
constexpr size_t kProbBytes = size_t(kWarps) * kRowsPerWarp * kPLd * sizeof(bf16);
template <int D>
constexpr size_t kStageBytes = size_t(kWarps) * kRowsPerWarp * (D + 4) * sizeof(float);  // one output, all warps
template <int D>
constexpr size_t kForwardSmem = 3 * kTileBytes<D> + kScoreBytes + 2 * kProbBytes;  // P's two bf16 terms
template <int D>
constexpr size_t kDqSmem = 4 * kTileBytes<D> + 2 * kScoreBytes + kProbBytes;
template <int D>
constexpr size_t kDkDvSmem = 4 * kTileBytes<D> + 2 * kScoreBytes + 2 * kProbBytes + 2 * kTileRows * sizeof(float);
// Outputs are staged in the tiles' place once the loop is done.
static_assert(kStageBytes<64> <= 2 * kTileBytes<64> && kStageBytes<128> <= 2 * kTileBytes<128>);
static_assert(kTileBytes<64> % 32 == 0 && kTileBytes<128> % 32 == 0 && kScoreBytes % 32 == 0 &&
              kProbBytes % 32 == 0 && kStageBytes<64> % 32 == 0 && kStageBytes<128> % 32 == 0);

// The first query of block x of n when the last queries come first (they see the most keys).
__device__ __forceinline__ int64_t last_first(unsigned n, unsigned x) { return int64_t(n - 1 - x) * kBlockRows; }

// grid (ceil(T / 64), heads, B), 4 warps. out [B, T, H, D], lse [B, H, T].
template <int D>
__global__ void __launch_bounds__(kWarps * kWarp)
    tc_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, TcDims s) {
  AZR_DYNAMIC_SHARED(smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kTileRows * kLd<D>;
  bf16* Vs = Ks + kTileRows * kLd<D>;
  float* S = reinterpret_cast<float*>(Vs + kTileRows * kLd<D>);
  bf16* P = reinterpret_cast<bf16*>(S + kWarps * kRowsPerWarp * kSLd);
  bf16* P_lo = P + kWarps * kRowsPerWarp * kPLd;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  S += warp * kRowsPerWarp * kSLd;
  P += warp * kRowsPerWarp * kPLd;
  P_lo += warp * kRowsPerWarp * kPLd;

  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = last_first(gridDim.x, blockIdx.x);
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  const float* qb = q + b * s.T * q_row + h * D;
  float* ob = out + b * s.T * q_row + h * D;
  float* lse_bh = lse + (b * s.H + h) * s.T;
  if (t0 >= L) return padding_forward_block<D>(ob, lse_bh, q_row, t0, s.T);
  const float* kb = k + b * s.kv_seq_stride + (h / s.group) * D;
  const float* vb = v + b * s.kv_seq_stride + (h / s.group) * D;
  const int64_t w0 = t0 + warp * kRowsPerWarp;  // this warp's first query
  const int r = lane / 2, half = lane % 2;      // this lane's row of the warp's 16, and its columns
  const int64_t t = w0 + r;
  const bool real = t < L;
  // The keys any row of the block sees. Tiles start at multiples of 64 below kend <= t0 + 64, so
  // at or before t0: every warp has a visible key in every tile.
  const int64_t kend = min(t0 + kBlockRows, L);
  load_tile<D>(Qs, qb, q_row, t0, L);

  // Pass 1: each row's max and sum of exponentials, online.
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = 0; j0 < kend; j0 += kTileRows) {
    __syncthreads();  // the last tile is consumed (and Qs is complete, the first time)
    load_tile<D>(Ks, kb, s.kv_row, j0, kend);
    __syncthreads();
    warp_scores<D>(S, Qs + warp * kRowsPerWarp * kLd<D>, Ks);
    __syncwarp();
    float mt = -INFINITY;
    for (int i = 0; i < kTileRows / 2; i++) {
      const int c = 2 * i + half;
      if (real && j0 + c <= t) mt = fmaxf(mt, S[r * kSLd + c] * s.scale);
    }
    mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, 1));
    const float m_new = fmaxf(m, mt);
    float sum = 0.f;
    if (m_new != -INFINITY)
      for (int i = 0; i < kTileRows / 2; i++) {
        const int c = 2 * i + half;
        if (real && j0 + c <= t) sum += expf(S[r * kSLd + c] * s.scale - m_new);
      }
    sum += __shfl_xor_sync(kFull, sum, 1);
    l = (m == -INFINITY ? 0.f : l * expf(m - m_new)) + sum;
    m = m_new;
    __syncwarp();  // S is read before the next tile overwrites it
  }
  const float row_lse = real ? m + logf(l) : 0.f;  // a real row always sees key 0, so l > 0

  // Pass 2: out = sum_j (hi_j + lo_j) v_j, hi + lo the two-term bf16 split of exp(scale s_j - lse).
  FragC acc[D / 16];
  zero_fragments(acc);
  for (int64_t j0 = 0; j0 < kend; j0 += kTileRows) {
    __syncthreads();
    load_tile<D>(Ks, kb, s.kv_row, j0, kend);
    load_tile<D>(Vs, vb, s.kv_row, j0, kend);
    __syncthreads();
    warp_scores<D>(S, Qs + warp * kRowsPerWarp * kLd<D>, Ks);
    __syncwarp();
    for (int i = 0; i < kTileRows / 2; i++) {
      const int c = 2 * i + half;
      const float p = real && j0 + c <= t ? expf(S[r * kSLd + c] * s.scale - row_lse) : 0.f;
      const bf16 hi = __float2bfloat16_rn(p);
      P[r * kPLd + c] = hi;
      P_lo[r * kPLd + c] = __float2bfloat16_rn(p - __bfloat162float(hi));
    }
    __syncwarp();
    warp_accumulate<D>(acc, P, Vs);
    warp_accumulate<D>(acc, P_lo, Vs);
  }
  __syncthreads();  // the K and V tiles are dead: the output is staged in their place
  float* stage = reinterpret_cast<float*>(Ks) + warp * kRowsPerWarp * (D + 4);
  warp_store_rows<D>(ob, q_row, w0, L, s.T, acc, 1.f, stage);
  if (half == 0 && t < s.T) lse_bh[t] = row_lse;
}

// dq = scale sum_j bf16(dS_tj) k_j. grid (ceil(T / 64), heads, B), 4 warps; a block owns 64 queries.
template <int D>
__global__ void __launch_bounds__(kWarps * kWarp)
    tc_dq_kernel(float* dq, const float* dout, const float* lse, const float* Drow, const float* q, const float* k,
                 const float* v, TcDims s) {
  AZR_DYNAMIC_SHARED(smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* dOs = Qs + kTileRows * kLd<D>;
  bf16* Ks = dOs + kTileRows * kLd<D>;
  bf16* Vs = Ks + kTileRows * kLd<D>;
  float* S = reinterpret_cast<float*>(Vs + kTileRows * kLd<D>);
  float* dP = S + kWarps * kRowsPerWarp * kSLd;
  bf16* dS = reinterpret_cast<bf16*>(dP + kWarps * kRowsPerWarp * kSLd);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  S += warp * kRowsPerWarp * kSLd;
  dP += warp * kRowsPerWarp * kSLd;
  dS += warp * kRowsPerWarp * kPLd;

  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = last_first(gridDim.x, blockIdx.x);
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  float* dqb = dq + b * s.T * q_row + h * D;
  if (t0 >= L) {
    zero_rows<D>(dqb, q_row, t0, s.T);
    return;
  }
  const float* kb = k + b * s.kv_seq_stride + (h / s.group) * D;
  const float* vb = v + b * s.kv_seq_stride + (h / s.group) * D;
  const int64_t w0 = t0 + warp * kRowsPerWarp;
  const int r = lane / 2, half = lane % 2;
  const int64_t t = w0 + r;
  const bool real = t < L;
  const float row_lse = real ? lse[(b * s.H + h) * s.T + t] : 0.f;
  const float row_D = real ? Drow[(b * s.H + h) * s.T + t] : 0.f;
  const int64_t kend = min(t0 + kBlockRows, L);  // as in the forward: every tile has keys for every warp
  load_tile<D>(Qs, q + b * s.T * q_row + h * D, q_row, t0, L);
  load_tile<D>(dOs, dout + b * s.T * q_row + h * D, q_row, t0, L);

  FragC acc[D / 16];
  zero_fragments(acc);
  for (int64_t j0 = 0; j0 < kend; j0 += kTileRows) {
    __syncthreads();
    load_tile<D>(Ks, kb, s.kv_row, j0, kend);
    load_tile<D>(Vs, vb, s.kv_row, j0, kend);
    __syncthreads();
    warp_scores<D>(S, Qs + warp * kRowsPerWarp * kLd<D>, Ks);
    warp_scores<D>(dP, dOs + warp * kRowsPerWarp * kLd<D>, Vs);
    __syncwarp();
    for (int i = 0; i < kTileRows / 2; i++) {
      const int c = 2 * i + half;
      float ds = 0.f;
      if (real && j0 + c <= t) ds = expf(S[r * kSLd + c] * s.scale - row_lse) * (dP[r * kSLd + c] - row_D);
      dS[r * kPLd + c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    warp_accumulate<D>(acc, dS, Ks);
  }
  __syncthreads();
  float* stage = reinterpret_cast<float*>(Ks) + warp * kRowsPerWarp * (D + 4);
  warp_store_rows<D>(dqb, q_row, w0, L, s.T, acc, s.scale, stage);
}

// Query head h's share of its kv head's gradients: dk_j = scale sum_{t >= j} bf16(dS_tj) q_t,
// dv_j = sum bf16(P_tj) bf16(dout_t), into dk_h and dv_h [B, T, H, D] (the queries' layout; rows
// past a sequence's length are zeros). grid (ceil(T / 64), heads, B), 4 warps; a block owns 64
// keys (the first block the first keys, which the most queries see). tc_group_sum_kernel then
// adds each group's shares.
template <int D>
__global__ void __launch_bounds__(kWarps * kWarp)
    tc_dkdv_kernel(float* dk_h, float* dv_h, const float* dout, const float* lse, const float* Drow, const float* q,
                   const float* k, const float* v, TcDims s) {
  AZR_DYNAMIC_SHARED(smem);
  bf16* Kb = reinterpret_cast<bf16*>(smem);
  bf16* Vb = Kb + kTileRows * kLd<D>;
  bf16* Qs = Vb + kTileRows * kLd<D>;
  bf16* dOs = Qs + kTileRows * kLd<D>;
  float* ST = reinterpret_cast<float*>(dOs + kTileRows * kLd<D>);
  float* dPT = ST + kWarps * kRowsPerWarp * kSLd;
  bf16* PT = reinterpret_cast<bf16*>(dPT + kWarps * kRowsPerWarp * kSLd);
  bf16* dST = PT + kWarps * kRowsPerWarp * kPLd;
  float* lse_s = reinterpret_cast<float*>(dST + kWarps * kRowsPerWarp * kPLd);
  float* D_s = lse_s + kTileRows;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  ST += warp * kRowsPerWarp * kSLd;
  dPT += warp * kRowsPerWarp * kSLd;
  PT += warp * kRowsPerWarp * kPLd;
  dST += warp * kRowsPerWarp * kPLd;

  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / s.group, j0 = int64_t(blockIdx.x) * kBlockRows;
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  float* dkb = dk_h + b * s.T * q_row + h * D;
  float* dvb = dv_h + b * s.T * q_row + h * D;
  if (j0 >= L) return padding_key_block<D>(dkb, dvb, q_row, j0, s.T);
  const int64_t w0 = j0 + warp * kRowsPerWarp;  // this warp's first key
  const int r = lane / 2, half = lane % 2;
  const int64_t j = w0 + r;  // this lane's key; its columns are queries
  load_tile<D>(Kb, k + b * s.kv_seq_stride + g * D, s.kv_row, j0, L);
  load_tile<D>(Vb, v + b * s.kv_seq_stride + g * D, s.kv_row, j0, L);

  FragC dk_acc[D / 16], dv_acc[D / 16];
  zero_fragments(dk_acc);
  zero_fragments(dv_acc);
  {
    const float* qb = q + b * s.T * q_row + h * D;
    const float* gb = dout + b * s.T * q_row + h * D;
    const float* lse_bh = lse + (b * s.H + h) * s.T;
    const float* D_bh = Drow + (b * s.H + h) * s.T;
    for (int64_t i0 = j0; i0 < L; i0 += kTileRows) {  // the queries that see any key of the block
      __syncthreads();
      load_tile<D>(Qs, qb, q_row, i0, L);
      load_tile<D>(dOs, gb, q_row, i0, L);
      stage_row_stats<kTileRows>(lse_s, D_s, lse_bh, D_bh, i0, L);
      __syncthreads();
      // i0 >= j0 and the warp's keys start at most 48 past j0: every warp has visible queries here.
      warp_scores<D>(ST, Kb + warp * kRowsPerWarp * kLd<D>, Qs);
      warp_scores<D>(dPT, Vb + warp * kRowsPerWarp * kLd<D>, dOs);
      __syncwarp();
      for (int i = 0; i < kTileRows / 2; i++) {
        const int c = 2 * i + half;
        const int64_t t = i0 + c;  // a query; it sees key j when j <= t < L
        float p = 0.f, ds = 0.f;
        if (t < L && j <= t) {
          p = expf(ST[r * kSLd + c] * s.scale - lse_s[c]);
          ds = p * (dPT[r * kSLd + c] - D_s[c]);
        }
        PT[r * kPLd + c] = __float2bfloat16_rn(p);
        dST[r * kPLd + c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      warp_accumulate<D>(dv_acc, PT, dOs);
      warp_accumulate<D>(dk_acc, dST, Qs);
    }
  }
  __syncthreads();
  float* stage_k = reinterpret_cast<float*>(Kb) + warp * kRowsPerWarp * (D + 4);
  float* stage_v = reinterpret_cast<float*>(Kb) + kWarps * kRowsPerWarp * (D + 4) + warp * kRowsPerWarp * (D + 4);
  warp_store_rows<D>(dkb, q_row, w0, L, s.T, dk_acc, s.scale, stage_k);
  warp_store_rows<D>(dvb, q_row, w0, L, s.T, dv_acc, 1.f, stage_v);
}

// dk [B, T, kv_heads, D] (at kv_seq_stride, kv_row) = the sum of its group's shares dk_h (and dv
// likewise), in head order. A grid-stride loop over B x T x kv_heads x D.
__global__ void tc_group_sum_kernel(float* dk, float* dv, const float* dk_h, const float* dv_h, TcDims s, int64_t B,
                                    int64_t D) {
  const int64_t kv_heads = s.H / s.group, n = B * s.T * kv_heads * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % D, g = e / D % kv_heads, t = e / D / kv_heads % s.T, b = e / D / kv_heads / s.T;
    const int64_t from = ((b * s.T + t) * s.H + g * s.group) * D + i;
    float sk = 0.f, sv = 0.f;
    for (int64_t h = 0; h < s.group; h++) sk += dk_h[from + h * D], sv += dv_h[from + h * D];
    const int64_t to = b * s.kv_seq_stride + t * s.kv_row + g * D + i;
    dk[to] = sk, dv[to] = sv;
  }
}

}  // namespace azr::kernels::cuda_detail::tensor_core
