// The training attention on mma.sync (kernels/cuda/mma_sync.cuh), CudaAttentionKernel::Mma:
// the WMMA kernels' arithmetic (attention_tensor_core.cuh) with scores, softmax and gradients in
// registers, and the forward in one pass over the keys (FlashAttention-2's structure) in place of
// two.
//
// Why: the op profile of a 1.5B training step on an H200 (bench/RESULTS.md, 2026-11-26) had the
// WMMA forward at 30 TFLOP/s and backward at 37. WMMA's accumulators are opaque, so its scores
// make a round trip through shared memory every tile (16 x 64 fp32 per warp, stored, then read by
// two lanes a row), and its output cannot be rescaled when the running max moves, hence the
// second forward pass. mma.sync's documented layouts let each lane keep its own scores, rescale
// its own part of the output, and hand P (or dS) to the next product as an A fragment without
// touching shared memory.
//
// The arithmetic, the one tests/kernels/tensor_core_reference.h holds the WMMA kernels to:
// - q, k, v (and dout) rounded to bf16 (attention_tensor_core.cu's round_rows, one pass before
//   the kernel); scores are sums of exact bf16 products in fp32.
// - Forward: online softmax per row. After each 64-key tile, m = max(m, tile max), and the
//   output and the lane's share of the sum of exponentials are scaled by exp(m_old - m);
//   p = exp(scale s - m). Exponentials in base 2, as FlashAttention-2 takes them: the scores are
//   scaled by scale log2(e) (one multiply-add, then the hardware's exp2), where expf would add a
//   range reduction to each, and at this kernel's rate the exponentials compete with the products
//   for issue slots (32 a lane per tile). The lanes' sums meet once, at the end: out = acc / l,
//   lse = m ln 2 + log l (natural units, as the backward reads it).
// - p enters P V as two bf16 terms, hi = bf16(p), lo = bf16(p - hi), as in the WMMA forward and
//   for the same reason (its header: the learner's log-probs stay at the sampler's).
// - Backward as the WMMA backward: P from the saved lse, dS = P (dP - D), one bf16 term each
//   (its kernels: attention_mma_backward.cuh).
//
// Layout: a block is 4 warps and 64 rows (the WMMA kernels' geometry and block order, so the
// launch code and the group sum of dK/dV are shared); each warp owns 16 rows. The forward can
// instead give a warp 32 rows and a block 128 (kForwardBlockRows, below; opt-in). Shared memory
// holds bf16 tiles with the padded stride kLd<D> (row starts 16-byte aligned as ldmatrix and
// cp.async require, and the 8 rows of a matrix on different banks). Each kernel double-buffers
// the tiles of the side it walks with cp.async: the next tile's copies run during this tile's
// products.
#pragma once

#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/mma_sync.cuh"

namespace azr::kernels::cuda_detail::tensor_core {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// The column of register e of C tile n for lane group position tq (mma_sync.cuh's C layout: tile n
// covers columns 8n.., registers 0, 1 and 2, 3 columns 2 tq, 2 tq + 1 of rows g and g + 8).
__device__ __forceinline__ int c_col(int n, int e, int tq) { return 8 * n + 2 * tq + e % 2; }

// The 16 x Cols scores of M m-tiles of a warp's rows (16 rows each) against Cols rows of a tile,
// as Cols / 8 C tiles each: a_frag[m] is this lane's ldmatrix address in m-tile m's rows (A),
// b_rows the tile's first row. B = the tile's rows^T: matrix m of an ldmatrix covers rows (m / 2)
// * 8.. and columns (m % 2) * 8.., so registers 0, 1 are C tile 2p's b0, b1 and 2, 3 C tile
// 2p + 1's. Each B fragment is loaded once for the M m-tiles (with M = 2, half the shared-memory
// reads per product of M = 1).
template <int D, int Cols, int M>
__device__ __forceinline__ void mma_scores_m(float (&sc)[M][Cols / 8][4], const bf16* const (&a_frag)[M],
                                             const bf16* b_rows, int mat, int mat_row) {
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int n = 0; n < Cols / 8; n++) sc[m][n][0] = sc[m][n][1] = sc[m][n][2] = sc[m][n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; m++) mma::ldmatrix_x4(a[m], a_frag[m] + kk * 16);
#pragma unroll
    for (int p = 0; p < Cols / 16; p++) {
      uint32_t bf[4];
      mma::ldmatrix_x4(bf, b_rows + (p * 16 + (mat / 2) * 8 + mat_row) * kLd<D> + kk * 16 + (mat % 2) * 8);
#pragma unroll
      for (int m = 0; m < M; m++) {
        mma::mma_bf16(sc[m][2 * p], a[m], bf[0], bf[1]);
        mma::mma_bf16(sc[m][2 * p + 1], a[m], bf[2], bf[3]);
      }
    }
  }
}

