// Causal GQA attention of the CUDA backend, flash-style: scores live in registers one tile of
// keys at a time with an online softmax, so no T x T matrix exists; forward saves the row's
// log-sum-exp and backward recomputes the probabilities from it (as kernels/cpu does).
//
// Layout of the work: one warp per query row (forward, dq) or key row (dk/dv); a block holds
// kRows such rows of one (sequence, head) and stages a tile of 32 rows of the other side in
// shared memory, where lane j scores row j of the tile (a d-long dot product), and the
// probabilities are then broadcast lane by lane (__shfl_sync) into the output rows, of which
// each lane owns the elements lane, lane + 32, ... Head dims up to kMaxD.
//
// fp32 throughout. The Bf16 table reads its queries, keys and values rounded to bf16 here, or runs
// the tensor-core kernels of attention_tensor_core.cu where those apply.
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_decode_tiles.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/internal.h"

namespace azr::kernels::cuda_detail {
namespace {

constexpr int kMaxD = 128;                  // Qwen2.5 0.5B-72B all use 128
constexpr int kPerLane = kMaxD / kWarp;     // output elements per lane
constexpr int kRows = 8;                    // warps per block, one row each
constexpr int kTile = kWarp;                // rows of the other side per shared-memory tile
constexpr unsigned kFull = 0xffffffffu;

struct Dims {
  int64_t T, H, d, group, kv_seq_stride, kv_row;
  const int32_t* lengths;
  float scale;
  bool round_q = false;  // the Bf16 table's: queries rounded to bf16 as they are read
  bool merge_each_element = false;  // decode: cuda_set_decode_merge's baseline
};

__device__ __forceinline__ int64_t seq_len(const Dims& s, int64_t b) { return s.lengths ? s.lengths[b] : s.T; }

__device__ __forceinline__ float bf16_rounded(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float query_value(const Dims& s, float x) { return s.round_q ? bf16_rounded(x) : x; }

// dot(a[0..d), b[0..d)) for one lane, both in shared memory.
__device__ __forceinline__ float dot_shared(const float* a, const float* b, int64_t d) {
  float acc = 0.f;
  for (int64_t i = 0; i < d; i++) acc += a[i] * b[i];
  return acc;
}

// The block copies rows [0, n) of d floats (global row stride src_stride) into shared memory
// (row stride dst_stride), rounded to bf16 if `round`; the caller synchronises.
__device__ __forceinline__ void load_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                                          int64_t n, int64_t d, bool round = false) {
  for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) {
    const int64_t r = e / d, i = e % d;
    const float x = src[r * src_stride + i];
    dst[r * dst_stride + i] = round ? bf16_rounded(x) : x;
  }
}

// acc (this lane's elements lane, lane + 32, ...) += sum_{r < count} coef_r rows[r], where lane r
// holds coef_r: the probabilities (or dS) scored lane by lane, applied to the tile's rows.
__device__ __forceinline__ void accumulate_rows(float (&acc)[kPerLane], float coef, const float* rows,
                                                int64_t row_stride, int64_t count, int64_t d, int lane) {
  for (int r = 0; r < count; r++) {
    const float c = __shfl_sync(kFull, coef, r);
#pragma unroll
    for (int u = 0; u < kPerLane; u++) {
      const int64_t i = lane + u * kWarp;
      if (i < d) acc[u] += c * rows[r * row_stride + i];
    }
  }
}

// grid (ceil(T / kRows), H, B); block kRows warps. Shared: Q [kRows][d], K [kTile][d+1] (padded so
// lane j reading row j hits distinct banks), V [kTile][d].
__global__ void attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                                         Dims s) {
  extern __shared__ float smem[];
  const int64_t d = s.d, dp = d + 1;
  float* Qs = smem;
  float* Ks = Qs + kRows * d;
  float* Vs = Ks + kTile * dp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = int64_t(blockIdx.x) * kRows, t = t0 + warp;
  const int64_t L = seq_len(s, b), q_row = s.H * d;
  const bool real = t < L;
  const float* qt = q + (b * s.T + t) * q_row + h * d;
  for (int64_t i = lane; i < d; i += kWarp) Qs[warp * d + i] = real ? query_value(s, qt[i]) : 0.f;

  const float* kb = k + b * s.kv_seq_stride + (h / s.group) * d;
  const float* vb = v + b * s.kv_seq_stride + (h / s.group) * d;
  const int64_t kend = min(t0 + kRows, L);  // the keys any row of the block sees
  float m = -INFINITY, l = 0.f, acc[kPerLane] = {};
  // Tiles start at multiples of 32 <= t0 + 7, so at or before t0: every real row sees key j0.
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and Qs is visible, the first time)
    const int64_t nk = min(int64_t(kTile), kend - j0);
    load_rows(Ks, dp, kb + j0 * s.kv_row, s.kv_row, nk, d);
    load_rows(Vs, d, vb + j0 * s.kv_row, s.kv_row, nk, d);
    __syncthreads();
    if (!real) continue;  // warp-uniform
    const int64_t j = j0 + lane;
    const float sc = lane < nk && j <= t ? dot_shared(Qs + warp * d, Ks + lane * dp, d) * s.scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(sc));
    const float p = sc == -INFINITY ? 0.f : expf(sc - m_new);
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int u = 0; u < kPerLane; u++) acc[u] *= corr;
    accumulate_rows(acc, p, Vs, d, min(nk, t - j0 + 1), d, lane);
    m = m_new;
  }
  if (t >= s.T) return;
  float* o = out + (b * s.T + t) * q_row + h * d;
  const float inv = real ? 1.f / l : 0.f;
