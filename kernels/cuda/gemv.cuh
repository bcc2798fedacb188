// Products of a few rows (a decode step's batch, R <= kMaxRows) with bf16 weights, and the decode
// ops fused around them. At batch 1 a decode step is a chain of small, latency-bound launches
// (the 2026-11-23 profile: 540 kernels of 5.8 us on average at 0.5B), and cuBLASLt takes 6 to 8 us
// for a product whose weights stream in under 1 us. These kernels read each weight once, with
// 16-byte loads where the rows allow, and do the work around the product in the same launch:
//
// - gemv_linear_kernel:  out[r, o] = x[r] . w[o] + bias[o] (+ residual[r, o])
//                                                 (matmul_forward_a16w16, ops.h: decode_linear_w16)
// - gemv_qkv_kernel:     q, k and v of a layer in one launch, bias added, RoPE applied to q and
//                        k, k and v stored to the bf16 KV cache        (ops.h: decode_qkv_w16)
// - gemv_gate_up_kernel: bf16(silu(x . wg[j] + bg[j]) * (x . wu[j] + bu[j]))
//                                                                       (ops.h: gate_up_swiglu_w16)
//
// The arithmetic: every product is bf16 x bf16, exact in fp32, summed in fp32; each thread sums
// its share of k in order, the warp adds its lanes' sums in a butterfly, and when a row is split
// over several warps, their sums are added in warp order. So results are deterministic, and
// differ from cuBLASLt's (and the CPU's) only in the order of the fp32 sums. The epilogues are
// the unfused ops' expressions (elementwise.cu's rope and SwiGLU), on the same fp32 values.
//
// The input rows: bf16 x16, or the fp32 residual stream, which each block normalizes into its
// shared memory before its products (ops.h: DecodeInput; rmsnorm_row.cuh, the norm kernel's
// arithmetic). At batch 1 a layer's two norms and two residual adds were four launches of one
// block each; folded into the products (the adds into the o and down projections' epilogues) they
// are none. Each block reads the R x IC fp32 rows from L2 where it read the bf16 rows before.
//
// Work: an item is one output (or a pair of outputs: a RoPE pair, or a gate and an up row) for all
// R rows. A block is kWarps warps; `split` warps (1, 2, 4 or 8) share an item, each taking every
// split-th 8-element pack of k, so that rows with a long k and few items still put enough loads in
// flight. Partial sums meet in shared memory; lane r of the item's first warp finishes row r.
//
// The kernels are in this header, apart from their launches (gemv.cu), so that
// tests/kernels/gemv_emulated_test.cpp can run them on the CPU through tests/kernels/cuda_emulation.h.
#pragma once

#include "kernels/cuda/decode_epilogues.cuh"  // swiglu_value, rounded_to_bf16
#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/internal.h"  // DecodeAhead
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/rmsnorm_row.cuh"
#include "kernels/ops.h"

#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace azr::kernels::cuda_detail::gemv {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kMaxRows = 8;  // ops.h's kDecodeFusedMaxRows
static_assert(kThreads == kNormThreads, "a normalized input row must have the norm kernel's bits");

// What a block prefetches into L2 before its wait (programmatic dependent launch), split evenly
// over its rows, in whole 16-byte units. Every block resident at once prefetches: at 16 KiB, at
// most 8 blocks on each of an H100's 132 multiprocessors ask for 17 MB of its 50 MB L2, not the
// whole of 1.5B's 55 MB gate/up matrix, whose first lines would be evicted before they were read.
// The rows' rest streams in as it is read. A first guess, for the GPU to tune. `from`: the bytes
// at the start of each row that the item's threads load into registers before the wait themselves
// (held_bytes_per_row), which the prefetch then skips.
constexpr int64_t kPrefetchBytesPerBlock = 16384;
template <int J>
AZR_HOST_DEVICE_INLINE uint32_t prefetch_bytes_per_row(int64_t row_bytes, int64_t from, int split) {
  const int64_t share = kPrefetchBytesPerBlock * split / (kWarps * J) / 16 * 16;
  const int64_t left = row_bytes - from;
  return uint32_t(left <= 0 ? 0 : left < share ? left : share);
}

