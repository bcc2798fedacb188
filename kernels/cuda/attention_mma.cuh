// The training attention's forward on mma.sync (kernels/cuda/mma_sync.cuh): one pass over the
// keys with the softmax in registers, FlashAttention-2's structure, in place of the WMMA
// forward's two passes (attention_tensor_core.cuh).
//
// Why: the op profile of a 1.5B training step on an H200 (bench/RESULTS.md, 2026-11-26) had the
// WMMA forward at 30 TFLOP/s. WMMA's accumulators are opaque, so its scores make a round trip
// through shared memory every tile (16 x 64 fp32 per warp, stored, then read by two lanes a row),
// and its output cannot be rescaled when the running max moves, hence the second pass over the
// keys. mma.sync's documented layouts let each lane keep its own scores, rescale its own part of
// the output, and hand the probabilities to P V as an A fragment without touching shared memory.
//
// The arithmetic, the one tests/kernels/tensor_core_reference.h holds every forward to:
// - q, k and v rounded to bf16 as tiles are read (load_tile, shared with the WMMA kernels);
//   scores are sums of exact bf16 products in fp32.
// - Online softmax per row: after each 64-key tile, m = max(m, tile max), the output and the
//   lane's share of the sum of exponentials scaled by exp(m_old - m); p = exp(scale s - m).
// - p enters P V as two bf16 terms, hi = bf16(p), lo = bf16(p - hi), as in the WMMA forward and
//   for the same reason (its header: the learner's log-probs stay at the sampler's). The lanes'
//   sums meet once, at the end: out = acc / l, lse = m + log l.
//
// Layout: a block is 4 warps and 64 queries (the WMMA kernels' geometry and block order, so the
// backward kernels and the launch code are shared); each warp owns 16 queries. Shared memory
// holds the block's q tile for the whole loop and the current 64-key tiles of k and v, bf16 with
// the padded stride kLd<D>: row starts 16-byte aligned as ldmatrix requires, and the 8 rows of a
// matrix on different banks.
#pragma once

#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace azr::kernels::cuda_detail::tensor_core {

template <int D>
constexpr size_t kMmaForwardSmem = 3 * kTileBytes<D>;  // q, k, v tiles

// Registers (ptxas, sm_90): 254 at D = 128 (2 blocks, 8 warps a multiprocessor, as
// FlashAttention-2's forward at this head size), 160 at D = 64 (3 blocks). Asking for 3 blocks at
// D = 128 (168 registers) spilled 64 bytes a thread.

