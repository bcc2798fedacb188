#pragma once
// RoPE's training kernel (elementwise.cu launches it): one thread per rotated pair (i, i + d/2) of
// one head of one row, the forward rotation (Sign 1) or its inverse for the backward (Sign -1),
// in place, with rope_pair's arithmetic (decode_epilogues.cuh): the CPU's bits.
//
// Index is the type of the pair's index and of what is divided out of it. A 64-bit division on the
// device is a software routine of dozens of instructions, and each pair takes three; on an H100
// (2026-11-26) RoPE took 3.7 ms of a 1.5B training step, about twice its memory time. Where
// N x heads x d fits in 31 bits (every real batch: 4 x 1,024 tokens x 12 heads x 128 is 6.3M) the
// launch takes uint32_t: the pair index stays below 2^30 and the grid's stride below 2^27, so
// nothing wraps.
//
// In this header, apart from the launch, so that tests/kernels/rope_emulated_test.cpp runs it on
// the CPU through tests/kernels/cuda_emulation.h.
#include "kernels/cuda/decode_epilogues.cuh"  // rope_pair, first_item, grid_stride, fits_32_bit_index
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/ordered_sums_limits.h"

#include <algorithm>
#include <cstdint>

namespace azr::kernels::cuda_detail {

template <int Sign, class Index>
__global__ void rope_kernel(float* x, const int32_t* pos, const float* cos, const float* sin, Index N, Index heads,
                            Index d) {
  const Index half = d / 2, total = N * heads * half;
  for (Index e = first_item<Index>(); e < total; e += grid_stride<Index>()) {
    const Index i = e % half, nh = e / half, n = nh / heads;
    const int64_t table = int64_t(pos[n]) * int64_t(half) + int64_t(i);
    float* v = x + int64_t(nh) * int64_t(d);
    rope_pair(v[i], v[i + half], cos[table], Sign * sin[table], v[i], v[i + half]);
  }
}

// The training attention's bf16 operands (Ops::rope_round_qkv_w16 and rope_backward_round_w16):
// RoPE and the roundings the next op reads in one pass, where there were five (RoPE on q and on k,
// then the attention rounding q, k and v) forward and four backward (RoPE on dq and on dk, then one
// to_bf16 of the three). One thread per pair (i, i + d/2) of a head of a row: the q heads, then the
// k heads, then the v heads (paired the same way and only rounded), as rope_kv_store_kernel walks a
// decode step's rows; rope_pair's arithmetic, so each value is rope_kernel's, rounded.
//
// Forward: qkv rows [q | k | v] (the one GEMM over [Wq; Wk; Wv]) to compact q16 [N, heads d] and
// k16, v16 [N, kv_heads d], the attention's operands; qkv is only read.
template <class Index>
__global__ void rope_round_qkv_kernel(__nv_bfloat16* q16, __nv_bfloat16* k16, __nv_bfloat16* v16, const float* qkv,
                                      const int32_t* pos, const float* cos, const float* sin, Index N, Index heads,
                                      Index kv_heads, Index d) {
  const Index half = d / 2, per_row = (heads + 2 * kv_heads) * half, total = N * per_row;
  const int64_t width = int64_t(heads + 2 * kv_heads) * int64_t(d);
  for (Index e = first_item<Index>(); e < total; e += grid_stride<Index>()) {
    const Index r = e / per_row, item = e - r * per_row, head = item / half, i = item - head * half;
    const float* x = qkv + int64_t(r) * width + int64_t(head) * int64_t(d) + int64_t(i);
    if (head >= heads + kv_heads) {
      __nv_bfloat16* y = v16 + (int64_t(r) * kv_heads + int64_t(head - heads - kv_heads)) * int64_t(d) + int64_t(i);
      y[0] = __float2bfloat16_rn(x[0]);
      y[half] = __float2bfloat16_rn(x[half]);
      continue;
    }
    __nv_bfloat16* y = head < heads ? q16 + (int64_t(r) * heads + int64_t(head)) * int64_t(d) + int64_t(i)
                                    : k16 + (int64_t(r) * kv_heads + int64_t(head - heads)) * int64_t(d) + int64_t(i);
    const int64_t table = int64_t(pos[r]) * int64_t(half) + int64_t(i);
    float y1, y2;
    rope_pair(x[0], x[half], cos[table], sin[table], y1, y2);
    y[0] = __float2bfloat16_rn(y1);
    y[half] = __float2bfloat16_rn(y2);
  }
}

// Backward: dq [N, heads d] and dk [N, kv_heads d] (the attention backward's) rotated back in
// place, the three rounded into rows [dq | dk | dv] of dqkv16, the one GEMM's output gradient,
// and (dbias not null) dbias [(heads + 2 kv_heads) d] += the rows' column sums, the q, k and v
// biases' gradients. So a thread keeps one pair (i, i + d/2) of one head, its item, and walks a
// chunk of rows: items along x (a warp's 32 adjacent columns, coalesced), chunks of
// rows_per_chunk rows along y, both grid-strided; its two sums, in row order, go to row blockIdx.y
// of dbias_parts [gridDim.y, (heads + 2 kv_heads) d], which add_column_parts then adds to dbias in
// chunk order (ordered_sums.cuh); or, dbias_parts null, to dbias with one atomic each, in whatever
// order the chunks finish (AZR_CUDA_GRADIENT_SUMS=atomic). The item's divisions happen once per
// item, not per value.
template <class Index>
__global__ void rope_backward_round_kernel(__nv_bfloat16* dqkv16, float* dq, float* dk, const float* dv, float* dbias,
                                           float* dbias_parts, const int32_t* pos, const float* cos,
                                           const float* sin, Index N, Index heads, Index kv_heads, Index d,
                                           Index rows_per_chunk) {
  release_next_grid();  // the bias parts' sum may launch now and wait (an ordinary launch: ordered_sums.cuh)
  const Index half = d / 2, per_row = (heads + 2 * kv_heads) * half;
  const int64_t width = int64_t(heads + 2 * kv_heads) * int64_t(d);
  for (Index item = first_item<Index>(); item < per_row; item += grid_stride<Index>()) {
    const Index head = item / half, i = item - head * half;
    const bool is_v = head >= heads + kv_heads, is_q = head < heads;
    const int64_t col = int64_t(head) * int64_t(d) + int64_t(i);  // in the rows of dqkv16 and dbias
    // The item's column in its compact source: dq [N, heads d], dk or dv [N, kv_heads d].
    const int64_t src_width = is_q ? int64_t(heads) * d : int64_t(kv_heads) * d;
    const int64_t src_col = is_q ? col : is_v ? col - int64_t(heads + kv_heads) * d : col - int64_t(heads) * d;
    float s0 = 0.f, s1 = 0.f;  // over the thread's chunks, in row order
    for (Index r0 = Index(blockIdx.y) * rows_per_chunk; r0 < N; r0 += Index(gridDim.y) * rows_per_chunk) {
      const Index r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
      for (Index r = r0; r < r1; r++) {
        __nv_bfloat16* y = dqkv16 + int64_t(r) * width + col;
        float y0, y1;
        if (is_v) {
          const float* x = dv + int64_t(r) * src_width + src_col;
          y0 = x[0], y1 = x[half];
        } else {
          float* x = (is_q ? dq : dk) + int64_t(r) * src_width + src_col;
          const int64_t table = int64_t(pos[r]) * int64_t(half) + int64_t(i);
          rope_pair(x[0], x[half], cos[table], -sin[table], y0, y1);
          x[0] = y0, x[half] = y1;
        }
        y[0] = __float2bfloat16_rn(y0);
        y[half] = __float2bfloat16_rn(y1);
        s0 += y0, s1 += y1;
      }
    }
    if (dbias_parts) {
      float* part = dbias_parts + int64_t(blockIdx.y) * width;
      part[col] = s0, part[col + half] = s1;
    } else if (dbias) {
      atomicAdd(dbias + col, s0);
      atomicAdd(dbias + col + half, s1);
    }
  }
}

// rope_backward_round_kernel's grid: the items of a row along x (256 a block), and about 1,024
// blocks in all through chunks of at least 8 rows along y (at most 65,535 chunks), so that a
// 4,096-row 1.5B call (1,024 items, 4 blocks of x) runs 256 chunks of 16 rows.
struct RopeBackwardGrid {
  unsigned x, y;
  int64_t rows_per_chunk;
};
inline RopeBackwardGrid rope_backward_grid(int64_t N, int64_t per_row) {
  const int64_t x = (per_row + 255) / 256;
  const int64_t aim = ordered_sums::kColumnSumBlocks;  // the column sums' aim: their partials' bound
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>({(aim + x - 1) / x, (N + 7) / 8, 65535}));
  return {unsigned(x), unsigned(chunks), (N + chunks - 1) / chunks};
}

// Whether a call of N rows of heads x d values takes the 32-bit index.
inline bool rope_fits_32_bits(int64_t N, int64_t heads, int64_t d) { return fits_32_bit_index(N * heads * d); }

}  // namespace azr::kernels::cuda_detail