// mma_scores_m of one m-tile: the backward kernels' 16 rows a warp.
template <int D, int Cols>
__device__ __forceinline__ void mma_scores(float (&sc)[Cols / 8][4], const bf16* a_frag, const bf16* b_rows, int mat,
                                           int mat_row) {
  const bf16* const frags[1] = {a_frag};
  mma_scores_m<D, Cols, 1>(reinterpret_cast<float (&)[1][Cols / 8][4]>(sc), frags, b_rows, mat, mat_row);
}

// acc[m] [16 x D] += X[m] [16 x Cols] Y [Cols x D] for each of M m-tiles: X in C tiles, rounded to
// one bf16 term here, or with Split to two (hi = bf16(x), lo = bf16(x - hi), each its own
// product). C tiles 2kk and 2kk + 1 are step kk's A fragment: registers (row g, tile 2kk), (g + 8,
// 2kk), (g, 2kk + 1), (g + 8, 2kk + 1). Y is a bf16 tile from y_rows, read with .trans: matrix m
// covers its rows (m % 2) * 8.. and columns (m / 2) * 8.., so registers 0, 1 are column tile 2c's
// b0, b1 and 2, 3 column tile 2c + 1's. Each Y fragment is loaded once for the M m-tiles.
template <int D, int Cols, int M, bool Split = false>
__device__ __forceinline__ void mma_accumulate_m(float (&acc)[M][D / 8][4], const float (&x)[M][Cols / 8][4],
                                                 const bf16* y_rows, int mat, int mat_row) {
#pragma unroll
  for (int kk = 0; kk < Cols / 16; kk++) {
    uint32_t hi[M][4], lo[M][4];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float x0 = x[m][2 * kk + i / 2][(i % 2) * 2], x1 = x[m][2 * kk + i / 2][(i % 2) * 2 + 1];
        hi[m][i] = mma::pack_bf16x2(x0, x1);
        // lo from hi's own halves (x0 low, x1 high; a bf16's float is its bits shifted up): the
        // same values as rounding x0 and x1 again, without the two conversions.
        if constexpr (Split)
          lo[m][i] =
              mma::pack_bf16x2(x0 - __uint_as_float(hi[m][i] << 16), x1 - __uint_as_float(hi[m][i] & 0xffff0000u));
      }
#pragma unroll
    for (int c = 0; c < D / 16; c++) {
      uint32_t yf[4];
      mma::ldmatrix_x4_trans(yf, y_rows + (kk * 16 + (mat % 2) * 8 + mat_row) * kLd<D> + c * 16 + (mat / 2) * 8);
#pragma unroll
      for (int m = 0; m < M; m++) {
        mma::mma_bf16(acc[m][2 * c], hi[m], yf[0], yf[1]);
        mma::mma_bf16(acc[m][2 * c + 1], hi[m], yf[2], yf[3]);
        if constexpr (Split) {
          mma::mma_bf16(acc[m][2 * c], lo[m], yf[0], yf[1]);
          mma::mma_bf16(acc[m][2 * c + 1], lo[m], yf[2], yf[3]);
        }
      }
    }
  }
}