#pragma unroll
  for (int u = 0; u < kPerLane; u++) {
    const int64_t i = lane + u * kWarp;
    if (i < d) o[i] = acc[u] * inv;
  }
  if (lane == 0) lse[(b * s.H + h) * s.T + t] = real ? m + logf(l) : 0.f;
}

// D[b, h, t] = dot(dout, out) of each real row (0 for padding): one warp per row. With do16 (may
// be null) also dout's bf16 rounding, the same [B, T, H, d] layout, as the row is read: the
// mma.sync backward's two passes over dout in one.
__global__ void attention_rowdot_kernel(float* D, __nv_bfloat16* do16, const float* dout, const float* out, Dims s,
                                        int64_t B) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;  // (b, t, h)
  const int lane = threadIdx.x % kWarp;
  if (row >= B * s.T * s.H) return;
  const int64_t h = row % s.H, t = (row / s.H) % s.T, b = row / (s.H * s.T);
  const float* o = out + row * s.d;
  const float* g = dout + row * s.d;
  float acc = 0.f;
  for (int64_t i = lane; i < s.d; i += kWarp) {
    acc += o[i] * g[i];
    if (do16) do16[row * s.d + i] = __float2bfloat16_rn(g[i]);
  }
  acc = warp_sum(acc);
  if (lane == 0) D[(b * s.H + h) * s.T + t] = t < seq_len(s, b) ? acc : 0.f;
}

