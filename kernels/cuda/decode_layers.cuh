// A decode step's layers at one row in one persistent kernel (ops.h: decode_layers_w16), opt-in
// (cuda_set_decode_layers_persistent, AZR_CUDA_DECODE_LAYERS=persistent).
//
// Why: at batch 1 a 1.5B step is about 145 launches, five a layer (gemv.cuh's q/k/v, o, gate/up
// and down products, attention_decode_tiles.cuh's attention), and on the H200 (2026-11-27) it took
// 1.73 ms where its 3.13 GB of weights need 0.65 ms at the bandwidth. The same step took 2.0 ms on
// the H100, whose bandwidth is 30% lower: about 1.1 ms of the step does not scale with bandwidth,
// roughly 7 us a launch of latency, ramp and tail. Here the grid stays resident for every layer
// (as many blocks as fit, each looping over the turns a launch's blocks would have), the five
// phases of a layer meet at grid barriers (grid_barrier.cuh) instead of kernel boundaries, and
// before each barrier every block asks L2 for a slice of the weights the next product reads
// (cp.async.bulk.prefetch), which no phase writes, so they stream in while the barrier waits.
//
// The phases run the launches' own block functions (gemv.cuh's qkv_block, linear_block and
// gate_up_block; decode_tiles_block), turn t of the persistent grid doing what block t of the
// launch did, with the launch's geometry (Plan, from the same host functions): the same
// arithmetic in the same order, so the values are the five launches' bit for bit.
//
// In a header, apart from its launch (decode_layers.cu), so that
// tests/kernels/decode_layers_emulated_test.cpp can run it on the CPU through
// tests/kernels/cuda_emulation.h (with one block, which takes every turn).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_decode_tiles.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/grid_barrier.cuh"
#include "kernels/cuda_launch_choice.h"
#include "kernels/decode_layers.h"
#include "kernels/ops.h"