// mma_accumulate_m of one m-tile: the backward kernels' 16 rows a warp.
template <int D, int Cols, bool Split = false>
__device__ __forceinline__ void mma_accumulate(float (&acc)[D / 8][4], const float (&x)[Cols / 8][4], const bf16* y_rows,
                                               int mat, int mat_row) {
  mma_accumulate_m<D, Cols, 1, Split>(reinterpret_cast<float (&)[1][D / 8][4]>(acc),
                                      reinterpret_cast<const float (&)[1][Cols / 8][4]>(x), y_rows, mat, mat_row);
}

// Writes a warp's C tiles (rows row[0], row[1] of this lane) times factor to dst (row stride
// `stride`): rows at or past `real_end` get zeros, rows at or past T do not exist.
template <int D>
__device__ __forceinline__ void mma_store_rows(float* dst, int64_t stride, const int64_t (&row)[2], int64_t real_end,
                                               int64_t T, const float (&acc)[D / 8][4], float factor, int tq) {
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (row[r] >= T) continue;
    const float f = row[r] < real_end ? factor : 0.f;
    float* o = dst + row[r] * stride + 2 * tq;
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[8 * n] = acc[n][2 * r] * f, o[8 * n + 1] = acc[n][2 * r + 1] * f;
  }
}

// The block copies rows first .. first + Rows - 1 of a bf16 tensor (row stride `stride`, head
// offset applied) into a tile with cp.async, 16 bytes a copy; rows at or past `end` are
// zero-filled. The caller commits, waits and synchronises.
template <int D, int Rows = kTileRows>
__device__ __forceinline__ void load_tile16_async(bf16* dst, const bf16* src, int64_t stride, int64_t first,
                                                  int64_t end) {
  constexpr int kRowChunks = D / 8, kChunks = Rows * kRowChunks, kThreads = kWarps * kWarp;
  static_assert(kChunks % kThreads == 0, "whole rounds of copies per thread");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; i++) {
    const int e = i * kThreads + int(threadIdx.x), r = e / kRowChunks, c = (e % kRowChunks) * 8;
    const int64_t row = first + r;
    const bool valid = row < end;
    mma::cp_async16(dst + r * kLd<D> + c, valid ? src + row * stride + c : src, valid);
  }
}

// Stage `stage` of the forward's and dQ's double-buffered k and v: its k tile, and its v tile
// right after it. Stages are addressed from the first one's offset: an array of four stage
// pointers indexed by the loop's stage bit lived in local memory (the PTX loaded a pointer from it
// four times a tile).
// Keys: the rows of a k (and v) tile.
template <int D, int Keys = kTileRows>
__device__ __forceinline__ bf16* k_stage(bf16* stage0, int stage) {
  return stage0 + stage * 2 * Keys * kLd<D>;
}
template <int D, int Keys = kTileRows>
__device__ __forceinline__ bf16* v_stage(bf16* stage0, int stage) {
  return k_stage<D, Keys>(stage0, stage) + Keys * kLd<D>;
}

// The forward's and dQ's double buffering of k and v, at the top of the tile loop: the next tile's
// copies into the other stage (last read in the previous iteration, which ended with a barrier),
// then a wait for this tile's group only, and a barrier after which every thread's copies of this
// tile (and of the first group's other tiles) have landed.
template <int D, int Keys = kTileRows>
__device__ __forceinline__ void kv_tile_ready(bf16* stage0, int stage, const bf16* kb, const bf16* vb, int64_t kv_row,
                                              int64_t j0, int64_t kend) {
  if (j0 + Keys < kend) {
    load_tile16_async<D, Keys>(k_stage<D, Keys>(stage0, stage ^ 1), kb, kv_row, j0 + Keys, kend);
    load_tile16_async<D, Keys>(v_stage<D, Keys>(stage0, stage ^ 1), vb, kv_row, j0 + Keys, kend);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
  } else {
    mma::cp_async_wait<0>();
  }
  __syncthreads();
}

// Whether a warp's 16 rows (first row w0, all before L) see every key of the tile from key j0:
// then the tile needs no mask. On the causal diagonal and past a sequence's end a tile needs one,
// elsewhere it does not; at T = 1,024 seven tiles in eight of a forward need none. The masked path
// gives a visible score the same value, so skipping the mask leaves every bit as it was
// (TensorCoreEmulated.SkippingTheMasksOfWholeTilesChangesNoBit). MaskEveryTile (the kernels'
// template flag) keeps the masked path on every tile: the bench's baseline.
template <bool MaskEveryTile, int Keys = kTileRows>
__device__ __forceinline__ bool rows_see_whole_tile(int64_t w0, int64_t j0, int64_t L) {
  return !MaskEveryTile && j0 + Keys - 1 <= w0 && w0 + kRowsPerWarp <= L;
}