// Holding weights before the wait (kHold, DecodeLayersTuning::hold_first_weights): each thread
// loads the first kPacks of its 8-element packs of each weight row into registers before its
// wait, so that under programmatic launch they arrive while the kernel before is finishing, and
// only the input, the sums and the epilogue are left after it. At batch 1 the o projection's
// blocks are all resident during the attention, so its weights (4.7 MB at 1.5B, 1.5 packs a
// thread) are all in registers when the attention ends; q/k/v's likewise during down's last wave.
// partial_dots sums the held packs first, in the order it would have loaded them: the same bits.
template <int J, int kPacks>
struct HeldPacks {
  uint4 w[kPacks][J];
  int count = 0;  // packs part, part + parts, ... held, at most kPacks
};

// The bytes at the start of each weight row that an item's threads hold: kPacks packs of 16 bytes
// for each of its split * 32 threads, within the row.
template <int kPacks>
AZR_HOST_DEVICE_INLINE int64_t held_bytes_per_row(int64_t row_bytes, int split) {
  const int64_t held = int64_t(kPacks) * split * kWarp * 16;
  return held < row_bytes ? held : row_bytes;
}

// This block's slice of `ahead`, a later product's weights (which no kernel of the step writes),
// asked of L2 before the wait: the launch's blocks take consecutive slices of bytes / blocks and
// each warp a consecutive part of its block's, all in whole 16-byte units (cp.async.bulk.prefetch's
// contract); lane 0 asks for that part of `first` and of `second` alike.
AZR_DEVICE_INLINE void prefetch_ahead(const DecodeAhead& ahead, int64_t block, int64_t blocks) {
  if (ahead.bytes <= 0 || threadIdx.x % kWarp != 0) return;
  const int64_t per_block = (ahead.bytes + blocks * 16 - 1) / (blocks * 16) * 16;
  const int64_t per_warp = (per_block + kWarps * 16 - 1) / (kWarps * 16) * 16;
  const int64_t begin = block * per_block + int64_t(threadIdx.x / kWarp) * per_warp;
  int64_t end = begin + per_warp;
  if (end > (block + 1) * per_block) end = (block + 1) * per_block;
  if (end > ahead.bytes) end = ahead.bytes;
  if (begin >= end) return;
  if (ahead.first) prefetch_to_l2(reinterpret_cast<const char*>(ahead.first) + begin, uint32_t(end - begin));
  if (ahead.second) prefetch_to_l2(reinterpret_cast<const char*>(ahead.second) + begin, uint32_t(end - begin));
}

// Shared memory for the partial sums: [kWarps][J][kRows] floats; after them, where the op
// normalizes its input, the block's normalized rows (input_smem_bytes).
template <int J, int kRows>
constexpr size_t kSmemBytes = sizeof(float) * kWarps * J * kRows;
static_assert(kSmemBytes<1, 1> % 16 == 0, "the normalized rows start 16-byte aligned");

inline size_t input_smem_bytes(const DecodeInput& in, int64_t rows, int64_t k) {
  return in.norm ? size_t(rows * k) * sizeof(uint16_t) : 0;
}

__device__ __forceinline__ float bf16_low(uint32_t two) { return __uint_as_float(two << 16); }
__device__ __forceinline__ float bf16_high(uint32_t two) { return __uint_as_float(two & 0xffff0000u); }
__device__ __forceinline__ float bf16_value(uint16_t one) { return __uint_as_float(uint32_t(one) << 16); }

// acc[j][r] += wp[j] . x_r[8p .. 8p+7] for rows r < rows of x (row stride ldx): one pack.
template <int J, int kRows>
__device__ __forceinline__ void add_pack(float (&acc)[J][kRows], const uint4 (&wp)[J], const uint16_t* x, int64_t ldx,
                                         int rows, int64_t p) {
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    if (r >= rows) break;
    const uint4 xp = reinterpret_cast<const uint4*>(x + r * ldx)[p];
    const uint32_t xs[4] = {xp.x, xp.y, xp.z, xp.w};
#pragma unroll
    for (int j = 0; j < J; j++) {
      const uint32_t ws[4] = {wp[j].x, wp[j].y, wp[j].z, wp[j].w};
      float a = acc[j][r];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        a += bf16_low(ws[e]) * bf16_low(xs[e]);
        a += bf16_high(ws[e]) * bf16_high(xs[e]);
      }
      acc[j][r] = a;
    }
  }
}