namespace azr::kernels::cuda_detail::decode_layers {

constexpr int kThreads = gemv::kThreads;
static_assert(gemv::kThreads == decode_tiles::kThreads, "one block size for every phase");
// What a block asks L2 for before each barrier, at most, by default (Plan::prefetch_bytes; the
// tuning of cuda_ops.h's cuda_set_decode_layers_tuning): with two blocks on each of an H200's 132
// multiprocessors, 8.4 MB, well within its L2, so that the first of it is not evicted before it is
// read. A first guess, for the GPU to tune (model_speed_bench --persistent-sweep).
constexpr int64_t kPrefetchBytesPerBlock = 32768;
constexpr int64_t kMaxPrefetchBytesPerBlock = kMaxDecodeLayersPrefetchBytes;  // cuda_launch_choice.h
// The slices of gate's and up's weights each block asks for while the attention runs (and one more
// during the o projection), by default. The attention phase is a few blocks' latency-bound work
// (at 1.5B and batch 1, 2 kv heads times a few splits, against 264 blocks) that leaves the memory
// nearly idle for microseconds, and gate and up are 55 MB of a layer's 94: two slices (17 MB at
// 32 KiB a block on an H200) fill about 3.5 us of it. A first guess, for the GPU to tune.
constexpr int kGateUpSlicesAtAttention = 2;
// The slices of down's weights each block asks for once its turns of gate and up are done, by
// default: one, as before the tuning. Gate and up's 1,120 turns at 1.5B leave 200 of 264 blocks
// idle for their last turn, when more of down (27.5 MB) could stream in; whether that or the
// last turns' own loads gain more is for the GPU to tell.
constexpr int kDownSlicesAtGateUp = 1;
// The products' loads a thread has in flight (gemv.cuh, partial_dots' kUnroll; the sums' order
// does not depend on it): with 16 warps a multiprocessor where a launch of the products had up to
// 64, each warp covers 4 packs of its pair of rows (q/k/v, gate/up) or 8 of its one row (o, down)
// at once, 64 KiB a multiprocessor at gate/up's and down's shapes where they have that many
// (at 1.5B: 6 and 8.75 packs a lane). A first guess, for the GPU to tune.
constexpr int kUnrollPairs = 4, kUnrollSingles = 8;

// The geometry of a layer's phases: the grids of the five launches (gemv.cu, attention.cu).
struct Plan {
  int qkv_split = 1, o_split = 1, gate_up_split = 1, down_split = 1;
  int64_t qkv_blocks = 0, o_blocks = 0, gate_up_blocks = 0, down_blocks = 0;
  // The attention's grid (1, kv_heads * head_chunks, splits): attention_blocks in all, `chunk`
  // positions a split.
  int head_chunks = 1, splits = 1;
  int64_t chunk = 0, attention_blocks = 0;
  float scale = 0.f;  // 1 / sqrt(d), as the launch's host code computes it
  // What each block asks L2 for before a barrier (prefetch_slice): 0 to kMaxPrefetchBytesPerBlock.
  // No value depends on it.
  int64_t prefetch_bytes = kPrefetchBytesPerBlock;
  int gate_up_slices_at_attention = kGateUpSlicesAtAttention;  // 0 to kMaxDecodeLayersSlices
  int down_slices_at_gate_up = kDownSlicesAtGateUp;             // 0 to kMaxDecodeLayersSlices
};

// The plan of the five launches for `a`, given the attention's head chunks, splits and chunk
// (attention.cu's decode_split: it depends on the device's multiprocessors).
inline Plan plan_for(const DecodeLayers& a, int head_chunks, int splits, int64_t chunk,
                     int64_t prefetch_bytes = kPrefetchBytesPerBlock,
                     int gate_up_slices_at_attention = kGateUpSlicesAtAttention,
                     int down_slices_at_gate_up = kDownSlicesAtGateUp) {
  Plan p;
  p.prefetch_bytes = prefetch_bytes, p.gate_up_slices_at_attention = gate_up_slices_at_attention;
  p.down_slices_at_gate_up = down_slices_at_gate_up;
  const int64_t qkv_items = (a.heads + 2 * a.kv_heads) * (a.d / 2), qd = a.heads * a.d;
  p.qkv_split = gemv::split_for(qkv_items, a.H), p.qkv_blocks = gemv::blocks_for(qkv_items, p.qkv_split);
  p.o_split = gemv::split_for(a.H, qd), p.o_blocks = gemv::blocks_for(a.H, p.o_split);
  p.gate_up_split = gemv::split_for(a.I, a.H), p.gate_up_blocks = gemv::blocks_for(a.I, p.gate_up_split);
  p.down_split = gemv::split_for(a.H, a.I), p.down_blocks = gemv::blocks_for(a.H, p.down_split);
  p.head_chunks = head_chunks, p.splits = splits, p.chunk = chunk;
  p.attention_blocks = a.kv_heads * head_chunks * splits;
  p.scale = 1.f / std::sqrt(float(a.d));
  return p;
}

// The most turns any phase has: more blocks than this would only wait at the barriers.
inline int64_t most_turns(const Plan& p) {
  return std::max({p.qkv_blocks, p.o_blocks, p.gate_up_blocks, p.down_blocks, p.attention_blocks});
}

// The kernel's dynamic shared memory: its largest phase's.
template <int D>
size_t smem_bytes(const DecodeLayers& a) {
  const size_t normed = size_t(a.H) * sizeof(uint16_t);  // the products that normalize their row
  return std::max({decode_tiles::smem_bytes<D>(), gemv::kSmemBytes<2, 1> + normed, gemv::kSmemBytes<1, 1>});
}

// This block's part of slice `slice` of a matrix of `bytes` (16-byte aligned): the grid's blocks
// take consecutive pieces of p.prefetch_bytes / parts bytes (parts: the matrices asked for
// together), each of its warps an eighth, in whole 16-byte units (none below 128 bytes a warp).
// Slice 0 is the matrix's first rows, which the products' first turns read (turn t = blockIdx.x
// takes the t-th run of rows).
AZR_DEVICE_INLINE void prefetch_slice(const Plan& p, const uint16_t* w, int64_t bytes, int parts, int slice) {
  const int64_t piece = p.prefetch_bytes / parts / 16 * 16, warp_piece = piece / gemv::kWarps / 16 * 16;
  if (!w || warp_piece == 0) return;
  const int warp = int(threadIdx.x) / kWarp;
  const int64_t first = (int64_t(slice) * gridDim.x + blockIdx.x) * piece + warp * warp_piece;
  if (threadIdx.x % kWarp != 0 || first >= bytes) return;
  const int64_t left = bytes - first;
  prefetch_to_l2(reinterpret_cast<const char*>(w) + first, uint32_t(left < warp_piece ? left : warp_piece));
}

// The phases of layer l, each every turn of its launch's grid that falls to this block, then the
// block's barrier (the next turn reuses the shared memory). Inlined: with the kernel's arguments
// grid constants, ptxas (sm_90, 128 registers for 2 blocks a multiprocessor) then spills 84
// bytes at head dim 128, where the tile attention alone takes 124 registers, and none at 64 and
// 32; each phase a function of its own spilled 340 bytes at 128 (their calls' saved registers).
template <class Body>
AZR_DEVICE_INLINE void turns(int64_t n, Body&& body) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    body(t);
    __syncthreads();
  }
}

