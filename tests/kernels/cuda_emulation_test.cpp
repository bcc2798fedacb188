// The CUDA emulation's own contract (cuda_emulation.h, emulation_fibers.h), on which every emulated
// suite rests: each CUDA thread keeps its registers across the switches; the threads of a block
// run each phase between two barriers whole, one after another, first to last and then last to
// first, so a kernel missing a barrier reads what it should not, every time; and a barrier that
// not every thread reaches stops the test with a message instead of hanging it.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

namespace emu = azr::emu;

constexpr unsigned kThreads = 64;  // two warps

// Each thread, after `leading` barriers, writes its own slot and then reads a neighbour's (the
// next thread's, or the previous one's), with or without the barrier between that makes the
// neighbour's write visible.
__global__ void neighbour_kernel(float* out, int leading, bool barrier, int step) {
  AZR_DYNAMIC_SHARED(smem_bytes);
  float* slots = reinterpret_cast<float*>(smem_bytes);
  const unsigned t = threadIdx.x;
  for (int i = 0; i < leading; i++) __syncthreads();
  slots[t] = float(t);
  if (barrier) __syncthreads();
  out[t] = slots[(t + kThreads + unsigned(step)) % kThreads];
}

// How many threads read something other than their neighbour's value (the poison is NaN).
int wrong_reads(int leading, bool barrier, int step) {
  std::vector<float> out(kThreads, -1.f);
  emu::launch({1, 1, 1}, kThreads, kThreads * sizeof(float), neighbour_kernel, out.data(), leading, barrier, step);
  int wrong = 0;
  for (unsigned t = 0; t < kThreads; t++)
    wrong += !(out[t] == float((t + kThreads + unsigned(step)) % kThreads));
  return wrong;
}

TEST(CudaEmulation, WithTheBarrierEveryThreadReadsItsNeighbour) {
  for (int leading : {0, 1})
    for (int step : {1, -1}) EXPECT_EQ(wrong_reads(leading, true, step), 0) << leading << " " << step;
}

// Worked out from the order. In the first phase thread t runs before t + 1, so every thread but
// the last (which reads thread 0's slot, written) reads the next one's before it is written; in
// the second phase the order is reversed, and every thread but thread 0 reads the previous one's
// too early. The other two: the neighbour ran first, so its write is there (a GPU would promise
// no such thing), except across the wrap: the first thread to run reads the last one's slot.
TEST(CudaEmulation, AMissingBarrierReadsTooEarlyInOneOfTheTwoOrders) {
  EXPECT_EQ(wrong_reads(0, false, 1), int(kThreads) - 1);
  EXPECT_EQ(wrong_reads(1, false, -1), int(kThreads) - 1);
  EXPECT_EQ(wrong_reads(0, false, -1), 1);
  EXPECT_EQ(wrong_reads(1, false, 1), 1);
}

// Every thread of every block, run at once, through barriers of its block, its warp and the grid's
// polls, ends with the registers it started with.
__global__ void registers_kernel(unsigned* out, int rounds) {
  const unsigned t = threadIdx.x, b = blockIdx.x;
  unsigned seen = 0;
  for (int i = 0; i < rounds; i++) {
    if (i % 3 == 0) __syncthreads();
    if (i % 3 == 1) __syncwarp();
    if (i % 3 == 2) emu::spin_read(&seen);
    seen += (threadIdx.x == t && blockIdx.x == b && blockDim.x == kThreads && gridDim.x == 3) ? 1u : 0u;
  }
  out[b * kThreads + t] = seen;
}

TEST(CudaEmulation, ThreadsKeepTheirRegistersAcrossEverySwitch) {
  std::vector<unsigned> out(3 * kThreads, 0);
  emu::launch_concurrent(3, kThreads, 0, registers_kernel, out.data(), 30);
  for (unsigned i = 0; i < out.size(); i++)
    EXPECT_EQ(out[i], 30u) << "block " << i / kThreads << " thread " << i % kThreads;
}

__global__ void first_warp_syncs_kernel() {
  if (threadIdx.x < 32) __syncthreads();  // undefined on a GPU: the second warp never arrives
}

TEST(CudaEmulationDeathTest, ABarrierNotEveryThreadReachesStopsWithAMessage) {
  EXPECT_DEATH(emu::launch({1, 1, 1}, kThreads, 0, first_warp_syncs_kernel),
               "deadlock: 32 CUDA threads wait at barriers that the others will not reach");
}

}  // namespace
