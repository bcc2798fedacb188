#pragma once
// What the kernel headers that also run on the CPU stand-in for the device
// (tests/kernels/cuda_emulation.h, which defines AZR_CUDA_EMULATION and these names) take from
// CUDA: the bf16 type and its conversions, and the block's dynamic shared memory; and the three
// instructions of programmatic dependent launch below: the stand-in runs the release as a no-op
// (its blocks run one kernel at a time), the wait as one too unless a test states what the kernel
// before writes (emu::PriorGridWrites), and keeps each prefetch for its tests.
#include <cstdint>

#ifndef AZR_CUDA_EMULATION
#include <cuda_bf16.h>
#define AZR_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#define AZR_DEVICE_INLINE __device__ __forceinline__
#define AZR_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#define AZR_DEVICE_NOINLINE inline __device__ __noinline__
#else
#define AZR_DEVICE_INLINE inline
#define AZR_HOST_DEVICE_INLINE inline
#define AZR_DEVICE_NOINLINE inline
#endif

namespace azr::kernels::cuda_detail {

// Programmatic dependent launch (PDL, sm_90 and later; launch_after_prior in common.cuh). A kernel
// launched that way may start while the kernel before it on the stream is still running, so it
// must call wait_for_prior_grids before it reads anything an earlier kernel wrote and before it
// writes anything: the wait returns once every earlier grid has finished and its writes are
// visible. What comes before the wait may only read memory no kernel of the step writes, and
// write none but the block's shared memory: the weights (prefetch_to_l2, and the few-row
// products' held packs, gemv.cuh; biases, RoPE tables), the step's inputs (its slots and
// positions), which the host uploads before the step's first kernel, and a row's KV cache before
// its position (earlier steps wrote it; this step writes each row's position in a slot of its own,
// Transformer::check_decode_rows). The kernels that do write weights (AdamW, the bf16 copy's
// rounding) make the launch after them an ordinary one (common.cuh, next_launch_ordinary).
//
// release_next_grid lets the next PDL kernel start. A kernel launched programmatically calls it
// right after its own wait, not earlier (a block may exit before its wait instead), so at most one
// kernel runs ahead of the one working, and its prefetches do not evict what the working one
// reads: released before its wait, the kernel after it could start while the kernel before it
// still runs, and read before its own wait what that kernel writes (which the emulation, poisoning
// only the writes of the kernel just before, would not see). A kernel only ever launched the
// ordinary way starts after every earlier one has finished, so it may release at its start: the
// ordered gradient sums' producers do (ordered_sums.cuh), so that the sum of their parts waits
// resident. Launched the ordinary way, or compiled for an architecture before sm_90, all three do
// nothing.
AZR_DEVICE_INLINE void wait_for_prior_grids() {
#if defined(AZR_CUDA_EMULATION)
  ::azr::emu::wait_for_prior_grid_writes();  // where a test states the writes of the kernel before
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

AZR_DEVICE_INLINE void release_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// A hint that `bytes` (a multiple of 16) from p (16-byte aligned) will be read soon: one
// instruction that fetches the whole range into L2 in the background.
AZR_DEVICE_INLINE void prefetch_to_l2([[maybe_unused]] const void* p, [[maybe_unused]] uint32_t bytes) {
#if defined(AZR_CUDA_EMULATION)
  ::azr::emu::note_prefetch(p, bytes);  // kept, for a test to check the contract and the range
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

}  // namespace azr::kernels::cuda_detail