// The forward's and dQ's causal mask on a lane's scores of a tile from key j0 (its rows row[0]
// and row[1], real when before L): each score its row sees becomes f(score, n, e), the rest
// `hidden`. On a whole tile (rows_see_whole_tile) every score is seen, and no position is compared.
template <int Cols, class F>
__device__ __forceinline__ void mask_scores(float (&sc)[Cols / 8][4], bool whole, int64_t j0, const int64_t (&row)[2],
                                            const bool (&real)[2], int tq, float hidden, F f) {
  if (whole) {
#pragma unroll
    for (int n = 0; n < Cols / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) sc[n][e] = f(sc[n][e], n, e);
  } else {
#pragma unroll
    for (int n = 0; n < Cols / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int r = e / 2;
        const int64_t key = j0 + c_col(n, e, tq);
        sc[n][e] = real[r] && key <= row[r] ? f(sc[n][e], n, e) : hidden;
      }
  }
}

// The forward's geometry, by M, the m-tiles (16 query rows each) a warp owns:
// - M = 1 (the default): a block of 4 warps owns 64 queries and walks 64-key tiles.
// - M = 2 (FlashAttention-2's forward geometry at head dim 128): a warp owns 32 queries, a block
//   128, and walks 32-key tiles, so the scores take as many registers as at M = 1 (2 x 16 x 32
//   against 16 x 64) while the output's doubles. Each k and v fragment read from shared memory
//   serves two m-tiles (half the reads per product), a block's k and v tiles serve 128 queries
//   (half the copies from L2 per product), and a warp has twice the independent products in
//   flight between its softmax steps. What it costs: the diagonal's masked work of a 128-query
//   block, and one 128-thread block per 128 queries where the grid had two. Chosen by
//   cuda_set_attention_warp_rows (AZR_CUDA_ATTENTION_WARP_ROWS=32), for the GPU to measure
//   (cuda_ops_bench --only attention; model_speed_bench under the variable).
// The online softmax rescales at tile boundaries, so the two geometries differ in the output's
// last fp32 bits (both are held to tests/kernels/tensor_core_reference.h's arithmetic).
template <int M>
constexpr int kForwardKeys = kTileRows / M;  // keys per tile
template <int M>
constexpr int kForwardBlockRows = kBlockRows * M;  // queries per block

// q, then two stages of k and v tiles: the next tile's copies run during this tile's products.
template <int D, int M = 1>
constexpr size_t kMmaForwardSmem = (size_t(kForwardBlockRows<M>) + 4 * size_t(kForwardKeys<M>)) * kLd<D> * sizeof(bf16);
static_assert(kMmaForwardSmem<128> == 5 * kTileBytes<128>, "M = 1: the q tile and two stages of 64-key tiles");

// Registers (ptxas, CUDA 13, sm_90), at M = 1: 228 at D = 128 (2 blocks, 8 warps a
// multiprocessor, as FlashAttention-2's forward at this head size), 156 at D = 64 (3 blocks);
// asking for 3 blocks at D = 128 (168 registers) spilled 64 bytes a thread. At M = 2: 245 at
// D = 128 (2 blocks), 158 at D = 64, no spills; the bench's baseline that masks every tile spills
// 120 bytes at M = 2, D = 128. sm_80: 249 and 251 at D = 128, no spills.

