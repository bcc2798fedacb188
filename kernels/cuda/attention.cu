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
// fp32 throughout; the bf16 tensor-core path is future work (issue 9).
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>

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
};

__device__ __forceinline__ int64_t seq_len(const Dims& s, int64_t b) { return s.lengths ? s.lengths[b] : s.T; }

// dot(a[0..d), b[0..d)) for one lane, both in shared memory.
__device__ __forceinline__ float dot_shared(const float* a, const float* b, int64_t d) {
  float acc = 0.f;
  for (int64_t i = 0; i < d; i++) acc += a[i] * b[i];
  return acc;
}

// The block copies rows [0, n) of d floats (global row stride src_stride) into shared memory
// (row stride dst_stride); the caller synchronises.
__device__ __forceinline__ void load_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                                          int64_t n, int64_t d) {
  for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) {
    const int64_t r = e / d, i = e % d;
    dst[r * dst_stride + i] = src[r * src_stride + i];
  }
}

// acc (this lane's elements lane, lane + 32, ...) += sum_{r < count} coef_r rows[r], where lane r
// holds coef_r: the probabilities (or dS) scored lane by lane, applied to the tile's rows.
// Rows are fp32, or bf16 (a bf16 KV cache), read as fp32.
__device__ __forceinline__ float as_float(float x) { return x; }
__device__ __forceinline__ float as_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ void accumulate_rows(float (&acc)[kPerLane], float coef, const T* rows,
                                                int64_t row_stride, int64_t count, int64_t d, int lane) {
  for (int r = 0; r < count; r++) {
    const float c = __shfl_sync(kFull, coef, r);
#pragma unroll
    for (int u = 0; u < kPerLane; u++) {
      const int64_t i = lane + u * kWarp;
      if (i < d) acc[u] += c * as_float(rows[r * row_stride + i]);
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
  for (int64_t i = lane; i < d; i += kWarp) Qs[warp * d + i] = real ? qt[i] : 0.f;

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

// D[b, h, t] = dot(dout, out) of each real row (0 for padding): one warp per row.
__global__ void attention_rowdot_kernel(float* D, const float* dout, const float* out, Dims s, int64_t B) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;  // (b, t, h)
  const int lane = threadIdx.x % kWarp;
  if (row >= B * s.T * s.H) return;
  const int64_t h = row % s.H, t = (row / s.H) % s.T, b = row / (s.H * s.T);
  const float* o = out + row * s.d;
  const float* g = dout + row * s.d;
  float acc = 0.f;
  for (int64_t i = lane; i < s.d; i += kWarp) acc += o[i] * g[i];
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
    Qs[warp * d + i] = real ? q[off + i] : 0.f;
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
      load_rows(Qs, dp, qb + i0 * q_row, q_row, nq, d);
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

// One warp per (row, head): the query against cache positions 0..pos[r], lane j scoring key
// j0 + j of each 32-key chunk straight from global memory (L1 keeps the rows between lanes).
// grid (R, ceil(H / kDecodeWarps)). Shared: each warp's query row [kDecodeWarps][d].
constexpr int kDecodeWarps = 4;

// KV: float, or __nv_bfloat16 for a bf16 cache (the same arithmetic on the values read as fp32).
template <class KV>
__global__ void attention_decode_kernel(float* out, const float* q, const KV* kcache, const KV* vcache,
                                        const int32_t* slot, const int32_t* pos, Dims s) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = blockIdx.x, h = int64_t(blockIdx.y) * kDecodeWarps + warp, d = s.d;
  if (h >= s.H) return;  // no block-wide barrier below
  float* qs = smem + warp * d;
  const float* qh = q + (r * s.H + h) * d;
  for (int64_t i = lane; i < d; i += kWarp) qs[i] = qh[i];
  __syncwarp();
  const int64_t n = int64_t(pos[r]) + 1;
  const KV* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + (h / s.group) * d;
  const KV* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + (h / s.group) * d;
  float m = -INFINITY, l = 0.f, acc[kPerLane] = {};
  for (int64_t j0 = 0; j0 < n; j0 += kWarp) {
    const int64_t j = j0 + lane, nk = min(int64_t(kWarp), n - j0);
    float sc = -INFINITY;
    if (j < n) {
      const KV* kj = kb + j * s.kv_row;
      float dot = 0.f;
      for (int64_t i = 0; i < d; i++) dot += qs[i] * as_float(kj[i]);
      sc = dot * s.scale;
    }
    const float m_new = fmaxf(m, warp_max(sc));
    const float p = sc == -INFINITY ? 0.f : expf(sc - m_new);
    const float corr = expf(m - m_new);
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int u = 0; u < kPerLane; u++) acc[u] *= corr;
    accumulate_rows(acc, p, vb + j0 * s.kv_row, s.kv_row, nk, d, lane);
    m = m_new;
  }
  float* o = out + (r * s.H + h) * d;
  const float inv = 1.f / l;
#pragma unroll
  for (int u = 0; u < kPerLane; u++) {
    const int64_t i = lane + u * kWarp;
    if (i < d) o[i] = acc[u] * inv;
  }
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

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& shape) {
  const Dims s = dims_of(shape);
  if (shape.B == 0 || s.T == 0) return;
  const dim3 grid(unsigned((s.T + kRows - 1) / kRows), unsigned(s.H), unsigned(shape.B));
  const size_t smem = sizeof(float) * size_t(kRows * s.d + kTile * (s.d + 1) + kTile * s.d);
  attention_forward_kernel<<<grid, kRows * kWarp, smem>>>(out, lse, q, k, v, s);
  AZR_CUDA_LAUNCHED();
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& shape) {
  const Dims s = dims_of(shape);
  const int64_t B = shape.B;
  if (B == 0 || s.T == 0) return;
  float* D = rowdot_scratch(size_t(B * s.H * s.T));
  const int64_t rows = B * s.T * s.H;
  attention_rowdot_kernel<<<unsigned((rows * kWarp + 255) / 256), 256>>>(D, dout, out, s, B);
  AZR_CUDA_LAUNCHED();

  const dim3 qgrid(unsigned((s.T + kRows - 1) / kRows), unsigned(s.H), unsigned(B));
  const size_t qsmem = sizeof(float) * size_t(2 * kRows * s.d + 2 * kTile * (s.d + 1));
  attention_dq_kernel<<<qgrid, kRows * kWarp, qsmem>>>(dq, dout, lse, D, q, k, v, s);
  AZR_CUDA_LAUNCHED();

  const dim3 kgrid(unsigned((s.T + kRows - 1) / kRows), unsigned(shape.kv_heads), unsigned(B));
  const size_t ksmem = sizeof(float) * size_t(2 * kRows * s.d + 2 * kTile * (s.d + 1) + 2 * kTile);
  attention_dkdv_kernel<<<kgrid, kRows * kWarp, ksmem>>>(dk, dv, dout, lse, D, q, k, v, s);
  AZR_CUDA_LAUNCHED();
}

namespace {

template <class KV>
void launch_decode(float* out, const float* q, const KV* kcache, const KV* vcache, const int32_t* slot,
                   const int32_t* pos, int64_t R, const AttentionShape& shape) {
  const Dims s = dims_of(shape);
  if (R == 0) return;
  const dim3 grid(unsigned(R), unsigned((s.H + kDecodeWarps - 1) / kDecodeWarps));
  attention_decode_kernel<KV><<<grid, kDecodeWarps * kWarp, sizeof(float) * size_t(kDecodeWarps * s.d)>>>(
      out, q, kcache, vcache, slot, pos, s);
  AZR_CUDA_LAUNCHED();
}

// k and v rounded to bf16 (kept as fp32 values), for the Bf16 table's attention.
__global__ void round_through_bf16_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
}

const float* rounded_through_bf16(DeviceScratch<>& scratch, const float* src, int64_t n) {
  float* dst = scratch.get(size_t(n));
  if (n > 0) {
    round_through_bf16_kernel<<<grid_for(n), 256>>>(dst, src, n);
    AZR_CUDA_LAUNCHED();
  }
  return dst;
}

DeviceScratch<> g_k16, g_v16;

}  // namespace

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                      const int32_t* pos, int64_t R, const AttentionShape& shape) {
  launch_decode(out, q, kcache, vcache, slot, pos, R, shape);
}

void attention_decode_w16(float* out, const float* q, const uint16_t* kcache, const uint16_t* vcache,
                          const int32_t* slot, const int32_t* pos, int64_t R, const AttentionShape& shape) {
  launch_decode(out, q, reinterpret_cast<const __nv_bfloat16*>(kcache),
                reinterpret_cast<const __nv_bfloat16*>(vcache), slot, pos, R, shape);
}

void attention_forward_bf16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& shape) {
  const int64_t n = shape.B * shape.kv_seq_stride;
  attention_forward(out, lse, q, rounded_through_bf16(g_k16, k, n), rounded_through_bf16(g_v16, v, n), shape);
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const AttentionShape& shape) {
  const int64_t n = shape.B * shape.kv_seq_stride;
  attention_backward(dq, dk, dv, dout, out, lse, q, rounded_through_bf16(g_k16, k, n),
                     rounded_through_bf16(g_v16, v, n), shape);
}

}  // namespace azr::kernels::cuda_detail
