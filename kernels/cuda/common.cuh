#pragma once
// Helpers shared by the CUDA kernels: warp and block reductions, grid sizes, the checked launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

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

// One attribute of a device (cudaDeviceGetAttribute, checked).
inline int device_attribute(cudaDeviceAttr a, int device) {
  int v = 0;
  AZR_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
  return v;
}

// Blocks for a grid-stride loop over n elements: enough to fill the device, no more than needed.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(blocks, 1, 65535 * 8));
}

// A grow-only device buffer for an op's scratch (attention backward's row dots, the bf16 table's
// rounded operands). Never freed: it lives as long as the process, and freeing device memory in a
// static destructor would run after the CUDA runtime has torn the context down.
template <class T = float>
class DeviceScratch {
 public:
  T* get(size_t n) {
    if (n > capacity_) {
      // cudaFree waits for the device: the ops queued before, which used the old buffer, finish first
      if (ptr_) AZR_CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      capacity_ = 0;
      AZR_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
      capacity_ = n;
    }
    return ptr_;
  }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace azr::kernels::cuda_detail

// Checks a launch's configuration at once; errors inside the kernel surface at the next sync.
#define AZR_CUDA_LAUNCHED() AZR_CUDA_CHECK(cudaGetLastError())