// grid (ceil(T / kForwardBlockRows<M>), heads, B), 4 warps. out [B, T, H, D], lse [B, H, T], as
// tc_forward_kernel; q, k and v are the bf16 copies (k and v compact: s.kv_seq_stride = T x
// kv_row). out16 (may be null): out rounded to bf16, the o projection's GEMM input
// (Ops::attention_forward_w16), written beside out rather than by a pass that reads out again.
template <int D, bool MaskEveryTile = false, int M = 1>
__global__ void __launch_bounds__(kWarps * kWarp)
    mma_forward_kernel(float* out, bf16* out16, float* lse, const bf16* q, const bf16* k, const bf16* v, TcDims s) {
  constexpr int kKeys = kForwardKeys<M>, kRows = kForwardBlockRows<M>, kWarpRows = kRowsPerWarp * M;
  static_assert(D % 16 == 0 && kTileRows == 64 && (M == 1 || M == 2), "16-column steps over 64- or 32-key tiles");
  AZR_DYNAMIC_SHARED(smem);
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* stage0 = Qs + kRows * kLd<D>;  // k_stage and v_stage
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, tq = lane % 4;  // this lane's rows g and g + 8 of each m-tile; columns 2 tq, 2 tq + 1
  // ldmatrix: lane l addresses row l % 8 of 8 x 8 matrix l / 8.
  const int mat = lane / 8, mat_row = lane % 8;

  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = last_first(gridDim.x, blockIdx.x) * M;
  const int64_t L = tc_seq_len(s, b), q_row = s.H * D;
  float* ob = out + b * s.T * q_row + h * D;
  float* lse_bh = lse + (b * s.H + h) * s.T;
  bf16* ob16 = out16 ? out16 + b * s.T * q_row + h * D : nullptr;
  if (t0 >= L) {
#pragma unroll
    for (int part = 0; part < M; part++) {  // the padding helpers take kBlockRows rows at a time
      if (ob16) zero_rows16<D>(ob16, q_row, t0 + part * kBlockRows, s.T);
      padding_forward_block<D>(ob, lse_bh, q_row, t0 + part * kBlockRows, s.T);
    }
    return;
  }
  const bf16* kb = k + b * s.kv_seq_stride + (h / s.group) * D;
  const bf16* vb = v + b * s.kv_seq_stride + (h / s.group) * D;
  const int64_t w0 = t0 + warp * kWarpRows;  // this warp's first query; m-tile m's is w0 + 16 m
  int64_t row[M][2];
  bool real[M][2];
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) row[m][r] = w0 + 16 * m + g + 8 * r, real[m][r] = row[m][r] < L;
  const int64_t kend = min(t0 + kRows, L);  // as in tc_forward_kernel: the keys the block's last query sees
  const float scale_log2 = s.scale * kLog2e;
  // The first group of copies: q and the first tile of k and v.
  load_tile16_async<D, kRows>(Qs, q + b * s.T * q_row + h * D, q_row, t0, L);
  load_tile16_async<D, kKeys>(k_stage<D, kKeys>(stage0, 0), kb, s.kv_row, 0, kend);
  load_tile16_async<D, kKeys>(v_stage<D, kKeys>(stage0, 0), vb, s.kv_row, 0, kend);
  mma::cp_async_commit();

  // This lane's row address in each of the warp's m-tiles of q for ldmatrix: matrix m covers rows
  // (m % 2) * 8.., columns (m / 2) * 8.. of each 16 x 16 block, so registers 0-3 come out in the A
  // order of mma_sync.cuh. q is read from shared memory every tile, as FlashAttention-2 does at
  // this head size: held in registers for the whole loop it took 32 more (at M = 1), and the
  // kernel hit 255.
  const bf16* q_frag[M];
#pragma unroll
  for (int m = 0; m < M; m++)
    q_frag[m] = Qs + (warp * kWarpRows + 16 * m + (mat % 2) * 8 + mat_row) * kLd<D> + (mat / 2) * 8;

  float acc[M][D / 8][4];  // each m-tile's output, 16 x D, as D / 8 C tiles
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int n = 0; n < D / 8; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
  // m in units of log2: the max of scale log2(e) s. l: this lane's columns only, until the end.
  float mx[M][2], l[M][2];