// held: this thread's first packs of each row (16-byte loads), loaded before the wait.
template <int J, int kPacks>
__device__ __forceinline__ void hold_first_packs(HeldPacks<J, kPacks>& held, const uint16_t* const (&w)[J],
                                                 int64_t k, int part, int parts) {
  const int64_t packs = k / 8;
#pragma unroll
  for (int u = 0; u < kPacks; u++) {
    const int64_t p = part + int64_t(u) * parts;
    if (p >= packs) break;
#pragma unroll
    for (int j = 0; j < J; j++) held.w[u][j] = reinterpret_cast<const uint4*>(w[j])[p];
    held.count = u + 1;
  }
}

// acc[j][r] += sum over this thread's packs p (p = part, part + parts, ...) of w_j[8p .. 8p+7] .
// x_r[8p .. 8p+7], for rows r < rows of x (row stride ldx). kVec = 8: 16-byte loads (k a multiple of
// 8, every row 16-byte aligned), the first held.count packs from `held` (hold_first_packs), not
// loaded again; kVec = 1: one element per step, any k and alignment. kUnroll: the packs a thread's
// loads cover at once (the sums' order is the same whatever it is): 2 where the launch fills a
// multiprocessor with up to 64 warps; more in the persistent kernel (decode_layers.cuh), whose 16
// warps must each have more bytes in flight.
template <int J, int kRows, int kVec, int kUnroll = 2>
__device__ __forceinline__ void partial_dots(float (&acc)[J][kRows], const uint16_t* const (&w)[J],
                                             const uint16_t* x, int64_t ldx, int rows, int64_t k, int part,
                                             int parts, const HeldPacks<J, kUnroll>* held = nullptr) {
  if constexpr (kVec == 8) {
    const int64_t packs = k / 8;
    int64_t first = part;
    if (held)
#pragma unroll
      for (int u = 0; u < kUnroll; u++)
        if (u < held->count) {
          add_pack<J, kRows>(acc, held->w[u], x, ldx, rows, first);
          first += parts;
        }
#pragma unroll kUnroll
    for (int64_t p = first; p < packs; p += parts) {
      uint4 wp[J];
#pragma unroll
      for (int j = 0; j < J; j++) wp[j] = reinterpret_cast<const uint4*>(w[j])[p];
      add_pack<J, kRows>(acc, wp, x, ldx, rows, p);
    }
  } else {
    for (int64_t i = part; i < k; i += parts) {
      float wv[J];
#pragma unroll
      for (int j = 0; j < J; j++) wv[j] = bf16_value(w[j][i]);
#pragma unroll
      for (int r = 0; r < kRows; r++) {
        if (r >= rows) break;
        const float xv = bf16_value(x[r * ldx + i]);
#pragma unroll
        for (int j = 0; j < J; j++) acc[j][r] += wv[j] * xv;
      }
    }
  }
}

// The block's bf16 input rows: in.x16, or in.x normalized into `rows16` (shared memory, rows x k)
// by the whole block, with the norm kernel's bits. Every thread calls it, after its wait.
AZR_DEVICE_INLINE const uint16_t* block_input(const DecodeInput& in, int rows, int64_t k, __nv_bfloat16* rows16) {
  if (!in.norm) return in.x16;
  __shared__ float sums[32];
  for (int r = 0; r < rows; r++) {
    const float* xr = in.x + r * k;
    const float rstd = row_rstd(xr, k, in.eps, sums);
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x)
      rows16[r * k + c] = __float2bfloat16_rn(normalized(xr[c], rstd, in.norm[c]));
  }
  __syncthreads();
  return reinterpret_cast<const uint16_t*>(rows16);
}