// dq = scale sum_j dS_tj k_j,  dS = P (dP - D),  P_tj = exp(scale q_t k_j - lse_t),  dP_tj = dout_t v_j.
// The forward kernel's layout; shared: Q and dO [kRows][d], K and V [kTile][d+1].
__global__ void attention_dq_kernel(float* dq, const float* dout, const float* lse, const float* D, const float* q,
                                    const float* k, const float* v, Dims s) {
  extern __shared__ float smem[];
  const int64_t d = s.d, dp = d + 1;
  float* Qs = smem;
  float* dOs = Qs + kRows * d;
  float* Ks = dOs + kRows * d;
  float* Vs = Ks + kTile * dp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t b = blockIdx.z, h = blockIdx.y, t0 = int64_t(blockIdx.x) * kRows, t = t0 + warp;
  const int64_t L = seq_len(s, b), q_row = s.H * d;
  const bool real = t < L;
  const int64_t off = (b * s.T + t) * q_row + h * d;
  for (int64_t i = lane; i < d; i += kWarp) {
    Qs[warp * d + i] = real ? query_value(s, q[off + i]) : 0.f;
    dOs[warp * d + i] = real ? dout[off + i] : 0.f;
  }
  const float lse_t = real ? lse[(b * s.H + h) * s.T + t] : 0.f;
  const float D_t = real ? D[(b * s.H + h) * s.T + t] : 0.f;

  const float* kb = k + b * s.kv_seq_stride + (h / s.group) * d;
  const float* vb = v + b * s.kv_seq_stride + (h / s.group) * d;
  const int64_t kend = min(t0 + kRows, L);
  float acc[kPerLane] = {};
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();
    const int64_t nk = min(int64_t(kTile), kend - j0);
    load_rows(Ks, dp, kb + j0 * s.kv_row, s.kv_row, nk, d);
    load_rows(Vs, dp, vb + j0 * s.kv_row, s.kv_row, nk, d);
    __syncthreads();
    if (!real) continue;
    const int64_t j = j0 + lane;
    float ds = 0.f;
    if (lane < nk && j <= t) {
      const float p = expf(dot_shared(Qs + warp * d, Ks + lane * dp, d) * s.scale - lse_t);
      ds = p * (dot_shared(dOs + warp * d, Vs + lane * dp, d) - D_t);
    }
    accumulate_rows(acc, ds, Ks, dp, min(nk, t - j0 + 1), d, lane);
  }
  if (t >= s.T) return;
#pragma unroll
  for (int u = 0; u < kPerLane; u++) {
    const int64_t i = lane + u * kWarp;
    if (i < d) dq[off + i] = acc[u] * s.scale;  // 0 for padding rows
  }
}

// dk_j = scale sum_{h in group, t >= j} dS_tj q_t,  dv_j = sum_{h, t >= j} P_tj dout_t: one warp per
// key row j of kv head g, so the heads of a group accumulate in registers, without atomics.
// grid (ceil(T / kRows), kv_heads, B). Shared: K and V rows [kRows][d], Q and dO [kTile][d+1],
// lse and D [kTile].
__global__ void attention_dkdv_kernel(float* dk, float* dv, const float* dout, const float* lse, const float* D,
                                      const float* q, const float* k, const float* v, Dims s) {
  extern __shared__ float smem[];
  const int64_t d = s.d, dp = d + 1;
  float* Kr = smem;
  float* Vr = Kr + kRows * d;
  float* Qs = Vr + kRows * d;
  float* dOs = Qs + kTile * dp;
  float* lse_s = dOs + kTile * dp;
  float* D_s = lse_s + kTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t b = blockIdx.z, g = blockIdx.y, j0 = int64_t(blockIdx.x) * kRows, j = j0 + warp;
  const int64_t L = seq_len(s, b), q_row = s.H * d;
  const bool real = j < L;
  const int64_t kv_off = b * s.kv_seq_stride + j * s.kv_row + g * d;
  for (int64_t i = lane; i < d; i += kWarp) {
    Kr[warp * d + i] = real ? k[kv_off + i] : 0.f;
    Vr[warp * d + i] = real ? v[kv_off + i] : 0.f;
  }
  float dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  for (int64_t h = g * s.group; h < (g + 1) * s.group; h++) {
    const float* qb = q + b * s.T * q_row + h * d;
    const float* gb = dout + b * s.T * q_row + h * d;
    const float* lse_bh = lse + (b * s.H + h) * s.T;
    const float* D_bh = D + (b * s.H + h) * s.T;
    for (int64_t i0 = j0; i0 < L; i0 += kTile) {  // the queries that see any key of the block
      __syncthreads();
      const int64_t nq = min(int64_t(kTile), L - i0);
      load_rows(Qs, dp, qb + i0 * q_row, q_row, nq, d, s.round_q);
      load_rows(dOs, dp, gb + i0 * q_row, q_row, nq, d);
      if (threadIdx.x < nq) {
        lse_s[threadIdx.x] = lse_bh[i0 + threadIdx.x];
        D_s[threadIdx.x] = D_bh[i0 + threadIdx.x];
      }
      __syncthreads();
      if (!real) continue;
      const int64_t i = i0 + lane;
      float p = 0.f, ds = 0.f;
      if (lane < nq && i >= j) {
        p = expf(dot_shared(Qs + lane * dp, Kr + warp * d, d) * s.scale - lse_s[lane]);
        ds = p * (dot_shared(dOs + lane * dp, Vr + warp * d, d) - D_s[lane]);
      }
      accumulate_rows(dv_acc, p, dOs, dp, nq, d, lane);
      accumulate_rows(dk_acc, ds, Qs, dp, nq, d, lane);
    }
  }
  if (j >= s.T) return;
#pragma unroll
  for (int u = 0; u < kPerLane; u++) {
    const int64_t c = lane + u * kWarp;
    if (c < d) {
      dk[kv_off + c] = dk_acc[u] * s.scale;  // 0 for padding rows
      dv[kv_off + c] = dv_acc[u];
    }
  }
}

