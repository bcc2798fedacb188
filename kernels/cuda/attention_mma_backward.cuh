// The training attention's backward on mma.sync (CudaAttentionKernel::Mma): the kernels, after
// attention_mma.cuh, which holds what they share with the forward (the fragments, the tile copies,
// the masks) and says why the attention runs on mma.sync.
#pragma once

#include "kernels/cuda/attention_mma.cuh"

namespace azr::kernels::cuda_detail::tensor_core {

// ---- Backward: the WMMA backward's arithmetic (attention_tensor_core.cuh: P from the saved lse,
// dS = P (dP - D) in fp32, P and dS rounded to one bf16 term) with its scores, P and dS in
// registers. Two kernels as there, so no atomics: dQ (a block owns 64 queries and walks the keys)
// and each query head's share of dK and dV (a block owns 64 keys and walks the queries), then
// tc_group_sum_kernel adds the shares. Both read bf16 copies of q, k, v and dout, as the forward
// does, and copy the next tile of the side they walk with cp.async during this tile's products.
//
// Or merged (CudaAttentionBackward::Merged, opt-in until a GPU measures it): the dK/dV kernel also
// adds each query tile's share of dQ into dq with atomics, FlashAttention-2's backward, and the dQ
// kernel does not run. Why: the two kernels take 7 products a pair of tiles, S and dP twice (once
// a kernel); merged, 5. What it costs: dS goes through shared memory (the dK product holds it as
// keys x queries, dQ's needs it as queries x keys), a barrier a tile, and dq's adds in L2, each
// element once per key block that sees its query (about T / 128 on average). The same kernel then
// adds its dK and dV into the kv head's rows with atomics too, not into a share of its own that
// tc_group_sum_kernel adds up after: the shares' round trip through memory (at 1.5B, 6 query heads
// a kv head, 6 x dK's and dV's bytes written and read again) and a launch go. dq, dk and dv must
// be zero before, and their bits depend on the order the blocks' adds land in. A training step's
// bits already do (the norm, embedding and bias gradients are sums by atomics), so the merged
// form gives up nothing the step had.

template <int D>
constexpr size_t kMmaDqSmem = 6 * kTileBytes<D>;  // q, dout, and two stages of k and v

// dq = scale sum_j bf16(dS_tj) k_j. grid (ceil(T / 64), heads, B), 4 warps; a block owns 64 queries.
template <int D, bool MaskEveryTile = false>
__global__ void __launch_bounds__(kWarps * kWarp)
    mma_dq_kernel(float* dq, const bf16* dout, const float* lse, const float* Drow, const bf16* q, const bf16* k,
                  const bf16* v, TcDims s) {
  AZR_DYNAMIC_SHARED(smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* dOs = Qs + kTileRows * kLd<D>;
  bf16* stage0 = dOs + kTileRows * kLd<D>;  // k_stage and v_stage
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, tq = lane % 4, mat = lane / 8, mat_row = lane % 8;

  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = last_first(gridDim.x, blockIdx.x);
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  float* dqb = dq + b * s.T * q_row + h * D;
  if (t0 >= L) return zero_rows<D>(dqb, q_row, t0, s.T);
  const bf16* kb = k + b * s.kv_seq_stride + (h / s.group) * D;
  const bf16* vb = v + b * s.kv_seq_stride + (h / s.group) * D;
  const int64_t w0 = t0 + warp * kRowsPerWarp;
  const int64_t row[2] = {w0 + g, w0 + g + 8};
  // P = exp2(scale log2(e) s - lse log2(e)), the dK/dV kernel's form. This kernel took expf while
  // ptxas (CUDA 13) spilled 20 to 92 bytes a thread with exp2f at D = 128; since the stage
  // pointers left local memory (k_stage), none at sm_80 or sm_90, and each score is an exp2 and
  // a multiply-add, not expf's range reduction around it.
  float row_lse[2], row_D[2];
  bool real[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    real[r] = row[r] < L;
    row_lse[r] = real[r] ? lse[(b * s.H + h) * s.T + row[r]] * kLog2e : 0.f;
    row_D[r] = real[r] ? Drow[(b * s.H + h) * s.T + row[r]] : 0.f;
  }
  const int64_t kend = min(t0 + kBlockRows, L);  // as in the forward: every tile has keys for every warp
  const float scale_log2 = s.scale * kLog2e;
  load_tile16_async<D>(Qs, q + b * s.T * q_row + h * D, q_row, t0, L);
  load_tile16_async<D>(dOs, dout + b * s.T * q_row + h * D, q_row, t0, L);
  load_tile16_async<D>(k_stage<D>(stage0, 0), kb, s.kv_row, 0, kend);
  load_tile16_async<D>(v_stage<D>(stage0, 0), vb, s.kv_row, 0, kend);
  mma::cp_async_commit();
  const int a_row = warp * kRowsPerWarp + (mat % 2) * 8 + mat_row, a_col = (mat / 2) * 8;
  const bf16* q_frag = Qs + a_row * kLd<D> + a_col;
  const bf16* do_frag = dOs + a_row * kLd<D> + a_col;

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  int stage = 0;
  for (int64_t j0 = 0; j0 < kend; j0 += kTileRows, stage ^= 1) {
    kv_tile_ready<D>(stage0, stage, kb, vb, s.kv_row, j0, kend);
    const bf16* Ks = k_stage<D>(stage0, stage);
    float sc[kTileRows / 8][4], dp[kTileRows / 8][4];
    mma_scores<D, kTileRows>(sc, q_frag, Ks, mat, mat_row);
    mma_scores<D, kTileRows>(dp, do_frag, v_stage<D>(stage0, stage), mat, mat_row);
    mask_scores<kTileRows>(sc, rows_see_whole_tile<MaskEveryTile>(w0, j0, L), j0, row, real, tq, 0.f,
                           [&](float x, int n, int e) {
                             return exp2f(x * scale_log2 - row_lse[e / 2]) * (dp[n][e] - row_D[e / 2]);
                           });
    mma_accumulate<D, kTileRows>(acc, sc, Ks, mat, mat_row);
    __syncthreads();  // this stage is read before the next iteration's copies refill it
  }
  mma_store_rows<D>(dqb, q_row, row, L, s.T, acc, s.scale, tq);
}

// The dK/dV kernel walks the queries 32 at a time: a warp's dK and dV accumulators (16 keys x D
// each) take 128 registers a lane at D = 128, and 16 x 64 scores and dP another 64, past the 255
// a thread may hold.
constexpr int kMmaQueryTile = 32;
template <int D>
constexpr size_t kMmaQueryTileBytes = size_t(kMmaQueryTile) * kLd<D> * sizeof(bf16);
// k and v, then two stages of q, dout and their rows' lse and D.
template <int D>
constexpr size_t kMmaDkDvSmem = 2 * kTileBytes<D> + 2 * (2 * kMmaQueryTileBytes<D> + 2 * kMmaQueryTile * sizeof(float));

// The merged kernel's dS^T tile: the block's 64 keys x a query tile's 32 queries in bf16, rows
// kDsLd apart: 80 bytes, so each row starts 16-byte aligned (ldmatrix) and the 8 rows an ldmatrix
// phase reads, and the 8 a store's lanes write, fall on distinct banks (row r at word 20 r mod 32).
constexpr int kDsLd = kMmaQueryTile + 8;
constexpr size_t kDsTileBytes = size_t(kTileRows) * kDsLd * sizeof(bf16);
template <int D>
constexpr size_t kMmaMergedSmem = kMmaDkDvSmem<D> + kDsTileBytes;

// dS^T of a warp's 16 keys (its C tiles ds, rows g and g + 8, columns 2 tq, 2 tq + 1 of each) into
// rows `first`.. of the block's dS^T tile as bf16, the values the dK product rounds them to; with
// ds null, zeros (the warp skipped the tile: none of its keys has a score).
__device__ __forceinline__ void store_ds_rows(bf16* dsT, int first, const float (*ds)[4], int g, int tq) {
#pragma unroll
  for (int n = 0; n < kMmaQueryTile / 8; n++)
#pragma unroll
    for (int r = 0; r < 2; r++)
      *reinterpret_cast<uint32_t*>(dsT + (first + g + 8 * r) * kDsLd + 8 * n + 2 * tq) =
          ds ? mma::pack_bf16x2(ds[n][2 * r], ds[n][2 * r + 1]) : 0u;
}

// Two adjacent floats of a gradient (8-byte aligned) += a, b. sm_90 adds both with one vector atomic.
__device__ __forceinline__ void add_pair(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// The query tile's share of dQ: dq rows i0.. (those before L) += scale dS K, from the block's
// dS^T tile and its k tile (64 keys each). Warp w takes columns w D / 4 .. of both m-tiles of 16
// queries. A (dS, queries x keys) is read with .trans from dS^T: matrix m of an ldmatrix covers
// stored rows (keys) (m / 2) * 8.. and columns (queries) (m % 2) * 8.., so registers 0-3 come out
// in the A order of mma_sync.cuh. B (k, keys x D) as mma_accumulate reads it.
template <int D>
__device__ __forceinline__ void add_dq_share(float* dqb, int64_t q_row, const bf16* dsT, const bf16* Kb, int64_t i0,
                                             int64_t L, float scale, int warp, int g, int tq, int mat, int mat_row) {
  constexpr int kCols = D / kWarps;  // 32 at D = 128, 16 at D = 64
  static_assert(kCols % 16 == 0, "whole 16-column steps a warp");
  constexpr int kM = kMmaQueryTile / 16;
  float acc[kM][kCols / 8][4];
#pragma unroll
  for (int m = 0; m < kM; m++)
#pragma unroll
    for (int n = 0; n < kCols / 8; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kTileRows / 16; kk++) {
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; m++)
      mma::ldmatrix_x4_trans(a[m], dsT + (kk * 16 + (mat / 2) * 8 + mat_row) * kDsLd + m * 16 + (mat % 2) * 8);
#pragma unroll
    for (int c = 0; c < kCols / 16; c++) {
      uint32_t kf[4];
      mma::ldmatrix_x4_trans(kf, Kb + (kk * 16 + (mat % 2) * 8 + mat_row) * kLd<D> + warp * kCols + c * 16 +
                                     (mat / 2) * 8);
#pragma unroll
      for (int m = 0; m < kM; m++) {
        mma::mma_bf16(acc[m][2 * c], a[m], kf[0], kf[1]);
        mma::mma_bf16(acc[m][2 * c + 1], a[m], kf[2], kf[3]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kM; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int64_t t = i0 + 16 * m + g + 8 * r;
      if (t >= L) continue;  // no score: dS is 0; at or past T the row does not exist
      float* o = dqb + t * q_row + warp * kCols + 2 * tq;
#pragma unroll
      for (int n = 0; n < kCols / 8; n++) add_pair(o + 8 * n, acc[m][n][2 * r] * scale, acc[m][n][2 * r + 1] * scale);
    }
}

// mma_store_rows' form for the merged backward: a warp's C tiles times factor added into dst's rows
// before real_end; the rows past stay as the zeroing before the launch left them.
template <int D>
__device__ __forceinline__ void mma_add_rows(float* dst, int64_t stride, const int64_t (&row)[2], int64_t real_end,
                                             const float (&acc)[D / 8][4], float factor, int tq) {
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (row[r] >= real_end) continue;
    float* o = dst + row[r] * stride + 2 * tq;
#pragma unroll
    for (int n = 0; n < D / 8; n++) add_pair(o + 8 * n, acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
  }
}

// Query head h's share of its kv head's gradients: dk_j = scale sum_{t >= j} bf16(dS_tj) q_t,
// dv_j = sum bf16(P_tj) bf16(dout_t), into dk_h and dv_h [B, T, H, D], as tc_dkdv_kernel. grid
// (ceil(T / 64), heads, B), 4 warps; a block owns 64 keys (the first block the first keys).
// Merged: the merged backward, which adds the block's share of dQ into dq and its dK and dV into
// dk_h and dv_h as the kv head's [B, T, kv_heads, D] (sequences out_seq_stride apart, rows
// s.kv_row), all three zero before; kMmaMergedSmem bytes of shared memory. Split: dq and
// out_seq_stride are not read.
template <int D, bool MaskEveryTile = false, bool Merged = false>
__global__ void __launch_bounds__(kWarps * kWarp)
    mma_dkdv_kernel(float* dk_h, float* dv_h, float* dq, const bf16* dout, const float* lse, const float* Drow,
                    const bf16* q, const bf16* k, const bf16* v, TcDims s, int64_t out_seq_stride) {
  AZR_DYNAMIC_SHARED(smem);
  // A stage: the query tile's q, then its dout (bf16), and apart its lse, then its D (fp32).
  // Addressed as base + stage offset: eight stage pointers held across the loop spilled.
  constexpr int kStage = 2 * kMmaQueryTile * kLd<D>, kStatsStage = 2 * kMmaQueryTile;
  bf16* Kb = reinterpret_cast<bf16*>(smem);
  bf16* Vb = Kb + kTileRows * kLd<D>;
  bf16* stages = Vb + kTileRows * kLd<D>;
  float* stats = reinterpret_cast<float*>(stages + 2 * kStage);
  [[maybe_unused]] bf16* dsT = reinterpret_cast<bf16*>(stats + 2 * kStatsStage);  // Merged's dS^T tile
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, tq = lane % 4, mat = lane / 8, mat_row = lane % 8;

  const int64_t b = blockIdx.z, h = blockIdx.y, j0 = int64_t(blockIdx.x) * kBlockRows;
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  // Where the block's rows go: its share's, or merged, its kv head's.
  const int64_t out_row = Merged ? s.kv_row : q_row;
  float* dkb = Merged ? dk_h + b * out_seq_stride + (h / s.group) * D : dk_h + b * s.T * q_row + h * D;
  float* dvb = Merged ? dv_h + b * out_seq_stride + (h / s.group) * D : dv_h + b * s.T * q_row + h * D;
  if (j0 >= L) {
    if (!Merged) padding_key_block<D>(dkb, dvb, q_row, j0, s.T);
    return;
  }
  const float scale_log2 = s.scale * kLog2e;
  const int64_t w0 = j0 + warp * kRowsPerWarp;  // this warp's first key
  const int64_t key[2] = {w0 + g, w0 + g + 8};
  const bf16* qb = q + b * s.T * q_row + h * D;
  const bf16* gb = dout + b * s.T * q_row + h * D;
  const float* lse_bh = lse + (b * s.H + h) * s.T;
  const float* D_bh = Drow + (b * s.H + h) * s.T;
  // The first group of copies: the block's k and v, and the first query tile's q and dout.
  load_tile16_async<D>(Kb, k + b * s.kv_seq_stride + (h / s.group) * D, s.kv_row, j0, L);
  load_tile16_async<D>(Vb, v + b * s.kv_seq_stride + (h / s.group) * D, s.kv_row, j0, L);
  load_tile16_async<D, kMmaQueryTile>(stages, qb, q_row, j0, L);
  load_tile16_async<D, kMmaQueryTile>(stages + kMmaQueryTile * kLd<D>, gb, q_row, j0, L);
  mma::cp_async_commit();
  stage_row_stats<kMmaQueryTile>(stats, stats + kMmaQueryTile, lse_bh, D_bh, j0, L);
  const int a_row = warp * kRowsPerWarp + (mat % 2) * 8 + mat_row, a_col = (mat / 2) * 8;
  const bf16* k_frag = Kb + a_row * kLd<D> + a_col;
  const bf16* v_frag = Vb + a_row * kLd<D> + a_col;

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk_acc[n][e] = dv_acc[n][e] = 0.f;
  // The queries that see any key of the block: i0 from j0 to L, 32 a tile.
  int stage = 0;
  for (int64_t i0 = j0; i0 < L; i0 += kMmaQueryTile, stage ^= 1) {
    const int64_t next = i0 + kMmaQueryTile;
    // The next tile's lse and D, loaded into registers now and stored after this tile's products.
    float next_lse = 0.f, next_D = 0.f;
    if (next < L) {
      bf16* other = stages + (stage ^ 1) * kStage;
      load_tile16_async<D, kMmaQueryTile>(other, qb, q_row, next, L);
      load_tile16_async<D, kMmaQueryTile>(other + kMmaQueryTile * kLd<D>, gb, q_row, next, L);
      mma::cp_async_commit();
      if (threadIdx.x < kMmaQueryTile && next + threadIdx.x < L)
        next_lse = lse_bh[next + threadIdx.x], next_D = D_bh[next + threadIdx.x];
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();  // this tile's copies and stats are in place
    const bf16* Qs = stages + stage * kStage;
    const bf16* dOs = Qs + kMmaQueryTile * kLd<D>;
    const float* lse_s = stats + stage * kStatsStage;
    const float* D_s = lse_s + kMmaQueryTile;
    if (next > w0) {  // else no query of the tile sees the warp's keys (uniform per warp)
      float st[kMmaQueryTile / 8][4], dpt[kMmaQueryTile / 8][4];  // S^T and dP^T: 16 keys x 32 queries
      mma_scores<D, kMmaQueryTile>(st, k_frag, Qs, mat, mat_row);
      mma_scores<D, kMmaQueryTile>(dpt, v_frag, dOs, mat, mat_row);
      // Every query of the tile (all before L) at or after every key of the warp: no mask, as in
      // the forward (rows_see_whole_tile).
      if (!MaskEveryTile && i0 >= w0 + kRowsPerWarp - 1 && i0 + kMmaQueryTile <= L) {
#pragma unroll
        for (int n = 0; n < kMmaQueryTile / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int c = c_col(n, e, tq);
            st[n][e] = exp2f(st[n][e] * scale_log2 - lse_s[c] * kLog2e);
            dpt[n][e] = st[n][e] * (dpt[n][e] - D_s[c]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < kMmaQueryTile / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int c = c_col(n, e, tq);
            const int64_t t = i0 + c;  // a query; it sees key j when j <= t < L
            float p = 0.f, ds = 0.f;
            if (t < L && key[e / 2] <= t) {
              p = exp2f(st[n][e] * scale_log2 - lse_s[c] * kLog2e);
              ds = p * (dpt[n][e] - D_s[c]);
            }
            st[n][e] = p, dpt[n][e] = ds;
          }
      }
      mma_accumulate<D, kMmaQueryTile>(dv_acc, st, dOs, mat, mat_row);
      mma_accumulate<D, kMmaQueryTile>(dk_acc, dpt, Qs, mat, mat_row);
      if constexpr (Merged) store_ds_rows(dsT, warp * kRowsPerWarp, dpt, g, tq);
    } else if constexpr (Merged) {
      store_ds_rows(dsT, warp * kRowsPerWarp, nullptr, g, tq);
    }
    if constexpr (Merged) {
      __syncthreads();  // every warp's rows of dS^T are in place
      add_dq_share<D>(dq + b * s.T * q_row + h * D, q_row, dsT, Kb, i0, L, s.scale, warp, g, tq, mat, mat_row);
    }
    // The other stage's stats were last read in the previous iteration, which ended with a barrier.
    if (next < L && threadIdx.x < kMmaQueryTile) {
      float* other = stats + (stage ^ 1) * kStatsStage;
      other[threadIdx.x] = next_lse, other[kMmaQueryTile + threadIdx.x] = next_D;
    }
    __syncthreads();  // this stage is read before the next iteration's copies refill it
  }
  if constexpr (Merged) {
    mma_add_rows<D>(dkb, out_row, key, L, dk_acc, s.scale, tq);
    mma_add_rows<D>(dvb, out_row, key, L, dv_acc, 1.f, tq);
  } else {
    mma_store_rows<D>(dkb, out_row, key, L, s.T, dk_acc, s.scale, tq);
    mma_store_rows<D>(dvb, out_row, key, L, s.T, dv_acc, 1.f, tq);
  }
}

}  // namespace azr::kernels::cuda_detail::tensor_core