// The dot products of one item: `w` are its J weight rows; each of the item's `split` warps sums
// its packs, and the sums meet in shared memory. Returns true in the threads that hold a finished
// row: lane r < rows of the item's first warp, with dots[j] = w_j . x_r. Every thread of the block
// must call it (it has barriers); `active` is false in warps whose item does not exist. smem: the
// partial sums, then room for the normalized rows (kSmemBytes, input_smem_bytes). kHold: each
// thread holds its first kUnroll packs of each row before the wait (HeldPacks).
template <int J, int kRows, int kVec, int kUnroll = 2, bool kHold = false>
__device__ __forceinline__ bool item_dots(float (&dots)[J], const uint16_t* const (&w)[J], const DecodeInput& in,
                                          int64_t k, int rows, int split, bool active, float* smem) {
  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
  // Launched after the kernel before it (programmatic dependent launch, device_or_emulation.cuh),
  // the item's weights are read while that kernel finishes: no kernel of a decode step writes the
  // weights. Held (kHold), the first packs come into registers; past them, the start of the rest
  // of each row streams into L2. x, written by the kernel before, and every output wait.
  HeldPacks<J, kUnroll> held;
  if constexpr (kVec == 8)
    if (active) {
      if constexpr (kHold) hold_first_packs<J, kUnroll>(held, w, k, (warp % split) * kWarp + lane, split * kWarp);
      if (warp % split == 0 && lane == 0) {
        const int64_t row_bytes = k * int64_t(sizeof(uint16_t));
        const int64_t from = kHold ? held_bytes_per_row<kUnroll>(row_bytes, split) : 0;
        const uint32_t bytes = prefetch_bytes_per_row<J>(row_bytes, from, split);
        if (bytes > 0)
#pragma unroll
          for (int j = 0; j < J; j++) prefetch_to_l2(reinterpret_cast<const char*>(w[j]) + from, bytes);
      }
    }
  wait_for_prior_grids();
  release_next_grid();
  const uint16_t* x = block_input(in, rows, k, reinterpret_cast<__nv_bfloat16*>(smem + kWarps * J * kRows));
  float acc[J][kRows];
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int r = 0; r < kRows; r++) acc[j][r] = 0.f;
  if (active)
    partial_dots<J, kRows, kVec, kUnroll>(acc, w, x, k, rows, k, (warp % split) * kWarp + lane, split * kWarp,
                                          kHold ? &held : nullptr);
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int r = 0; r < kRows; r++) {
      const float v = warp_sum(acc[j][r]);
      if (lane == 0) smem[(warp * J + j) * kRows + r] = v;
    }
  __syncthreads();
  if (!active || warp % split != 0 || lane >= rows) return false;
#pragma unroll
  for (int j = 0; j < J; j++) {
    float s = 0.f;
    for (int q = 0; q < split; q++) s += smem[((warp + q) * J + j) * kRows + lane];
    dots[j] = s;
  }
  return true;
}

// This warp's item in block `block` (blockIdx.x, or a persistent kernel's turn: decode_layers.cuh):
// the block holds kWarps / split items.
__device__ __forceinline__ int64_t item_of_warp(int64_t block, int split) {
  return block * (kWarps / split) + int(threadIdx.x) / kWarp / split;
}

// out[r * OC + o] = (x[r] . w16[o] + bias[o]) + residual[r * OC + o] (bias, residual may be null;
// residual may alias out: each entry is read and written by one thread), r < rows. The sum of the
// product and the residual is the one fp32 addition the unfused residual add makes.
// One block's work (block: its index in the launch's grid); every thread of the block calls it.
template <int kRows, int kVec, int kUnroll = 2, bool kHold = false>
__device__ __forceinline__ void linear_block(int64_t block, float* out, const DecodeInput& in, const uint16_t* w16,
                                             const float* bias, const float* residual, int rows, int64_t IC,
                                             int64_t OC, int split, float* smem) {
  const int64_t o = item_of_warp(block, split);
  const bool active = o < OC;
  const uint16_t* const w[1] = {w16 + (active ? o : 0) * IC};
  float dot[1];
  if (!item_dots<1, kRows, kVec, kUnroll, kHold>(dot, w, in, IC, rows, split, active, smem)) return;
  const int r = int(threadIdx.x) % kWarp;
  const float y = dot[0] + (bias ? bias[o] : 0.f);
  out[r * OC + o] = residual ? residual[r * OC + o] + y : y;
}