// Decode: one query row per sequence against its cached positions 0..pos[r].
//
// A block takes one (row, kv head, chunk of up to kDecodeHeads of the query heads that share
// that kv head), so each cached key and value is read once for all of them (GQA: 6 or 7 query
// heads per kv head in Qwen2.5). Reads are row by row and coalesced: a warp takes one cache
// position at a time, each lane holding E = ceil(d / 32) consecutive elements of the key, the
// value and each head's query (16-byte loads at d = 128 in fp32, 8-byte in bf16); the per-head
// dot products are summed across the warp with shuffles. The block's warps take interleaved
// positions, each with its own online softmax, merged through shared memory at the end.
// When the (row, kv head) blocks are too few to fill the GPU (batch 1), the positions are split
// across blocks as well (flash-decoding): each split writes its unnormalised partial (max, sum,
// acc), and the last split of a row to finish merges them (attention_decode.cuh,
// merge_splits_if_last), in the same launch rather than a second kernel. Head dims 32, 64 and
// 128 take attention_decode.cuh's lane-group kernel instead, which scores several positions per warp.
using decode::kDecodeHeads;
using decode::kDecodeWarps;

// x[u] = p[u] for u < E as fp32; FULL: all E in bounds and aligned to E elements (d == 32 E).
template <int E, bool FULL>
__device__ __forceinline__ void load_lane(float (&x)[E], const float* p, int64_t left) {
  if constexpr (FULL && E == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else if constexpr (FULL && E == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    x[0] = v.x, x[1] = v.y;
  } else {
#pragma unroll
    for (int u = 0; u < E; u++) x[u] = (FULL || u < left) ? p[u] : 0.f;
  }
}
template <int E, bool FULL>
__device__ __forceinline__ void load_lane(float (&x)[E], const __nv_bfloat16* p, int64_t left) {
  if constexpr (FULL && E == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
  } else if constexpr (FULL && E == 2) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    x[0] = a.x, x[1] = a.y;
  } else {
#pragma unroll
    for (int u = 0; u < E; u++) x[u] = (FULL || u < left) ? __bfloat162float(p[u]) : 0.f;
  }
}