AZR_DEVICE_INLINE void qkv_phase(const DecodeLayers& a, const Plan& p, int64_t l, float* smem) {
  const gemv::QkvArgs qa = gemv::qkv_args(decode_layer_qkv(a, l));
  turns(p.qkv_blocks, [&](int64_t t) { gemv::qkv_block<1, 8, kUnrollPairs>(t, qa, 1, p.qkv_split, smem); });
}

template <int D>
AZR_DEVICE_INLINE void attention_phase(const DecodeLayers& a, const Plan& p, int64_t l, float* part,
                                       unsigned* merge_counts, unsigned char* smem_raw) {
  const decode::DecodeDims dims{a.heads, D, a.heads / a.kv_heads, a.slot_stride, a.kv_heads * D, p.scale};
  const unsigned gy = unsigned(a.kv_heads * p.head_chunks);
  const auto* kcache = reinterpret_cast<const __nv_bfloat16*>(decode_layer_at(a.kcache, l, a.cache_stride));
  const auto* vcache = reinterpret_cast<const __nv_bfloat16*>(decode_layer_at(a.vcache, l, a.cache_stride));
  turns(p.attention_blocks, [&](int64_t t) {
    const decode::DecodeGridIndex g{0, unsigned(t) % gy, unsigned(t) / gy, gy, unsigned(p.splits)};
    decode_tiles::decode_tiles_block<D>(g, a.att, reinterpret_cast<__nv_bfloat16*>(a.att16), part, merge_counts, a.q,
                                        kcache, vcache, a.slot, a.pos, dims, p.head_chunks, p.chunk, smem_raw);
  });
}

AZR_DEVICE_INLINE void o_phase(const DecodeLayers& a, const Plan& p, int64_t l, float* smem) {
  const uint16_t* wo = decode_layer_at(a.wo, l, a.param_stride);
  const float* bo = decode_layer_at(a.bo, l, a.param_stride);
  turns(p.o_blocks, [&](int64_t t) {
    gemv::linear_block<1, 8, kUnrollSingles>(t, a.h, DecodeInput{a.att16, nullptr, nullptr, 0.f}, wo, bo, a.x, 1,
                                             a.heads * a.d, a.H, p.o_split, smem);
  });
}

AZR_DEVICE_INLINE void gate_up_phase(const DecodeLayers& a, const Plan& p, int64_t l, float* smem) {
  const int64_t ps = a.param_stride;
  const DecodeInput in{nullptr, a.h, decode_layer_at(a.ln2, l, ps), a.eps};
  const uint16_t *wg = decode_layer_at(a.wg, l, ps), *wu = decode_layer_at(a.wu, l, ps);
  const float *bg = decode_layer_at(a.bg, l, ps), *bu = decode_layer_at(a.bu, l, ps);
  turns(p.gate_up_blocks, [&](int64_t t) {
    gemv::gate_up_block<1, 8, kUnrollPairs>(t, reinterpret_cast<__nv_bfloat16*>(a.mlp16), in, wg, bg, wu, bu, 1,
                                            a.H, a.I, p.gate_up_split, a.round_gate_up, smem);
  });
}