// block(index) for the blocks' items this block takes: its own (blockIdx.x) or, where kTurns, turns
// of them (blockIdx.x, + gridDim.x, ...; one_wave, below), with a barrier between turns, since the
// turn before still reads its sums, rows and epilogue operands from shared memory.
template <bool kTurns, class Block>
AZR_DEVICE_INLINE void take_turns(int turns, Block&& block) {
  if constexpr (!kTurns) {
    block(int64_t(blockIdx.x));
  } else {
    for (int t = 0; t < turns; t++) {
      if (t > 0) __syncthreads();
      block(int64_t(blockIdx.x) + int64_t(t) * gridDim.x);
    }
  }
}

// ahead: a later product's weights to ask L2 for before the wait as well (16-byte loads only).
// kHold: HeldPacks (16-byte loads only), in every turn (past the first its wait has returned).
// kTurns: each block takes `turns` blocks' items (one_wave, below), every kernel here alike; a
// kernel of its own, since the loop costs registers, and without it `turns` is 1. gemv.cu launches
// it without held weights (ptxas, sm_90, one row: gate/up 38 registers, 56 holding; q/k/v 40, 62;
// the linear map 31, 32).
// At one row, at most 32 registers a thread, so that 8 blocks (64 warps) fit on a multiprocessor,
// as they did before the held packs (ptxas, sm_90: 32 registers without them, 36 with them
// unbounded, which would have left room for 6; no spills either way). Past one row the bound would
// spill.
constexpr int kOneRowLinearBlocksPerMultiprocessor = 8;
template <int kRows, int kVec, bool kHold = false, bool kTurns = false>
__global__ void __launch_bounds__(kThreads, kRows == 1 ? kOneRowLinearBlocksPerMultiprocessor : 1)
    gemv_linear_kernel(float* out, DecodeInput in, const uint16_t* w16, const float* bias, const float* residual,
                       int rows, int64_t IC, int64_t OC, int split, DecodeAhead ahead, int turns) {
  AZR_DYNAMIC_SHARED(smem_raw);
  if constexpr (kVec == 8) prefetch_ahead(ahead, blockIdx.x, gridDim.x);
  float* smem = reinterpret_cast<float*>(smem_raw);
  take_turns<kTurns>(turns, [&](int64_t block) {
    linear_block<kRows, kVec, 2, kHold && kVec == 8>(block, out, in, w16, bias, residual, rows, IC, OC, split, smem);
  });
}

// What decode_qkv_w16 (kernels/ops.h) needs on the device.
struct QkvArgs {
  DecodeInput in;
  const uint16_t *wq, *wk, *wv;
  const float *bq, *bk, *bv;
  const float *cos, *sin;
  const int32_t *slot, *pos;
  float* q;
  __nv_bfloat16 *kcache, *vcache;
  int64_t H, heads, kv_heads, d, slot_stride;
};

// The op's arguments as the kernel takes them (the caches as bf16 values); on the device too, for
// the persistent kernel (decode_layers.cuh).
AZR_HOST_DEVICE_INLINE QkvArgs qkv_args(const DecodeQkv& a) {
  return {a.in, a.wq, a.wk, a.wv, a.bq, a.bk, a.bv, a.cos, a.sin, a.slot, a.pos, a.q,
          reinterpret_cast<__nv_bfloat16*>(a.kcache), reinterpret_cast<__nv_bfloat16*>(a.vcache),
          a.H, a.heads, a.kv_heads, a.d, a.slot_stride};
}

