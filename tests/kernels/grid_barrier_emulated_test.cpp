// The grid barrier of the persistent decode kernel (kernels/cuda/grid_barrier.cuh) on the CPU,
// through tests/kernels/cuda_emulation.h with every block of the grid running at once
// (emu::launch_concurrent: every CUDA thread of every block a fiber), as a cooperative launch guarantees
// on a GPU. What it must do: no block leaves a barrier before every block has arrived, and what
// each wrote before it is what every block reads after it; the same word serves barrier after
// barrier, launch after launch, with its count back where it started. A block 0 that adds one too
// little never lets the grid go (the barrier's timeout stops the test with a message); without
// its wait, or without the barrier between rounds, blocks read the wrong round.
//
// The emulation runs every CUDA thread in turn on one core, so every access lands in the order
// written: whether the barrier's atomic add, acquire reads and fences keep the multiprocessors'
// L1 from serving stale lines is for the GPU test of the kernel that uses it
// (CudaModel.PersistentDecodeLayers...). What runs here is the protocol: who waits for whom.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/grid_barrier.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace azr::kernels::cuda_detail {
namespace {

// `rounds` times: every thread of block b writes its entry of the block's row of `slots` with the
// round's value for b, the grid meets, every thread reads its entry in every block's row and
// counts the wrong ones, and the grid meets again before the next round's writes.
void rounds_kernel(unsigned* arrived, int32_t* slots, unsigned* wrong, int rounds) {
  const int b = int(blockIdx.x), t = int(threadIdx.x), threads = int(blockDim.x), blocks = int(gridDim.x);
  for (int r = 0; r < rounds; r++) {
    slots[b * threads + t] = r * 1000 + b;
    grid_barrier(arrived);
    for (int o = 0; o < blocks; o++)
      if (slots[o * threads + t] != r * 1000 + o) atomicAdd(wrong, 1u);
    grid_barrier(arrived);
  }
}

TEST(GridBarrierEmulated, BlocksMeetEveryRoundAndTheWordComesBack) {
  constexpr unsigned kThreads = 64;
  constexpr int kRounds = 12;
  for (const unsigned blocks : {1u, 2u, 5u})
    for (const unsigned start : {0u, 0x80000000u}) {  // either top bit: an even or odd count of barriers before
      SCOPED_TRACE(std::to_string(blocks) + " blocks, the word at " + std::to_string(start));
      unsigned arrived = start, wrong = 0;
      std::vector<int32_t> slots(blocks * kThreads, -1);
      emu::launch_concurrent(blocks, kThreads, 0, rounds_kernel, &arrived, slots.data(), &wrong, kRounds);
      EXPECT_EQ(wrong, 0u) << "a block read another's entry from the wrong round";
      // 2 x kRounds barriers, each flipping the top bit once and leaving the low bits.
      EXPECT_EQ(arrived, start) << "the word moved";
      // And a second launch on the same word.
      emu::launch_concurrent(blocks, kThreads, 0, rounds_kernel, &arrived, slots.data(), &wrong, 1);
      EXPECT_EQ(wrong, 0u);
      EXPECT_EQ(arrived, start);
    }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