AZR_DEVICE_INLINE void down_phase(const DecodeLayers& a, const Plan& p, int64_t l, float* smem) {
  const uint16_t* wd = decode_layer_at(a.wd, l, a.param_stride);
  const float* bd = decode_layer_at(a.bd, l, a.param_stride);
  turns(p.down_blocks, [&](int64_t t) {
    gemv::linear_block<1, 8, kUnrollSingles>(t, a.x, DecodeInput{a.mlp16, nullptr, nullptr, 0.f}, wd, bd, a.h, 1,
                                             a.I, a.H, p.down_split, smem);
  });
}

// Layer l's q/k/v weights, slice 0 of each.
AZR_DEVICE_INLINE void prefetch_qkv(const DecodeLayers& a, const Plan& p, int64_t l) {
  const int64_t bytes_q = a.heads * a.d * a.H * 2, bytes_kv = a.kv_heads * a.d * a.H * 2;
  prefetch_slice(p, decode_layer_at(a.wq, l, a.param_stride), bytes_q, 3, 0);
  prefetch_slice(p, decode_layer_at(a.wk, l, a.param_stride), bytes_kv, 3, 0);
  prefetch_slice(p, decode_layer_at(a.wv, l, a.param_stride), bytes_kv, 3, 0);
}

// grid: as many blocks of kThreads as are resident at once (a cooperative launch), at most
// most_turns; smem_bytes<D>() of dynamic shared memory. a and p stay in the parameter space
// (__grid_constant__): the phases take them by reference, which would otherwise copy them to
// every thread's stack. part and merge_counts: the attention's
// split records and counts (attention.cu's); barrier: grid_barrier's word. Before each barrier
// the block asks for a slice of the weights of the next product (for the o projection one phase
// earlier, as the attention reads none; gate and up p.gate_up_slices_at_attention slices while
// the attention runs, and one more during the o projection; down p.down_slices_at_gate_up).
template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    decode_layers_kernel(const __grid_constant__ DecodeLayers a, const __grid_constant__ Plan p, float* part,
                         unsigned* merge_counts, unsigned* barrier) {
  AZR_DYNAMIC_SHARED(smem_raw);
  float* smem = reinterpret_cast<float*>(smem_raw);
  const int64_t ps = a.param_stride, bytes_o = a.H * a.heads * a.d * 2, bytes_mlp = a.I * a.H * 2;
  prefetch_qkv(a, p, 0);
  for (int64_t l = 0; l < a.layers; l++) {
    qkv_phase(a, p, l, smem);
    prefetch_slice(p, decode_layer_at(a.wo, l, ps), bytes_o, 1, 0);
    grid_barrier(barrier);
    attention_phase<D>(a, p, l, part, merge_counts, smem_raw);
    for (int s = 0; s < p.gate_up_slices_at_attention; s++) {
      prefetch_slice(p, decode_layer_at(a.wg, l, ps), bytes_mlp, 2, s);
      prefetch_slice(p, decode_layer_at(a.wu, l, ps), bytes_mlp, 2, s);
    }
    grid_barrier(barrier);
    o_phase(a, p, l, smem);
    prefetch_slice(p, decode_layer_at(a.wg, l, ps), bytes_mlp, 2, p.gate_up_slices_at_attention);
    prefetch_slice(p, decode_layer_at(a.wu, l, ps), bytes_mlp, 2, p.gate_up_slices_at_attention);
    grid_barrier(barrier);
    gate_up_phase(a, p, l, smem);
    for (int s = 0; s < p.down_slices_at_gate_up; s++)
      prefetch_slice(p, decode_layer_at(a.wd, l, ps), bytes_mlp, 1, s);
    grid_barrier(barrier);
    down_phase(a, p, l, smem);
    if (l + 1 < a.layers) {
      prefetch_qkv(a, p, l + 1);
      grid_barrier(barrier);
    }
  }
}

}  // namespace azr::kernels::cuda_detail::decode_layers