// Items: the RoPE pairs (i, i + d/2) of every q head, then of every k head, then of every v head
// (v is not rotated; pairing its outputs the same way keeps one kind of item).
template <int kRows, int kVec, int kUnroll = 2, bool kHold = false>
__device__ __forceinline__ void qkv_block(int64_t block, const QkvArgs& a, int rows, int split, float* smem) {
  const int64_t half = a.d / 2, items = (a.heads + 2 * a.kv_heads) * half;
  const int64_t item = item_of_warp(block, split);
  const bool active = item < items;
  const int64_t head = active ? item / half : 0, i = item % half;
  // which: 0 = q, 1 = k, 2 = v; h: the head within its projection
  const int which = head < a.heads ? 0 : head < a.heads + a.kv_heads ? 1 : 2;
  const int64_t h = which == 0 ? head : which == 1 ? head - a.heads : head - a.heads - a.kv_heads;
  const uint16_t* wbase = which == 0 ? a.wq : which == 1 ? a.wk : a.wv;
  const float* bias = which == 0 ? a.bq : which == 1 ? a.bk : a.bv;
  const int64_t o0 = h * a.d + i, o1 = o0 + half;
  const uint16_t* const w[2] = {wbase + o0 * a.H, wbase + o1 * a.H};
  // The epilogue's operands, read before item_dots' wait by the threads that finish a row and kept
  // in shared memory through the dots (not in registers: they would cost the kernel its fifth
  // block a multiprocessor): the biases and the RoPE tables, which no kernel writes, and the step's
  // positions and slots, which the host uploads before the step's first kernel.
  __shared__ float operands_s[kWarps][kRows][4];  // bias at o0, at o1, cos, sin
  __shared__ int64_t at_s[kWarps][kRows];         // the row's cache offset; -1: no position (padding)
  const int r = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  if (active && warp % split == 0 && r < rows) {
    const int64_t p = a.pos[r];
    float* o = operands_s[warp][r];
    o[0] = bias ? bias[o0] : 0.f, o[1] = bias ? bias[o1] : 0.f;
    o[2] = which != 2 && p >= 0 ? a.cos[p * half + i] : 1.f;
    o[3] = which != 2 && p >= 0 ? a.sin[p * half + i] : 0.f;
    at_s[warp][r] = p >= 0 ? int64_t(a.slot[r]) * a.slot_stride + p * (a.kv_heads * a.d) : -1;
  }
  float dot[2];
  if (!item_dots<2, kRows, kVec, kUnroll, kHold>(dot, w, a.in, a.H, rows, split, active, smem)) return;
  const float* o = operands_s[warp][r];
  const float x1 = dot[0] + o[0], x2 = dot[1] + o[1], c = o[2], s = o[3];
  const int64_t at = at_s[warp][r];
  if (which == 2) {
    if (at < 0) return;
    a.vcache[at + o0] = __float2bfloat16_rn(x1);
    a.vcache[at + o1] = __float2bfloat16_rn(x2);
    return;
  }
  const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
  if (which == 0) {
    float* qr = a.q + r * (a.heads * a.d);
    qr[o0] = y1;
    qr[o1] = y2;
  } else if (at >= 0) {
    a.kcache[at + o0] = __float2bfloat16_rn(y1);
    a.kcache[at + o1] = __float2bfloat16_rn(y2);
  }
}

template <int kRows, int kVec, bool kHold = false, bool kTurns = false>
__global__ void __launch_bounds__(kThreads) gemv_qkv_kernel(QkvArgs a, int rows, int split, int turns) {
  AZR_DYNAMIC_SHARED(smem_raw);
  float* smem = reinterpret_cast<float*>(smem_raw);
  take_turns<kTurns>(turns,
                     [&](int64_t block) { qkv_block<kRows, kVec, 2, kHold && kVec == 8>(block, a, rows, split, smem); });
}