// grid (R, kv_heads * head_chunks, splits), block kDecodeWarps warps. Shared (decode_smem_bytes): each warp's
// accumulators [kDecodeWarps][kDecodeHeads][d]. With splits == 1 writes out (and out16, its bf16
// rounding for the o projection, unless null); otherwise part, [R, H, splits] records of (max,
// sum, acc[d]).
template <int E, bool FULL, class KV>
__global__ void __launch_bounds__(kDecodeWarps * kWarp)
    attention_decode_kernel(float* out, __nv_bfloat16* out16, float* part, unsigned* merge_counts, const float* q,
                            const KV* kcache, const KV* vcache, const int32_t* slot, const int32_t* pos, Dims s,
                            int head_chunks, int64_t chunk) {
  extern __shared__ float acc_s[];
  __shared__ float m_s[kDecodeWarps][kDecodeHeads], l_s[kDecodeWarps][kDecodeHeads];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  wait_for_prior_grids();  // q and this step's key and value come from the kernel before
  release_next_grid();
  const int64_t r = blockIdx.x, d = s.d, kvh = blockIdx.y / head_chunks;
  const int64_t h0 = kvh * s.group + int64_t(blockIdx.y % head_chunks) * kDecodeHeads;
  const int nh = int(min(int64_t(kDecodeHeads), (kvh + 1) * s.group - h0));
  const int splits = int(gridDim.z), z = int(blockIdx.z);
  const int64_t n = int64_t(pos[r]) + 1, begin = int64_t(z) * chunk;
  const int64_t end = z == splits - 1 ? n : min(n, begin + chunk);
  if (z >= decode::splits_with_positions(n, chunk, splits)) return;  // no position: no record, no merge
  const int64_t e0 = int64_t(lane) * E, left = d - e0;

  float qr[kDecodeHeads][E], acc[kDecodeHeads][E], m[kDecodeHeads], l[kDecodeHeads];
#pragma unroll
  for (int g = 0; g < kDecodeHeads; g++) {
    m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
    for (int u = 0; u < E; u++) qr[g][u] = 0.f, acc[g][u] = 0.f;
    if (g < nh && left > 0) load_lane<E, FULL>(qr[g], q + (r * s.H + h0 + g) * d + e0, left);
    if constexpr (std::is_same_v<KV, __nv_bfloat16>)  // a bf16 cache: the Bf16 table's queries are bf16 too
#pragma unroll
      for (int u = 0; u < E; u++) qr[g][u] = bf16_rounded(qr[g][u]);
  }
  const KV* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * d + e0;
  const KV* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + kvh * d + e0;
  float kx[E] = {}, vx[E] = {}, kn[E] = {}, vn[E] = {};
  int64_t j = begin + warp;
  if (j < end && left > 0) load_lane<E, FULL>(kx, kb + j * s.kv_row, left), load_lane<E, FULL>(vx, vb + j * s.kv_row, left);
  for (; j < end; j += kDecodeWarps) {
    const int64_t jn = j + kDecodeWarps;  // the next position's loads go out before this one's math
    if (jn < end && left > 0)
      load_lane<E, FULL>(kn, kb + jn * s.kv_row, left), load_lane<E, FULL>(vn, vb + jn * s.kv_row, left);
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++) {
      if (g >= nh) break;  // uniform across the block
      float dot = 0.f;
#pragma unroll
      for (int u = 0; u < E; u++) dot += qr[g][u] * kx[u];
      const float sc = warp_sum(dot) * s.scale;
      const float m_new = fmaxf(m[g], sc);
      const float corr = expf(m[g] - m_new), p = expf(sc - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int u = 0; u < E; u++) acc[g][u] = acc[g][u] * corr + p * vx[u];
      m[g] = m_new;
    }
#pragma unroll
    for (int u = 0; u < E; u++) kx[u] = kn[u], vx[u] = vn[u];
  }

  // Merge the warps: each holds a softmax over its positions with its own running max.
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kDecodeHeads; g++) m_s[warp][g] = m[g], l_s[warp][g] = l[g];
#pragma unroll
  for (int g = 0; g < kDecodeHeads; g++)
#pragma unroll
    for (int u = 0; u < E; u++)
      if (g < nh && u < left) acc_s[(warp * kDecodeHeads + g) * d + e0 + u] = acc[g][u];
  __syncthreads();
  // used again from pos, not kept from the start: one register less through the loop above.
  const int used = decode::splits_with_positions(int64_t(pos[r]) + 1, chunk, splits);
  decode::decode_write_merged(acc_s, m_s, l_s, nh, d, s.H, r, h0, splits, used, z, out, out16, part,
                              merge_counts + decode::merge_count_index(decode::launched_block()),
                              s.merge_each_element);
}