#pragma unroll
  for (int m = 0; m < M; m++) mx[m][0] = mx[m][1] = -INFINITY, l[m][0] = l[m][1] = 0.f;

  int stage = 0;
  for (int64_t j0 = 0; j0 < kend; j0 += kKeys, stage ^= 1) {
    kv_tile_ready<D, kKeys>(stage0, stage, kb, vb, s.kv_row, j0, kend);
    // A tile wholly after the warp's last query adds nothing to its rows (every score masked:
    // p = 0, no new max); with M = 1 there is none, with M = 2 the 128-query block's diagonal has
    // them. Uniform across the warp; the barriers stay outside.
    if (j0 <= w0 + kWarpRows - 1) {
      const bf16* Ks = k_stage<D, kKeys>(stage0, stage);
      const bf16* Vs = v_stage<D, kKeys>(stage0, stage);

      float sc[M][kKeys / 8][4];  // scores: each m-tile's 16 x kKeys as kKeys / 8 C tiles of 8 keys
      mma_scores_m<D, kKeys, M>(sc, q_frag, Ks, mat, mat_row);

#pragma unroll
      for (int m = 0; m < M; m++) {
        // Mask (on the tiles that need it), scale, and the tile's max of each of the lane's two
        // rows across the 4 lanes that share it.
        // The products are rounded (__fmul_rn) where the compiler may fuse them into the later
        // subtraction of the max on whole tiles and not behind the mask's select (or the other way
        // round): a CUDA 13 build for sm_90 did so at D = 128 and the two paths differed in the
        // last bit. l's rescale likewise, which may fuse with the adds of p.
        mask_scores<kKeys>(sc[m], rows_see_whole_tile<MaskEveryTile, kKeys>(w0 + 16 * m, j0, L), j0, row[m], real[m],
                           tq, -INFINITY, [&](float x, int, int) { return __fmul_rn(x, scale_log2); });
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kKeys / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) tile_max[e / 2] = fmaxf(tile_max[e / 2], sc[m][n][e]);
        float alpha[2], base[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFull, tile_max[r], 1));
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFull, tile_max[r], 2));
          const float m_new = fmaxf(mx[m][r], tile_max[r]);
          base[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: every p and alpha is exp(-inf) = 0
          alpha[r] = exp2f(mx[m][r] - base[r]);
          mx[m][r] = m_new;
          l[m][r] = __fmul_rn(l[m][r], alpha[r]);
        }
        // The output's rescale, skipped where no row of the m-tile has a new max (alpha = 1 in
        // every lane, which leaves each value as it is): after the first tiles, most tiles of a row.
        if (__any_sync(kFull, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
          for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][n][e] *= alpha[e / 2];
        }
#pragma unroll
        for (int n = 0; n < kKeys / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            sc[m][n][e] = exp2f(sc[m][n][e] - base[e / 2]);
            l[m][e / 2] += sc[m][n][e];
          }
      }

      mma_accumulate_m<D, kKeys, M, true>(acc, sc, Vs, mat, mat_row);  // P V, P in two bf16 terms
    }
    __syncthreads();  // this stage is read before the next iteration's copies refill it
  }

  // The four lanes of each row add their sums; then out = acc / l, lse = m + log l.
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      l[m][r] += __shfl_xor_sync(kFull, l[m][r], 1);
      l[m][r] += __shfl_xor_sync(kFull, l[m][r], 2);
    }
#pragma unroll
  for (int m = 0; m < M; m++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      if (row[m][r] >= s.T) continue;
      const float inv = real[m][r] ? 1.f / l[m][r] : 0.f;  // a real row always sees key 0, so l > 0
      float* o = ob + row[m][r] * q_row + 2 * tq;
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        const float x0 = acc[m][n][2 * r] * inv, x1 = acc[m][n][2 * r + 1] * inv;
        o[8 * n] = x0, o[8 * n + 1] = x1;
        // The two values are adjacent, so their roundings are one 4-byte store (x0 the low half).
        if (ob16)
          *reinterpret_cast<uint32_t*>(ob16 + row[m][r] * q_row + 2 * tq + 8 * n) = mma::pack_bf16x2(x0, x1);
      }
      if (tq == 0) lse_bh[row[m][r]] = real[m][r] ? mx[m][r] * kLn2 + logf(l[m][r]) : 0.f;
    }
}

}  // namespace azr::kernels::cuda_detail::tensor_core