// grid (ceil(T / 64), heads, B), 4 warps. out [B, T, H, D], lse [B, H, T], as tc_forward_kernel.
template <int D>
__global__ void __launch_bounds__(kWarps * kWarp)
    mma_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, TcDims s) {
  static_assert(D % 16 == 0 && kTileRows == 64, "16-column steps over 64-key tiles");
  constexpr int kKeySteps = kTileRows / 16;  // 16-key steps of a tile (P V's k dimension)
  constexpr int kDSteps = D / 16;            // 16-column steps of a head (q k^T's k dimension)
  AZR_DYNAMIC_SHARED(smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + kTileRows * kLd<D>;
  bf16* Vs = Ks + kTileRows * kLd<D>;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, tq = lane % 4;  // this lane's rows g and g + 8 of the warp's 16; columns 2 tq, 2 tq + 1
  // ldmatrix: lane l addresses row l % 8 of 8 x 8 matrix l / 8.
  const int mat = lane / 8, mat_row = lane % 8;

  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = last_first(gridDim.x, blockIdx.x);
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  float* ob = out + b * s.T * q_row + h * D;
  float* lse_bh = lse + (b * s.H + h) * s.T;
  if (t0 >= L) return padding_forward_block<D>(ob, lse_bh, q_row, t0, s.T);
  const float* kb = k + b * s.kv_seq_stride + (h / s.group) * D;
  const float* vb = v + b * s.kv_seq_stride + (h / s.group) * D;
  const int64_t w0 = t0 + warp * kRowsPerWarp;
  const int64_t row[2] = {w0 + g, w0 + g + 8};
  const bool real[2] = {row[0] < L, row[1] < L};
  const int64_t kend = min(t0 + kBlockRows, L);  // as in tc_forward_kernel: every tile has keys for every warp
  load_tile<D>(Qs, q + b * s.T * q_row + h * D, q_row, t0, L);
  __syncthreads();

  // This lane's row address in the warp's q for ldmatrix: matrix m covers rows (m % 2) * 8..,
  // columns (m / 2) * 8.. of each 16 x 16 block, so registers 0-3 come out in the A order of
  // mma_sync.cuh. q is read from shared memory every tile, as FlashAttention-2 does at this head
  // size: held in registers for the whole loop it took 32 more, and the kernel hit 255.
  const bf16* q_frag = Qs + (warp * kRowsPerWarp + (mat % 2) * 8 + mat_row) * kLd<D> + (mat / 2) * 8;

  float acc[D / 8][4];  // the output's 16 x D, as D / 8 C tiles
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this lane's columns only, until the end

  for (int64_t j0 = 0; j0 < kend; j0 += kTileRows) {
    __syncthreads();  // the last tiles are consumed (and every warp has its q, the first time)
    load_tile<D>(Ks, kb, s.kv_row, j0, kend);
    load_tile<D>(Vs, vb, s.kv_row, j0, kend);
    __syncthreads();

    // Scores: 16 x 64 as 8 C tiles of 8 keys. B = k^T: matrix m of an ldmatrix covers keys
    // (m / 2) * 8.. and columns (m % 2) * 8.., so registers 0, 1 are key tile 2p's b0, b1 and 2, 3
    // key tile 2p + 1's.
    float sc[kTileRows / 8][4];
#pragma unroll
    for (int n = 0; n < kTileRows / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDSteps; kk++) {
      uint32_t qa[4];
      mma::ldmatrix_x4(qa, q_frag + kk * 16);
#pragma unroll
      for (int p = 0; p < kTileRows / 16; p++) {
        uint32_t kf[4];
        mma::ldmatrix_x4(kf, Ks + (p * 16 + (mat / 2) * 8 + mat_row) * kLd<D> + kk * 16 + (mat % 2) * 8);
        mma::mma_bf16(sc[2 * p], qa, kf[0], kf[1]);
        mma::mma_bf16(sc[2 * p + 1], qa, kf[2], kf[3]);
      }
    }

    // Mask, scale, and the tile's max of each of the lane's two rows across the 4 lanes that share it.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTileRows / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int r = e / 2;
        const int64_t key = j0 + 8 * n + 2 * tq + e % 2;
        sc[n][e] = real[r] && key <= row[r] ? sc[n][e] * s.scale : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], sc[n][e]);
      }
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFull, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFull, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      base[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: every p and alpha is exp(-inf) = 0
      alpha[r] = expf(m[r] - base[r]);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[n][e] *= alpha[e / 2];
#pragma unroll
    for (int n = 0; n < kTileRows / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        sc[n][e] = expf(sc[n][e] - base[e / 2]);
        l[e / 2] += sc[n][e];
      }

    // P V, 16 keys a step: key tiles 2kk and 2kk + 1 are the step's A fragment (mma_sync.cuh), in
    // two bf16 terms. B = v: with .trans, matrix m covers keys (m % 2) * 8.. and columns (m / 2) * 8..,
    // so registers 0, 1 are column tile 2c's b0, b1 and 2, 3 column tile 2c + 1's.
#pragma unroll
    for (int kk = 0; kk < kKeySteps; kk++) {
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        // A's register order: (row g, key tile 2kk), (g + 8, 2kk), (g, 2kk + 1), (g + 8, 2kk + 1).
        const float* pair = &sc[2 * kk + i / 2][(i % 2) * 2];
        hi[i] = mma::pack_bf16x2(pair[0], pair[1]);
        const float h0 = __bfloat162float(__float2bfloat16_rn(pair[0]));
        const float h1 = __bfloat162float(__float2bfloat16_rn(pair[1]));
        lo[i] = mma::pack_bf16x2(pair[0] - h0, pair[1] - h1);
      }
#pragma unroll
      for (int c = 0; c < D / 16; c++) {
        uint32_t vf[4];
        mma::ldmatrix_x4_trans(vf, Vs + (kk * 16 + (mat % 2) * 8 + mat_row) * kLd<D> + c * 16 + (mat / 2) * 8);
        mma::mma_bf16(acc[2 * c], hi, vf[0], vf[1]);
        mma::mma_bf16(acc[2 * c + 1], hi, vf[2], vf[3]);
        mma::mma_bf16(acc[2 * c], lo, vf[0], vf[1]);
        mma::mma_bf16(acc[2 * c + 1], lo, vf[2], vf[3]);
      }
    }
  }

  // The four lanes of each row add their sums; then out = acc / l, lse = m + log l.
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(kFull, l[r], 1);
    l[r] += __shfl_xor_sync(kFull, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (row[r] >= s.T) continue;
    const float inv = real[r] ? 1.f / l[r] : 0.f;  // a real row always sees key 0, so l > 0
    float* o = ob + row[r] * q_row + 2 * tq;
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[8 * n] = acc[n][2 * r] * inv, o[8 * n + 1] = acc[n][2 * r + 1] * inv;
    if (tq == 0) lse_bh[row[r]] = real[r] ? m[r] + logf(l[r]) : 0.f;
  }
}

}  // namespace azr::kernels::cuda_detail::tensor_core