Dims dims_of(const AttentionShape& s) {
  if (s.d > kMaxD || s.d <= 0)
    throw std::invalid_argument("cuda attention: head dim " + std::to_string(s.d) + " (supported: 1.." +
                                std::to_string(kMaxD) + ")");
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw std::invalid_argument("cuda attention: heads must be a multiple of kv_heads");
  return Dims{s.T, s.heads, s.d, s.heads / s.kv_heads, s.kv_seq_stride, s.kv_heads * s.d, s.lengths,
              1.f / std::sqrt(float(s.d))};
}

// Scratch for backward's D [B, H, T]: grow-only, one per process (ops run on one stream).
float* rowdot_scratch(size_t n) {
  static DeviceScratch<> scratch;
  return scratch.get(n);
}

void simt_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& shape, bool round_q) {
  Dims s = dims_of(shape);
  s.round_q = round_q;
  if (shape.B == 0 || s.T == 0) return;
  const dim3 grid(unsigned((s.T + kRows - 1) / kRows), unsigned(s.H), unsigned(shape.B));
  const size_t smem = sizeof(float) * size_t(kRows * s.d + kTile * (s.d + 1) + kTile * s.d);
  attention_forward_kernel<<<grid, kRows * kWarp, smem, op_stream()>>>(out, lse, q, k, v, s);
  AZR_CUDA_LAUNCHED();
}

void simt_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const AttentionShape& shape,
                             bool round_q) {
  Dims s = dims_of(shape);
  s.round_q = round_q;
  const int64_t B = shape.B;
  if (B == 0 || s.T == 0) return;
  const float* D = attention_row_dots(dout, out, shape);

  const dim3 qgrid(unsigned((s.T + kRows - 1) / kRows), unsigned(s.H), unsigned(B));
  const size_t qsmem = sizeof(float) * size_t(2 * kRows * s.d + 2 * kTile * (s.d + 1));
  attention_dq_kernel<<<qgrid, kRows * kWarp, qsmem, op_stream()>>>(dq, dout, lse, D, q, k, v, s);
  AZR_CUDA_LAUNCHED();

  const dim3 kgrid(unsigned((s.T + kRows - 1) / kRows), unsigned(shape.kv_heads), unsigned(B));
  const size_t ksmem = sizeof(float) * size_t(2 * kRows * s.d + 2 * kTile * (s.d + 1) + 2 * kTile);
  attention_dkdv_kernel<<<kgrid, kRows * kWarp, ksmem, op_stream()>>>(dk, dv, dout, lse, D, q, k, v, s);
  AZR_CUDA_LAUNCHED();
}

}  // namespace

const float* attention_row_dots_round(uint16_t* do16, const float* dout, const float* out, const AttentionShape& shape) {
  const Dims s = dims_of(shape);
  const int64_t rows = shape.B * s.T * s.H;
  float* D = rowdot_scratch(size_t(std::max<int64_t>(rows, 1)));
  if (rows == 0) return D;
  attention_rowdot_kernel<<<unsigned((rows * kWarp + 255) / 256), 256, 0, op_stream()>>>(
      D, reinterpret_cast<__nv_bfloat16*>(do16), dout, out, s, shape.B);
  AZR_CUDA_LAUNCHED();
  return D;
}

const float* attention_row_dots(const float* dout, const float* out, const AttentionShape& shape) {
  return attention_row_dots_round(nullptr, dout, out, shape);
}

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& shape) {
  simt_attention_forward(out, lse, q, k, v, shape, /*round_q=*/false);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& shape) {
  simt_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, /*round_q=*/false);
}

// The splits' partials: grow-only, one per process (ops run on one stream).
float* decode_partials(size_t n) {
  static DeviceScratch<> scratch;
  return scratch.get(n);
}

// The splits' merge counts, one per (row, kv head, head chunk) (decode::merge_splits_if_last).
unsigned* decode_merge_counts(size_t n) {
  static ZeroedCounts counts;
  return counts.get(n);
}