// out16[r * I + j] = bf16(silu(g) * u), g = x[r] . wg[j] + bg[j], u = x[r] . wu[j] + bu[j], g and
// u rounded to bf16 first where round_gate_up (the training forward's matmul_forward_o16).
template <int kRows, int kVec, int kUnroll = 2, bool kHold = false>
__device__ __forceinline__ void gate_up_block(int64_t block, __nv_bfloat16* out16, const DecodeInput& in,
                                              const uint16_t* wg, const float* bg, const uint16_t* wu,
                                              const float* bu, int rows, int64_t IC, int64_t I, int split,
                                              bool round_gate_up, float* smem) {
  const int64_t j = item_of_warp(block, split);
  const bool active = j < I;
  const int64_t row = active ? j : 0;
  const uint16_t* const w[2] = {wg + row * IC, wu + row * IC};
  float dot[2];
  if (!item_dots<2, kRows, kVec, kUnroll, kHold>(dot, w, in, IC, rows, split, active, smem)) return;
  const int r = int(threadIdx.x) % kWarp;
  float g = dot[0] + (bg ? bg[j] : 0.f), u = dot[1] + (bu ? bu[j] : 0.f);
  if (round_gate_up) g = rounded_to_bf16(g), u = rounded_to_bf16(u);
  out16[r * I + j] = __float2bfloat16_rn(swiglu_value(g, u));
}

template <int kRows, int kVec, bool kHold = false, bool kTurns = false>
__global__ void __launch_bounds__(kThreads)
    gemv_gate_up_kernel(__nv_bfloat16* out16, DecodeInput in, const uint16_t* wg, const float* bg,
                        const uint16_t* wu, const float* bu, int rows, int64_t IC, int64_t I, int split,
                        bool round_gate_up, int turns) {
  AZR_DYNAMIC_SHARED(smem_raw);
  float* smem = reinterpret_cast<float*>(smem_raw);
  take_turns<kTurns>(turns, [&](int64_t block) {
    gate_up_block<kRows, kVec, 2, kHold && kVec == 8>(block, out16, in, wg, bg, wu, bu, rows, IC, I, split,
                                                     round_gate_up, smem);
  });
}

// The launch geometry, host code shared by gemv.cu and the emulated test.

// Warps per item: enough warps in all to keep the memory system busy (about 8,192, a full H100
// holds 8,448), but at least one 8-element pack per lane and no more than a block's warps.
inline int split_for(int64_t items, int64_t k) {
  int split = 1;
  while (split < kWarps && items * split < 8192 && (k / 8) >= int64_t(2 * split) * kWarp) split *= 2;
  return split;
}

inline unsigned blocks_for(int64_t items, int split) {
  const int64_t per_block = kWarps / split;
  return unsigned((items + per_block - 1) / per_block);
}

// A launch of `blocks` blocks' items as one wave (DecodeLayersTuning::one_wave): where more blocks
// than `resident` (what the device holds at once) are asked for, each block takes `turns` of them
// (blockIdx.x, + gridDim.x, ...), and there are just enough blocks for that: 1,120 blocks of 1.5B's
// gate/up at one row, of which an H200 holds 792, become 560 of 2 turns, all resident, where 792
// and then 328 ran. Blocks past the last item find no item (their warps are inactive).
struct Wave {
  unsigned blocks;
  int turns;
};
inline Wave one_wave(unsigned blocks, int64_t resident) {
  if (resident <= 0 || blocks <= resident) return {blocks, 1};
  const int64_t turns = (int64_t(blocks) + resident - 1) / resident;
  return {unsigned((int64_t(blocks) + turns - 1) / turns), int(turns)};
}

// Calls launch(rows_c, vec_c), integral constants: the smallest compiled row count >= rows, and
// the elements per load (8: 16-byte loads, 1: scalar).
template <class Launch>
void dispatch(int64_t rows, bool vec8, Launch&& launch) {
  if (rows < 1 || rows > kMaxRows) throw std::invalid_argument("gemv: rows outside 1..8");
  auto with_vec = [&](auto rows_c) {
    if (vec8)
      launch(rows_c, std::integral_constant<int, 8>{});
    else
      launch(rows_c, std::integral_constant<int, 1>{});
  };
  if (rows == 1)
    with_vec(std::integral_constant<int, 1>{});
  else if (rows == 2)
    with_vec(std::integral_constant<int, 2>{});
  else if (rows <= 4)
    with_vec(std::integral_constant<int, 4>{});
  else
    with_vec(std::integral_constant<int, 8>{});
}

}  // namespace azr::kernels::cuda_detail::gemv
