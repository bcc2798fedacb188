#pragma once
// Warp and block reductions of the CUDA kernels. Device code only, and no CUDA header of its own,
// so that tests/kernels/cuda_emulation.h can stand in for the device under kernels that use them
// (the sampler's, sampling_unfiltered.cuh).
#include <cmath>
#include <cstdint>

namespace azr::kernels::cuda_detail {

constexpr int kWarp = 32;

// Reduction over the warp with a commutative, associative `op`; every lane gets the result.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct Plus {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a < b ? b : a; }
};
struct Min {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; }
};

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, Plus{}); }
__device__ __forceinline__ double warp_sum(double v) { return warp_reduce(v, Plus{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, Max{}); }

// Reduction over the block (blockDim.x a multiple of 32, at most 1024) with `op`, whose identity
// fills the missing warps; every thread gets the result. `shared` holds 32 values; the call ends
// with a barrier, so it can be called again at once.
template <class T, class Op>
__device__ T block_reduce(T v, T identity, Op op, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_reduce(v, op);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : identity;
  total = warp_reduce(total, op);
  __syncthreads();
  return total;
}

template <class T>
__device__ T block_sum(T v, T* shared) {
  return block_reduce(v, T(0), Plus{}, shared);
}

__device__ __forceinline__ float block_max(float v, float* shared) { return block_reduce(v, -INFINITY, Max{}, shared); }

// A grid-level merge of `blocks` blocks' parts (a sampled row split over blocks, a decode row's
// positions split over blocks): called by every thread of each of them once the block has written
// its part, it returns true in the block that finishes last, which may then read every part.
// count: the blocks done so far, 0 before the launch; the last block puts it back to 0, for the
// next launch or a recorded graph's next replay (common.cuh, ZeroedCounts). Every thread's writes
// are fenced before the count, as CUDA's threadFenceReduction sample does. `last` is a __shared__
// flag of the block.
__device__ inline bool last_block_done(unsigned* count, int64_t blocks, bool* last) {
  __threadfence();  // the block's part is visible to every block before the count
  __syncthreads();
  if (threadIdx.x == 0) {
    *last = atomicAdd(count, 1u) == unsigned(blocks - 1);
    if (*last) {
      __threadfence();  // and the other blocks' parts to this one
      *count = 0u;      // ready for the next call
    }
  }
  __syncthreads();
  return *last;
}

// A part another block wrote, read by the block that last_block_done chose: from L2, past this
// multiprocessor's L1 (ld.global.cg), whose lines may predate the other blocks' writes. Not a
// volatile read: the compiler keeps those in program order, each between the arithmetic that uses
// it, so one thread walking 128 parts waits out 128 round trips to L2 (tens of microseconds);
// these it may issue together, and the merges load a batch of parts before they use it.
template <class T>
__device__ __forceinline__ T load_past_l1(const T* p) {
#ifdef AZR_CUDA_EMULATION
  return *p;
#else
  return __ldcg(p);
#endif
}

}  // namespace azr::kernels::cuda_detail