DecodeSplit decode_split(int64_t R, const AttentionShape& shape, bool tiles) {
  const int64_t capacity = std::max<int64_t>(1, shape.kv_seq_stride / (shape.kv_heads * shape.d));
  const DecodeSplit plan = decode::plan_decode_split(R, shape.heads, shape.kv_heads, capacity,
                                                     tiles ? decode_tiles::kTile : 1, multiprocessors());
  // The plan caps the splits; the merge weighs no more (attention_decode.cuh, a head's weights in
  // kMergeStride floats), and past them would read the next head's weights as its own.
  if (plan.splits > decode::kMaxMergeSplits)
    throw std::logic_error("decode attention: " + std::to_string(plan.splits) + " splits a row, past the merge's " +
                           std::to_string(decode::kMaxMergeSplits));
  return plan;
}

namespace {

// Which decode kernel runs where it applies (cuda_set_decode_kernel): over a bf16 cache at head
// dims 32, 64 and 128 the shared-memory tiles (attention_decode_tiles.cuh); over an fp32 cache at
// those head dims the lane groups (attention_decode.cuh); else one position per warp.
CudaDecodeKernel g_decode_kernel = CudaDecodeKernel::Tiles;
// How split rows merge (cuda_set_decode_merge): each head's weights once, or the baseline.
CudaDecodeMerge g_decode_merge = CudaDecodeMerge::WeightsOnce;

template <int E, bool FULL, class KV>
void launch_decode_kernel(dim3 grid, float* out, __nv_bfloat16* out16, float* part, unsigned* counts, const float* q,
                          const KV* kcache, const KV* vcache, const int32_t* slot, const int32_t* pos, const Dims& s,
                          int head_chunks, int64_t chunk) {
  const size_t smem = decode::decode_smem_bytes(s.d);
  launch_after_prior(attention_decode_kernel<E, FULL, KV>, grid, kDecodeWarps * kWarp, smem, out, out16, part,
                     counts, q, kcache, vcache, slot, pos, s, head_chunks, chunk);
}

template <class KV>
void launch_decode(float* out, __nv_bfloat16* out16, const float* q, const KV* kcache, const KV* vcache,
                   const int32_t* slot, const int32_t* pos, int64_t R, const AttentionShape& shape) {
  Dims s = dims_of(shape);
  s.merge_each_element = g_decode_merge == CudaDecodeMerge::EachElement;
  if (R == 0) return;
  const bool lane_dims = s.d == 32 || s.d == 64 || s.d == 128;
  const bool tiles = g_decode_kernel == CudaDecodeKernel::Tiles && lane_dims && std::is_same_v<KV, __nv_bfloat16>;
  const DecodeSplit plan = decode_split(R, shape, tiles);
  const int head_chunks = plan.head_chunks, splits = plan.splits;
  const int64_t chunk = plan.chunk;
  float* part = splits > 1 ? decode_partials(size_t(R * s.H * splits * (s.d + 2))) : nullptr;
  unsigned* counts = splits > 1 ? decode_merge_counts(size_t(R * shape.kv_heads * head_chunks)) : nullptr;
  const dim3 grid(unsigned(R), unsigned(shape.kv_heads * head_chunks), unsigned(splits));
  const decode::DecodeDims dd{s.H, s.d, s.group, s.kv_seq_stride, s.kv_row, s.scale, s.merge_each_element};
  // f(std::integral_constant<int, D>{}) for the head dim D = 32, 64 or 128.
  auto with_head_dim = [&](auto f) {
    if (s.d == 32)
      f(std::integral_constant<int, 32>{});
    else if (s.d == 64)
      f(std::integral_constant<int, 64>{});
    else
      f(std::integral_constant<int, 128>{});
  };
  if (tiles) {
    if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
      with_head_dim([&](auto dim) {
        constexpr int D = decltype(dim)::value;
        // Dynamic and static together stay under 48 KiB without an opt-in: 1 KiB left for the
        // static (the merge's flag and sums: 128 bytes at D = 128, ptxas sm_90).
        static_assert(decode_tiles::smem_bytes<D>() + 1024 <= 48 * 1024, "no opt-in to more shared memory needed");
        launch_after_prior(decode_tiles::decode_tiles_kernel<D>, grid, decode_tiles::kThreads,
                           decode_tiles::smem_bytes<D>(), out, out16, part, counts, q, kcache, vcache, slot, pos,
                           dd, head_chunks, chunk);
      });
    }
  } else if (g_decode_kernel != CudaDecodeKernel::WarpPerPosition && lane_dims) {
    const size_t smem = decode::decode_smem_bytes(s.d);
    with_head_dim([&](auto dim) {
      constexpr int LP = decltype(dim)::value / 8;  // lanes per position
      launch_after_prior(decode::decode_lane_groups_kernel<LP, KV>, grid, kDecodeWarps * kWarp, smem, out, out16, part,
                         counts, q, kcache, vcache, slot, pos, dd, head_chunks, chunk);
    });
  } else {
    const int E = int((s.d + kWarp - 1) / kWarp);
    const bool full = s.d == int64_t(kWarp) * E;
    auto launch = [&](auto e, auto f) {
      launch_decode_kernel<decltype(e)::value, decltype(f)::value, KV>(grid, out, out16, part, counts, q, kcache,
                                                                       vcache, slot, pos, s, head_chunks, chunk);
    };
    auto launch_e = [&](auto e) { full ? launch(e, std::true_type{}) : launch(e, std::false_type{}); };
    switch (E) {
      case 1: launch_e(std::integral_constant<int, 1>{}); break;
      case 2: launch_e(std::integral_constant<int, 2>{}); break;
      case 3: launch_e(std::integral_constant<int, 3>{}); break;
      default: launch_e(std::integral_constant<int, 4>{}); break;
    }
  }
}

