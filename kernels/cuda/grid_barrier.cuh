#pragma once
// A barrier of every block of a grid, for a kernel whose blocks are all resident at once (a
// cooperative launch, which fails rather than start a grid that cannot all be resident:
// decode_layers.cu). Device code only, no CUDA header of its own, so that
// tests/kernels/cuda_emulation.h can run the kernels that use it: with every block at once
// (emu::launch_concurrent; grid_barrier_emulated_test.cpp), or with one block (the persistent
// decode kernel, whose phases declare __shared__ variables, one for the process there).
//
// `arrived` is one word for the grid, zero before its first launch ever. At each barrier block 0
// adds 2^31 - (blocks - 1) and every other block 1: 2^31 in all, so the top bit flips once the
// last block has arrived, and the low bits come back to zero. They must be zero when a barrier
// starts: from any other count, block 0's add could carry into the top bit before the others
// arrive (grid_barrier_emulated_test.cpp found that of a count of 0x1234). The word is never reset,
// between barriers or launches (or a recorded graph's replays): the count of CUDA's cooperative
// groups, whose grid sync works the same way.
//
// What a block wrote before the barrier is visible to every block's reads after it: thread 0 of
// each block fences (gpu scope) before it arrives and again once it sees the flip, and the block's
// own barriers order its other threads around thread 0; the second fence is the acquire that also
// keeps the multiprocessor's L1 from serving lines it read before the barrier.
//
// A barrier that waits longer than kGridBarrierTimeoutNs traps (an error at the next
// synchronisation, "unspecified launch failure") rather than hang the process: the blocks were then
// not all resident, or one of them left the kernel early.
#include <cstdint>

#include "kernels/cuda/device_or_emulation.cuh"

namespace azr::kernels::cuda_detail {

constexpr uint64_t kGridBarrierTimeoutNs = 5'000'000'000ull;

// The device's clock in nanoseconds (%globaltimer); the host's in the emulation.
AZR_DEVICE_INLINE uint64_t device_nanoseconds() {
#if defined(AZR_CUDA_EMULATION)
  return ::azr::emu::now_ns();
#elif defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return 0;
#endif
}

// The word as it is now, past this multiprocessor's L1.
AZR_DEVICE_INLINE unsigned read_arrived(const unsigned* arrived) {
#if defined(AZR_CUDA_EMULATION)
  return ::azr::emu::spin_read(arrived);
#else
  return *static_cast<const volatile unsigned*>(arrived);
#endif
}

AZR_DEVICE_INLINE void grid_barrier(unsigned* arrived) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    const unsigned before = atomicAdd(arrived, add);
    const uint64_t start = device_nanoseconds();
    for (unsigned spins = 1; ((before ^ read_arrived(arrived)) & 0x80000000u) == 0; spins++)
      if (spins % 1024 == 0 && device_nanoseconds() - start > kGridBarrierTimeoutNs) {
#if defined(AZR_CUDA_EMULATION)
        ::azr::emu::trap("a grid barrier waited past kGridBarrierTimeoutNs");
#elif defined(__CUDA_ARCH__)
        __trap();
#endif
      }
    __threadfence();
  }
  __syncthreads();
}

}  // namespace azr::kernels::cuda_detail