// k and v rounded to bf16 (kept as fp32 values), for the Bf16 table's attention.
__global__ void round_through_bf16_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
}

const float* rounded_through_bf16(DeviceScratch<>& scratch, const float* src, int64_t n) {
  float* dst = scratch.get(size_t(n));
  if (n > 0) {
    round_through_bf16_kernel<<<grid_for(n), 256, 0, op_stream()>>>(dst, src, n);
    AZR_CUDA_LAUNCHED();
  }
  return dst;
}

DeviceScratch<> g_k16, g_v16;

}  // namespace

// A switch makes recorded decode steps anew (graphs.cu): a replay would run the old kernel.
void cuda_set_decode_kernel(CudaDecodeKernel kernel) {
  if (g_decode_kernel == kernel) return;
  g_decode_kernel = kernel;
  cuda_detail::scratch_generation()++;
}
void cuda_set_decode_merge(CudaDecodeMerge merge) {
  if (g_decode_merge == merge) return;
  g_decode_merge = merge;
  cuda_detail::scratch_generation()++;
}

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                      const int32_t* pos, int64_t R, const AttentionShape& shape) {
  launch_decode(out, nullptr, q, kcache, vcache, slot, pos, R, shape);
}

void attention_decode_w16(float* out, uint16_t* out16, const float* q, const uint16_t* kcache,
                          const uint16_t* vcache, const int32_t* slot, const int32_t* pos, int64_t R,
                          const AttentionShape& shape) {
  launch_decode(out, reinterpret_cast<__nv_bfloat16*>(out16), q, reinterpret_cast<const __nv_bfloat16*>(kcache),
                reinterpret_cast<const __nv_bfloat16*>(vcache), slot, pos, R, shape);
}

void attention_forward_bf16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& shape) {
  if (tensor_core_attention_applies(shape)) return tensor_core_attention_forward(out, lse, q, k, v, shape);
  const int64_t n = shape.B * shape.kv_seq_stride;
  simt_attention_forward(out, lse, q, rounded_through_bf16(g_k16, k, n), rounded_through_bf16(g_v16, v, n), shape,
                         /*round_q=*/true);
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const AttentionShape& shape) {
  if (tensor_core_attention_applies(shape))
    return tensor_core_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape);
  const int64_t n = shape.B * shape.kv_seq_stride;
  simt_attention_backward(dq, dk, dv, dout, out, lse, q, rounded_through_bf16(g_k16, k, n),
                          rounded_through_bf16(g_v16, v, n), shape, /*round_q=*/true);
}

}  // namespace azr::kernels::cuda_detail
